"""Simulated allgather / reduce-scatter / allreduce: ring and single-root tree
baselines against ForestColl's forest and its optimum, nccl-tests style, plus
the same ForestColl plan after a round trip through MSCCL XML: `forest_xml` is
the XML made for a small symbolic size and run the way the executor runs it
(passes of 2 MiB per XML chunk, pipelined), `forest_xml1` the XML refined for
the run size so that one pass moves the plan's own pieces. `--warm-connections`
simulates the XML rows as NCCL connections run (a stream's next piece hides its
alpha behind the previous one); `--split-multiplicity` exports a tree of
multiplicity m as m streams.

    .venv/bin/python benchmarks/collectives.py [--topology mi250:2] [--sizes 1MiB,64MiB,1GiB]
    .venv/bin/python benchmarks/collectives.py --topology h100:2 --sizes 1GiB --chunks 64 --split-multiplicity --warm-connections

algbw = M / time with M the per-rank output of allgather (input of
reduce-scatter, buffer of allreduce), as ForestColl and nccl-tests define it;
busbw = algbw × (P-1)/P (× 2 for allreduce). Everything is simulated
(`collsched.sim.simulate`), nothing is executed.
"""
from __future__ import annotations

import argparse
import json

from collsched import _core, parse_bytes
from collsched import collectives as C


def _m_bytes(kind: str, n: int, nbytes: int) -> int:
    return n * nbytes if kind in ("allgather", "reduce_scatter") else nbytes


def _with_tiers(plan, gps: int):
    """Plans made from a forest.Graph carry gpus_per_server = 0; give them the cluster's tiers."""
    d = json.loads(plan.to_json())
    d["gpus_per_server"] = gps
    for t in d["transfers"]:
        t["tier"] = "local" if t["src"] == t["dst"] else ("scale_up" if t["src"] // gps == t["dst"] // gps else "scale_out")
    return _core.Plan.from_json(json.dumps(d))


def _via_xml(kind: str, n: int, per: int, elem: int, cluster, chunks: int, one_pass: bool = False, split: bool = False):
    """The ForestColl plan exported to MSCCL XML for a small symbolic size and read back
    for `per` bytes (the XML is size-independent), or None if `per` does not fit its chunks."""
    import re

    from collsched import forest
    from collsched.export.msccl import from_xml, refine_for, to_xml

    k = forest.schedule(forest.as_graph(cluster)).k
    unit = k * chunks * 16 * elem
    small = unit * (n if kind == "allreduce" else 1)
    label = "forest_xml1" if one_pass else "forest_xml"
    try:
        symbolic = C.plan_collective(kind, n, small, "forest", elem_bytes=elem, topology=cluster, chunks=chunks, merge=False,
                                     split_multiplicity=split)
        xml = to_xml(symbolic)
        total = int(re.search(r'nchunksperloop="(\d+)"', xml).group(1))
        m = per * (n if kind != "allreduce" else 1)
        m -= m % (total * elem)
        if one_pass and m:
            refine = refine_for(total, m)
            xml = to_xml(symbolic, refine=refine)
            m -= m % (total * refine * elem)
    except ValueError as e:  # beyond MSCCL's limits (steps per threadblock, XML nodes)
        print(f"{kind:>15} {'':>10} {label:>11}  not exportable: {str(e)[:70]}")
        return None
    per = m // n if kind != "allreduce" else m
    return from_xml(xml, per, elem, cluster=cluster) if per else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--topology", default="mi250:2")
    ap.add_argument("--sizes", default="1MiB,64MiB,1GiB", help="total M per collective")
    ap.add_argument("--chunks", type=int, default=8)
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--warm-connections", action="store_true", help="simulate the XML rows with warm connections")
    ap.add_argument("--split-multiplicity", action="store_true", help="export trees of multiplicity m as m streams")
    args = ap.parse_args()
    from collsched import sim

    cluster = _core.Cluster.parse(args.topology)
    n = cluster.num_gpus
    try:
        from collsched import forest

        opt = forest.optimal(forest.Graph.from_cluster(cluster))
        algos = ["ring", "tree", "forest", "forest_xml", "forest_xml1"]
    except (ImportError, AttributeError):
        opt, algos = None, ["ring", "tree"]
    rows = []
    print(f"# {args.topology}: {n} GPUs; ForestColl optimum (allgather): {opt['algbw_gbps']:.2f} GB/s" if opt else f"# {args.topology}: {n} GPUs")
    print(f"{'collective':>15} {'size':>10} {'algorithm':>11} {'time(us)':>11} {'algbw':>8} {'busbw':>8} {'vs opt':>7}")
    for kind in C.KINDS:
        elem = 1 if kind == "allgather" else 4
        for m in (parse_bytes(s) for s in args.sizes.split(",")):
            per = m // n if kind != "allreduce" else m
            per -= per % (elem * n * args.chunks)
            for algo in algos:
                if algo.startswith("forest_xml"):
                    plan = _via_xml(kind, n, per, elem, cluster, args.chunks, one_pass=algo == "forest_xml1", split=args.split_multiplicity)
                    if plan is None:
                        continue
                else:
                    plan = C.plan_collective(kind, n, per, algo, elem_bytes=elem, topology=cluster, chunks=args.chunks)
                    if plan.gpus_per_server == 0:
                        plan = _with_tiers(plan, cluster.gpus_per_server)
                r = sim.simulate(plan, cluster, warm_connections=args.warm_connections and algo.startswith("forest_xml"))
                mb = _m_bytes(kind, n, per)
                algbw = mb / r.time_s / 1e9
                bus = algbw * (n - 1) / n * (2 if kind == "allreduce" else 1)
                # Allreduce = reduce-scatter + allgather: its optimum is half the allgather one (paper §5.7).
                bound = (opt["algbw_gbps"] / (2 if kind == "allreduce" else 1)) if opt else float("nan")
                ratio = algbw / bound
                rows.append({"collective": kind, "bytes": mb, "algorithm": algo, "time_s": r.time_s, "algbw_gbps": algbw, "busbw_gbps": bus, "ratio_to_opt": ratio})
                print(f"{kind:>15} {mb:>10} {algo:>11} {r.time_s * 1e6:>11.1f} {algbw:>8.2f} {bus:>8.2f} {ratio:>7.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
