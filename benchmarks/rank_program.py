"""What one rank pays on a new matrix before moving data: from the matrix to an executable program.

    .venv/bin/python benchmarks/rank_program.py [--reps 21] [--servers 8,40,128]

Per algorithm and h200 cluster (8 GPUs per server), medians over `reps` Zipf(0.8) matrices
(50 MB mean pair), each planned for a different rank, on this thread:
- per rank (`collsched.plan_for_rank`, what the runtime does, in a planning workspace kept
  across matrices as the runtime's plan cache keeps one): decide (what every rank computes
  alike), expand (this rank's transfers), compile (`compile_rank_program` from the RankPlan,
  p2p transport, as on NCCL), and their total with the Python call around them;
- overlap: on Gloo the dependency-driven executor's program (`RankProgram.overlap`: the
  RankPlan's deps and the conflicting accesses), built on first use after compile: not in
  the per-rank total (NCCL never builds it), add it for Gloo;
- whole plan (the path before): `plan_all_to_all`, its content hash (what ranks compared),
  compile from the whole plan; total;
- cpu rank / cpu whole: the same totals in this process's CPU time (less sensitive to other
  processes on a shared machine than the wall-clock columns);
- ratio: whole total / per-rank total (wall clock), in the same run;
- target: the issue's target for the per-rank total (FAST 0.1 / 2.5 / 25 ms, fanout 0.02 /
  0.3 / 3 ms at 64 / 320 / 1024 GPUs) and whether it is met.
Each rank's program from the RankPlan is checked equal to the one from the whole plan.
"""
from __future__ import annotations

import argparse
import statistics
import time

import collsched
from collsched import _core, traffic
from collsched.comm.program import compile_rank_program
from collsched.planning import _plan_for_rank_timed

ALGOS = ("fast", "fanout")
TARGET_MS = {("fast", 64): 0.1, ("fast", 320): 2.5, ("fast", 1024): 25.0,
             ("fanout", 64): 0.02, ("fanout", 320): 0.3, ("fanout", 1024): 3.0}
COLUMNS = ("decide", "expand", "compile", "overlap", "per rank", "cpu rank", "whole plan", "hash", "compile(w)", "whole", "cpu whole",
           "ratio")


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=21)
    ap.add_argument("--servers", type=str, default="8,40,128")
    args = ap.parse_args()
    print(f"## One rank's host time from a new Zipf(0.8) matrix to its program (median of {args.reps}, ms)")
    print(f"{'GPUs':>6} {'algorithm':>10} " + " ".join(f"{c:>10}" for c in COLUMNS) + f" {'target':>8} {'met':>4}")
    for servers in [int(x) for x in args.servers.split(",")]:
        cluster = collsched.Cluster.parse(f"h200:{servers}")
        p = servers * 8
        mats = [traffic.zipf(p, 0.8, 50 << 20, seed=s) for s in range(args.reps)]
        for algo in ALGOS:
            ws = _core.Workspace()
            _plan_for_rank_timed(mats[0], cluster, 0, algo, {}, ws)  # warm-up, untimed
            t = {c: [] for c in COLUMNS}
            for i, m in enumerate(mats):
                rank = (i * 37) % p
                c0, t0 = time.process_time(), time.perf_counter()
                rp, decide, expand = _plan_for_rank_timed(m, cluster, rank, algo, {}, ws)
                prog, dt = timed(lambda: compile_rank_program(rp, rank, collective_steps=False))
                t["per rank"].append(time.perf_counter() - t0)
                t["cpu rank"].append(time.process_time() - c0)
                t["decide"].append(decide)
                t["expand"].append(expand)
                t["compile"].append(dt)
                t["overlap"].append(timed(lambda: prog.overlap)[1])
                c0, t0 = time.process_time(), time.perf_counter()
                plan, dt = timed(lambda: collsched.plan_all_to_all(m, cluster, algo))
                t["whole plan"].append(dt)
                t["hash"].append(timed(lambda: plan.hash)[1])
                ref, dt = timed(lambda: compile_rank_program(plan, rank, collective_steps=False))
                t["compile(w)"].append(dt)
                t["whole"].append(time.perf_counter() - t0)
                t["cpu whole"].append(time.process_time() - c0)
                t["ratio"].append(t["whole"][-1] / t["per rank"][-1])
                assert prog == ref, f"{algo} on {p} GPUs, rank {rank}: the RankPlan's program differs"
                del plan, ref, rp, prog
            med = {k: statistics.median(v) * (1 if k == "ratio" else 1e3) for k, v in t.items()}
            target = TARGET_MS[(algo, p)] if (algo, p) in TARGET_MS else float("nan")
            met = "yes" if med["per rank"] <= target else "no"
            print(f"{p:>6} {algo:>10} " + " ".join(f"{med[c]:>10.3f}" for c in COLUMNS) + f" {target:>8.2f} {met:>4}")


if __name__ == "__main__":
    main()
