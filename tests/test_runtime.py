"""Runtime tests: the executor and the drop-in all_to_all_single on real Gloo process groups,
and on NCCL with CUDA tensors where the machine has a GPU (skipped elsewhere; one GPU is
enough: the launcher lets ranks share it).

One spawned 8-rank group runs every correctness case (algorithms × workloads × dtypes,
hand-built multi-step plans, autograd) in one go; small 4-rank groups run the fault
cases. The launcher kills any rank still running at its deadline, so nothing hangs.
"""
from __future__ import annotations

import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import collsched  # noqa: E402
from collsched import comm  # noqa: E402

from _multiproc import failures as _failures, run_ranks  # noqa: E402

WORLD = 8
FAULT_WORLD = 4
FAULT_TIMEOUT_S = 5.0
SLACK_S = 4.0  # scheduling slack on a loaded 2-core machine


def available_algorithms() -> list[str]:
    """Every all-to-all algorithm, auto included."""
    return [name for name, _ in collsched.all_to_all_algorithms()]


def _nccl_usable() -> bool:
    import torch.distributed as dist

    return torch.cuda.is_available() and dist.is_nccl_available()


BACKENDS = ["gloo", pytest.param("nccl", marks=pytest.mark.skipif(not _nccl_usable(), reason="needs a CUDA GPU and NCCL"))]


@pytest.fixture(scope="module", params=BACKENDS)
def correctness_results(request):
    return run_ranks("correctness", WORLD, available_algorithms(), timeout_s=170 if request.param == "gloo" else 400,
                     backend=request.param)


def _count(results, prefix):
    return sum(1 for k in results[0] if k.startswith(prefix)) if isinstance(results[0], dict) else 0


def test_every_rank_finished(correctness_results):
    assert all(isinstance(r, dict) for r in correctness_results), [str(r) for r in correctness_results]


def test_all_to_all_matches_torch_for_every_algorithm_workload_dtype(correctness_results):
    algs = available_algorithms()
    assert "fanout" in algs
    # 7 workloads × 4 dtype/shape cases + 3 cluster/traffic variants per algorithm.
    assert _count(correctness_results, "a2a/") >= len(algs) * (7 * 4 + 3) + 7 + 2
    assert _failures(correctness_results, "a2a/") == {}


def test_api_async_handle_stats_and_cache(correctness_results):
    on_cpu = correctness_results is not None and "api/eager_one_round" in correctness_results[0]
    assert _count(correctness_results, "api/") == (5 if on_cpu else 2)
    assert _failures(correctness_results, "api/") == {}


def test_eager_pairs_byte_identical_for_every_algorithm_workload_dtype(correctness_results):
    # Small pairs ride inside the descriptor exchange: one round, output identical to torch's,
    # empty pairs and silent ranks included.
    algs = available_algorithms()
    assert _count(correctness_results, "eager/") == len(algs) * 7 * 3
    assert _failures(correctness_results, "eager/") == {}


def test_executor_runs_multistep_scratch_reduce_and_other_collectives(correctness_results):
    names = {k for k in correctness_results[0] if k.startswith("execute/")}
    for transport in ("alltoallv", "p2p", "hybrid"):
        assert {f"execute/allgather/{transport}", f"execute/reduce_scatter/int64/{transport}",
                f"execute/allreduce/float32/{transport}", f"execute/relay_all_to_all/float32/{transport}",
                f"execute/pool_reuse/{transport}"} <= names
    assert _failures(correctness_results, "execute/") == {}


def test_nccl_call_does_not_wait_for_the_gpu(correctness_results):
    """On NCCL the host runs ahead of the GPU, as with torch's call (skipped on Gloo: no GPU)."""
    if "gpu/host_runs_ahead" not in correctness_results[0]:
        pytest.skip("the process group has no GPU (Gloo)")
    assert _failures(correctness_results, "gpu/") == {}


def test_autograd_gradients_equal_torch(correctness_results):
    assert _count(correctness_results, "autograd/") == 3
    assert _failures(correctness_results, "autograd/") == {}


def test_collectives_match_torch(correctness_results):
    assert _count(correctness_results, "collective/") == 9
    assert _failures(correctness_results, "collective/") == {}


