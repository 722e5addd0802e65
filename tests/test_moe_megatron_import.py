"""Importing collsched.moe.megatron without megatron-core, or with an unsupported version, fails
with one line naming the `[megatron]` extra. Runs whether or not megatron-core is installed: a
fresh interpreter hides it (None in sys.modules) or fakes its installed version."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest


def _import_error(prelude: str) -> str:
    """stderr's last line after importing collsched.moe.megatron in a fresh interpreter."""
    code = prelude + "\nimport collsched.moe.megatron\n"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode != 0, proc.stdout
    return proc.stderr.strip().splitlines()[-1]


def test_import_without_megatron_names_the_extra():
    # None in sys.modules makes `import megatron...` fail as if it were not installed.
    line = _import_error("import sys, importlib.metadata as md\nsys.modules['megatron'] = None\n"
                         "real = md.version\n"
                         "def fake(name):\n"
                         "    if name == 'megatron-core':\n"
                         "        raise md.PackageNotFoundError(name)\n"
                         "    return real(name)\n"
                         "md.version = fake")
    assert line == ("ImportError: collsched.moe.megatron needs megatron-core: pip install 'collsched[megatron]' "
                    "(megatron-core>=0.16.1,<0.20)"), line


@pytest.mark.parametrize("found", ["0.20.0", "0.15.3"])
def test_unsupported_megatron_version_is_a_clear_error(found):
    line = _import_error("import importlib.metadata as md\nreal = md.version\n"
                         f"md.version = lambda name: {found!r} if name == 'megatron-core' else real(name)")
    assert line.startswith("ImportError: collsched.moe.megatron supports megatron-core >=0.16.1,<0.20, "
                           f"found {found}: pip install 'collsched[megatron]'"), line
