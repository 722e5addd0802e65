"""tests/test_moe_megatron.py again on megatron-core's oldest supported release, from the same venv.

The venv holds the newest supported megatron-core (on Python >= 3.12); `make` installs the
oldest, 0.16.1, with --no-deps into ``<venv>/side/megatron-core-0.16.1`` (Makefile:
MEGATRON_OLDEST; megatron-core's only dependencies, torch, numpy and packaging, are the newest's).
Each ``<venv>/side/megatron-core-<version>`` folder found is tested here: pytest reruns
tests/test_moe_megatron.py in a subprocess with the folder first on PYTHONPATH, and that file's
ranks check that they imported exactly that version. So both ends of the supported range run the
same MoELayer comparison against Megatron's MoEAlltoAllTokenDispatcher without a second venv and
its own copy of torch. Another release can be tried the same way:
``pip install --no-deps --target .venv/side/megatron-core-0.17.1 megatron-core==0.17.1``.
"""
from __future__ import annotations

import glob
import importlib.metadata
import os
import subprocess
import sys

import pytest

from _multiproc import TESTS_DIR

SIDE = os.path.join(sys.prefix, "side")


def _venv_megatron() -> str:
    try:
        return importlib.metadata.version("megatron-core")
    except importlib.metadata.PackageNotFoundError:
        return ""


def _side_versions() -> list:
    """(version, folder) of each megatron-core under <venv>/side, as pytest params."""
    found = []
    for folder in sorted(glob.glob(os.path.join(SIDE, "megatron-core-*"))):
        version = os.path.basename(folder)[len("megatron-core-"):]
        if version == _venv_megatron():
            marks = pytest.mark.skip(reason=f"the venv's own megatron-core is {version} (tests/test_moe_megatron.py)")
        elif not _venv_megatron():
            marks = pytest.mark.skip(reason="no megatron-core in the venv to provide torch, numpy, packaging")
        else:
            marks = ()
        found.append(pytest.param(version, folder, id=version, marks=marks))
    return found or [pytest.param("", "", id="none", marks=pytest.mark.skip(
        reason=f"no megatron-core under {SIDE} (`make build` installs 0.16.1 there)"))]


@pytest.mark.parametrize("version,folder", _side_versions())
def test_megatron_tests_pass_on_side_release(version, folder):
    env = dict(os.environ, COLLSCHED_TEST_MEGATRON_VERSION=version,
               PYTHONPATH=os.pathsep.join([folder] + [p for p in sys.path if p]))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           os.path.join(TESTS_DIR, "test_moe_megatron.py")],
                          cwd=os.path.dirname(TESTS_DIR), env=env, capture_output=True, text=True, timeout=600)
    tail = proc.stdout[-4000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, f"megatron-core {version}:\n{tail}"
    summary = proc.stdout.strip().splitlines()[-1]
    # Every test ran (none skipped: megatron-core imported, the ranks saw `version`).
    assert " passed" in summary and "skipped" not in summary and "error" not in summary, summary
