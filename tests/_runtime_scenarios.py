"""Functions each spawned rank runs (tests/_multiproc.py starts them). Each returns a dict
of case name -> result that the pytest side asserts on; nothing here asserts, so one
failing case never hides the others."""
from __future__ import annotations

import os
import time
import traceback

import numpy as np
import torch
import torch.distributed as dist

import collsched
import collsched.nn
from collsched import comm
from collsched.comm import callsite, launch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "int64": torch.int64, "float16": torch.float16}


def workloads(n: int) -> dict:
    """Row matrices (entry [i][j] = rows i sends to j), identical on every rank."""
    t = collsched.traffic
    w = {
        "balanced": np.full((n, n), 5, dtype=np.int64),
        "uniform": t.uniform(n, 12, seed=3).astype(np.int64),
        "zipf": t.zipf(n, 1.2, 10, seed=5).astype(np.int64),
        "hot_experts": (t.hot_experts(n, skew=1.5, tokens_per_rank=48, top_k=2, hidden=1, dtype_bytes=1, seed=7)
                        .astype(np.int64)),
    }
    empty = t.uniform(n, 6, seed=11).astype(np.int64)
    empty[::3, 1::2] = 0
    w["empty_splits"] = empty
    silent = t.uniform(n, 6, seed=13).astype(np.int64)
    silent[2, :] = 0  # rank 2 sends nothing
    silent[:, 5] = 0  # rank 5 receives nothing
    w["silent_rank"] = silent
    w["all_zero"] = np.zeros((n, n), dtype=np.int64)
    return w


# Where the correctness cases keep their tensors: the GPU on NCCL, else the CPU.
DEVICE = torch.device("cpu")


def _use_backend_device() -> None:
    global DEVICE
    if "nccl" in str(dist.get_backend()).lower():
        DEVICE = torch.device("cuda", torch.cuda.current_device())


def _fill(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype).to(DEVICE)
    return torch.randint(-(2**40), 2**40, shape, generator=g, dtype=torch.int64).to(dtype).to(DEVICE)


def _compare_a2a(rows, dtype, trailing, seed, **kw):
    rank, n = dist.get_rank(), dist.get_world_size()
    in_splits = [int(x) for x in rows[rank]]
    out_splits = [int(x) for x in rows[:, rank]]
    x = _fill((sum(in_splits),) + trailing, dtype, seed * 100 + rank)
    ref = torch.empty((sum(out_splits),) + trailing, dtype=dtype, device=DEVICE)
    dist.all_to_all_single(ref, x, out_splits, in_splits)
    out = torch.full_like(ref, 7) if ref.numel() else torch.empty_like(ref)
    collsched.all_to_all_single(out, x, out_splits, in_splits, timeout=20, **kw)
    return bool(torch.equal(out.reshape(-1).view(torch.uint8), ref.reshape(-1).view(torch.uint8))) \
        if ref.numel() else out.shape == ref.shape


def _took(mode: str) -> bool:
    """Whether the last call took `mode` (eager needs CPU tensors on Gloo: elsewhere any mode)."""
    return DEVICE.type != "cpu" or comm.last_call_stats().mode == mode


def _case(results, name, fn):
    try:
        results[name] = {"ok": bool(fn())}
    except Exception as e:  # recorded, asserted by the parent
        results[name] = {"ok": False, "error": f"{type(e).__name__}: {e}", "tb": traceback.format_exc()[-1500:]}


