"""Simulator speed and fanout quality on 64 / 256 / 1024 GPUs (h200:8/32/128).

Prints one table: case, GPUs, transfers, simulator wall and CPU seconds, simulated
completion time, algbw, and the ratio to the lower bound measured in the same run.
Everything here is simulated (no GPU executes anything).

    python benchmarks/simulator.py            # all sizes
    python benchmarks/simulator.py --max 256  # skip the 1024-GPU cases
    python benchmarks/simulator.py --json out.json
"""
from __future__ import annotations

import argparse
import json
import time

import collsched
from collsched import sim, traffic


def cases(max_gpus: int):
    for servers in (8, 32, 128):
        n = servers * 8
        if n > max_gpus:
            continue
        yield f"h200:{servers}", "uniform 1MiB", traffic.uniform(n, 1 << 20, seed=1)
        yield f"h200:{servers}", "zipf1.2 1MiB", traffic.zipf(n, 1.2, 1 << 20, seed=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--max", type=int, default=1024, help="largest GPU count to run")
    ap.add_argument("--tolerance", type=float, default=sim.DEFAULT_TOLERANCE)
    ap.add_argument("--json", help="also write the rows as JSON here")
    args = ap.parse_args()
    head = f"{'case':<24} {'GPUs':>5} {'transfers':>9} {'plan s':>7} {'sim wall s':>10} {'sim cpu s':>9} " \
           f"{'simulated':>11} {'algbw GB/s':>10} {'bound':>11} {'/bound':>7}  binding term"
    print(f"fanout all-to-all, simulated; tolerance {args.tolerance}")
    print(head)
    rows = []
    for spec, name, m in cases(args.max):
        c = collsched.Cluster.parse(spec)
        t0 = time.perf_counter()
        p = collsched.plan_all_to_all(m, c, "fanout")
        plan_s = time.perf_counter() - t0
        w0, c0 = time.perf_counter(), time.thread_time()
        r = sim.simulate(p, c, tolerance=args.tolerance)
        wall, cpu = time.perf_counter() - w0, time.thread_time() - c0
        row = dict(case=f"fanout {name}", gpus=c.num_gpus, transfers=r.transfers, plan_s=plan_s, sim_wall_s=wall,
                   sim_cpu_s=cpu, time_s=r.time_s, algbw_gbps=r.algbw_gbps, bound_s=r.lower_bound_s,
                   ratio=r.ratio_to_bound, term=r.bound_term, windows=r.windows)
        rows.append(row)
        print(f"{row['case']:<24} {row['gpus']:>5} {row['transfers']:>9} {plan_s:>7.3f} {wall:>10.3f} {cpu:>9.3f} "
              f"{r.time_s * 1e3:>9.3f}ms {r.algbw_gbps:>10.1f} {r.lower_bound_s * 1e3:>9.3f}ms "
              f"{r.ratio_to_bound:>7.4f}  {r.bound_term}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
