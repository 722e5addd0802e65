"""FAST planning time (matrix in, Plan out, from Python) and Birkhoff stage counts.

    .venv/bin/python benchmarks/fast_planning.py [--reps 100] [--csv docs/fast_planning.csv]

Planning time: median over `reps` Zipf(0.8) matrices (50 MB mean pair size) on h200
clusters of 8, 40 and 128 servers × 8 GPUs, beside fanout's planning time on the same
matrices (fanout does no scheduling: it is the cost of emitting one segment per block).
Stage counts: uniform and Zipf 0.5/0.8/0.99 for N = 4..128 servers, against 8·N.
"""
from __future__ import annotations

import argparse
import csv
import os
import statistics
import time

import collsched
from collsched import traffic

TARGET_US = {8: 50, 40: 2_000, 128: 20_000}


def median_plan_us(mats, cluster, algo):
    times = []
    for m in mats:
        t0 = time.perf_counter()
        collsched.plan_all_to_all(m, cluster, algo)
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--servers", type=str, default="8,40,128")
    ap.add_argument("--csv", type=str, default="docs/fast_planning.csv")
    args = ap.parse_args()
    rows = []
    print("## Planning time (median, µs), Zipf(0.8), 50 MB mean pair")
    print(f"{'GPUs':>6} {'servers':>7} {'fast':>10} {'target':>8} {'fast/target':>11} {'fanout':>10} {'fast/fanout':>11} {'stages':>6} {'segments':>9}")
    for servers in [int(x) for x in args.servers.split(",")]:
        cluster = collsched.Cluster.parse(f"h200:{servers}")
        p = servers * 8
        reps = args.reps if servers < 128 else max(5, args.reps // 5)
        mats = [traffic.zipf(p, 0.8, 50 << 20, seed=s) for s in range(reps)]
        fast_us = median_plan_us(mats, cluster, "fast")
        fan_us = median_plan_us(mats[: max(3, reps // 5)], cluster, "fanout")
        plan = collsched.plan_all_to_all(mats[0], cluster, "fast")
        tgt = TARGET_US.get(servers)
        print(f"{p:>6} {servers:>7} {fast_us:>10.0f} {tgt or '-':>8} {fast_us / tgt if tgt else float('nan'):>11.2f} {fan_us:>10.0f} {fast_us / fan_us:>11.2f} {plan.meta['stages']:>6} {plan.num_segments:>9}")
        rows.append({"kind": "planning_us", "gpus": p, "servers": servers, "workload": "zipf0.8", "fast": round(fast_us, 1), "fanout": round(fan_us, 1), "stages": plan.meta["stages"], "reps": reps})
    print()
    print("## Birkhoff stages (one matrix each, seed 0), target ≤ 8·N")
    workloads = [("uniform", None), ("zipf0.5", 0.5), ("zipf0.8", 0.8), ("zipf0.99", 0.99)]
    print(f"{'N':>4} " + " ".join(f"{w:>9}" for w, _ in workloads) + f" {'8N':>5} {'N²-2N+2':>8}")
    for n in [4, 8, 16, 32, 64, 128]:
        cluster = collsched.Cluster.parse(f"h200:{n}")
        counts = []
        for name, s in workloads:
            m = traffic.uniform(n * 8, 50 << 20, seed=0) if s is None else traffic.zipf(n * 8, s, 50 << 20, seed=0)
            plan = collsched.plan_all_to_all(m, cluster, "fast")
            counts.append(int(plan.meta["stages"]))
            rows.append({"kind": "stages", "gpus": n * 8, "servers": n, "workload": name, "fast": counts[-1], "fanout": "", "stages": counts[-1], "reps": 1})
        print(f"{n:>4} " + " ".join(f"{c:>9}" for c in counts) + f" {8 * n:>5} {n * n - 2 * n + 2:>8}")
    if args.csv:
        os.makedirs(os.path.dirname(args.csv), exist_ok=True)
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
            w.writeheader()
            w.writerows(rows)
        print(f"\nwrote {args.csv}")


if __name__ == "__main__":
    main()
