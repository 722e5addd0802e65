"""Runtime errors a person can act on: identical per-rank errors collapse to one clause, and a
timeout names the rank that never made the call (8 local Gloo ranks)."""
from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


def _expand(text: str) -> list[int]:
    """Inverse of rank_ranges."""
    body = text.split(" ", 1)[1]
    out = []
    for part in body.split(", "):
        lo, _, hi = part.partition("–")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


@given(st.lists(st.tuples(st.integers(0, 70), st.sampled_from(["a", "b b", "c: d", "e; f"])), min_size=1, max_size=60,
                unique_by=lambda x: x[0]))
@settings(max_examples=200, deadline=None)
def test_collapse_names_every_rank_once_and_every_message_once(items):
    text = collapse_rank_messages(items)
    msgs = list(dict.fromkeys(m for _, m in items))
    assert "\n" not in text
    for m in msgs:
        want = sorted(r for r, x in items if x == m)
        clause = f"{rank_ranges(want)}: {m}"
        assert text.count(clause) == 1, (clause, text)
        assert _expand(rank_ranges(want)) == want
    assert len(text) <= sum(len(m) + 12 for m in msgs) + 8 * len(items)  # ranks, not messages, repeat


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
        assert "ranks 0–4, 6, 7 waited" in got["missing"], (r, got)
        assert got["elapsed"] < TIMEOUT_S + 4.0, got  # the roll call adds at most half a second (+ load)
        assert got["ranks"] == [missing], got
