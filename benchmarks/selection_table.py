"""Which algorithm wins where, and does `auto` pick it? For clusters × sizes × workloads,
simulate every all-to-all algorithm, report its ratio to the lower bound, `auto`'s choice
(`collsched.choose` with the NCCL defaults: transfer + host overheads), auto's gap to the
best candidate in simulated transfer time alone (so a choice made for smaller overheads
shows as a gap here), and the time `choose` takes against the simulated transfer time.
The closed form's residual (predicted transfer / simulated - 1) is printed per candidate.

Writes docs/results/selection_table.csv and docs/results/selection_table.png and prints a table.
Run: .venv/bin/python benchmarks/selection_table.py [--quick]
"""
from __future__ import annotations

import argparse
import csv
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import collsched  # noqa: E402
from collsched import plan_all_to_all, sim, traffic  # noqa: E402
from collsched.choose import choose  # noqa: E402
from collsched.skew import mtm  # noqa: E402
from skewed_workloads import with_mtm  # noqa: E402

DOCS = os.path.join(os.path.dirname(__file__), "..", "docs", "results")
MB = 1 << 20
CANDIDATES = ["fanout", "spreadout", "hierarchical", "balanced_direct", "fast", "sabre_skewed", "sabre_light"]
ALGS = CANDIDATES + ["sabre", "auto"]