def correctness(algorithms: list[str]) -> dict:
    _use_backend_device()
    rank, n = dist.get_rank(), dist.get_world_size()
    res: dict = {}
    clusters = {"2x4": "h200:2,gpus=4", "1x8": "h200:1", "2x4_shared_nics": "h200:2,gpus=4,nics=2"}
    seed = 1
    for alg in algorithms:
        for wname, rows in workloads(n).items():
            for dname in ("float32", "bfloat16", "int64"):
                seed += 1
                # eager_bytes=0: these small matrices would otherwise ride in the exchange; the
                # plans are what these cases test (the eager cases follow).
                _case(res, f"a2a/{alg}/{wname}/{dname}",
                      lambda: _compare_a2a(rows, DTYPES[dname], (3,), seed, algorithm=alg, cluster=clusters["2x4"],
                                           eager_bytes=0))
            seed += 1
            _case(res, f"a2a/{alg}/{wname}/3d_float16",
                  lambda: _compare_a2a(rows, torch.float16, (2, 5), seed, algorithm=alg, cluster=clusters["2x4"],
                                       eager_bytes=0))
            # The same call with its pairs inside the exchange (one round); CPU tensors on Gloo only.
            for dname, trailing in (("float32", (3,)), ("bfloat16", (2, 5)), ("int64", (1,))):
                seed += 1
                _case(res, f"eager/{alg}/{wname}/{dname}",
                      lambda: _compare_a2a(rows, DTYPES[dname], trailing, seed, algorithm=alg,
                                           cluster=clusters["2x4"]) and _took("eager"))
        rows = workloads(n)["zipf"]
        for cname in ("1x8", "2x4_shared_nics"):
            seed += 1
            _case(res, f"a2a/{alg}/zipf_{cname}/float32",
                  lambda: _compare_a2a(rows, torch.float32, (4,), seed, algorithm=alg, cluster=clusters[cname],
                                       eager_bytes=0))
        seed += 1
        _case(res, f"a2a/{alg}/zipf_traffic_arg/float32",
              lambda: _compare_a2a(rows, torch.float32, (4,), seed, algorithm=alg, cluster=clusters["2x4"],
                                   traffic=rows, eager_bytes=0))

    # The p2p transport (batch_isend_irecv per step; the default on NCCL) on every workload.
    for wname, rows in workloads(n).items():
        seed += 1
        _case(res, f"a2a/p2p_transport/{wname}/float32",
              lambda: _compare_a2a(rows, torch.float32, (3,), seed, algorithm="fanout", cluster=clusters["2x4"],
                                   transport="p2p", eager_bytes=0))
    rows = workloads(n)["hot_experts"]
    seed += 1
    _case(res, "a2a/unchecked_with_traffic/float32",
          lambda: _compare_a2a(rows, torch.float32, (2,), seed, algorithm="fanout", cluster=clusters["2x4"],
                               traffic=rows, checks=False))

    # Equal splits (None), 1-D input, env cluster (LOCAL_WORLD_SIZE=4 set by the launcher).
    def equal_splits():
        x = _fill((n * 6,), torch.float32, 900 + rank)
        ref = torch.empty_like(x)
        dist.all_to_all_single(ref, x)
        out = torch.empty_like(x)
        collsched.all_to_all_single(out, x, algorithm="fanout")
        return torch.equal(out, ref)

    _case(res, "a2a/equal_splits_env_cluster", equal_splits)

    def async_and_stats():
        x = _fill((n * 4, 2), torch.float32, 950 + rank)
        out = torch.empty_like(x)
        comm.DEFAULT_CACHE.clear()
        kw = dict(algorithm="fanout", cluster="h200:2,gpus=4", eager_bytes=0)
        h = collsched.all_to_all_single(out, x, async_op=True, **kw)
        s1 = comm.last_call_stats()
        collsched.all_to_all_single(out, x, **kw)
        s2 = comm.last_call_stats()
        return h.wait() and h.is_completed() and not s1.cache_hit and s2.cache_hit and s2.plan_hash == s1.plan_hash \
            and s1.mode == "planned" and s1.exchanged and s1.ops == 1 + 2 * (n - 1) \
            and s1.execute_s > 0 and s1.total_s >= s1.execute_s and s1.planned_by == "fanout" \
            and s1.decide_s > 0 and s1.expand_s > 0 and s1.compile_s > 0 and s1.plan_s >= s1.decide_s + s1.expand_s \
            and (s2.decide_s, s2.expand_s, s2.compile_s) == (0, 0, 0) \
            and s1.plan_hash == collsched.plan_for_rank(np.full((n, n), 32, dtype=np.uint64), "h200:2,gpus=4", rank, "fanout").digest

    _case(res, "api/async_and_stats", async_and_stats)

    def colliding_call_keys():
        # Every matrix gets the same 64-bit cache key: the cache must still compare the
        # matrices, or the second call would run the first call's plan.
        import collsched.comm.cache as cache

        saved = cache.fast_matrix_hash
        cache.fast_matrix_hash = lambda m: "0" * 16
        try:
            w = workloads(n)
            return all(_compare_a2a(w[name], torch.float32, (2,), 40 + k, algorithm="fanout", cluster="h200:2,gpus=4",
                                    eager_bytes=0)
                       for k, name in enumerate(["uniform", "zipf", "uniform", "hot_experts"]))
        finally:
            cache.fast_matrix_hash = saved

    _case(res, "api/colliding_call_keys", colliding_call_keys)

    if DEVICE.type == "cpu":
        _call_site_cases(res, n, rank)

    if DEVICE.type == "cuda":
        _case(res, "gpu/host_runs_ahead", _host_runs_ahead)

    # Synthetic plans: multi-step, scratch, relays, multi-segment messages, reduce, other collectives.
    import _synthetic_plans as S

    global TRANSPORT
    for TRANSPORT in ("alltoallv", "p2p", "hybrid"):
        _synthetic_cases(res, n, rank, S)

    # Autograd: collsched.nn vs torch.distributed.nn.functional, same upstream gradient.
    _autograd_cases(res, n, rank)
    _collective_cases(res, n, rank)
    return res


