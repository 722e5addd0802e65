"""The framework versions the code accepts are the ones the extras install and the tests run.

megatron-core's range is written in four places (collsched/moe/megatron.py, the `[megatron]`
extra, requirements-dev.txt, the Makefile's oldest release for tests/test_moe_megatron_versions.py)
and torchtitan's pin in three (collsched/moe/torchtitan.py, the `[torchtitan]` extra, the
Makefile's install): they must agree. Reads the files only; nothing is imported.
"""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _text(path: str) -> str:
    return (ROOT / path).read_text(encoding="utf-8")


def _one(pattern: str, text: str, where: str) -> str:
    found = re.findall(pattern, text, re.M)
    assert len(found) == 1, f"{where}: expected one match of {pattern!r}, found {found}"
    return found[0]


def test_megatron_core_range_agrees_everywhere():
    code = _text("python/collsched/moe/megatron.py")
    rng = _one(r'^_RANGE = "(>=[\d.]+,<[\d.]+)"', code, "megatron.py")
    lo, hi = re.fullmatch(r">=([\d.]+),<([\d.]+)", rng).groups()
    supported = _one(r"^SUPPORTED = \(\((\d+, \d+, \d+)\), \((\d+, \d+, \d+)\)\)", code, "megatron.py")
    as_tuple = [tuple(int(v) for v in t.split(", ")) for t in supported]

    def pad(v):
        nums = tuple(int(x) for x in v.split("."))
        return nums + (0,) * (3 - len(nums))

    assert as_tuple == [pad(lo), pad(hi)], (supported, rng)
    assert _one(r'"megatron-core([^"]+)"', _text("pyproject.toml"), "pyproject.toml") == rng
    assert _one(r"^megatron-core(\S+)", _text("requirements-dev.txt"), "requirements-dev.txt") == rng
    assert _one(r"^MEGATRON_OLDEST := (\S+)$", _text("Makefile"), "Makefile") == lo


def test_torchtitan_pin_agrees_everywhere():
    pin = _one(r'^SUPPORTED_TORCHTITAN = "([\d.]+)"', _text("python/collsched/moe/torchtitan.py"), "torchtitan.py")
    assert _one(r'"torchtitan==([\d.]+)"', _text("pyproject.toml"), "pyproject.toml") == pin
    assert _one(r"torchtitan==([\d.]+)", _text("Makefile"), "Makefile") == pin