@pytest.fixture(scope="module", params=BACKENDS)
def fault_results(request):
    return run_ranks("faults", FAULT_WORLD, FAULT_TIMEOUT_S, timeout_s=60 if request.param == "gloo" else 150,
                     gpus_per_server=FAULT_WORLD, backend=request.param)


EXPECTED_FAULTS = {
    "split_sum_wrong": ("CollectiveInputError", "input_split_sizes sum to"),
    "negative_split": ("CollectiveInputError", "is negative"),
    "wrong_split_count": ("CollectiveInputError", "entries but the group has"),
    "output_too_small": ("CollectiveInputError", "output too small"),
    "dtype_mismatch_across_ranks": ("CollectiveInputError", "disagree on dtype"),
    "trailing_shape_mismatch": ("CollectiveInputError", "trailing shape"),
    "input_output_dtype_differ": ("CollectiveInputError", "differs from output dtype"),
    "non_contiguous": ("CollectiveInputError", "not a contiguous"),
    "split_disagreement": ("CollectiveInputError", "expects"),
    "traffic_mismatch": ("TrafficMismatchError", "different traffic matrices"),
    "traffic_contradicts_splits": ("CollectiveInputError", "traffic row of this rank"),
    "cluster_mismatch_plan": ("PlanMismatchError", "disagree on cluster"),
    "bad_cluster_size": ("CollectiveInputError", "GPUs but the group has"),
}


@pytest.mark.parametrize("case", sorted(EXPECTED_FAULTS))
def test_bad_input_raises_same_error_on_every_rank(fault_results, case):
    exc, text = EXPECTED_FAULTS[case]
    assert all(isinstance(r, dict) for r in fault_results), [str(r) for r in fault_results]
    messages = set()
    for r, res in enumerate(fault_results):
        got = res[case]
        assert got["raised"] == exc, (r, got)
        assert text in got["message"], (r, got)
        assert got["elapsed"] < FAULT_TIMEOUT_S, (r, got)  # detected collectively, not by timing out
        messages.add(got["message"].split(" (")[0])
    assert len(messages) == 1, messages


def test_group_stays_usable_after_input_errors(fault_results):
    for res in fault_results:
        assert res["healthy_after"]["raised"] is None, res["healthy_after"]


def test_straggler_times_out_on_every_other_rank(fault_results):
    for res in fault_results[:-1]:
        got = res["straggler_timeout"]
        assert got["raised"] == "CommTimeoutError", got
        assert FAULT_TIMEOUT_S - 0.5 <= got["elapsed"] <= FAULT_TIMEOUT_S + SLACK_S, got


@pytest.mark.parametrize("phase", ["api", "execute", "execute_p2p", "stall"])
def test_killed_or_stalled_peer_raises_on_every_survivor(phase):
    victim = 2
    results = run_ranks("killed_peer", FAULT_WORLD, FAULT_TIMEOUT_S, victim, phase, timeout_s=60,
                        gpus_per_server=FAULT_WORLD)
    for r, res in enumerate(results):
        if r == victim:
            continue
        assert isinstance(res, dict), str(res)
        got = res["killed_peer"]
        expected = ("CommTimeoutError",) if phase == "stall" else ("CommTimeoutError", "PeerFailureError")
        assert got["raised"] in expected, got
        assert got["elapsed"] <= FAULT_TIMEOUT_S + SLACK_S, got


# ---- single-process unit tests -------------------------------------------------------------

def _plan(n=8, seed=1):
    return collsched.plan_all_to_all(collsched.traffic.uniform(n, 100, seed=seed), f"h200:{n // 4},gpus=4", "fanout")


def test_plan_arrays_round_trip_plan_json():
    import json

    p = _plan()
    a = comm.plan_arrays(p)
    j = json.loads(p.to_json())
    assert len(a.transfers) == p.num_transfers and len(a.segments) == p.num_segments
    assert [t["src"] for t in j["transfers"]] == a.transfers["src"].tolist()
    assert [s["len"] for s in j["segments"]] == a.segments["len"].tolist()
    assert a.transfer_bytes().sum() == sum(p.input_sizes)


