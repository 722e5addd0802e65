"""What does `auto` cost to plan, next to what it plans? Issue 4's targets: at most 1 ms at
64 GPUs, and at most 5% of the predicted transfer time.

For each cluster size (64, 128, 320 GPUs; h200 servers of 8) and matrix (Zipf 0.8 and
uniform, 16 MiB and 256 MiB per GPU), from Python, cache off, median of --reps runs:
  auto      auto's planning time (default options: closed-form model, fluid refinement of
            close calls within its counted-work budget)
  cands     the sum of the candidates' own planning times (each planned directly), over the
            candidates auto planned (those with a prediction, plus balanced_direct, fast and
            the SABRE planners, which are always planned for their bound)
  overhead  auto - cands: the cost model, pruning, refinement and bookkeeping
  predicted the predicted transfer time of auto's choice (fluid time when refined)
  hit       auto with the decision cache on, same matrix again (a hit: hash and compare the
            matrix, clone the kept plan, hand it to Python)
  /1ms      auto / 1 ms (the 64-GPU target; shown for every size)
  /5%       auto / (5% of predicted): <= 1 meets the relative target
Times are wall-clock on whatever machine runs this; the table prints the load average.

Run: .venv/bin/python benchmarks/auto_cost.py [--reps 5] [--sizes 64,128,320] [--refine fluid]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import collsched
from collsched import plan_all_to_all, traffic

CANDIDATES = ["fanout", "spreadout", "hierarchical", "balanced_direct", "fast", "sabre_skewed", "sabre_light"]
ALWAYS_PLANNED = {"balanced_direct", "fast", "sabre_skewed", "sabre_light"}
MB = 1 << 20


def median_time(fn, reps):
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--sizes", default="64,128,320", help="GPU counts (multiples of 8)")
    ap.add_argument("--refine", default=None, help="auto's refine option (default: auto's own default)")
    args = ap.parse_args()
    opts = {"cache": 0}
    if args.refine:
        opts["refine"] = args.refine
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}; "
          f"{os.cpu_count()} cores; median of {args.reps}; auto options {opts}")
    hdr = (f"{'GPUs':>5} {'matrix':<14}{'choice':<16}{'how':<8}{'auto ms':>9}{'cands ms':>10}{'overhead':>10}"
           f"{'predicted ms':>13}{'/1ms':>8}{'/5%':>9}{'hit ms':>9}{'hit/5%':>8}")
    print(hdr)
    worst = {}
    for gpus in [int(x) for x in args.sizes.split(",")]:
        c = collsched.Cluster.parse(f"h200:{gpus // 8}")
        for per_gpu in (16 * MB, 256 * MB):
            for name, m in (("zipf0.8", traffic.zipf(gpus, 0.8, per_gpu // gpus, seed=1)),
                            ("uniform", traffic.uniform(gpus, per_gpu // gpus, seed=1))):
                label = f"{name} {per_gpu // MB}M"
                p = plan_all_to_all(m, c, "auto", **opts)
                p.verify()
                t_auto = median_time(lambda: plan_all_to_all(m, c, "auto", **opts), args.reps)
                planned = [a for a in CANDIDATES if f"predicted_{a}_ns" in p.meta or a in ALWAYS_PLANNED]
                t_cands = sum(median_time(lambda a=a: plan_all_to_all(m, c, a), args.reps) for a in planned)
                choice = p.meta["choice"]
                pred_ns = int(p.meta.get(f"fluid_{choice}_ns", p.meta[f"predicted_{choice}_ns"]))
                how = p.meta.get("refined_with", "none")
                if how == "none" and "over its budget" in p.meta["reason"]:
                    how = "budget"
                cached = {k: v for k, v in opts.items() if k != "cache"}
                plan_all_to_all(m, c, "auto", **cached)
                t_hit = median_time(lambda: plan_all_to_all(m, c, "auto", **cached), args.reps)
                r_ms = t_auto / 1e-3
                r_5 = t_auto / (0.05 * pred_ns * 1e-9)
                worst[gpus] = max(worst.get(gpus, 0.0), r_ms)
                print(f"{gpus:>5} {label:<14}{choice:<16}{how:<8}{t_auto * 1e3:9.2f}{t_cands * 1e3:10.2f}"
                      f"{(t_auto - t_cands) * 1e3:10.2f}{pred_ns * 1e-6:13.2f}{r_ms:8.2f}{r_5:9.1f}"
                      f"{t_hit * 1e3:9.3f}{t_hit / (0.05 * pred_ns * 1e-9):8.2f}")
    print("how: fluid = close calls refined by the integer fluid model; budget = refinement over its budget "
          "(closed form decided); none = one close call (or refinement off)")
    for gpus, r in worst.items():
        print(f"  {gpus} GPUs: worst auto / 1 ms = {r:.2f}")


if __name__ == "__main__":
    sys.exit(main())
