"""`auto`'s picks on the hardware model: for clusters with fitted constants (mi300x,
perlmutter shapes), uniform / Zipf / hot-receiver matrices and 1-256 MB per GPU, simulate
every all-to-all candidate under the hardware model and compare `auto`'s pick
(`collsched.choose`, NCCL constants: transfer + host overhead) with the simulated best.
The gap is auto's simulated transfer time over the best candidate's, minus 1, as in
`selection_table.py`. Nothing is executed.

The simulated times do not depend on `choose`, so `--cache FILE` keeps them (JSON) and a
second run (e.g. with another build of the core) only re-evaluates the picks.

Usage: python benchmarks/auto_hardware_gaps.py [--cache sims.json] [--json out.json] [--quick] [--seed 7]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import collsched  # noqa: E402
from collsched import plan_all_to_all, sim, traffic  # noqa: E402
from collsched.choose import choose  # noqa: E402
from skewed_workloads import with_mtm  # noqa: E402

MB = 1 << 20
CANDIDATES = ["fanout", "spreadout", "hierarchical", "balanced_direct", "fast", "sabre_skewed", "sabre_light"]
CLUSTERS = ["mi300x:3", "mi300x:4", "perlmutter:4"]
SIZES_MB = [1, 4, 16, 64, 256]


def workloads(cluster, size, seed=7):
    """The selection table's matrices: uniform, Zipf(s), hot receivers at a target MTM."""
    n = cluster.num_gpus
    yield "uniform", traffic.uniform(n, size // n, seed=seed)
    for s in (0.5, 0.8, 0.99):
        yield f"zipf{s}", traffic.zipf(n, s, size // n, seed=seed)
    for target in (2, 4, 8):
        yield f"hot_mtm{target}", with_mtm(cluster, float(target), size, seed=seed, hot=max(1, n // 16))


def simulated(m, c) -> dict[str, float]:
    """Each candidate's simulated transfer time (hardware model, default tolerance)."""
    out = {}
    for alg in CANDIDATES:
        try:
            out[alg] = sim.simulate(plan_all_to_all(m, c, alg), c).time_s
        except ValueError as e:  # an algorithm that does not apply to this cluster
            if "not implemented" not in str(e) and "unsupported" not in str(e).lower():
                raise
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", help="JSON file of simulated times (read if present, written after)")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--quick", action="store_true", help="mi300x:4 only, 1/16/256 MB")
    ap.add_argument("--seed", type=int, default=7, help="the matrices' seed (7: the record's; others held out)")
    args = ap.parse_args()
    clusters, sizes = (["mi300x:4"], [1, 16, 256]) if args.quick else (CLUSTERS, SIZES_MB)
    cache = {}
    if args.cache and os.path.exists(args.cache):
        with open(args.cache) as f:
            cache = json.load(f)
    rows = []
    print(f"{'cluster':<13}{'MB':>4} {'workload':<11} {'pick':<16} {'best':<16} {'gap':>7} {'+ovh':>7}")
    for spec in clusters:
        c = collsched.Cluster.parse(spec)
        for mb in sizes:
            for name, m in workloads(c, mb * MB, args.seed):
                key = f"{spec}|{mb}|{name}|{args.seed}"
                if key not in cache:
                    cache[key] = simulated(m, c)
                times = cache[key]
                choice = choose(m, c, "nccl")
                pick = choice.algorithm
                moved = "fanout" if pick == "native" else pick  # native moves fanout's data
                best = min(times, key=times.get)
                gap = times[moved] / times[best] - 1
                # With each candidate's predicted host overhead added (what auto minimises).
                total = {a: t + choice.overhead_s[a] for a, t in times.items()}
                total["native"] = times["fanout"] + choice.overhead_s["native"]
                gap_total = total[pick] / min(total.values()) - 1
                rows.append(dict(cluster=spec, size_mb=mb, workload=name, pick=pick, best=best, gap=gap, gap_total=gap_total,
                                 simulated_s=times, predicted_transfer_s=choice.transfer_s, overhead_s=choice.overhead_s))
                print(f"{spec:<13}{mb:>4} {name:<11} {pick:<16} {best:<16} {gap * 100:6.1f}% {gap_total * 100:6.1f}%")
    for key, what in (("gap", "transfer"), ("gap_total", "transfer + predicted overhead")):
        gaps = [r[key] for r in rows]
        print(f"{what}: mean gap {sum(gaps) / len(gaps) * 100:.2f}%, max {max(gaps) * 100:.1f}%, "
              f"best picked in {sum(g <= 1e-9 for g in gaps)} of {len(rows)}, beyond 5%: {sum(g > 0.05 for g in gaps)}")
    if args.cache:
        with open(args.cache, "w") as f:
            json.dump(cache, f)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
