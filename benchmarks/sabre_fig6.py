"""Reproduce SABRE ICS'26 Fig. 6 in simulation: all-to-all completion time versus MTM
for the highly-skewed (sabre_skewed) and lightly-skewed (sabre_light) algorithms on
16 GPUs (perlmutter:4), average message sizes 64 MB and 128 MB per GPU, and the
crossover MTM where the skewed algorithm becomes faster (the paper measures ≈ 2.2).

Writes docs/results/sabre_fig6.csv and docs/results/sabre_fig6.png and prints a table.
Run: .venv/bin/python benchmarks/sabre_fig6.py [--quick]
"""
from __future__ import annotations

import argparse
import csv
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import collsched  # noqa: E402
from collsched import plan_all_to_all, sim  # noqa: E402
from collsched.skew import mtm  # noqa: E402
from skewed_workloads import with_mtm  # noqa: E402

DOCS = os.path.join(os.path.dirname(__file__), "..", "docs", "results")
MB = 1 << 20


def crossover(xs, light, skewed):
    """Smallest MTM after which sabre_skewed stays faster (linear interpolation of the gap)."""
    gap = np.asarray(light) - np.asarray(skewed)  # > 0: skewed faster
    for i in range(len(xs) - 1, 0, -1):
        if gap[i - 1] <= 0 < gap[i] and all(g > 0 for g in gap[i:]):
            x0, x1 = xs[i - 1], xs[i]
            return x0 + (x1 - x0) * (-gap[i - 1]) / (gap[i] - gap[i - 1])
    return xs[0] if all(g > 0 for g in gap) else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer points")
    ap.add_argument("--cluster", default="perlmutter:4")
    args = ap.parse_args()
    cluster = collsched.Cluster.parse(args.cluster)
    targets = np.round(np.linspace(1.0, 8.0, 8 if args.quick else 29), 3)
    sizes = [64 * MB, 128 * MB]
    rows = []
    print(f"{'size':>8} {'MTM':>6} {'light ms':>9} {'skewed ms':>9} {'bound ms':>9} {'light/bnd':>9} {'skew/bnd':>9} {'sabre picks':>12}")
    for size in sizes:
        for k, target in enumerate(targets):
            m = with_mtm(cluster, float(target), size, seed=1000 + k)
            x = mtm(m, cluster).overall
            bound = sim.lower_bound(m, cluster).seconds
            t = {}
            for alg in ["sabre_light", "sabre_skewed"]:
                plan = plan_all_to_all(m, cluster, alg)
                t[alg] = sim.simulate(plan, cluster).time_s
            pick = plan_all_to_all(m, cluster, "sabre").meta["choice"]
            rows.append(dict(size_mb=size // MB, mtm=round(x, 4), light_s=t["sabre_light"], skewed_s=t["sabre_skewed"],
                             bound_s=bound, sabre_choice=pick))
            print(f"{size // MB:>6}MB {x:6.2f} {t['sabre_light'] * 1e3:9.3f} {t['sabre_skewed'] * 1e3:9.3f} {bound * 1e3:9.3f} "
                  f"{t['sabre_light'] / bound:9.3f} {t['sabre_skewed'] / bound:9.3f} {pick:>12}")
    os.makedirs(DOCS, exist_ok=True)
    with open(os.path.join(DOCS, "sabre_fig6.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(sizes), figsize=(11, 4), sharey=False)
    for ax, size in zip(axes, sizes):
        r = [x for x in rows if x["size_mb"] == size // MB]
        xs = [x["mtm"] for x in r]
        light = [x["light_s"] * 1e3 for x in r]
        skewed = [x["skewed_s"] * 1e3 for x in r]
        ax.plot(xs, light, "o-", label="lightly-skewed (sabre_light)")
        ax.plot(xs, skewed, "s-", label="highly-skewed (sabre_skewed)")
        ax.plot(xs, [x["bound_s"] * 1e3 for x in r], "k:", label="lower bound")
        cx = crossover(xs, light, skewed)
        ax.axvline(2.2, color="grey", ls="--", lw=1, label="SABRE threshold 2.2")
        if cx == cx:
            ax.axvline(cx, color="red", ls="-.", lw=1, label=f"simulated crossover {cx:.2f}")
        print(f"{size // MB} MB: simulated crossover MTM = {cx:.2f} (paper: ≈ 2.2)")
        ax.set_title(f"{args.cluster}, {size // MB} MB per GPU")
        ax.set_xlabel("MTM ratio")
        ax.set_ylabel("completion time (ms, simulated)")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(DOCS, "sabre_fig6.png"), dpi=120)
    print("wrote docs/results/sabre_fig6.csv and docs/results/sabre_fig6.png")


if __name__ == "__main__":
    main()
