"""Calibrate the simulator against the namespace testbed (root): measure fanout, SpreadOut and FAST
over balanced, uniform, Zipf 0.5/0.9/0.99 and hot:1.2 at 256 KiB, 2 MiB and 8 MiB per rank on
2 servers × 4 ranks at 200 Mbit/s (executed), fit ``ModelParams`` on half the matrices, and
report the error on the other half (simulated vs executed).

    python benchmarks/testbed_calibration.py [--transport auto] [--iters 3] [--csv docs/results/testbed_calibration.csv]
                                             [--from-csv FILE]   # refit earlier measurements, no fabric

About 3-4 minutes on the 2-core host. Error = predicted / executed − 1.
"""
from __future__ import annotations

import argparse
import csv
import os
import sys

from collsched.testbed import calibrate as cal
from collsched.testbed.fabric import FabricSpec, TestbedError, check_available


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transport", default="auto")
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--nic", default="200Mbps")
    ap.add_argument("--csv", default=None, help="write the measured rows (and predictions) here")
    ap.add_argument("--from-csv", default=None, help="refit rows measured earlier instead of measuring")
    ap.add_argument("--planned-on", default=None, help="with --from-csv: the cluster spec the ranks planned for "
                    "(default: the csv's cluster column, else the fabric's current derived spec)")
    ap.add_argument("--evaluate", action="store_true",
                    help="also report the error of the shipped parameters (DEFAULT_PARAMS) on every case, unfitted")
    ap.add_argument("--fit-min-bytes", type=int, default=cal.MIN_BYTES,
                    help="fit only on cases of at least this many bytes per rank (default 2 MiB; 0 = every case)")
    args = ap.parse_args()
    spec = FabricSpec.from_knobs(2, 4, args.nic)
    case_list = cal.cases(spec.ranks)
    if args.from_csv:
        with open(args.from_csv) as f:
            rows = [dict(r, bytes_per_rank=int(r["bytes_per_rank"]), time_s=float(r["time_s"]), case=int(r["case"]),
                         identical=r["identical"] == "True") for r in csv.DictReader(f)]
        print(f"# refit of {args.from_csv}")
    else:
        try:
            check_available()
        except TestbedError as e:
            print(f"skipped: {e}")
            return 0
        load = " ".join(f"{x:.1f}" for x in os.getloadavg())
        print(f"# executed on the testbed 2x4 at {args.nic}, transport {args.transport}; load average before: {load} "
              f"({os.cpu_count()} cores)")
        rows = cal.measure(spec, case_list, args.iters, args.transport, on_progress=lambda s: print("  " + s))
        print(f"# load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    planned_on = args.planned_on or (rows[0].get("cluster") or None)
    if args.evaluate:
        shipped = cal.evaluate(rows, cal.DEFAULT_PARAMS, cal._Predictor(spec, case_list, planned_on))
        print(f"\nshipped parameters {cal.DEFAULT_PARAMS}, on every case (none of them fitted):")
        print("| algorithm | cases | mean abs error | max abs error | cases ≥ 2 MiB/rank | mean abs | max abs |\n"
              "|---|---|---|---|---|---|---|")
        for a in cal.ALGORITHMS:
            e_all = [abs(r["error"]) for r in shipped if r["algorithm"] == a]
            e_big = [abs(r["error"]) for r in shipped if r["algorithm"] == a and r["bytes_per_rank"] >= 2 * 2**20]
            print(f"| {a} | {len(e_all)} | {sum(e_all) / len(e_all) * 100:.0f}% | {max(e_all) * 100:.0f}% | "
                  f"{len(e_big)} | {sum(e_big) / len(e_big) * 100:.0f}% | {max(e_big) * 100:.0f}% |")
    params, rows = cal.fit(spec, case_list, rows, planned_on=planned_on, min_bytes=args.fit_min_bytes)
    print(f"\nfitted on the 'fit' half: {params}")
    print(f"derived cluster: {cal.cluster_spec(spec, params)}\n")
    print(f"{'workload':>9} {'KiB/rank':>8} {'half':>8} {'algorithm':>10} {'executed ms':>11} {'simulated ms':>12} {'error':>7}")
    for r in rows:
        sim = f"{r['predicted_s'] * 1e3:12.1f}" if r["predicted_s"] is not None else f"{'—':>12}"
        err = f"{r['error'] * 100:+6.0f}%" if r["error"] is not None else f"{'':>7}"
        print(f"{r['workload']:>9} {r['bytes_per_rank'] >> 10:>8} {r['half']:>8} {r['algorithm']:>10} "
              f"{r['time_s'] * 1e3:11.1f} {sim} {err}")
    for min_bytes in (0, 2 * 2**20):
        print(f"\nsizes ≥ {min_bytes >> 10} KiB per rank\n| half | algorithm | cases | mean abs error | max abs error |"
              "\n|---|---|---|---|---|")
        for e in cal.error_table(rows, min_bytes):
            print(f"| {e['half']} | {e['algorithm']} | {e['cases']} | {e['mean_abs_error'] * 100:.0f}% | "
                  f"{e['max_abs_error'] * 100:.0f}% |")
    if args.csv:
        keys = ["case", "workload", "bytes_per_rank", "half", "algorithm", "time_s", "predicted_s", "error", "identical",
                "cluster"]
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
            w.writeheader()
            w.writerows(rows)
    return 0 if all(r["identical"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