# Spin cycles of the GPU kernel the host must not wait for (≈ 0.2 s alone on a 2 GHz GPU;
# the ranks sharing one GPU stretch it).
_SPIN_CYCLES = 400_000_000


def _call_site_cases(res, n, rank):
    """The call site's modes (Gloo, CPU tensors): eager, native between checks, planned, and the
    plan digest checked at the next exchange."""
    cl = "h200:2,gpus=4"

    def eager_one_round():
        x = _fill((n * 5, 3), torch.float32, 980 + rank)
        ref, out = torch.empty_like(x), torch.empty_like(x)
        dist.all_to_all_single(ref, x)
        seen = []
        for _ in range(3):
            out.zero_()
            collsched.all_to_all_single(out, x, algorithm="fast", cluster=cl)
            st = comm.last_call_stats()
            seen.append((st.mode, st.exchanged, st.ops, st.planned_by, bool(torch.equal(out, ref))))
        return seen == [("eager", True, 1, "eager", True)] * 3

    _case(res, "api/eager_one_round", eager_one_round)

    def native_skips_exchange():
        # auto restricted to torch's call: the first call checks, the next 15 are torch's call
        # alone (torch's own work handle with async_op), the 17th checks again.
        kw = dict(algorithm="auto", cluster=cl, options={"candidates": ["native"]}, eager_bytes=0)
        x = _fill((n * 7, 2), torch.float32, 990 + rank)
        ref, out = torch.empty_like(x), torch.empty_like(x)
        dist.all_to_all_single(ref, x)
        seen, same = [], True
        for k in range(callsite.NATIVE_RECHECK_EVERY + 2):
            out.zero_()
            h = collsched.all_to_all_single(out, x, async_op=(k == 2), **kw)
            if k == 2:
                same = same and not isinstance(h, comm.api.CompletedWork) and h.wait() is not False
            st = comm.last_call_stats()
            seen.append(st.exchanged)
            same = same and st.mode == "native" and st.choice == "native" and bool(torch.equal(out, ref))
        want = [True] + [False] * (callsite.NATIVE_RECHECK_EVERY - 1) + [True, False]
        return same and seen == want

    _case(res, "api/native_skips_exchange", native_skips_exchange)

    def digest_checked_next_call():
        # A plan digest that differs on one rank (as a determinism bug would make it) is
        # caught by every rank at the site's next exchange.
        kw = dict(algorithm="fanout", cluster=cl, eager_bytes=8)
        x = _fill((n * 9, 2), torch.float32, 995 + rank)
        out = torch.empty_like(x)
        collsched.all_to_all_single(out, x, **kw)  # 72-byte pairs > 8: planned
        collsched.all_to_all_single(out, x, **kw)  # compares the first call's digests: equal
        ok = comm.last_call_stats().mode == "planned"
        from collsched.comm import api

        site = callsite.SITES.get((0, api._configure("fanout", {}, cl, "auto", None, x.device, n, 8).cfg_hash))
        if rank == 1:
            site.last_digest ^= 1
        try:
            collsched.all_to_all_single(out, x, **kw)
        except comm.PlanMismatchError as e:
            return ok and "executed different plans" in str(e)
        return False

    _case(res, "api/digest_checked_next_call", digest_checked_next_call)


def _host_runs_ahead() -> bool:
    """On NCCL a call only enqueues, like torch's: with a long kernel queued before it, the call
    returns well before the kernel ends (its exchanges run on the host group, not behind the
    kernel), and the output is right once the GPU is done. A new matrix (check round) and a
    repeat, for a planned algorithm and for auto."""
    rank, n = dist.get_rank(), dist.get_world_size()
    cl = "h200:2,gpus=4"
    host_group = comm.groups.host_group(None, 20.0)

    def start_together():
        # Ranks sharing one GPU leave their synchronize() at different times: line them up on
        # the host, so no rank's call waits for a peer that is still in the previous round.
        torch.cuda.synchronize()
        dist.barrier(group=host_group)

    for k, alg in enumerate(("fanout", "auto")):
        rows = workloads(n)["zipf"] + (k + 1)  # a matrix no earlier case planned
        in_splits, out_splits = [int(v) for v in rows[rank]], [int(v) for v in rows[:, rank]]
        x = _fill((sum(in_splits), 3), torch.float32, 990 + 10 * k + rank)
        ref = torch.empty((sum(out_splits), 3), device=DEVICE)
        dist.all_to_all_single(ref, x, out_splits, in_splits)
        start_together()
        t0 = time.perf_counter()
        torch.cuda._sleep(_SPIN_CYCLES)
        torch.cuda.synchronize()
        busy = time.perf_counter() - t0
        for repeat in (False, True):
            out = torch.full_like(ref, 7)
            start_together()
            torch.cuda._sleep(_SPIN_CYCLES)
            t0 = time.perf_counter()
            collsched.all_to_all_single(out, x, out_splits, in_splits, algorithm=alg, cluster=cl, timeout=20)
            host = time.perf_counter() - t0
            torch.cuda.synchronize()
            if not (host < busy / 2 and torch.equal(out, ref)):
                raise AssertionError(f"{alg} (repeat={repeat}): the call took {host * 1e3:.1f} ms on the host with a "
                                     f"{busy * 1e3:.1f} ms kernel queued before it; output equal: {torch.equal(out, ref)}")
    return True


