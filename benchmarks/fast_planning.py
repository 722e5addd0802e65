"""FAST planning time (matrix in, Plan out, from Python) and Birkhoff stage counts.

    .venv/bin/python benchmarks/fast_planning.py [--reps 100] [--csv docs/results/fast_planning.csv]

Planning time: median over `reps` Zipf(0.8) matrices (50 MB mean pair size) on h200
clusters of 8, 40 and 128 servers × 8 GPUs, for fast, balanced_direct and fanout on the
same matrices (fanout does no scheduling: it is the cost of emitting one segment per
block), each from Python (matrix in, Plan out) and core-only (timed inside Rust).
Floor: the time to fill as many bytes as FAST's plan arrays take (`Plan.nbytes`) on this
thread (planning is sequential), measured in the same run: what writing that
plan costs at least on this machine, before any planning.
At fanout's rate: FAST's plan bytes times fanout's time per plan byte, from Python, in the
same run. fanout does no scheduling (one transfer and one segment per block), so this is
what writing FAST's plan costs at the rate this library's simplest producer writes a plan.
Stage counts: uniform and Zipf 0.5/0.8/0.99 for N = 4..128 servers, against 8·N.

Steady state, as when a job plans every step: one untimed warm-up plan per algorithm and
size first (it maps the memory the plan arrays are recycled into), and each timed plan is
dropped before the next, so the next one reuses its arrays (`plan::recycle`). Keeping each
plan alive instead made the next one fault in fresh pages: about +1% at 320 GPUs here.
"""
from __future__ import annotations

import argparse
import csv
import os
import statistics
import time

import collsched
from collsched import _core, traffic

TARGET_US = {8: 50, 40: 2_000, 128: 20_000}


ALGOS = ("fast", "balanced_direct", "fanout")


def median_plan_us(mats, cluster, algo):
    """From Python: matrix in, Plan out (conversion, the call, wrapping, dropping the plan)."""
    collsched.plan_all_to_all(mats[0], cluster, algo)  # warm-up, untimed (see the module doc)
    times = []
    for m in mats:
        t0 = time.perf_counter()
        collsched.plan_all_to_all(m, cluster, algo)
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def median_core_us(mats, cluster, algo):
    """Core only: matrix (read in place) → Traffic → Plan timed inside Rust (no Python call or wrapping)."""
    _core._core_plan_ns(mats[0], cluster, algo, {})  # warm-up, untimed
    return statistics.median(_core._core_plan_ns(m, cluster, algo, {}) / 1e3 for m in mats)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--servers", type=str, default="8,40,128")
    ap.add_argument("--csv", type=str, default="docs/results/fast_planning.csv")
    args = ap.parse_args()
    rows = []
    print(f"## Planning time (median, µs), Zipf(0.8), 50 MB mean pair; load average {os.getloadavg()[0]:.1f}")
    print("   floor: filling FAST's plan arrays (plan MB) on this thread, the least writing that plan costs here")
    print("   at fanout rate: FAST's plan bytes at fanout's µs per plan byte (fanout schedules nothing)")
    print(f"{'GPUs':>6} {'servers':>7} {'reps':>4} " + " ".join(f"{a + ' py':>12} {a + ' core':>13}" for a in ALGOS)
          + f" {'target':>8} {'fast/target':>11} {'fast/fanout':>11} {'plan MB':>8} {'floor':>7} {'fast/floor':>10}"
          f" {'at fanout rate':>14} {'stages':>6} {'segments':>9}")
    for servers in [int(x) for x in args.servers.split(",")]:
        cluster = collsched.Cluster.parse(f"h200:{servers}")
        p = servers * 8
        reps = args.reps if servers < 128 else max(5, args.reps // 5)
        mats = [traffic.zipf(p, 0.8, 50 << 20, seed=s) for s in range(reps)]
        py = {a: median_plan_us(mats, cluster, a) for a in ALGOS}
        core = {a: median_core_us(mats, cluster, a) for a in ALGOS}
        plan = collsched.plan_all_to_all(mats[0], cluster, "fast")
        floor = _core._write_floor_ns(plan.nbytes, reps) / 1e3
        fanout_rate = py["fanout"] / collsched.plan_all_to_all(mats[0], cluster, "fanout").nbytes  # µs per plan byte
        at_fanout_rate = fanout_rate * plan.nbytes
        tgt = TARGET_US.get(servers)
        print(f"{p:>6} {servers:>7} {reps:>4} " + " ".join(f"{py[a]:>12.0f} {core[a]:>13.0f}" for a in ALGOS)
              + f" {tgt or '-':>8} {py['fast'] / tgt if tgt else float('nan'):>11.2f} {py['fast'] / py['fanout']:>11.2f}"
              f" {plan.nbytes / 1e6:>8.1f} {floor:>7.0f} {py['fast'] / floor:>10.1f} {at_fanout_rate:>14.0f}"
              f" {plan.meta['stages']:>6} {plan.num_segments:>9}")
        rows.append({"kind": "planning_us", "gpus": p, "servers": servers, "workload": "zipf0.8", "fast": round(py["fast"], 1),
                     "fanout": round(py["fanout"], 1), "balanced_direct": round(py["balanced_direct"], 1),
                     "fast_core": round(core["fast"], 1), "balanced_direct_core": round(core["balanced_direct"], 1),
                     "fanout_core": round(core["fanout"], 1), "stages": plan.meta["stages"], "segments": plan.num_segments,
                     "reps": reps, "plan_bytes": plan.nbytes, "write_floor": round(floor, 1),
                     "at_fanout_rate": round(at_fanout_rate, 1)})
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
            rows.append({"kind": "stages", "gpus": n * 8, "servers": n, "workload": name, "fast": counts[-1], "fanout": "",
                         "balanced_direct": "", "fast_core": "", "balanced_direct_core": "", "fanout_core": "",
                         "stages": counts[-1], "segments": plan.num_segments, "reps": 1, "plan_bytes": plan.nbytes,
                         "write_floor": "", "at_fanout_rate": ""})
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
