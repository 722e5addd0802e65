"""Does `auto` pick what the published measurements show fastest, on each fitted platform?

For every size of the balanced MI300X fitting rows (benchmarks/data/hardware, FAST's result
files), the measured fastest of fan-out, SpreadOut and FLASH (`fast`) against `auto`'s choice
among those three (`collsched.choose`, NCCL backend constants), once on the preset with its
fitted hardware-model constants and once on the preset's peaks (every hardware term neutral:
the fluid model). Nothing is executed; `choose` is the closed form of docs/auto.md.

Usage: python benchmarks/hardware_auto_picks.py [--json]
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from collsched import Cluster, choose, fidelity  # noqa: E402

CANDIDATES = ["fanout", "spreadout", "fast"]


def peak_spec(spec: str) -> str:
    """The cluster spec with every hardware term neutral (the fluid model's cluster)."""
    return spec + ",eff_scaleout=1,eff_scaleup=1,chunk_scaleout=0B,chunk_scaleup=0B,step_cost=0ns,peer_cost=0ns,incast_flows=0,rendezvous=0"


def picks(platform_prefix: str) -> list[dict]:
    by_size = defaultdict(dict)
    for r in fidelity.load_rows("fit"):
        if r.cluster.startswith(platform_prefix) and r.operation == "all_to_all" and r.workload == "balanced" \
                and r.algorithm in CANDIDATES and "flash_paper" not in r.file:
            by_size[(r.cluster, r.size_bytes)][r.algorithm] = r
    out = []
    for (spec, size), algos in sorted(by_size.items()):
        row = next(iter(algos.values()))
        m = fidelity.traffic_matrix(row)
        fastest = min(algos, key=lambda a: algos[a].measured_s)
        hw = choose(m, Cluster.parse(spec), candidates=CANDIDATES).algorithm
        fluid = choose(m, Cluster.parse(peak_spec(spec)), candidates=CANDIDATES).algorithm
        out.append({"cluster": spec, "size_bytes": size, "measured": {a: algos[a].measured_s for a in algos},
                    "measured_fastest": fastest, "fanout_excluded": bool(algos.get("fanout") and algos["fanout"].excluded),
                    "auto_hardware": hw, "auto_fluid": fluid})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = picks("mi300x")
    if args.json:
        print(json.dumps({"rows": rows}))
        return
    print(f"{'cluster':10} {'MB/GPU':>8} {'measured fastest':>17} {'auto (hardware)':>16} {'auto (fluid)':>13}")
    for r in rows:
        print(f"{r['cluster']:10} {r['size_bytes'] / 1e6:8.0f} {r['measured_fastest']:>17} {r['auto_hardware']:>16} {r['auto_fluid']:>13}")
    hw = sum(r["auto_hardware"] == r["measured_fastest"] for r in rows)
    fl = sum(r["auto_fluid"] == r["measured_fastest"] for r in rows)
    print(f"auto picks the measured fastest: hardware model {hw}/{len(rows)}, fluid model {fl}/{len(rows)}")


if __name__ == "__main__":
    main()