def test_plan_nbytes_counts_its_arrays():
    p = collsched.plan_all_to_all(collsched.traffic.uniform(8, 100, seed=1), "h200:2,gpus=4", "fast")
    a = comm.plan_arrays(p)
    assert p.num_deps == len(a.deps) > 0
    # Transfers and segments are 32-byte rows in memory, deps u32 (pinned in the core's tests).
    assert p.nbytes == 32 * (p.num_transfers + p.num_segments) + 4 * p.num_deps > 0


def test_write_floor_measures_a_fill_and_refuses_absurd_sizes():
    from collsched import _core

    assert _core._write_floor_ns(1 << 20, 3) > 0
    with pytest.raises(ValueError, match="1 GiB"):
        _core._write_floor_ns(1 << 40, 1)


def test_rank_programs_partition_the_plan():
    import sys
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    import _synthetic_plans as S

    m = collsched.traffic.uniform(8, 50, seed=2)
    p = S.relay_all_to_all(m.tolist(), 4)
    progs = [comm.compile_rank_program(p, r) for r in range(8)]
    # Every message once on each side, named alike by (src, dst, tag).
    sends = sorted((r, m_.peer, m_.tag) for r, pr in enumerate(progs) for sp in pr.steps for m_ in sp.sends)
    recvs = sorted((m_.peer, r, m_.tag) for r, pr in enumerate(progs) for sp in pr.steps for m_ in sp.recvs)
    assert sends == recvs and len(set(sends)) == len(sends)
    for pr in progs:
        for sp in pr.steps:
            for peer in {m_.peer for m_ in sp.sends}:
                tags = [m_.tag for m_ in sp.sends if m_.peer == peer]
                assert tags == sorted(tags)
            for m_ in sp.sends + sp.recvs:
                if m_.stage_off >= 0:
                    assert m_.stage_off % 16 == 0 and m_.stage_off + m_.nbytes <= sp.staging_bytes
    assert sum(pr.bytes_sent for pr in progs) == sum(pr.bytes_received for pr in progs)
    with pytest.raises(ValueError, match="outside"):
        comm.compile_rank_program(p, 8)


def test_pool_reuses_buffers_by_size_class():
    pool = comm.BufferPool()
    a = pool.acquire(5000, torch.device("cpu"))
    assert a.numel() == 8192
    pool.release(a)
    b = pool.acquire(6000, torch.device("cpu"))
    assert b.data_ptr() == a.data_ptr() and pool.allocations == 1
    c = pool.acquire(100, torch.device("cpu"))
    assert c.numel() == 4096 and pool.allocations == 2


def test_plan_cache_is_a_bounded_lru_and_checks_the_matrix():
    cache = comm.PlanCache(capacity=2)
    cl = collsched.Cluster.parse("h200:2,gpus=4")
    ms = [collsched.traffic.uniform(8, 64, seed=s) for s in range(3)]
    e0, hit = cache.get(ms[0], cl, "fanout", {})
    assert not hit and e0.plan_seconds >= 0
    assert cache.get(ms[0], cl, "fanout", {})[1]
    cache.get(ms[1], cl, "fanout", {})
    cache.get(ms[2], cl, "fanout", {})  # evicts ms[0]
    assert len(cache) == 2 and not cache.get(ms[0], cl, "fanout", {})[1]
    assert cache.get(ms[2], cl, "fanout", {})[0].plan_hash == collsched.plan_all_to_all(ms[2], cl, "fanout").hash
    # A different cluster is a different key.
    assert not cache.get(ms[2], collsched.Cluster.parse("h200:1"), "fanout", {})[1]


