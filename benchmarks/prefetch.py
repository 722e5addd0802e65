"""What `prefetch_transpose` hides: the backward (or an MoE combine) of an all-to-all moves the
transposed matrix, whose plan the forward can make on a background thread while it moves data.

    .venv/bin/python benchmarks/prefetch.py [--reps 10] [--servers 8,40,128]

Per h200 cluster (8 GPUs per server), FAST, Zipf(0.8) matrices with a 50 MB mean pair, medians:
- foreground: what the backward's call pays without prefetch (a plan-cache miss: plan, hash,
  this rank's p2p program);
- background: from `PlanCache.prefetch` to the prefetched entry being ready (the same work on
  the prefetch thread); the forward's data movement must take this long to hide all of it;
- hit: the backward's cache lookup once the prefetch is done (the transposed matrix hashed and
  compared, the entry returned with its program compiled).
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import collsched
from collsched import traffic
from collsched.comm.cache import PlanCache


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--servers", type=str, default="8,40,128")
    args = ap.parse_args()
    print("## The transposed plan: in the foreground vs prefetched (median ms), FAST, Zipf(0.8), 50 MB mean pair")
    print(f"{'GPUs':>6} {'reps':>4} {'foreground':>11} {'background':>11} {'hit':>8} {'foreground/hit':>15}")
    for servers in [int(x) for x in args.servers.split(",")]:
        cluster = collsched.Cluster.parse(f"h200:{servers}")
        p = servers * 8
        reps = args.reps if servers < 128 else max(3, args.reps // 3)
        fg, bg, hit = [], [], []
        # One cache each, as a job has one: its prefetch thread and its plan arrays stay warm
        # (the first plan on a fresh thread is slow). Cleared before each matrix, so the
        # dropped plans' arrays are recycled as a job's evicted ones would be.
        cold, warm = PlanCache(), PlanCache()
        for s in range(-1, reps):  # s = -1: warm-up, untimed
            mt = np.ascontiguousarray(traffic.zipf(p, 0.8, 50 << 20, seed=100 + s).T)
            rank = (s * 37) % p
            cold.clear()
            warm.clear()
            t0 = time.perf_counter()
            e, _ = cold.get(mt, cluster, "fast", {})
            e.program(rank, False)
            t_fg = time.perf_counter() - t0
            t0 = time.perf_counter()
            assert warm.prefetch(mt, cluster, "fast", {}, rank=rank, collective_steps=False)
            while warm.prefetched == 0:  # the background entry lands
                time.sleep(0.0001)
            t_bg = time.perf_counter() - t0
            while warm._inflight:  # the thread is back to waiting (holding no GIL) before `hit`
                time.sleep(0.0001)
            time.sleep(0.001)
            t0 = time.perf_counter()
            e2, was_hit = warm.get(mt, cluster, "fast", {})
            e2.program(rank, False)
            t_hit = time.perf_counter() - t0
            assert was_hit and e2.prefetched and e2.plan_hash == e.plan_hash
            if s >= 0:
                fg.append(t_fg)
                bg.append(t_bg)
                hit.append(t_hit)
        med = [statistics.median(v) * 1e3 for v in (fg, bg, hit)]
        print(f"{p:>6} {reps:>4} {med[0]:>11.2f} {med[1]:>11.2f} {med[2]:>8.3f} {med[0] / med[2]:>15.0f}")


if __name__ == "__main__":
    main()
