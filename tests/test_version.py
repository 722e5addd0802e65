"""One version everywhere (docs/release.md): the wheel takes Cargo.toml's workspace version
through maturin, `collsched --version` prints `collsched.__version__`, and CHANGELOG.md has a
section for it."""
from __future__ import annotations

import re
from pathlib import Path

import collsched

ROOT = Path(__file__).resolve().parent.parent


def _cargo_workspace_version() -> str:
    text = (ROOT / "Cargo.toml").read_text(encoding="utf-8")
    section = text.split("[workspace.package]", 1)[1].split("\n[", 1)[0]
    m = re.search(r'^version\s*=\s*"([^"]+)"', section, flags=re.M)
    assert m, "Cargo.toml has no [workspace.package] version"
    return m.group(1)


def test_python_version_is_the_cargo_workspace_version():
    assert collsched.__version__ == _cargo_workspace_version()


def test_both_crates_take_the_workspace_version():
    for crate in ("collsched-core", "collsched-py"):
        text = (ROOT / "crates" / crate / "Cargo.toml").read_text(encoding="utf-8")
        assert "version.workspace = true" in text, crate


def test_changelog_has_a_section_for_the_version():
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert re.search(rf"^## {re.escape(collsched.__version__)} \(", changelog, flags=re.M), \
        f"CHANGELOG.md has no '## {collsched.__version__} (...)' section"
