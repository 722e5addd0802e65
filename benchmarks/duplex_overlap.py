"""Executed on loopback Gloo (8 ranks = 2 servers x 4, `collsched.comm.launch.run_local`): what the
runtime's full-duplex transport and dependency-driven execution change, against torch's own
``all_to_all_single`` (half duplex) measured in the same run.

    .venv/bin/python benchmarks/duplex_overlap.py [--mean 262144] [--iters 7] [--pair 4194304]
    .venv/bin/python benchmarks/duplex_overlap.py --testbed-nic 200Mbps   # as root: on the shaped fabric

Table 1, a bidirectional exchange of `--pair` bytes each way between rank pairs (r, r+4), all
four pairs at once: one way only, both ways on one process group (half duplex), both ways on one
group per direction (full duplex), torch's all_to_all_single with only those pairs nonzero.
Table 2, the executed all-to-all of fanout, FAST and auto on Zipf(0.9) and hot-expert matrices
(`--mean` bytes per pair): step by step or dependency-driven, half or full duplex, the former
Gloo default (hybrid: dense steps as one all_to_all_single), and torch. Times are the median
over `--iters` rounds of the slowest rank (ms; lower is better); plans and programs are built
before timing, so only data movement is measured. With `--testbed-nic`, the same runs on the
namespace testbed (`collsched.testbed`: 2 servers x 4 ranks, each rank's NIC shaped to that
rate both ways), planned for the fabric's derived cluster.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

import collsched

WORLD, GPUS = 8, 4
CLUSTER = f"h200:{WORLD // GPUS},gpus={GPUS}"


def _timed(fn, iters: int) -> float:
    """Median over `iters` of the slowest rank's seconds (after one warm-up)."""
    import torch
    import torch.distributed as dist

    fn()
    out = []
    for _ in range(iters):
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        out.append(float(t))
    return statistics.median(out)


