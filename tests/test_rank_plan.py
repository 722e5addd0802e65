"""Per-rank planning from Python: `plan_for_rank` equals the whole plan's `rank_plan` for every
producer and rank, its program equals the one compiled from the whole plan, its digest is
the same in every process, and bad input is a clear error."""
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import collsched
from _matrices import matrix_of_kind
from collsched import traffic

ALGOS = [a for a, _ in collsched.all_to_all_algorithms()]


def matrix(p, kind, seed):
    return matrix_of_kind(p, kind, seed, unit=1 << 14)


@settings(max_examples=25, deadline=None)
@given(servers=st.integers(1, 4), gpus=st.integers(1, 4), nics=st.integers(1, 4),
       kind=st.sampled_from(["zipf", "uniform", "empty", "hot"]), seed=st.integers(0, 10_000))
def test_plan_for_rank_equals_the_whole_plans_rank_plan(servers, gpus, nics, kind, seed):
    spec = f"h200:{servers},gpus={gpus},nics={min(nics, gpus)}"
    p = servers * gpus
    m = matrix(p, kind, seed)
    for algo in ALGOS:
        plan = collsched.plan_all_to_all(m, spec, algo)
        plan.verify()
        for rank in range(p):
            own = collsched.plan_for_rank(m, spec, rank, algo)
            cut = plan.rank_plan(rank)
            assert own == cut, f"{algo} on {spec}, rank {rank}"
            assert own.digest == plan.digest and own.rank == rank and own.num_ranks == p
            assert own.input_bytes == plan.input_sizes[rank] and own.output_bytes == plan.output_sizes[rank]
            assert own.moving_pairs is None
        with_pairs = collsched.plan_for_rank(m, spec, seed % p, algo, moving_pairs=True)
        assert with_pairs == plan.rank_plan(seed % p, moving_pairs=True) and with_pairs.moving_pairs is not None


@pytest.mark.parametrize("algo", ["fanout", "spreadout", "fast", "sabre_skewed"])
def test_a_rank_plans_program_is_the_whole_plans(algo):
    from collsched.comm.program import compile_rank_program

    m = traffic.zipf(12, 0.99, 1 << 18, seed=4)
    plan = collsched.plan_all_to_all(m, "h200:3,gpus=4,nics=2", algo)
    for rank in range(12):
        for steps in (True, False):
            rp = collsched.plan_for_rank(m, "h200:3,gpus=4,nics=2", rank, algo, moving_pairs=steps)
            own = compile_rank_program(rp, rank, collective_steps=steps)
            assert own == compile_rank_program(plan, rank, collective_steps=steps)
            assert [sp.dense for sp in own.steps] == [sp.dense for sp in compile_rank_program(plan, rank, collective_steps=steps).steps]
    with pytest.raises(ValueError, match="rank 0's, not rank 1's"):
        compile_rank_program(collsched.plan_for_rank(m, "h200:3,gpus=4,nics=2", 0, algo), 1)
    # The collective transports' steps need the moving pairs, which a default rank plan lacks.
    with pytest.raises(ValueError, match="moving pairs, which were not counted"):
        compile_rank_program(collsched.plan_for_rank(m, "h200:3,gpus=4,nics=2", 0, algo), 0)


_CHILD = """
import collsched
from collsched import traffic
m = traffic.zipf(32, 0.9, 1 << 20, seed=42)
print(" ".join(collsched.plan_for_rank(m, "h200:4", r, a).digest for a in ("fast", "fanout", "sabre") for r in (0, 31)))
"""


def test_the_digest_is_identical_across_processes():
    outs = [subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=120,
                           check=True).stdout.strip() for _ in range(2)]
    m = traffic.zipf(32, 0.9, 1 << 20, seed=42)
    here = " ".join(collsched.plan_for_rank(m, "h200:4", r, a).digest for a in ("fast", "fanout", "sabre") for r in (0, 31))
    assert outs[0] == outs[1] == here
    # One digest per algorithm, shared by the ranks.
    d = here.split()
    assert d[0] == d[1] and d[2] == d[3] and len({d[0], d[2], d[4]}) == 3


def test_bad_input_is_a_clear_error():
    m = traffic.uniform(8, 1 << 10, seed=0)
    with pytest.raises(ValueError, match="rank 8 is outside the 8 ranks"):
        collsched.plan_for_rank(m, "h200:1", 8, "fanout")
    with pytest.raises(ValueError, match="rank must be a non-negative int"):
        collsched.plan_for_rank(m, "h200:1", -1, "fast")
    with pytest.raises(ValueError, match="unknown all-to-all algorithm 'nope'"):
        collsched.plan_for_rank(m, "h200:1", 0, "nope")
    with pytest.raises(ValueError, match="unknown option 'bogus'"):
        collsched.plan_for_rank(m, "h200:1", 0, "fast", bogus=1)
    with pytest.raises(ValueError, match="8×8"):
        collsched.plan_for_rank(m, "h200:2", 0, "fanout")
    with pytest.raises(ValueError, match="rank 9 is outside the plan's 8 ranks"):
        collsched.plan_all_to_all(m, "h200:1", "fanout").rank_plan(9)


