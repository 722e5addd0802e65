"""Does one call make the host wait for the GPU? On NCCL, torch's own ``all_to_all_single`` only
enqueues its work, so the host runs ahead of the GPU (and its planning, hashing and Python cost
hide behind the kernels already queued). This benchmark queues a long GPU kernel (a spin of
`--spin` cycles) on every rank, then times one call on the host, new Zipf matrix each round:

    host ms    median host time of the call with the kernel queued before it
    kernel ms  median time the same kernel takes alone (every rank spinning at once)
    vs torch   host ms / torch's host ms (both measured in this run)
    waits      "yes" when the median call lasts at least half the kernel: it waited for the GPU

Needs CUDA and NCCL (8 ranks may share one GPU: the launcher gives each its own NCCL host id,
so bytes go over loopback sockets; the point here is the host, not the bytes). Runs only the
public API, so the same script measures an older collsched on the same machine.

    python benchmarks/host_runahead.py [--ranks 8] [--reps 9] [--spin 400000000]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

ALGORITHMS = ("torch", "fanout", "fast", "auto")


def rank_main(reps: int, spin: int, algorithms: tuple) -> dict:
    import numpy as np
    import torch
    import torch.distributed as dist

    import collsched

    rank, n = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", torch.cuda.current_device())
    host = dist.new_group(backend="gloo")  # lines the ranks up without touching the GPU
    cluster = f"h200:{max(1, n // 4)},gpus={min(n, 4)}"
    rng = np.random.default_rng(17)

    def together():
        torch.cuda.synchronize()
        dist.barrier(group=host)

    kernel, out = [], {}
    for alg in algorithms:
        times = []
        for i in range(reps + 1):  # the first round warms communicators and groups
            rows = collsched.traffic.zipf(n, 1.1, 64, seed=int(rng.integers(1 << 30))).astype(np.int64) + 1
            ins, outs = [int(v) for v in rows[rank]], [int(v) for v in rows[:, rank]]
            x = torch.ones(sum(ins), 256, device=dev)
            y = torch.empty(sum(outs), 256, device=dev)
            together()
            t0 = time.perf_counter()
            torch.cuda._sleep(spin)
            torch.cuda.synchronize()
            kernel.append(time.perf_counter() - t0)
            together()
            torch.cuda._sleep(spin)
            t0 = time.perf_counter()
            if alg == "torch":
                dist.all_to_all_single(y, x, outs, ins)
            else:
                collsched.all_to_all_single(y, x, outs, ins, algorithm=alg, cluster=cluster, timeout=60)
            t = time.perf_counter() - t0
            torch.cuda.synchronize()
            if i:
                times.append(t)
        out[alg] = statistics.median(times)
        if alg == "auto":
            out["_auto_chose"] = collsched.comm.last_call_stats().choice
    out["_kernel"] = statistics.median(kernel)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--spin", type=int, default=400_000_000, help="GPU spin cycles queued before each call")
    ap.add_argument("--algorithms", default=",".join(ALGORITHMS))
    a = ap.parse_args()
    from collsched.comm.launch import run_local

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import host_runahead  # the ranks import the function by module name, not from __main__

    algs = tuple(s for s in a.algorithms.split(",") if s)
    res = run_local(host_runahead.rank_main, a.ranks, args=(a.reps, a.spin, algs), backend="nccl", timeout_s=600,
                    gpus_per_server=min(a.ranks, 4), extra_pythonpath=[os.path.dirname(os.path.abspath(__file__))])
    import collsched

    print(f"## Host time of one call with a GPU kernel queued before it ({a.ranks} NCCL ranks, median of "
          f"{a.reps}, worst rank; collsched {collsched.__version__} from {os.path.dirname(collsched.__file__)})")
    kernel = max(r["_kernel"] for r in res)
    base = max(r["torch"] for r in res) if "torch" in algs else None
    print(f"{'algorithm':>16} {'host ms':>9} {'kernel ms':>10} {'vs torch':>9} {'waits':>6}")
    for alg in algs:
        t = max(r[alg] for r in res)
        ratio = f"{t / base:9.1f}" if base else f"{'-':>9}"
        name = f"auto ({res[0].get('_auto_chose', '?')})" if alg == "auto" else alg
        print(f"{name:>16} {t * 1e3:9.2f} {kernel * 1e3:10.1f} {ratio} {'yes' if t >= kernel / 2 else 'no':>6}")


if __name__ == "__main__":
    main()
