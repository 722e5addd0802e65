"""The core's rank programs (`plan::rank_program`, what `compile_rank_program` and
`RankProgram.overlap` return) against the numpy layout they replaced
(tests/_program_reference.py): over random clusters and matrices for every all-to-all
algorithm, and over collectives and synthetic plans with ReduceSum and relays, on every rank,
from the whole Plan, its decoded arrays and the rank's RankPlan, with and without the steps
every rank joins."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import _program_reference as ref
from _matrices import matrix_of_kind
import collsched
from collsched import traffic
from collsched.collectives import plan_collective
from collsched.comm.program import compile_rank_program, plan_arrays, rank_deps

ALGORITHMS = [name for name, _ in collsched.all_to_all_algorithms()]


def _matrix(p: int, kind: str, seed: int) -> np.ndarray:
    return matrix_of_kind(p, kind, seed, unit=1 << 12)


def _assert_equal_to_reference(plan, rank: int, rank_plan_of=None) -> None:
    """The core's program and overlap of `rank` equal the reference's, from every source
    (`rank_plan_of(moving_pairs)`: the rank's RankPlan, with or without the moving pairs)."""
    arrays = plan_arrays(plan)
    for steps in (True, False):
        want, cols = ref.compile_reference(plan, rank, collective_steps=steps)
        want_ov = ref.overlap_reference(want, cols, ref._dep_pairs(plan, rank))
        sources = [(plan, None), (plan, arrays)] + ([(rank_plan_of(steps), None)] if rank_plan_of is not None else [])
        for src, a in sources:
            got = compile_rank_program(src, rank, a, collective_steps=steps)
            what = f"{plan.algorithm} rank {rank} from {type(src).__name__}{' arrays' if a is not None else ''}"
            assert got == want, what
            # Messages are shared by the steps and the actions, as the executors expect.
            assert got.overlap == want_ov, what
            shared = {id(m) for sp in got.steps for m in sp.sends + sp.recvs}
            assert all(id(a.msg) in shared for a in got.overlap.actions if a.msg is not None), what
    deps = {}
    for o, d in zip(*(x.tolist() for x in ref._dep_pairs(plan, rank))):
        deps.setdefault(o, []).append(d)
    want_deps = {o: tuple(ds) for o, ds in deps.items()}
    assert rank_deps(plan, rank) == want_deps == rank_deps(plan, rank, arrays)
    if rank_plan_of is not None:
        assert rank_deps(rank_plan_of(False), rank) == want_deps


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(servers=st.integers(1, 4), gpus=st.integers(1, 4), nics=st.integers(1, 4),
       kind=st.sampled_from(["zipf", "uniform", "empty", "hot"]), seed=st.integers(0, 10_000),
       algorithm=st.sampled_from(ALGORITHMS))
def test_the_core_program_equals_the_numpy_reference(servers, gpus, nics, kind, seed, algorithm):
    spec = f"h200:{servers},gpus={gpus},nics={min(nics, gpus)}"
    p = servers * gpus
    m = _matrix(p, kind, seed)
    plan = collsched.plan_all_to_all(m, spec, algorithm)
    plan.verify()
    for rank in range(p):
        _assert_equal_to_reference(plan, rank, lambda pairs: collsched.plan_for_rank(m, spec, rank, algorithm,
                                                                                     moving_pairs=pairs))


@pytest.mark.parametrize("kind", ["allgather", "reduce_scatter", "allreduce"])
@pytest.mark.parametrize("algorithm", ["ring", "tree", "forest"])
def test_collectives_compile_as_the_reference(kind, algorithm):
    """Collectives carry ReduceSum (staged receives) and several segments per message."""
    plan = plan_collective(kind, 6, 6 * 1024, algorithm, elem_bytes=4)
    for rank in range(6):
        _assert_equal_to_reference(plan, rank)


def test_synthetic_plans_compile_as_the_reference():
    """Hand-made plans: relays through scratch, a direct reduce-scatter, an all-reduce made
    of a reduce-scatter and an all-gather (ReduceSum into the user's buffer)."""
    import _synthetic_plans as syn

    n = 8
    m = traffic.uniform(n, 1000, seed=1)
    for plan in (syn.relay_all_to_all(m.tolist(), 4), syn.ring_allgather(n, 64, 4),
                 syn.direct_reduce_scatter(n, 64, 4, 4), syn.rs_ag_allreduce(n, 64, 4, 4)):
        for rank in range(n):
            _assert_equal_to_reference(plan, rank)


def test_bad_sources_are_clear_errors():
    from collsched import _core

    m = traffic.uniform(4, 100, seed=0)
    plan = collsched.plan_all_to_all(m, "h200:2,gpus=2", "fanout")
    with pytest.raises(TypeError, match="expected a Plan or a RankPlan, got list"):
        _core._compile_rank_program([], 0, False)
    with pytest.raises(ValueError, match="rank 4 is outside the plan's 4 ranks"):
        _core._compile_rank_program(plan, 4, False)
    with pytest.raises(ValueError, match="this RankPlan is rank 1's, not rank 2's"):
        compile_rank_program(plan.rank_plan(1), 2)
    prog = compile_rank_program(plan, 0)
    with pytest.raises(ValueError, match="expected 6 messages and 1 local copies, got 0 and 0"):
        prog._core._overlap([], [])