def test_the_cache_plans_one_rank_and_keys_by_it():
    from collsched.comm import PlanCache

    m = traffic.zipf(16, 0.8, 1 << 20, seed=3)
    cl = collsched.Cluster.parse("h200:2")
    cache = PlanCache()
    e, hit = cache.get(m, cl, "fast", {}, rank=5)
    assert not hit and e.plan == collsched.plan_for_rank(m, cl, 5, "fast") and e.plan_hash == e.plan.digest
    assert e.decide_s > 0 and e.expand_s >= 0
    assert cache.get(m, cl, "fast", {}, rank=5)[1] and not cache.get(m, cl, "fast", {}, rank=6)[1]
    whole, hit = cache.get(m, cl, "fast", {})
    assert not hit and whole.plan_hash == collsched.plan_all_to_all(m, cl, "fast").hash
    assert e.program(5, False) == whole.program(5, False) and e.compile_s > 0
    # The collective transports' programs need the moving pairs: a separate entry counts them.
    with_pairs, hit = cache.get(m, cl, "fast", {}, rank=5, moving_pairs=True)
    assert not hit and with_pairs.plan.moving_pairs is not None and with_pairs.program(5) == whole.program(5)
    assert cache.get(m, cl, "fast", {}, rank=5, moving_pairs=True)[1]


def test_a_per_rank_prefetch_is_found_by_that_ranks_get():
    from collsched.comm import PlanCache

    m = traffic.zipf(16, 0.8, 1 << 20, seed=9)
    cl = collsched.Cluster.parse("h200:2")
    cache = PlanCache()
    with pytest.raises(ValueError, match="needs the rank"):
        cache.prefetch(m, cl, "fast", {}, per_rank=True)
    assert cache.prefetch(m, cl, "fast", {}, rank=3, collective_steps=False, per_rank=True)
    e, hit = cache.get(m, cl, "fast", {}, rank=3)  # waits for the prefetch rather than planning again
    assert hit and e.prefetched and e.plan == collsched.plan_for_rank(m, cl, 3, "fast")
    assert (3, False) in e.programs
    assert not cache.get(m, cl, "fast", {}, rank=4)[1]


def test_rank_plan_api():
    m = traffic.zipf(8, 0.8, 1 << 16, seed=1)
    rp = collsched.plan_for_rank(m, "h200:1", 2, "fast")
    assert isinstance(rp, collsched.RankPlan) and rp.collective == "all_to_all" and rp.algorithm == "fast"
    assert rp.num_transfers == len(rp.tags) > 0 and rp.nbytes > 0 and len(rp.digest) == 16
    # Tags count each ordered (src, dst) pair's transfers of the rank, in plan order.
    rows = np.frombuffer(rp._rows()["transfers"], dtype="<u4").reshape(-1, 9)
    seen: dict = {}
    for (src, dst), tag in zip(rows[:, :2].tolist(), rp.tags):
        assert tag == seen.get((src, dst), 0)
        seen[(src, dst)] = tag + 1
    assert "fast rank 2 of 8" in repr(rp)
    rows = rp._rows()
    assert len(rows["tags"]) == 4 * rp.num_transfers and rows["sizes"] == (rp.input_bytes, rp.output_bytes,
                                                                            rp.scratch_bytes)
    assert rp != collsched.plan_for_rank(m, "h200:1", 3, "fast")
    auto = collsched.plan_for_rank(m, "h200:1", 2, "auto")
    assert auto.algorithm == collsched.plan_all_to_all(m, "h200:1", "auto").meta["choice"]


def test_a_reused_workspace_gives_the_same_rank_plans():
    from collsched import _core
    from collsched.planning import _plan_for_rank_timed

    ws = _core.Workspace()
    for spec, seed in [("h200:3,nics=2", 1), ("h200:5", 2), ("h200:2,gpus=4", 3), ("h200:3,nics=2", 1)]:
        p = collsched.Cluster.parse(spec).num_gpus
        m = traffic.zipf(p, 0.99, 1 << 20, seed=seed)
        for algo in ("fast", "balanced_direct", "fanout"):
            rank = seed % p
            assert _plan_for_rank_timed(m, spec, rank, algo, {}, ws)[0] == collsched.plan_for_rank(m, spec, rank, algo)


@settings(max_examples=15, deadline=None)
@given(servers=st.integers(1, 3), gpus=st.integers(1, 4), kind=st.sampled_from(["zipf", "uniform", "hot"]),
       seed=st.integers(0, 10_000))
def test_rank_deps_from_a_rank_plan_equal_those_cut_from_the_whole_plan(servers, gpus, kind, seed):
    # The dependency-driven executor reads a rank's deps from its RankPlan on the runtime's path;
    # they must be exactly what the whole plan's deps, cut to the rank, give.
    from collsched.comm.program import rank_deps

    spec = f"h200:{servers},gpus={gpus}"
    p = servers * gpus
    m = matrix(p, kind, seed)
    for algo in ("fast", "hierarchical", "sabre", "balanced_direct"):
        plan = collsched.plan_all_to_all(m, spec, algo)
        for rank in range(p):
            whole = rank_deps(plan, rank)
            assert rank_deps(collsched.plan_for_rank(m, spec, rank, algo), rank) == whole
            assert rank_deps(plan.rank_plan(rank), rank) == whole