def _collective_cases(res, n, rank):
    """collsched's allgather / reduce-scatter / allreduce against torch.distributed's."""
    k = 250
    for algorithm in ("forest", "ring", "tree"):
        def allgather(algorithm=algorithm):
            x = _fill((k,), torch.float32, 1800 + rank)
            got = torch.empty(n * k, device=DEVICE)
            collsched.all_gather_into_tensor(got, x, algorithm=algorithm, timeout=20)
            want = torch.empty(n * k, device=DEVICE)
            dist.all_gather_into_tensor(want, x)
            return torch.equal(got, want)

        def reduce_scatter(algorithm=algorithm):
            x = _fill((n * k,), torch.float32, 1900 + rank)
            got = torch.empty(k, device=DEVICE)
            collsched.reduce_scatter_tensor(got, x, algorithm=algorithm, timeout=20)
            want = torch.empty(k, device=DEVICE)
            dist.reduce_scatter_tensor(want, x)
            return torch.allclose(got, want, rtol=1e-5, atol=1e-5)

        def allreduce(algorithm=algorithm):
            x = _fill((k,), torch.int64, 2000 + rank)
            got = x.clone()
            collsched.all_reduce(got, algorithm=algorithm, timeout=20)
            dist.all_reduce(x)
            return torch.equal(got, x)

        for name, fn in (("allgather", allgather), ("reduce_scatter", reduce_scatter), ("allreduce", allreduce)):
            _case(res, f"collective/{name}/{algorithm}", fn)


TRANSPORT = "alltoallv"


def _synthetic_cases(res, n, rank, S):
    rows = workloads(n)["uniform"]
    for dname in ("float32", "int64"):
        def relay(dname=dname):
            dt = DTYPES[dname]
            esize = torch.empty(0, dtype=dt).element_size()
            plan = S.relay_all_to_all((rows * 3 * esize).tolist(), 4)
            in_s, out_s = [int(v) for v in rows[rank]], [int(v) for v in rows[:, rank]]
            x = _fill((sum(in_s), 3), dt, 1000 + rank)
            ref = torch.empty((sum(out_s), 3), dtype=dt, device=DEVICE)
            dist.all_to_all_single(ref, x, out_s, in_s)
            out = torch.zeros_like(ref)
            comm.execute(plan, x, out, timeout=20, transport=TRANSPORT)
            return torch.equal(out, ref)

        _case(res, f"execute/relay_all_to_all/{dname}/{TRANSPORT}", relay)

    def allgather():
        plan = S.ring_allgather(n, 24, 4)
        x = _fill((6,), torch.float32, 1100 + rank)
        ref = [torch.empty_like(x) for _ in range(n)]
        dist.all_gather(ref, x)
        out = torch.zeros(6 * n, device=DEVICE)
        comm.execute(plan, x, out, timeout=20, transport=TRANSPORT)
        return torch.equal(out, torch.cat(ref))

    _case(res, f"execute/allgather/{TRANSPORT}", allgather)

    for dname in ("int64", "float32"):
        def reduce_scatter(dname=dname):
            dt = DTYPES[dname]
            esize = torch.empty(0, dtype=dt).element_size()
            k = 5
            plan = S.direct_reduce_scatter(n, k * esize, esize, 4)
            x = _fill((n * k,), dt, 1200 + rank)
            ref = torch.empty(k, dtype=dt, device=DEVICE)
            dist.reduce_scatter_tensor(ref, x)
            out = torch.zeros(k, dtype=dt, device=DEVICE)
            comm.execute(plan, x, out, timeout=20, transport=TRANSPORT)
            return torch.equal(out, ref) if not dt.is_floating_point else torch.allclose(out, ref, rtol=1e-5, atol=1e-5)

        _case(res, f"execute/reduce_scatter/{dname}/{TRANSPORT}", reduce_scatter)

        def allreduce(dname=dname):
            dt = DTYPES[dname]
            esize = torch.empty(0, dtype=dt).element_size()
            k = 3
            plan = S.rs_ag_allreduce(n, k * esize, esize, 4)
            x = _fill((n * k,), dt, 1300 + rank)
            ref = x.clone()
            dist.all_reduce(ref)
            out = torch.zeros_like(x)
            comm.execute(plan, x, out, timeout=20, transport=TRANSPORT)
            return torch.equal(out, ref) if not dt.is_floating_point else torch.allclose(out, ref, rtol=1e-5, atol=1e-5)

        _case(res, f"execute/allreduce/{dname}/{TRANSPORT}", allreduce)

    def pool_reuse():
        plan = S.relay_all_to_all((rows * 4).tolist(), 4)
        in_s, out_s = [int(v) for v in rows[rank]], [int(v) for v in rows[:, rank]]
        x = _fill((sum(in_s),), torch.float32, 1700 + rank)
        out = torch.zeros(sum(out_s), device=DEVICE)
        comm.execute(plan, x, out, timeout=20, transport=TRANSPORT)
        before = comm.DEFAULT_POOL.allocations
        for _ in range(3):
            comm.execute(plan, x, out, timeout=20, transport=TRANSPORT)
        return comm.DEFAULT_POOL.allocations == before

    _case(res, f"execute/pool_reuse/{TRANSPORT}", pool_reuse)


