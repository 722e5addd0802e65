"""What one rank pays on a new matrix before moving data: plan, hash, then compile its program.

    .venv/bin/python benchmarks/rank_program.py [--reps 20] [--servers 8,40,128]

Per algorithm and h200 cluster (8 GPUs per server), medians over `reps` Zipf(0.8) matrices
(50 MB mean pair; a fifth as many at 128 servers), each compiled for a different rank:
- plan: `collsched.plan_all_to_all` from Python (the whole plan, as every rank computes it);
- hash: `Plan.hash`, which the ranks compare before moving data;
- view own / view all: the core's rank view alone (`Plan._rank_view`): the rank's transfers,
  without and with the per-step pair counts (which read every transfer's segments);
- p2p compile: `compile_rank_program(plan, rank, collective_steps=False)`, what the runtime
  compiles for the p2p transport (NCCL's default), its view included;
- full compile: `compile_rank_program(plan, rank)`, which also marks the steps every rank
  joins, for the alltoallv and hybrid transports;
- overlap: what Gloo's p2p transport adds on first use, the dependency-driven program
  (`RankProgram.overlap`: the plan's deps cut to the rank, and its conflicting accesses;
  NCCL never computes it);
- a2a: the all_to_all_single layouts of the alltoallv transport, on first use
  (`RankProgram.a2a_staging_bytes`; p2p never computes them);
- per call: plan + hash + p2p compile, what a rank pays on NCCL before its first byte moves;
- whole: the full program compiled from the whole plan decoded into numpy
  (`compile_rank_program(plan, rank, plan_arrays(plan))`, the reference the tests hold the
  view path equal to, and the path the runtime took before the view).
"""
from __future__ import annotations

import argparse
import statistics
import time

import collsched
from collsched import traffic
from collsched.comm.program import compile_rank_program, plan_arrays

ALGOS = ("fast", "fanout")
COLUMNS = ("plan", "hash", "view own", "view all", "p2p compile", "full compile", "overlap", "a2a", "per call", "whole")


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--servers", type=str, default="8,40,128")
    args = ap.parse_args()
    print("## One rank's host time on a new matrix (median, ms), Zipf(0.8), 50 MB mean pair")
    print(f"{'GPUs':>6} {'algorithm':>10} {'reps':>4} " + " ".join(f"{c:>12}" for c in COLUMNS))
    for servers in [int(x) for x in args.servers.split(",")]:
        cluster = collsched.Cluster.parse(f"h200:{servers}")
        p = servers * 8
        reps = args.reps if servers < 128 else max(3, args.reps // 5)
        mats = [traffic.zipf(p, 0.8, 50 << 20, seed=s) for s in range(reps)]
        for algo in ALGOS:
            collsched.plan_all_to_all(mats[0], cluster, algo)  # warm-up, untimed
            t = {c: [] for c in COLUMNS}
            for i, m in enumerate(mats):
                rank = (i * 37) % p
                plan, dt = timed(lambda: collsched.plan_all_to_all(m, cluster, algo))
                t["plan"].append(dt)
                t["hash"].append(timed(lambda: plan.hash)[1])
                t["view own"].append(timed(lambda: plan._rank_view(rank, False))[1])
                t["view all"].append(timed(lambda: plan._rank_view(rank))[1])
                own, dt = timed(lambda: compile_rank_program(plan, rank, collective_steps=False))
                t["p2p compile"].append(dt)
                t["per call"].append(t["plan"][-1] + t["hash"][-1] + dt)
                prog, dt = timed(lambda: compile_rank_program(plan, rank))
                t["full compile"].append(dt)
                t["overlap"].append(timed(lambda: own.overlap)[1])
                t["a2a"].append(timed(lambda: prog.a2a_staging_bytes)[1])
                ref, dt = timed(lambda: compile_rank_program(plan, rank, plan_arrays(plan)))
                t["whole"].append(dt)
                assert prog == ref and own.overlap == ref.overlap and [sp.a2a for sp in prog.steps] == [
                    sp.a2a for sp in ref.steps], f"{algo} on {p} GPUs, rank {rank}: the view path differs"
                assert own.bytes_sent == prog.bytes_sent and own.active_steps == prog.active_steps
                del plan, prog, ref, own
            med = {k: statistics.median(v) * 1e3 for k, v in t.items()}
            print(f"{p:>6} {algo:>10} {reps:>4} " + " ".join(f"{med[c]:>12.2f}" for c in COLUMNS))


if __name__ == "__main__":
    main()
