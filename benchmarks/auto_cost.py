"""What does `auto`'s decision cost? Issue 33's targets: `collsched.choose` at most 30 µs at
64 GPUs and at most 2 ms at 1024, from Python, including building its inputs from the matrix.

For each cluster size (h200 servers of 8 GPUs) and matrix (Zipf 0.8 and uniform, 16 MiB per
GPU), median of --reps calls, measured in the same run:
  choose    `collsched.choose(matrix, cluster, "nccl")` from a uint64 numpy matrix (the
            matrix read in place, the one pass over it, the closed form, the Choice)
  /target   choose / the target (<= 1 meets it)
  pass      numpy's own single pass over the same matrix (`matrix.sum()`): the floor any
            decision that reads every entry pays from Python
  /pass     choose / pass
  copy      `matrix.tobytes()`: what handing the matrix over as bytes cost before it was
            read in place (once for choose and once more for the plan, per new matrix)
  miss      the runtime's plan cache on a new matrix with algorithm "auto", rank 0: one core
            call that chooses and expands the winner's rank part (nothing for native)
  hit       the same matrix again: the cache hit (hash + compare), no choose
  fanout    planning fanout, the cheapest plan (what any planned algorithm costs at least)
  winner    planning what choose picked (0 for native: torch's call needs no plan)
The machine is shared (2 cores, other jobs): the table prints the load average.

Run: .venv/bin/python benchmarks/auto_cost.py [--reps 21] [--sizes 64,320,1024]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

import collsched
from collsched import _core, plan_all_to_all, traffic
from collsched.choose import choose
from collsched.comm.cache import PlanCache

TARGET_S = {64: 30e-6, 1024: 2e-3}


def timed(fn, reps: int) -> float:
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=21)
    ap.add_argument("--sizes", default="64,320,1024")
    ap.add_argument("--backend", default="nccl")
    args = ap.parse_args()
    cal = _core.Calibration.defaults()
    print(f"load average {os.getloadavg()[0]:.2f}; median of {args.reps}; backend {args.backend}")
    hdr = (f"{'GPUs':>5} {'matrix':<9} {'choice':<16} {'choose':>9} {'target':>8} {'/target':>8} {'pass':>9} {'/pass':>6} "
           f"{'copy':>9} {'miss':>9} {'hit':>9} {'fanout':>9} {'winner':>9}")
    print(hdr)
    for n in (int(x) for x in args.sizes.split(",")):
        c = collsched.Cluster.parse(f"h200:{n // 8}")
        per_pair = (16 << 20) // n
        for name, m in (("zipf0.8", traffic.zipf(n, 0.8, per_pair, seed=1)), ("uniform", traffic.uniform(n, per_pair, seed=1))):
            m = np.ascontiguousarray(m, dtype=np.uint64)
            choose(m, c, args.backend, calibration=cal)  # warm up
            t_choose = timed(lambda: choose(m, c, args.backend, calibration=cal), args.reps)
            t_pass = timed(lambda: m.sum(), args.reps)
            t_copy = timed(lambda: m.tobytes(), args.reps)
            opts = {"backend": args.backend}
            fresh = iter([PlanCache() for _ in range(args.reps)])  # a new cache per call: every call misses
            t_miss = timed(lambda: next(fresh).get(m, c, "auto", opts, rank=0, calibration=cal, copy=False), args.reps)
            cache = PlanCache()
            cache.get(m, c, "auto", opts, rank=0, calibration=cal)
            t_hit = timed(lambda: cache.get(m, c, "auto", opts, rank=0, calibration=cal), args.reps)
            ch = choose(m, c, args.backend, calibration=cal)
            fan_reps = max(3, args.reps // 4) if n > 320 else args.reps
            t_fan = timed(lambda: plan_all_to_all(m, c, "fanout"), fan_reps)
            t_win = 0.0 if ch.algorithm == "native" else timed(lambda: plan_all_to_all(m, c, ch.algorithm), fan_reps)
            target = TARGET_S.get(n)
            ratio = f"{t_choose / target:8.2f}" if target else f"{'-':>8}"
            tgt = f"{target * 1e6:6.0f}µs" if target else f"{'-':>8}"
            print(f"{n:>5} {name:<9} {ch.algorithm:<16} {t_choose * 1e6:7.1f}µs {tgt} {ratio} {t_pass * 1e6:7.1f}µs "
                  f"{t_choose / t_pass:6.2f} {t_copy * 1e6:7.1f}µs {t_miss * 1e6:7.1f}µs {t_hit * 1e6:7.1f}µs "
                  f"{t_fan * 1e3:7.2f}ms {t_win * 1e3:7.2f}ms")


if __name__ == "__main__":
    main()