def _autograd_cases(res, n, rank):
    def autograd():
        import torch.distributed.nn.functional as F

        r = workloads(n)["zipf"]
        in_s, out_s = [int(v) for v in r[rank]], [int(v) for v in r[:, rank]]
        base = _fill((sum(in_s), 4), torch.float32, 1400 + rank)
        w = _fill((sum(out_s), 4), torch.float32, 1500 + rank)
        a = base.clone().requires_grad_(True)
        ya = collsched.nn.all_to_all_single(a * 2, out_s, in_s, algorithm="fanout", cluster="h200:2,gpus=4")
        (ya * w).sum().backward()
        b = base.clone().requires_grad_(True)
        yb = F.all_to_all_single(torch.empty(sum(out_s), 4, device=DEVICE), b * 2, out_s, in_s)
        (yb * w).sum().backward()
        return torch.equal(ya.detach(), yb.detach()) and torch.equal(a.grad, b.grad)

    _case(res, "autograd/grad_equals_torch", autograd)

    def autograd_traffic():
        r = workloads(n)["hot_experts"]
        in_s, out_s = [int(v) for v in r[rank]], [int(v) for v in r[:, rank]]
        a = _fill((sum(in_s), 2), torch.float32, 1600 + rank).requires_grad_(True)
        y = collsched.nn.all_to_all(None, a, out_s, in_s, traffic=r, algorithm="fanout", cluster="h200:2,gpus=4")
        y.sum().backward()
        return torch.equal(a.grad, torch.ones_like(a))

    _case(res, "autograd/traffic_transposed", autograd_traffic)

    def autograd_backward_plan_prefetched():
        # The forward plans the transposed matrix in the background; the backward finds it.
        r = workloads(n)["zipf"]
        in_s, out_s = [int(v) for v in r[rank]], [int(v) for v in r[:, rank]]
        cache = comm.PlanCache()  # its own: earlier cases' prefetches may still land in the default one
        a = _fill((sum(in_s), 3), torch.float32, 1700 + rank).requires_grad_(True)
        y = collsched.nn.all_to_all_single(a, out_s, in_s, algorithm="fast", cluster="h200:2,gpus=4", cache=cache,
                                           eager_bytes=0)  # planned: small pairs would ride in the exchange
        fwd = comm.last_call_stats()
        # The background thread keys the transposed demand once it has transposed it; wait for
        # the plan itself (the wait of a call that comes first is tested in test_runtime.py).
        deadline = time.time() + 60
        while cache.prefetched == 0:
            assert time.time() < deadline, "the transposed plan was never prefetched"
            time.sleep(0.001)
        y.sum().backward()
        bwd = comm.last_call_stats()
        with torch.no_grad():  # no backward to follow: nothing prefetched
            collsched.nn.all_to_all_single(a, out_s, in_s, algorithm="fanout", cluster="h200:2,gpus=4", cache=cache,
                                           eager_bytes=0)
        got = (fwd.prefetched, bwd.cache_hit, bwd.prefetched, cache.prefetched, len(cache._inflight), cache.misses)
        assert got == (False, True, True, 1, 0, 2), \
            f"(fwd prefetched, bwd hit, bwd prefetched, prefetches, in flight, misses) = {got}"
        return torch.equal(a.grad, torch.ones_like(a))

    _case(res, "autograd/backward_plan_prefetched", autograd_backward_plan_prefetched)