def _exchange(pair_bytes: int, iters: int) -> dict:
    import torch
    import torch.distributed as dist

    from collsched.comm.duplex import router

    rank, n = dist.get_rank(), dist.get_world_size()
    peer = (rank + n // 2) % n
    x = torch.full((pair_bytes,), rank, dtype=torch.uint8)
    y = torch.empty_like(x)
    half = router(None, 60.0, duplex=False)
    full = router(None, 60.0, duplex=True)

    def p2p(route, both):
        works = []
        if both or rank < peer:
            works.append(dist.isend(x, peer, group=route.send_group(peer), tag=1))
        if both or peer < rank:
            works.append(dist.irecv(y, peer, group=route.recv_group(peer), tag=1))
        for w in works:
            w.wait()

    splits = [pair_bytes if j == peer else 0 for j in range(n)]
    res = {
        "one way": _timed(lambda: p2p(full, False), iters),
        "both ways, one group (half duplex)": _timed(lambda: p2p(half, True), iters),
        "both ways, group per direction (full duplex)": _timed(lambda: p2p(full, True), iters),
        "torch all_to_all_single": _timed(lambda: dist.all_to_all_single(y, x, splits, splits), iters),
    }
    return res


def matrices(mean: int) -> dict:
    out = {}
    z = collsched.traffic.zipf(WORLD, 0.9, 1000, seed=7).astype(np.float64)
    h = collsched.traffic.hot_experts(WORLD, skew=1.2, tokens_per_rank=4096, top_k=2, hidden=1, dtype_bytes=1,
                                      seed=7).astype(np.float64)
    for name, m in (("zipf:0.9", z), ("hot:1.2", h)):
        np.fill_diagonal(m, m.diagonal())  # the diagonal stays: a local copy, as in torch
        out[name] = (np.round(m * (mean / m.mean()) / 16) * 16).astype(np.uint64)
    return out


MODES = [  # (label, transport, overlap, duplex)
    ("steps, half duplex", "p2p", False, False),
    ("steps, full duplex", "p2p", False, True),
    ("overlap, half duplex", "p2p", True, False),
    ("overlap, full duplex", "p2p", True, True),
    ("hybrid (old Gloo default)", "hybrid", False, True),
]


def worker(mean: int, iters: int, pair_bytes: int, algorithms: list, cluster: str = CLUSTER) -> dict:
    import torch
    import torch.distributed as dist

    from collsched import comm

    rank = dist.get_rank()
    res = {"exchange": _exchange(pair_bytes, iters), "a2a": {}}
    for wname, m in matrices(mean).items():
        ins = [int(v) for v in m[rank]]
        outs = [int(v) for v in m[:, rank]]
        x = torch.randint(0, 256, (sum(ins),), dtype=torch.uint8)
        ref = torch.empty(sum(outs), dtype=torch.uint8)
        rows = {"torch": _timed(lambda: dist.all_to_all_single(ref, x, outs, ins), iters)}
        for alg in algorithms:
            plan = collsched.plan_all_to_all(m, cluster, alg)
            for label, transport, overlap, dup in MODES:
                out = torch.empty_like(ref)
                prog = comm.compile_rank_program(plan, rank, collective_steps=transport != "p2p")

                def run(plan=plan, out=out, prog=prog, transport=transport, overlap=overlap, dup=dup):
                    comm.execute(plan, x, out, timeout=120, program=prog, transport=transport, overlap=overlap,
                                 duplex=dup)

                t = _timed(run, iters)
                same = bool(torch.equal(out, ref))
                ok = torch.tensor([int(same)])
                dist.all_reduce(ok, op=dist.ReduceOp.MIN)
                rows[(plan.meta.get("choice", plan.algorithm), alg, label)] = (t, bool(ok))
        res["a2a"][wname] = {"rows": rows, "total_bytes": int(m.sum())}
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mean", type=int, default=256 << 10, help="mean bytes per rank pair")
    ap.add_argument("--iters", type=int, default=7)
    ap.add_argument("--pair", type=int, default=4 << 20, help="bytes each way in the exchange")
    ap.add_argument("--algorithms", default="fanout,fast,auto")
    ap.add_argument("--testbed-nic", default="", help="run on a 2x4 namespace fabric with this NIC rate (root)")
    args = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    t0 = time.time()
    job = (args.mean, args.iters, args.pair, args.algorithms.split(","))
    if args.testbed_nic:
        from collsched.testbed import Fabric, FabricSpec, check_available, cluster_spec
        from collsched.testbed.launch import run_ranks, teardown_on_signals

        sys.path.insert(0, here)
        import duplex_overlap as me  # the ranks find the worker by this module name

        check_available()
        spec = FabricSpec.from_knobs(WORLD // GPUS, GPUS, args.testbed_nic)
        cluster = cluster_spec(spec)
        with teardown_on_signals(), Fabric(spec) as fabric:
            res = run_ranks(fabric, me.worker, job + (cluster,), timeout_s=900)[0]
        where = f"namespace testbed, NIC {args.testbed_nic} per rank both ways, planned for {cluster}"
    else:
        from collsched.comm.launch import run_local

        res = run_local("duplex_overlap:worker", WORLD, job, gpus_per_server=GPUS, timeout_s=900,
                        extra_pythonpath=[here])[0]
        where = f"loopback, planned for {CLUSTER}"
    print(f"# Executed: Gloo, {WORLD} ranks (2 servers x 4), {where}; torch {__import__('torch').__version__}, "
          f"{os.cpu_count()} CPUs; median of {args.iters} rounds, slowest rank; lower is better")
    print(f"\n## Bidirectional exchange, {args.pair} bytes each way, 4 pairs (r, r+4) at once")
    print(f"{'mode':>46} {'time ms':>9} {'GB/s per pair':>14} {'vs one way':>11}")
    one = res["exchange"]["one way"]
    for mode, t in res["exchange"].items():
        nb = args.pair * (1 if mode == "one way" else 2)
        print(f"{mode:>46} {t * 1e3:9.2f} {nb / t / 1e9:14.3f} {t / one:10.2f}x")
    for wname, w in res["a2a"].items():
        rows = w["rows"]
        torch_t = rows.pop("torch")
        print(f"\n## all-to-all, {wname}, mean {args.mean} bytes per pair, {w['total_bytes']} bytes in all")
        print(f"{'algorithm':>22} {'mode':>26} {'time ms':>9} {'algbw GB/s':>11} {'vs torch':>9} {'identical':>9}")
        print(f"{'torch':>22} {'all_to_all_single':>26} {torch_t * 1e3:9.2f} "
              f"{w['total_bytes'] / WORLD / torch_t / 1e9:11.3f} {1.0:8.2f}x {'-':>9}")
        for (planned, alg, label), (t, same) in rows.items():
            name = f"auto->{planned}" if alg == "auto" else alg
            print(f"{name:>22} {label:>26} {t * 1e3:9.2f} {w['total_bytes'] / WORLD / t / 1e9:11.3f} "
                  f"{t / torch_t:8.2f}x {str(same):>9}")
    print(f"\n(vs torch: time / torch's time, below 1 is faster than torch; algbw: bytes per rank / time; "
          f"{time.time() - t0:.0f} s)")


if __name__ == "__main__":
    sys.exit(main())
