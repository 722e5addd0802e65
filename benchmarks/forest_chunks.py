"""ForestColl pipeline chunks: the automatic count (``chunks=None``: ⌊√(bandwidth time /
per-piece latency)⌋, 1..64) against fixed counts, simulated.

For each cluster (a Cluster-derived ForestColl graph, the cluster's alphas) and output size
per rank, the simulated allgather algbw as a fraction of the exact optimum for 1..32 chunks
per tree and for the automatic count, with ratios to the best fixed count and to the old
fixed default (8). Simulated with collsched's fluid simulator; nothing is executed.

    .venv/bin/python benchmarks/forest_chunks.py [--clusters h100:2,a100:2,mi250:2] [--sizes-mib 1,16,256,1024]
"""
from __future__ import annotations

import argparse
import json
import os

from collsched import _core, forest, sim

FIXED = (1, 2, 4, 8, 16, 32)


def fraction_of_optimum(cluster, sch, optimum_gbps, shard, chunks):
    """Simulated allgather algbw / optimum, and the chunk count the plan used."""
    plan = forest.plan_allgather(sch, shard, chunks, latency_ns=cluster.to_dict()["alpha_scaleout_ns"])
    d = json.loads(plan.to_json())
    gps = d["gpus_per_server"] = cluster.gpus_per_server
    for t in d["transfers"]:  # tiers from the cluster's servers (a Graph plan may carry 0 GPUs per box)
        t["tier"] = "local" if t["src"] == t["dst"] else ("scale_up" if t["src"] // gps == t["dst"] // gps else "scale_out")
    r = sim.simulate(_core.Plan.from_json(json.dumps(d)), cluster)
    return cluster.num_gpus * shard / r.time_s / 1e9 / optimum_gbps, int(d["meta"]["chunks"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--clusters", default="h100:2,a100:2,mi250:2")
    ap.add_argument("--sizes-mib", default="1,16,256,1024", help="allgather output per rank, MiB")
    args = ap.parse_args()
    print(f"## ForestColl allgather, simulated algbw / optimum; load average {os.getloadavg()[0]:.1f}")
    print(f"{'cluster':<9}{'out MiB':>8} " + " ".join(f"{c:>6}" for c in FIXED) + f" {'auto':>6} {'P':>3} {'auto/best':>9} {'auto/8':>7}")
    for spec in args.clusters.split(","):
        cluster = _core.Cluster.parse(spec)
        g = forest.Graph.from_cluster(cluster)
        sch = forest.schedule(g)
        opt = forest.optimal(g)["algbw_gbps"]
        for mib in (int(x) for x in args.sizes_mib.split(",")):
            shard = (mib << 20) // cluster.num_gpus
            fixed = {c: fraction_of_optimum(cluster, sch, opt, shard, c)[0] for c in FIXED}
            auto, p = fraction_of_optimum(cluster, sch, opt, shard, None)
            best = max(fixed.values())
            print(f"{spec:<9}{mib:>8} " + " ".join(f"{fixed[c]:>6.3f}" for c in FIXED)
                  + f" {auto:>6.3f} {p:>3} {auto / best:>9.3f} {auto / fixed[8]:>7.2f}", flush=True)


if __name__ == "__main__":
    main()
