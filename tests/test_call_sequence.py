"""The call sequence is checked: every checked call carries its call site's sequence number,
and the native calls between checks carry fingerprints of their split sizes; ranks at
different calls, or contradicting split sizes in a native call, raise on every rank at the
next check (or at once with checks="always")."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

torch = pytest.importorskip("torch")

from _multiproc import TESTS_DIR  # noqa: E402
from collsched.comm import PlanMismatchError, CollectiveInputError  # noqa: E402
from collsched.comm.callsite import NATIVE_RECHECK_EVERY, split_fingerprint  # noqa: E402
from collsched.comm.descriptor import W_RECV_FP, W_SENT_FP, CallArgs, check_sequence, header  # noqa: E402
from collsched.comm.launch import run_local  # noqa: E402

TIMEOUT_S = 10.0


def _run(fn: str, *args, world: int = 4) -> list:
    results = run_local(f"_thread_scenarios:{fn}", world, args, gpus_per_server=world, timeout_s=90,
                        extra_pythonpath=[TESTS_DIR], raise_on_failure=False)
    assert all(isinstance(r, dict) for r in results), [str(r)[:500] for r in results]
    return results


def _fingerprint_sums(calls: list) -> tuple[int, int]:
    """Σ over ranks and calls of (sent, expected) fingerprints; calls: [(seq, in_rows, out_rows)]
    with in_rows[i][j] = rows i sends j and out_rows[j][i] = rows j expects from i."""
    sent = recv = 0
    for seq, ins, outs in calls:
        for r in range(len(ins)):
            s, e = split_fingerprint(seq, r, [int(v) for v in ins[r]], [int(v) for v in outs[r]])
            sent, recv = (sent + s) % 2**64, (recv + e) % 2**64
    return sent, recv


MATRICES = st.integers(2, 6).flatmap(lambda n: st.lists(
    st.lists(st.lists(st.integers(0, 2**20), min_size=n, max_size=n), min_size=n, max_size=n), min_size=1, max_size=6))


@settings(max_examples=60, deadline=None)
@given(MATRICES, st.data())
def test_fingerprints_agree_exactly_when_every_pair_agrees(mats, data):
    calls = [(seq, np.array(m), np.array(m).T) for seq, m in enumerate(mats)]
    sent, recv = _fingerprint_sums(calls)
    assert sent == recv
    # One receiver expecting a different count in one call always shows.
    k = data.draw(st.integers(0, len(calls) - 1))
    n = len(mats[0])
    i, j = data.draw(st.integers(0, n - 1)), data.draw(st.integers(0, n - 1))
    delta = data.draw(st.integers(-2**20, 2**20).filter(lambda d: d != 0 and calls[k][1][i][j] + d >= 0))
    outs = calls[k][2].copy()
    outs[j][i] += delta
    calls[k] = (calls[k][0], calls[k][1], outs)
    sent, recv = _fingerprint_sums(calls)
    assert sent != recv


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 80), st.integers(0, 2**40), st.data())
def test_fingerprint_terms_are_the_same_summed_in_python_or_numpy(world, seq, data):
    from collsched.comm import callsite

    rank = data.draw(st.integers(0, world - 1))
    ins = data.draw(st.lists(st.integers(0, 2**31), min_size=world, max_size=world))
    outs = data.draw(st.lists(st.integers(0, 2**31), min_size=world, max_size=world))
    got = split_fingerprint(seq, rank, ins, outs)
    callsite._pair_weights.cache_clear()
    small, callsite._PY_SUM_RANKS = callsite._PY_SUM_RANKS, (0 if world <= callsite._PY_SUM_RANKS else 10**6)
    try:
        assert split_fingerprint(seq, rank, ins, outs) == got
    finally:
        callsite._PY_SUM_RANKS = small
        callsite._pair_weights.cache_clear()


def _gathered(seqs: list[int], fps=None) -> np.ndarray:
    n = len(seqs)
    args = CallArgs([1] * n, [1] * n, 1, 1, 4)
    return np.stack([header(args, n, 7, 0, 0, False, 3, s, fps[r] if fps else (0, 0)) for r, s in enumerate(seqs)])


def test_sequence_numbers_name_the_ranks_behind_or_ahead():
    check_sequence(_gathered([5, 5, 5, 5]), 4)  # agreed: nothing raised
    with pytest.raises(PlanMismatchError, match=r"rank 2 is 1 call ahead.*#3–#6"):
        check_sequence(_gathered([5, 5, 6, 5]), 2)
    with pytest.raises(PlanMismatchError, match=r"ranks 0, 1 are 2 calls behind"):
        check_sequence(_gathered([3, 3, 5, 5, 5]), 2)


def test_fingerprint_words_wrap_like_the_sums():
    # Fingerprints are unsigned 64-bit sums carried in int64 words: the check must wrap alike.
    big = 2**64 - 5
    g = _gathered([5, 5], fps=[(big, 3), (10, (big + 7) % 2**64)])
    assert int(g[0, W_SENT_FP].astype(np.uint64)) == big
    assert int(g[1, W_RECV_FP].astype(np.uint64)) == (big + 7) % 2**64
    check_sequence(g, 0)  # big + 10 == 3 + big + 7 (mod 2^64)
    with pytest.raises(CollectiveInputError, match="calls #1–#4 .* a different number of rows"):
        check_sequence(_gathered([5, 5], fps=[(big, 3), (11, (big + 7) % 2**64)]), 0)


def test_a_rank_ahead_in_a_native_site_raises_on_every_rank():
    # Rank 1 raises alone at call 3 (bad split sizes) and carries on: its next call meets its
    # peers' call 3, and the outputs shift by one call (as with torch's own call) until the
    # check, which every rank reaches at the same point on the wire and which names rank 1.
    results = _run("rank_ahead_in_native", TIMEOUT_S, 1, 3)
    assert results[1]["bad_call_raised"]
    for r, res in enumerate(results):
        assert "rank 1 is 1 call ahead" in res.get("message", ""), f"rank {r}: {res}"
        assert "#1–#17" in res["message"]  # the calls since the last check, the bad one among them
        assert res["raised_at"] == (NATIVE_RECHECK_EVERY + 1 if r == 1 else NATIVE_RECHECK_EVERY)
        assert res["shifted"] > 0  # what the check reports happened: torch's calls paired shifted


@pytest.mark.parametrize("always", [False, True], ids=["checks_true", "checks_always"])
def test_a_native_split_contradiction_is_reported(always):
    # Rank 0 sends rank 1 one row fewer than rank 1 expects at call 2, in a site that runs
    # torch's call: torch leaves the missing row as it was (silently wrong). checks=True: the
    # next check raises on every rank naming the calls since the last one; "always": call 2
    # itself raises on every rank, naming the pair, before anything moves.
    results = _run("native_contradiction", TIMEOUT_S, always)
    messages = {res["message"] for res in results}
    assert len(messages) == 1, messages  # the same error on every rank
    for res in results:
        assert res["error"] == "CollectiveInputError"
        if always:
            assert res["raised_at"] == 2 and "rank 0 sends 2 rows to rank 1 but rank 1 expects 3" in res["message"]
        else:
            assert res["raised_at"] == NATIVE_RECHECK_EVERY and "calls #1–#15" in res["message"]
    if not always:
        assert results[1]["bad_call_output_right"] is False  # what the check is there to report


def test_a_rank_ahead_in_a_planned_site_raises_at_its_next_call():
    results = _run("seq_tampered", TIMEOUT_S)
    for res in results:
        assert "rank 1 is 1 call ahead" in res["message"]
        assert res["again"] and "rank 1 is 1 call ahead" in res["again"]  # the ranks stay at different calls


def test_checks_takes_only_true_false_or_always():
    from collsched.comm.api import _checks_always

    assert _checks_always(True) is False and _checks_always(False) is False and _checks_always("always") is True
    with pytest.raises(ValueError, match="checks must be True, False or 'always'"):
        _checks_always("sometimes")
