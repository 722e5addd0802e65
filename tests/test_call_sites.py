"""Call sites: the mode of each call (eager / native / planned) is decided without a round of its
own, from what every rank already shares, so every rank decides the same."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

torch = pytest.importorskip("torch")
from collsched.comm import callsite  # noqa: E402
from collsched.comm.callsite import EAGER, NATIVE, PLANNED, CallSite, CallSites, next_mode  # noqa: E402

from _multiproc import run_ranks  # noqa: E402


def test_next_mode_table():
    assert next_mode(True, True, False) == EAGER
    assert next_mode(True, True, True) == EAGER  # everything fits: one round beats torch's call plus nothing
    assert next_mode(True, False, True) == NATIVE  # NCCL: nothing rides in the exchange
    assert next_mode(False, True, True) == NATIVE
    assert next_mode(False, True, False) == PLANNED
    assert next_mode(True, False, False) == PLANNED


def test_eager_capacity_fits_the_room():
    for world in (1, 2, 8, 64, 1024, 4096):
        room = callsite.eager_room(world)
        cap = callsite.eager_capacity(world)
        assert 0 <= cap <= room and cap % 8 == 0 and room % 8 == 0
        assert world * room <= callsite.EAGER_RANK_BYTES  # the receive room a rank posts is bounded
    assert callsite.eager_capacity(8) == callsite.EAGER_PAIR_BYTES


@given(st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=200))
def test_native_sites_check_on_a_fixed_schedule(checks):
    # Whatever the checked calls find, a site never runs more than NATIVE_RECHECK_EVERY - 1
    # calls in a row without an exchange, and two sites fed the same results stay identical.
    a, b = CallSite(), CallSite()
    run = 0
    for fits, native in checks:
        for site in (a, b):
            if site.skips_exchange():
                site.ran_unchecked()
            else:
                site.checked(next_mode(fits, True, native))
        run = run + 1 if a.mode == NATIVE and a.unchecked else 0
        assert run < callsite.NATIVE_RECHECK_EVERY
        assert a == b


def test_call_sites_are_bounded_lru():
    sites = CallSites(capacity=3)
    first = sites.get("a")
    first.mode = NATIVE
    for k in "bcd":
        sites.get(k)
    assert sites.get("a").mode == EAGER  # evicted, so it starts again (every rank evicts alike)


CALL = st.tuples(st.sampled_from(["tiny", "small", "large"]), st.sampled_from(["auto", "fanout", "fast"]),
                 st.sampled_from([None, 0, 64]), st.sampled_from(["float32", "bfloat16"]))


@settings(max_examples=2, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(st.lists(CALL, min_size=6, max_size=14))
def test_every_rank_decides_the_same_over_random_call_sequences(calls):
    results = run_ranks("call_sequence", 4, calls, timeout_s=120)
    assert all(isinstance(r, dict) for r in results), [str(r) for r in results]
    traces = [r["trace"] for r in results]
    assert all(t == traces[0] for t in traces), traces
    assert all(ok for *_, ok in traces[0]), traces[0]
    assert all(ops for *_, ops, _ in traces[0])