def test_plan_cache_keeps_to_its_byte_budget():
    cl = collsched.Cluster.parse("h200:2,gpus=4")
    ms = [collsched.traffic.uniform(8, 64, seed=s) for s in range(4)]
    one = comm.PlanCache().get(ms[0], cl, "fanout", {})[0]
    size = one.plan.nbytes + one.matrix.nbytes
    cache = comm.PlanCache(max_bytes=2 * size + size // 2)  # room for two fanout entries
    for m in ms:
        cache.get(m, cl, "fanout", {})
    assert len(cache) == 2 and cache.nbytes == 2 * size
    assert cache.get(ms[3], cl, "fanout", {})[1] and not cache.get(ms[0], cl, "fanout", {})[1]
    tiny = comm.PlanCache(max_bytes=1)  # the newest entry stays, alone
    tiny.get(ms[0], cl, "fanout", {})
    tiny.get(ms[1], cl, "fanout", {})
    assert len(tiny) == 1 and tiny.get(ms[1], cl, "fanout", {})[1]
    with pytest.raises(ValueError, match="max_bytes"):
        comm.PlanCache(max_bytes=0)


def test_prefetched_plans_are_hits_with_their_program_compiled():
    from collsched.comm.program import compile_rank_program

    cache = comm.PlanCache()
    cl = collsched.Cluster.parse("h200:2,gpus=4")
    m = collsched.traffic.zipf(8, 0.9, 1 << 20, seed=5)
    assert cache.prefetch(m, cl, "fast", {}, rank=3, collective_steps=False)
    assert not cache.prefetch(m, cl, "fast", {})  # already on its way (or done)
    e, hit = cache.get(m, cl, "fast", {})  # waits for the prefetch rather than planning again
    assert hit and e.prefetched and cache.misses == 0 and cache.prefetched == 1
    fresh = collsched.plan_all_to_all(m, cl, "fast")
    assert e.plan_hash == fresh.hash
    assert e.programs[(3, False)] == compile_rank_program(fresh, 3, collective_steps=False)
    assert not cache.prefetch(m, cl, "fast", {})  # cached


def test_a_get_waits_for_a_prefetch_in_flight_and_plans_once():
    cache = comm.PlanCache()
    cl = collsched.Cluster.parse("h200:40")
    m = collsched.traffic.zipf(320, 0.8, 50 << 20, seed=1)  # a few ms to plan: still in flight below
    assert cache.prefetch(m, cl, "fast", {})
    e, hit = cache.get(m, cl, "fast", {})
    assert hit and e.prefetched and (cache.misses, cache.prefetched, cache.hits) == (0, 1, 1)


def test_a_transposed_prefetch_is_transposed_in_the_background_and_skips_symmetric_matrices():
    cache = comm.PlanCache()
    cl = collsched.Cluster.parse("h200:2,gpus=4")
    m = collsched.traffic.zipf(8, 0.9, 1 << 20, seed=6)
    assert cache.prefetch(m, cl, "fast", {}, rank=2, collective_steps=False, transpose=True)
    # Once the background thread has added it, the call finds the transposed matrix's plan.
    # (A call racing the thread may plan it too: both counts then move.)
    deadline = time.time() + 30
    while cache.prefetched < 1:
        assert time.time() < deadline, "the background prefetch never finished"
        time.sleep(0.01)
    e, hit = cache.get(np.ascontiguousarray(m.T), cl, "fast", {})
    assert (hit, e.prefetched, cache.prefetched) == (True, True, 1)
    sym = collsched.traffic.balanced(8, 1 << 20)
    assert cache.prefetch(sym, cl, "fast", {}, transpose=True)
    _wait_background_idle(cache)
    assert cache.prefetched <= 1 and not any(np.array_equal(x.matrix, sym) for x in cache._d.values())


def test_a_forked_child_does_not_wait_for_its_parents_prefetches():
    import threading
    import time

    cache = comm.PlanCache()
    cl = collsched.Cluster.parse("h200:2,gpus=4")
    m = collsched.traffic.uniform(8, 64, seed=9)
    cache._inflight[cache.key(m.astype("<u8"), cl, "fanout", {})] = threading.Event()  # never set here
    cache._pid = -1  # as in a child forked while that prefetch ran in the parent
    t0 = time.perf_counter()
    e, hit = cache.get(m, cl, "fanout", {}, wait_s=30)
    assert not hit and time.perf_counter() - t0 < 10 and cache._inflight == {}


def test_a_failed_prefetch_leaves_the_error_to_the_call():
    cache = comm.PlanCache()
    cl = collsched.Cluster.parse("h200:2,gpus=4")
    bad = collsched.traffic.uniform(6, 64, seed=0)  # 6 ranks on an 8-GPU cluster
    assert cache.prefetch(bad, cl, "fanout", {})
    with pytest.raises(ValueError, match="6"):
        cache.get(bad, cl, "fanout", {}, wait_s=30)
    assert cache.misses == 0 and cache.prefetched == 0 and len(cache) == 0


def _wait_background_idle(cache):
    """Until the cache's background thread has nothing queued or in flight, then a little more
    for the item it took last (a transposed demand is registered only once transposed)."""
    import time

    deadline = time.time() + 30
    while not cache._queue.empty() or cache._inflight:
        assert time.time() < deadline
        time.sleep(0.01)
    time.sleep(0.05)


def _hold_background_planning(cache):
    """Make the cache's background thread hold the demand it plans until `release` is set;
    `taken` is set once it holds one. Returns (release, taken)."""
    import threading

    release, taken, plan = threading.Event(), threading.Event(), cache._plan

    def held_plan(*args):
        taken.set()
        assert release.wait(30)
        return plan(*args)

    cache._plan = held_plan
    return release, taken


def test_prefetches_past_the_queue_are_dropped():
    cache = comm.PlanCache()
    cl = collsched.Cluster.parse("h200:2,gpus=4")
    ms = [collsched.traffic.uniform(8, 64, seed=s) for s in range(3 + comm.cache.PREFETCH_QUEUE)]
    release, taken = _hold_background_planning(cache)
    assert cache.prefetch(ms[0], cl, "fanout", {}) and taken.wait(30)
    queued = [cache.prefetch(m, cl, "fanout", {}) for m in ms[1:]]
    assert queued == [True] * comm.cache.PREFETCH_QUEUE + [False, False]
    release.set()
    for m, q in zip(ms, [True] + queued):
        assert cache.get(m, cl, "fanout", {})[1] == q  # dropped ones are planned by the call


def test_a_prefetch_in_flight_does_not_land_after_clear():
    cache = comm.PlanCache()
    cl = collsched.Cluster.parse("h200:2,gpus=4")
    ms = [collsched.traffic.zipf(8, 0.9, 64 << 10, seed=s) for s in (1, 2)]
    assert not np.array_equal(ms[1], ms[1].T)  # so its transposed prefetch is planned
    release, taken = _hold_background_planning(cache)
    assert cache.prefetch(ms[0], cl, "fanout", {}) and taken.wait(30)  # in flight
    assert cache.prefetch(ms[1], cl, "fanout", {}, transpose=True)  # queued behind it
    cache.clear()
    assert cache.prefetch(ms[0], cl, "fanout", {})  # again: the one in flight will not land
    release_again, taken_again = _hold_background_planning(cache)  # holds the second one
    release.set()
    assert taken_again.wait(30)
    # The first one's end did not unregister the second (a `get` now waits for it).
    assert cache.key(ms[0], cl, "fanout", {}) in cache._inflight
    release_again.set()
    _wait_background_idle(cache)
    e, hit = cache.get(ms[0], cl, "fanout", {})
    assert hit and e.prefetched and cache.prefetched == 1 and len(cache) == 1  # the second prefetch only
    assert cache.get(np.ascontiguousarray(ms[1].T), cl, "fanout", {})[1] is False


def test_auto_falls_back_to_fanout_only_while_not_implemented():
    cl = collsched.Cluster.parse("h200:2,gpus=4")
    entry, _ = comm.PlanCache().get(collsched.traffic.balanced(8, 64), cl, "auto", {})
    assert entry.algorithm in [a for a, _ in collsched.all_to_all_algorithms()]
    with pytest.raises(ValueError, match="unknown all-to-all algorithm"):
        comm.PlanCache().get(collsched.traffic.balanced(8, 64), cl, "no_such_algorithm", {})


def test_timeout_resolution(monkeypatch):
    monkeypatch.delenv(comm.TIMEOUT_ENV, raising=False)
    assert comm.resolve_timeout(None) == comm.DEFAULT_TIMEOUT_S
    monkeypatch.setenv(comm.TIMEOUT_ENV, "7.5")
    assert comm.resolve_timeout(None) == 7.5
    assert comm.resolve_timeout(3) == 3.0
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            comm.resolve_timeout(bad)
    monkeypatch.setenv(comm.TIMEOUT_ENV, "soon")
    with pytest.raises(ValueError, match=comm.TIMEOUT_ENV):
        comm.resolve_timeout(None)


def test_cluster_from_environment(monkeypatch):
    monkeypatch.delenv("COLLSCHED_CLUSTER", raising=False)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    c = comm.resolve_cluster(None, 8)
    assert (c.servers, c.gpus_per_server) == (2, 4)
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    c = comm.resolve_cluster(None, 8)
    assert (c.servers, c.gpus_per_server) == (1, 8)
    monkeypatch.setenv("COLLSCHED_CLUSTER", "mi300x:2,gpus=4")
    assert comm.resolve_cluster(None, 8).name.lower().startswith("mi300x")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "3")
    monkeypatch.delenv("COLLSCHED_CLUSTER")
    with pytest.raises(ValueError, match="whole number of servers"):
        comm.resolve_cluster(None, 8)
    with pytest.raises(ValueError, match="GPUs but the group has"):
        comm.resolve_cluster("h200:2", 8)