def _expect(results, name, fn, exc_types, timeout_s=None):
    """Run fn, record which exception it raised and how long it took."""
    t0 = time.monotonic()
    try:
        fn()
        results[name] = {"raised": None, "elapsed": time.monotonic() - t0}
    except Exception as e:
        results[name] = {"raised": type(e).__name__, "is_expected": isinstance(e, exc_types),
                         "message": str(e)[:600], "elapsed": time.monotonic() - t0}


def faults(timeout_s: float) -> dict:
    """Bad inputs on one rank / disagreeing ranks: every rank must raise the same error, and the
    group must stay usable afterwards. Ends with a straggler (breaks the group)."""
    _use_backend_device()
    rank, n = dist.get_rank(), dist.get_world_size()
    res: dict = {}
    cl = f"h200:1,gpus={n}"
    kw = dict(algorithm="fanout", cluster=cl, timeout=timeout_s)
    ok_in = torch.arange(n * 3, dtype=torch.float32, device=DEVICE).reshape(n * 3, 1)
    splits = [3] * n
    E = comm.CollectiveInputError

    def call(out=None, inp=None, osz=splits, isz=splits, **extra):
        o = out if out is not None else torch.empty(n * 3, 1, device=DEVICE)
        i = inp if inp is not None else ok_in
        collsched.all_to_all_single(o, i, osz, isz, **{**kw, **extra})

    bad_rank = 1
    cases = {
        "split_sum_wrong": lambda: call(isz=[3] * (n - 1) + [4] if rank == bad_rank else splits),
        "negative_split": lambda: call(isz=[-1, 4] + [3] * (n - 2) if rank == bad_rank else splits),
        "wrong_split_count": lambda: call(isz=[3] * (n + 1) if rank == bad_rank else splits),
        "output_too_small": lambda: call(out=torch.empty(n * 3 - 1, 1, device=DEVICE) if rank == bad_rank else None),
        "dtype_mismatch_across_ranks": lambda: call(
            inp=ok_in.double() if rank == bad_rank else None,
            out=torch.empty(n * 3, 1, dtype=torch.float64, device=DEVICE) if rank == bad_rank else None),
        "trailing_shape_mismatch": lambda: call(
            inp=torch.zeros(n * 3, 2, device=DEVICE) if rank == bad_rank else None,
            out=torch.empty(n * 3, 2, device=DEVICE) if rank == bad_rank else None),
        "input_output_dtype_differ": lambda: call(out=torch.empty(n * 3, 1, dtype=torch.int32, device=DEVICE) if rank == bad_rank else None),
        "non_contiguous": lambda: call(inp=torch.zeros(n * 6, 1, device=DEVICE)[::2] if rank == bad_rank else None),
        "split_disagreement": lambda: call(osz=[2, 4] + [3] * (n - 2) if rank == bad_rank else splits,
                                           out=torch.empty(n * 3, 1, device=DEVICE)),
    }
    for name, fn in cases.items():
        _expect(res, name, fn, (E,))
    tr = np.full((n, n), 3)
    tr_bad = tr.copy()
    tr_bad[2, 3], tr_bad[2, 0] = 4, 2  # agrees with the bad rank's own splits, not with the others' matrix
    _expect(res, "traffic_mismatch", lambda: call(traffic=tr_bad if rank == bad_rank else tr),
            (comm.TrafficMismatchError,))
    tr_contra = tr.copy()
    tr_contra[bad_rank, 0], tr_contra[bad_rank, 2] = 2, 4  # the bad rank's own row disagrees with its splits
    _expect(res, "traffic_contradicts_splits", lambda: call(traffic=tr_contra if rank == bad_rank else tr), (E,))
    _expect(res, "cluster_mismatch_plan", lambda: call(cluster="b200:1,gpus=%d" % n if rank == bad_rank else cl),
            (comm.PlanMismatchError,))
    _expect(res, "bad_cluster_size", lambda: call(cluster="h200:3" if rank == bad_rank else cl), (E,))
    # The group still works after all of that.
    _expect(res, "healthy_after", lambda: call(), (Exception,))
    # Straggler: the last rank never joins; the others must time out within the bound.
    if rank != n - 1:
        _expect(res, "straggler_timeout", lambda: call(), (comm.CommTimeoutError,))
        # Stay up until the other waiting ranks reach their own deadlines: a rank that left
        # first would show them a peer failure (NCCL reports the closed connection at once).
        time.sleep(2.0)
    else:
        time.sleep(timeout_s + 3)
        res["straggler_timeout"] = {"raised": "skipped (straggler)", "elapsed": 0.0}
    return res


