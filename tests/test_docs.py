"""The guides read as a product (docs/results/README.md): run records (dates, UTC times, machine
load) live in docs/results/, papers are cited by title (the repository does not ship them),
and every relative link resolves. docs/runtime.md and docs/cli.md are checked for links only
(their measurement sections are still being moved)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GUIDES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
LINK_ONLY: set = set()
# What a run record says and a guide should not: a clock time, a load average, a date, a paper file.
RECORD_WORDS = re.compile(r"\d\d:\d\d UTC|load average|\b20\d\d-\d\d-\d\d\b|papers/[\w-]+\.txt")


@pytest.mark.parametrize("path", [p for p in GUIDES if p.name not in LINK_ONLY], ids=lambda p: p.name)
def test_guides_hold_no_run_records(path):
    hits = [f"{path.name}:{i}: {line.strip()[:100]}"
            for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if RECORD_WORDS.search(line) and "results/" not in line]
    assert not hits, "move these to docs/results/:\n" + "\n".join(hits)


@pytest.mark.parametrize("path", GUIDES + sorted((ROOT / "docs" / "results").glob("*.md")) + [ROOT / "CHANGELOG.md"],
                         ids=lambda p: p.name)
def test_relative_links_resolve(path):
    text = path.read_text(encoding="utf-8")
    missing = [t for t in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
               if not t.startswith(("http://", "https://", "mailto:")) and not (path.parent / t).exists()]
    assert not missing, f"{path.name} links to missing files: {missing}"