def test_transport_errors_are_classified():
    from collsched.comm.errors import classify_transport_error

    assert isinstance(classify_transport_error(RuntimeError("Timed out waiting 5000ms for recv"), "x"),
                      comm.CommTimeoutError)
    assert isinstance(classify_transport_error(RuntimeError("Connection closed by peer"), "x"), comm.PeerFailureError)


def test_synthetic_plans_verify():
    import sys
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    import _synthetic_plans as S
    from _runtime_scenarios import workloads

    rows = workloads(WORLD)["uniform"]
    plans = [S.relay_all_to_all((rows * 12).tolist(), 4), S.ring_allgather(WORLD, 24, 4),
             S.direct_reduce_scatter(WORLD, 40, 8, 4), S.rs_ag_allreduce(WORLD, 12, 4, 4)]
    for p in plans:
        p.verify()


def test_plans_used_by_the_tests_verify():
    """The plans the 8-rank group executes (same matrices, row sizes, clusters) pass the verifier."""
    from _runtime_scenarios import workloads

    checked = 0
    for alg in available_algorithms():
        for wname, rows in workloads(WORLD).items():
            for row_bytes, cluster in ((12, "h200:2,gpus=4"), (6, "h200:2,gpus=4"), (24, "h200:2,gpus=4"),
                                       (20, "h200:2,gpus=4"), (16, "h200:1"), (16, "h200:2,gpus=4,nics=2")):
                p = comm.PlanCache().get((rows * row_bytes).astype(np.uint64), collsched.Cluster.parse(cluster),
                                         alg, {})[0].plan
                try:
                    p.verify()
                except ValueError as e:
                    raise AssertionError(f"{alg} on {wname} ({row_bytes} B/row, {cluster}): {e}") from e
                checked += 1
    assert checked >= 7 * 6


def test_native_mode_bad_rank_raises_at_once_peers_time_out():
    # Between checks a native call site runs torch's call alone: no exchange tells the peers.
    results = run_ranks("native_local_problem", FAULT_WORLD, FAULT_TIMEOUT_S, timeout_s=60,
                        gpus_per_server=FAULT_WORLD)
    assert all(isinstance(r, dict) for r in results), [str(r) for r in results]
    for r, res in enumerate(results):
        assert res["first_mode"] == "native", res
        got = res["native_bad_rank"]
        if r == 1:
            assert got["raised"] == "CollectiveInputError" and got["elapsed"] < 1.0, got
            assert "rank 1" in got["message"] and "input_split_sizes sum to" in got["message"], got
        else:  # the bad rank's process ends (a reset) or not (the timeout): either is named
            assert got["raised"] in ("CommTimeoutError", "PeerFailureError"), got
            assert "torch's all-to-all" in got["message"], got
            assert got["elapsed"] <= FAULT_TIMEOUT_S + SLACK_S, got