def killed_peer(timeout_s: float, victim: int, phase: str) -> dict:
    """One rank dies; every survivor must raise within the timeout."""
    rank, n = dist.get_rank(), dist.get_world_size()
    x = torch.arange(n * 4096, dtype=torch.float32)
    out = torch.empty_like(x)
    collsched.all_to_all_single(out, x, algorithm="fanout", cluster=f"h200:1,gpus={n}", timeout=timeout_s)
    dist.barrier()
    if rank == victim:
        if phase == "stall":  # alive but never joins: survivors must time out inside a step
            time.sleep(timeout_s + 3)
            return {"killed_peer": {"raised": "skipped (victim)", "elapsed": 0.0}}
        os._exit(3)
    res: dict = {}
    if phase in ("execute", "stall", "execute_p2p"):
        # Survivors use the executor directly, so the death shows up inside a step.
        plan = collsched.plan_all_to_all(collsched.traffic.balanced(n, 4096 * 4), f"h200:1,gpus={n}", "fanout")
        time.sleep(0.5)
        tr = "p2p" if phase == "execute_p2p" else "auto"
        _expect(res, "killed_peer", lambda: comm.execute(plan, x, out, timeout=timeout_s, transport=tr),
                (comm.CommTimeoutError, comm.PeerFailureError))
    else:
        time.sleep(0.5)
        _expect(res, "killed_peer", lambda: collsched.all_to_all_single(
            out, x, algorithm="fanout", cluster=f"h200:1,gpus={n}", timeout=timeout_s),
            (comm.CommTimeoutError, comm.PeerFailureError))
    return res


def smoke() -> dict:
    return correctness(["fanout"])


def noop() -> dict:
    return {"t": time.time()}


def micro_exchange(iters: int = 20) -> dict:
    """Cost of small exchanges on this machine (diagnostic, not a test)."""
    n = dist.get_world_size()
    x = torch.arange(30, dtype=torch.int64)
    outs = [torch.empty_like(x) for _ in range(n)]
    res = {}
    for name, fn in {
        "all_gather": lambda: dist.all_gather(outs, x),
        "a2a_gather": lambda: dist.all_to_all_single(torch.empty(n * 30, dtype=torch.int64), x.repeat(n)),
        "all_reduce": lambda: dist.all_reduce(x.clone()),
        "barrier": lambda: dist.barrier(),
    }.items():
        fn()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        res[name] = (time.perf_counter() - t0) / iters * 1e6
    return res


