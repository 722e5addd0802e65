"""Runtime errors a person can act on: identical per-rank errors collapse to one clause, and a
timeout names the rank that never made the call (8 local Gloo ranks)."""
from __future__ import annotations

import os

import pytest

pytest.importorskip("torch")

from collsched.comm.errors import collapse_rank_messages, rank_ranges  # noqa: E402
from collsched.comm.launch import run_local  # noqa: E402

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
TIMEOUT_S = 2.0


def test_rank_ranges_and_collapse():
    assert rank_ranges(range(8)) == "ranks 0–7"
    assert rank_ranges([5]) == "rank 5"
    assert rank_ranges([0, 2, 3, 4, 9]) == "ranks 0, 2–4, 9"
    assert rank_ranges([1, 2]) == "ranks 1, 2"
    msg = collapse_rank_messages([(r, "input is not a contiguous tensor") for r in range(64)])
    assert msg == "ranks 0–63: input is not a contiguous tensor"
    assert collapse_rank_messages([(0, "a"), (1, "b"), (2, "a")]) == "ranks 0, 2: a; rank 1: b"


def test_eight_rank_errors_read_as_one_line_and_a_missing_rank_is_named():
    missing = 5
    res = run_local("_errors_scenarios:bad_everywhere_then_missing", 8, (TIMEOUT_S, missing), gpus_per_server=4,
                    timeout_s=90, extra_pythonpath=[TESTS_DIR], raise_on_failure=False)
    assert all(isinstance(r, dict) for r in res), [str(r) for r in res]
    for r, got in enumerate(res):
        text = got["collapsed"]
        assert "ranks 0–7: input is not a contiguous tensor" in text, (r, text)
        assert text.count("not a contiguous") <= 2, (r, text)  # one clause (+ this rank's own detail)
        assert "\n" not in text
        if r == missing:
            continue
        assert "timed out" in got["missing"] and f"rank {missing} never reached this call" in got["missing"], (r, got)
        assert "ranks 0–4, 6, 7 did" in got["missing"], (r, got)
        assert got["elapsed"] < TIMEOUT_S + 4.0, got  # the look-up adds a fraction of a second
