"""`collsched calibrate --network` on testbed fabrics of known truth (root), and auto's picks with
the recovered constants against the hand-set ones.

    python benchmarks/testbed_network_calibration.py [--fabrics "2x4,nic=200Mbps;3x2,nic=100Mbps"]
        [--picks docs/results/testbed_calibration_quiet.csv,...] [--json FILE]

1. Per fabric (``SxG,nic=RATE[,scaleup=RATE][,nics=K]``, as ``bench --testbed``): build it, run the
   network calibration on its ranks (not told the shape), print truth beside measured: shape (servers
   × ranks / NICs per server), NIC line rate (error vs the shaped rate), payload rate, fraction of
   peak, scale-up rate, latencies, incast, seconds from fabric build to teardown, and the load
   average before and after.
2. Picks (no fabric): on the 2×4, 200 Mbit/s fabric's recorded executed runs (``--picks``: the
   rows of ``benchmarks/testbed_calibration.py``, fanout, SpreadOut, FAST and torch on 18
   matrices), which algorithm ``collsched.choose`` (auto's rule, Gloo constants) picks among those
   four with the hand-set cluster (``testbed/model.py``) and with the calibrated one, and the
   executed time of each pick: per matrix the median over the runs, then summed.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import sys

import numpy as np

PICK_CANDIDATES = ["native", "fanout", "spreadout", "fast"]  # the methods the recorded runs executed
DEFAULT_PICKS = ",".join(f"docs/results/testbed_calibration_{r}.csv" for r in ("quiet", "check2", "check3"))


def calibrate_rows(fabrics: list[str], max_time: float) -> list[dict]:
    from collsched.testbed.bench import parse_testbed
    from collsched.testbed.netcal import calibrate_network

    rows = []
    for text in fabrics:
        spec = parse_testbed(text)
        res = calibrate_network(spec, max_time)
        t, m = res["truth"], res["measured"]
        rows.append({"fabric": text, "truth": t, "measured": m, "spec": res["spec"], "seconds": res["seconds"],
                     "load": res["load"], "nic_error": m["nic_bps"] / t["nic_bps"] - 1,
                     "scaleup_error": None if t["scaleup_bps"] is None or m["scaleup_bps"] is None
                     else m["scaleup_bps"] / t["scaleup_bps"] - 1,
                     "shape_exact": (m["servers"], m["gpus_per_server"], m["nics_per_server"])
                     == (t["servers"], t["gpus_per_server"], t["nics_per_server"])})
    return rows


def print_calibration(rows: list[dict]) -> None:
    print("\nNetwork calibration on the testbed (truth = the fabric's knobs; NIC = line rate, htb counts frames)")
    print(f"{'fabric':>30} {'S×G/NICs':>9} {'NIC Mbit/s':>11} {'error':>7} {'payload':>8} {'of peak':>8} "
          f"{'scale-up Mbit/s':>16} {'lat out/up µs (least)':>22} {'(median)':>12} {'incast':>7} {'s':>6} {'load':>11}")
    for r in rows:
        m, t = r["measured"], r["truth"]
        up = "—" if m["scaleup_bps"] is None else f"{m['scaleup_bps'] * 8 / 1e6:.0f}"
        if r["scaleup_error"] is not None:
            up += f" ({r['scaleup_error']:+.1%})"
        lat, med = m["latency_s"], m.get("latency_median_s") or {}

        def us(d, k):
            return "—" if d.get(k) is None else f"{d[k] * 1e6:.0f}"

        inc = "—" if m["incast"] is None else f"{m['incast']['ratio']:.3f}"
        shape = f"{m['servers']}×{m['gpus_per_server']}/{m['nics_per_server']}" + ("" if r["shape_exact"] else " WRONG")
        print(f"{r['fabric']:>30} {shape:>9} {m['nic_bps'] * 8 / 1e6:>11.1f} {r['nic_error']:>+7.1%} "
              f"{m['nic_goodput_bps'] * 8 / 1e6:>8.1f} {m['fraction_of_peak']['nic']:>8.3f} {up:>16} "
              f"{us(lat, 'scaleout') + '/' + us(lat, 'scaleup'):>22} {us(med, 'scaleout') + '/' + us(med, 'scaleup'):>12} "
              f"{inc:>7} {r['seconds']:>6.1f} {r['load'][0]:>5.1f}→{r['load'][1]:<5.1f}")


def compare_picks(calibrated: str, paths: list[str]) -> dict:
    """Picks of ``collsched.choose`` under the hand-set and the calibrated 2×4 cluster, with the
    executed time of each pick in the recorded runs (``paths``)."""
    import collsched
    from collsched.testbed import calibrate as cal
    from collsched.testbed.fabric import FabricSpec
    from collsched.testbed.model import DEFAULT_PARAMS, cluster_spec

    hand = cluster_spec(FabricSpec.from_knobs(2, 4, "200Mbps"), DEFAULT_PARAMS)
    runs = []
    for p in paths:
        with open(p) as f:
            runs.append({(int(r["case"]), r["algorithm"]): float(r["time_s"]) for r in csv.DictReader(f)})
    rows = []
    for i, c in enumerate(cal.cases(8)):
        m = np.asarray(c["matrix"], dtype=np.uint64)
        picks = {name: collsched.choose(m, spec, "gloo", candidates=PICK_CANDIDATES).algorithm
                 for name, spec in (("hand", hand), ("calibrated", calibrated))}

        def executed(alg):
            return statistics.median(run[(i, "torch" if alg == "native" else alg)] for run in runs)

        rows.append({"workload": c["workload"], "bytes_per_rank": c["bytes_per_rank"],
                     **{f"pick_{k}": v for k, v in picks.items()},
                     "hand_s": executed(picks["hand"]), "calibrated_s": executed(picks["calibrated"]),
                     "best_s": min(executed(a) for a in PICK_CANDIDATES),
                     "per_run": {k: [run[(i, "torch" if v == "native" else v)] for run in runs] for k, v in picks.items()}})
    total = {k: sum(r[f"{k}_s"] for r in rows) for k in ("hand", "calibrated", "best")}
    return {"hand_spec": hand, "calibrated_spec": calibrated, "runs": paths, "rows": rows, "total_s": total,
            "same_picks": sum(r["pick_hand"] == r["pick_calibrated"] for r in rows),
            "total_per_run_s": {k: [sum(r["per_run"][k][j] for r in rows) for j in range(len(runs))]
                                for k in ("hand", "calibrated")}}


def print_picks(res: dict) -> None:
    print(f"\nauto's picks on 2×4, 200 Mbit/s (collsched.choose, Gloo constants, among {', '.join(PICK_CANDIDATES)});"
          f" executed ms = median over {len(res['runs'])} recorded runs")
    print(f"  hand-set:   {res['hand_spec']}\n  calibrated: {res['calibrated_spec']}")
    print(f"{'workload':>10} {'KiB/rank':>9} {'hand pick':>10} {'ms':>6} {'calibrated pick':>16} {'ms':>6} {'best ms':>8}")
    for r in res["rows"]:
        mark = "" if r["pick_hand"] == r["pick_calibrated"] else "  <- differs"
        print(f"{r['workload']:>10} {r['bytes_per_rank'] >> 10:>9} {r['pick_hand']:>10} {r['hand_s'] * 1e3:>6.1f} "
              f"{r['pick_calibrated']:>16} {r['calibrated_s'] * 1e3:>6.1f} {r['best_s'] * 1e3:>8.1f}{mark}")
    t = res["total_s"]
    print(f"same pick on {res['same_picks']}/{len(res['rows'])} matrices; sum of medians: hand {t['hand'] * 1e3:.0f} ms, "
          f"calibrated {t['calibrated'] * 1e3:.0f} ms ({t['calibrated'] / t['hand'] - 1:+.1%}), best possible "
          f"{t['best'] * 1e3:.0f} ms")
    per = res["total_per_run_s"]
    print("per run (sum): " + "; ".join(f"hand {h * 1e3:.0f} vs calibrated {c * 1e3:.0f} ms"
                                          for h, c in zip(per["hand"], per["calibrated"])))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fabrics", default="2x4,nic=200Mbps;3x2,nic=100Mbps",
                    help="';'-separated fabrics SxG,nic=RATE[,scaleup=RATE][,nics=K] (empty: picks only)")
    ap.add_argument("--max-time", type=float, default=110.0)
    ap.add_argument("--picks", default=DEFAULT_PICKS, help="recorded 2×4, 200 Mbit/s runs (comma list; empty: skip)")
    ap.add_argument("--calibration", default=None, help="the calibrated 2×4 spec's file (default: this run's "
                    "2x4,nic=200Mbps fabric)")
    ap.add_argument("--json", default=None, help="write every row here")
    args = ap.parse_args()
    out = {}
    fabrics = [f.strip() for f in args.fabrics.split(";") if f.strip()]
    if fabrics:
        from collsched.testbed.fabric import TestbedError, check_available

        try:
            check_available()
        except TestbedError as e:
            print(f"testbed unavailable: {e}", file=sys.stderr)
            return 2
        print(f"load average before: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        out["calibration"] = calibrate_rows(fabrics, args.max_time)
        print_calibration(out["calibration"])
    calibrated = None
    if args.calibration:
        from collsched.network import load

        calibrated = load(args.calibration)["spec"]
    else:
        calibrated = next((r["spec"] for r in out.get("calibration", []) if r["fabric"].replace(" ", "") == "2x4,nic=200Mbps"),
                          None)
    if args.picks and calibrated:
        out["picks"] = compare_picks(calibrated, [p for p in args.picks.split(",") if p])
        print_picks(out["picks"])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0 if all(r["shape_exact"] and abs(r["nic_error"]) < 0.05 for r in out.get("calibration", [])) else 1


if __name__ == "__main__":
    sys.exit(main())