def micro_a2a(nbytes: int = 1 << 20, iters: int = 10) -> dict:
    from datetime import timedelta

    n = dist.get_world_size()
    x = torch.ones(nbytes // 4)
    out = torch.empty_like(x)
    xb, ob = x.view(torch.uint8), out.view(torch.uint8)
    splits = [nbytes // n] * n
    res = {}
    for name, fn in {
        "sync_f32": lambda: dist.all_to_all_single(out, x),
        "sync_u8_splits": lambda: dist.all_to_all_single(ob, xb, splits, splits),
        "async_wait": lambda: dist.all_to_all_single(ob, xb, splits, splits, async_op=True).wait(),
        "async_wait_timeout": lambda: dist.all_to_all_single(ob, xb, splits, splits, async_op=True).wait(
            timeout=timedelta(seconds=30)),
    }.items():
        fn()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        res[name] = (time.perf_counter() - t0) / iters * 1e6
    return res


def micro_exec(nbytes: int = 1 << 20, rounds: int = 5, iters: int = 5) -> dict:
    from collsched.comm.executor import byte_view, run_program

    n = dist.get_world_size()
    rank = dist.get_rank()
    x = torch.ones(nbytes // 4)
    out = torch.empty_like(x)
    plan = collsched.plan_all_to_all(collsched.traffic.balanced(n, nbytes // n), "h200:2,gpus=4", "fanout")
    prog = comm.compile_rank_program(plan, rank)
    ib, ob = byte_view(x, "i"), byte_view(out, "o")
    fns = {
        "torch": lambda: dist.all_to_all_single(out, x),
        "exec_a2a": lambda: run_program(prog, ib, ob, None, torch.float32, 60, comm.DEFAULT_POOL, "alltoallv"),
        "exec_p2p": lambda: run_program(prog, ib, ob, None, torch.float32, 60, comm.DEFAULT_POOL, "p2p"),
        "dropin": lambda: collsched.all_to_all_single(out, x, algorithm="fanout", cluster="h200:2,gpus=4"),
    }
    best = {k: float("inf") for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            fn()
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            t = torch.tensor([(time.perf_counter() - t0) / iters * 1e6], dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            best[k] = min(best[k], float(t))
    return best


def micro_transport(nbytes: int = 1 << 20, rounds: int = 3, iters: int = 3) -> dict:
    """Executor time per transport and algorithm (diagnostic, not a test)."""
    from collsched.comm.executor import byte_view, run_program

    n, rank = dist.get_world_size(), dist.get_rank()
    x = torch.ones(nbytes // 4)
    out = torch.empty_like(x)
    ib, ob = byte_view(x, "i"), byte_view(out, "o")
    fns = {"torch": lambda: dist.all_to_all_single(out, x)}
    for alg in ("fanout", "spreadout", "hierarchical"):
        plan = collsched.plan_all_to_all(collsched.traffic.balanced(n, nbytes // n), "h200:2,gpus=4", alg)
        prog = comm.compile_rank_program(plan, rank)
        for tr in ("alltoallv", "p2p", "hybrid"):
            fns[f"{alg}/{tr}"] = (lambda prog=prog, tr=tr:
                                  run_program(prog, ib, ob, None, torch.float32, 60, comm.DEFAULT_POOL, tr))
    best = {k: float("inf") for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            fn()
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            t = torch.tensor([(time.perf_counter() - t0) / iters * 1e6], dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            best[k] = min(best[k], float(t))
    return best


def micro_phases(nbytes: int = 1 << 16, iters: int = 20) -> dict:
    """Where a drop-in call spends its time (diagnostic, not a test)."""
    n = dist.get_world_size()
    x = torch.ones(nbytes // 4)
    out = torch.empty_like(x)
    acc = {}
    for i in range(iters + 2):
        dist.barrier()
        collsched.all_to_all_single(out, x, algorithm="fanout", cluster=f"h200:1,gpus={n}")
        st = comm.last_call_stats()
        if i >= 2:
            for k in ("exchange_s", "plan_s", "check_s", "execute_s", "total_s"):
                acc[k] = acc.get(k, 0.0) + getattr(st, k) / iters * 1e6
    acc["cache_hit"] = st.cache_hit
    return acc


def call_sequence(calls: list) -> dict:
    """Run `calls` (the same list on every rank): each entry ``(size_class, algorithm, eager_bytes,
    dtype)``. Returns per call what the runtime decided and whether the output equals torch's,
    so the parent can check that every rank decided the same."""
    rank, n = dist.get_rank(), dist.get_world_size()
    pair_rows = {"tiny": 2, "small": 40, "large": 3000}  # × 4 floats (16 B) per row
    trace = []
    for k, (size, alg, eager_bytes, dname) in enumerate(calls):
        rng = np.random.default_rng(k)
        rows = rng.integers(0, 2 * pair_rows[size] + 1, (n, n))
        rows[rng.random((n, n)) < 0.15] = 0  # empty pairs
        in_s, out_s = [int(v) for v in rows[rank]], [int(v) for v in rows[:, rank]]
        x = _fill((sum(in_s), 4), DTYPES[dname], 5000 + 10 * k + rank)
        ref = torch.empty((sum(out_s), 4), dtype=x.dtype)
        dist.all_to_all_single(ref, x, out_s, in_s)
        out = torch.full_like(ref, 3)
        collsched.all_to_all_single(out, x, out_s, in_s, algorithm=alg, cluster=f"h200:{n // 4},gpus=4",
                                    eager_bytes=eager_bytes, timeout=30)
        st = comm.last_call_stats()
        trace.append((st.mode, st.exchanged, st.planned_by, st.ops > 0, bool(torch.equal(out, ref))))
    return {"trace": trace}


def native_local_problem(timeout_s: float) -> dict:
    """A call site in native mode runs torch's call without an exchange: a rank whose own
    arguments are bad raises at once, naming itself; its peers time out naming torch's call."""
    rank, n = dist.get_rank(), dist.get_world_size()
    kw = dict(algorithm="auto", cluster=f"h200:1,gpus={n}", options={"candidates": ["native"]}, eager_bytes=0,
              timeout=timeout_s)
    x = torch.arange(n * 3, dtype=torch.float32).reshape(n * 3, 1)
    out = torch.empty_like(x)
    collsched.all_to_all_single(out, x, [3] * n, [3] * n, **kw)  # checked: the site turns native
    res = {"first_mode": comm.last_call_stats().mode}
    bad = [3] * (n - 1) + [4] if rank == 1 else [3] * n
    _expect(res, "native_bad_rank", lambda: collsched.all_to_all_single(out, x, [3] * n, bad, **kw),
            (comm.CollectiveInputError, comm.CommTimeoutError))
    if rank != 1:
        time.sleep(1.0)  # the others reach their own deadlines before the bad rank's process ends
    return res
