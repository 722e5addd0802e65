"""Executed on the namespace testbed (root): FAST and auto against torch's all_to_all_single and
against collsched's own fanout on the same transport, plus where the 2-core host turns CPU-bound.

    python benchmarks/testbed_speedup.py [--transports auto,p2p] [--quick] [--csv docs/results/testbed_speedup.csv]

Tables (times are medians of interleaved rounds, slowest rank; lower is better):
0. Full duplex: 2 servers × 1 rank exchanging 4 MiB each way through torch's Gloo all-to-all
   (both directions of the pair one after the other) and collsched's fanout (one Gloo group per direction).
1. 2 servers × 4 ranks, NIC 200 Mbit/s, 1 MiB mean per pair: hot:1.2, zipf:0.9, balanced.
2. The same at 4 × 2 and 2 × 8 (hot:1.2).
3. CPU-bound sweep: 2 × 4 balanced at rising NIC rates: executed / lower bound of fanout and FAST;
   while the NIC binds it stays flat, once the CPU binds it grows with the rate.
Prints the host's load average before and after (the machine may be shared).
"""
from __future__ import annotations

import argparse
import csv
import os
import sys
import time

from collsched.testbed.fabric import FabricSpec, TestbedError, check_available
from collsched.testbed.runner import RunConfig, run

ALGS = ["torch", "fanout", "balanced_direct", "fast", "auto"]


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def _run(servers, gpus, nic, workload, algorithms, transport, iters, mean=2**20):
    spec = FabricSpec.from_knobs(servers, gpus, nic)
    cfg = RunConfig(workload=workload, mean=mean, algorithms=algorithms, iters=iters, warmup=1, transport=transport,
                    timeout_s=600)
    return run(spec, cfg)


def speedup_rows(res: dict, servers: int, gpus: int, nic: str) -> list[dict]:
    t = {r["algorithm"]: r for r in res["results"]}
    rows = []
    for r in res["results"]:
        rows.append({"fabric": f"{servers}x{gpus}", "nic": nic, "workload": res["workload"], "transport": res["transport"],
                     "algorithm": r["algorithm"], "time_ms": r["time_s"] * 1e3,
                     "sim_ms": None if r["predicted_s"] is None else r["predicted_s"] * 1e3,
                     "bound_ms": res["lower_bound_s"] * 1e3,
                     "vs_torch": t["torch"]["time_s"] / r["time_s"] if "torch" in t else None,
                     "vs_fanout": t["fanout"]["time_s"] / r["time_s"] if "fanout" in t else None,
                     "identical": r["identical"]})
    return rows


def print_rows(title: str, rows: list[dict]) -> None:
    print(f"\n{title}")
    print(f"{'fabric':>6} {'workload':>9} {'transport':>9} {'algorithm':>16} {'time ms':>9} {'sim ms':>8} "
          f"{'bound ms':>9} {'speed-up vs torch':>17} {'vs fanout':>9} {'output':>9}")
    for r in rows:
        sim = f"{r['sim_ms']:.1f}" if r["sim_ms"] is not None else "—"
        vt = f"{r['vs_torch']:.2f}×" if r["vs_torch"] else "—"
        vf = f"{r['vs_fanout']:.2f}×" if r["vs_fanout"] else "—"
        print(f"{r['fabric']:>6} {r['workload']:>9} {r['transport']:>9} {r['algorithm']:>16} {r['time_ms']:9.1f} {sim:>8} "
              f"{r['bound_ms']:9.1f} {vt:>17} {vf:>9} {'identical' if r['identical'] else 'DIFFERS':>9}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transports", default="auto", help="comma list passed to collsched.all_to_all_single")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="only table 1, hot:1.2")
    ap.add_argument("--duplex-only", action="store_true", help="only table 0")
    ap.add_argument("--csv", default=None, help="write every row here")
    args = ap.parse_args()
    try:
        check_available()
    except TestbedError as e:
        print(f"skipped: {e}")
        return 0
    transports = [t for t in args.transports.split(",") if t]
    print(f"# testbed speed-up benchmark, executed; load average before: {_load()} ({os.cpu_count()} cores)")
    t0 = time.perf_counter()
    all_rows = []
    rows = speedup_rows(_run(2, 1, "200Mbps", "balanced", ["torch", "fanout"], transports[0], args.iters,
                             mean=4 * 2**20), 2, 1, "200Mbps")
    print_rows("Table 0: one pair across servers, 4 MiB each way, NIC 200 Mbit/s (bound = one direction at the "
               "NIC rate)", rows)
    all_rows += rows
    if args.duplex_only:
        print(f"\n# load average after: {_load()}; {time.perf_counter() - t0:.0f} s")
        return 0
    rows = []
    for w in (["hot:1.2"] if args.quick else ["hot:1.2", "zipf:0.9", "balanced"]):
        for tr in transports:
            rows += speedup_rows(_run(2, 4, "200Mbps", w, ALGS, tr, args.iters), 2, 4, "200Mbps")
    print_rows("Table 1: 2 servers x 4 ranks, NIC 200 Mbit/s, 1 MiB mean per pair (speed-up above 1 = faster)", rows)
    all_rows += rows
    if not args.quick:
        rows = []
        for s, g in ((4, 2), (2, 8)):
            for tr in transports:
                rows += speedup_rows(_run(s, g, "200Mbps", "hot:1.2", ["torch", "fanout", "fast", "auto"], tr,
                                          max(3, args.iters - 2)), s, g, "200Mbps")
        print_rows("Table 2: other shapes, hot:1.2, NIC 200 Mbit/s, 1 MiB mean per pair", rows)
        all_rows += rows
        rows = []
        for nic in ("100Mbps", "200Mbps", "400Mbps", "1Gbps"):
            rows += speedup_rows(_run(2, 4, nic, "balanced", ["torch", "fanout", "fast"], transports[0], 3,
                                      mean=2**20), 2, 4, nic)
        print("\nTable 3: CPU-bound sweep, 2 x 4 balanced, 1 MiB per pair: executed / lower bound at each NIC rate")
        print(f"{'nic':>8} {'algorithm':>10} {'time ms':>9} {'bound ms':>9} {'time/bound':>10}")
        for r in rows:
            print(f"{r['nic']:>8} {r['algorithm']:>10} {r['time_ms']:9.1f} {r['bound_ms']:9.1f} "
                  f"{r['time_ms'] / r['bound_ms']:10.2f}")
        all_rows += rows
    print(f"\n# load average after: {_load()}; {time.perf_counter() - t0:.0f} s")
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(all_rows[0]))
            w.writeheader()
            w.writerows(all_rows)
    return 0 if all(r["identical"] for r in all_rows) else 1


if __name__ == "__main__":
    sys.exit(main())