def workloads(cluster, size, seed):
    n = cluster.num_gpus
    yield "uniform", traffic.uniform(n, size // n, seed=seed)
    for s in (0.5, 0.8, 0.99):
        yield f"zipf{s}", traffic.zipf(n, s, size // n, seed=seed)
    for target in (1, 2, 4, 8):
        yield f"hot_mtm{target}", with_mtm(cluster, float(target), size, seed=seed, hot=max(1, n // 16))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--big", action="store_true", help="64-GPU clusters (planning-cost check)")
    args = ap.parse_args()
    clusters = ["h200:4", "mi300x:4", "perlmutter:4"]
    if args.big:
        clusters = ["h200:8", "mi300x:8", "perlmutter:16"]  # 64 GPUs: the planning-cost target
    sizes = [1 * MB, 16 * MB, 256 * MB, 1024 * MB] if not args.quick else [16 * MB, 256 * MB]
    rows = []
    hdr = f"{'cluster':<13}{'size':>7} {'workload':<11}{'MTM':>5} " + " ".join(f"{a[:9]:>9}" for a in CANDIDATES) + f" {'auto→':>14} {'gap':>6} {'choose ms':>8} {'%':>6}"
    print("ratio of simulated time to the lower bound (1.00 = optimal)")
    print(hdr)
    for spec in clusters:
        c = collsched.Cluster.parse(spec)
        for size in sizes:
            for name, m in workloads(c, size, seed=7):
                bound = sim.lower_bound(m, c).seconds
                ratio = {}
                for alg in ALGS:
                    try:
                        plan = plan_all_to_all(m, c, alg, **({"backend": "nccl"} if alg == "auto" else {}))
                    except ValueError as e:
                        if "not implemented" in str(e) or "unsupported" in str(e).lower():
                            continue
                        raise
                    ratio[alg] = sim.simulate(plan, c).time_s / bound
                    if alg == "auto":
                        choice = plan.meta["choice"]
                        if choice == "native":
                            choice = "native (fanout)"
                        # Best of 5: the container is shared, the minimum is the cost.
                        plan_s = float("inf")
                        for _ in range(5):
                            t0 = time.perf_counter()
                            predicted = choose(m, c, "nccl").transfer_s
                            plan_s = min(plan_s, time.perf_counter() - t0)
                best = min(ratio[a] for a in CANDIDATES if a in ratio)
                row = dict(cluster=spec, size_mb=size // MB, workload=name, mtm=round(mtm(m, c).overall, 3),
                           bound_s=bound, auto_choice=choice, auto_gap=ratio["auto"] / best - 1,
                           auto_plan_ms=plan_s * 1e3, auto_plan_frac=plan_s / (ratio["auto"] * bound))
                row.update({f"ratio_{a}": ratio.get(a, float("nan")) for a in ALGS})
                # Cost-model residual: predicted / simulated - 1.
                row.update({f"resid_{a}": predicted[a] / (ratio[a] * bound) - 1 if a in predicted and a in ratio else float("nan")
                            for a in CANDIDATES})
                rows.append(row)
                cells = " ".join(f"{ratio[a]:9.2f}" if a in ratio else f"{'-':>9}" for a in CANDIDATES)
                print(f"{spec:<13}{size // MB:>5}MB {name:<11}{row['mtm']:5.2f} {cells} {choice[:14]:>14} {row['auto_gap'] * 100:5.1f}% "
                      f"{row['auto_plan_ms']:8.3f} {row['auto_plan_frac'] * 100:5.1f}%")
    os.makedirs(DOCS, exist_ok=True)
    stem = "selection_table_64gpu" if args.big else "selection_table"
    with open(os.path.join(DOCS, f"{stem}.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    gaps = np.array([r["auto_gap"] for r in rows])
    print(f"\nauto vs best candidate: mean gap {gaps.mean() * 100:.2f}%, max {gaps.max() * 100:.2f}%, "
          f"picks the best in {np.mean(gaps <= 1e-9) * 100:.0f}% of {len(rows)} cases")
    for a in CANDIDATES:
        r = np.array([x[f"ratio_{a}"] for x in rows])
        if np.all(np.isnan(r)):
            continue
        au = np.array([x["ratio_auto"] for x in rows])
        ok = ~np.isnan(r)
        print(f"  mean ratio to bound: {a:<16}{np.mean(r[ok]):6.3f}   auto on the same cases {np.mean(au[ok]):6.3f}")
    print("\ncost-model residual (predicted / simulated - 1) over all cases:")
    for a in CANDIDATES:
        r = np.array([x[f"resid_{a}"] for x in rows])
        r = r[~np.isnan(r)]
        if r.size:
            print(f"  {a:<16} mean {r.mean() * 100:+6.2f}%  mean |.| {np.abs(r).mean() * 100:5.2f}%  min {r.min() * 100:+6.2f}%  max {r.max() * 100:+6.2f}%")
    pt = np.array([r["auto_plan_ms"] for r in rows])
    print(f"\nchoose time (from Python, best of 5): median {np.median(pt):.3f} ms, max {pt.max():.3f} ms")
    plot(rows, clusters, stem)


def plot(rows, clusters, stem):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    algs = [a for a in CANDIDATES + ["auto"] if not all(np.isnan(r[f"ratio_{a}"]) for r in rows)]
    fig, axes = plt.subplots(1, len(clusters), figsize=(5.5 * len(clusters), 0.26 * len(rows) / len(clusters) + 2.5))
    fig.subplots_adjust(wspace=0.04)
    fig.suptitle("simulated all-to-all time / lower bound (red: auto's pick)", fontsize=11)
    for n_ax, (ax, spec) in enumerate(zip(np.atleast_1d(axes), clusters)):
        r = [x for x in rows if x["cluster"] == spec]
        data = np.array([[x[f"ratio_{a}"] for a in algs] for x in r])
        im = ax.imshow(np.clip(data, 1, 4), cmap="viridis_r", aspect="auto", vmin=1, vmax=4)
        for i, x in enumerate(r):
            for j, a in enumerate(algs):
                v = data[i, j]
                if v == v:
                    bold = a == x["auto_choice"]
                    ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=6,
                            color="red" if bold else ("black" if v < 2.5 else "white"), fontweight="bold" if bold else "normal")
        ax.set_xticks(range(len(algs)))
        ax.set_xticklabels(algs, rotation=45, ha="right", fontsize=8)
        ax.set_yticks(range(len(r)))
        if n_ax == 0:
            ax.set_yticklabels([f"{x['size_mb']}MB {x['workload']}" for x in r], fontsize=7)
        else:
            ax.set_yticklabels([])
        ax.set_title(spec, fontsize=10)
    fig.colorbar(im, ax=axes, shrink=0.6, label="ratio to lower bound (clipped at 4)")
    fig.savefig(os.path.join(DOCS, f"{stem}.png"), dpi=110, bbox_inches="tight")
    print(f"wrote docs/results/{stem}.csv and docs/results/{stem}.png")


if __name__ == "__main__":
    main()
