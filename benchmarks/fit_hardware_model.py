"""Fit the hardware model's constants per platform to the published fitting set.

Reads the ``fit`` rows of ``benchmarks/data/hardware/*.csv`` (``collsched.fidelity.load_rows``;
the sources are cited in that folder's README), and for each platform below searches the few
constants it names (spec keys of docs/simulator.md, "Hardware model") that minimise the mean
squared log error of the simulator's prediction (``fidelity.predict(row, "hardware", extra)``)
over the platform's non-excluded fit rows. ``validation`` rows are never fitted: their error is
only reported. Writes the constants, their provenance and the residuals to
``crates/collsched-core/src/topology/hardware.json`` (``--write``), which the presets load;
``tests/test_hardware_fit.py`` checks that the committed constants reproduce their recorded
residuals and that a fast platform's fit reproduces its constants.

The search is deterministic: cyclic coordinate descent, each coordinate by golden-section
search over a fixed grid (the values written are the grid's, so a rerun gives the same text).

Usage:
    python benchmarks/fit_hardware_model.py [--platform mi300x] [--write] [--json]
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

from collsched import fidelity  # noqa: E402

JSON_PATH = ROOT / "crates" / "collsched-core" / "src" / "topology" / "hardware.json"
DATE = "2026-11-28"


@dataclass(frozen=True)
class Param:
    """One fitted constant: its spec key, search range, grid step and how it is written."""

    key: str
    lo: float
    hi: float
    step: float
    unit: str  # "" fraction, "KiB" size, "ns" duration, "GB/s" rate (written in MB/s)

    def text(self, x: float) -> str:
        """The spec value of grid point ``x`` (the text written to hardware.json)."""
        if self.unit == "":
            return f"{x:.3f}".rstrip("0").rstrip(".")
        if self.unit == "GB/s":
            return f"{int(round(x * 1000))}MB/s"
        return f"{int(round(x))}{self.unit}"

    def snap(self, x: float) -> float:
        return min(self.hi, max(self.lo, round(x / self.step) * self.step))


@dataclass(frozen=True)
class Platform:
    """A preset, the cluster specs of its rows (prefix match) and its fitted constants."""

    preset: str
    prefixes: tuple[str, ...]
    params: tuple[Param, ...]
    start: tuple[float, ...]
    note: str
    fixed: tuple[tuple[str, str], ...] = ()  # structural terms set, not searched (e.g. rendezvous=1)
    files: tuple[str, ...] = ()  # only rows of these measurement files (empty: every file)
    # Presets of the same design that take these constants unchanged (never fitted on their
    # own rows: those are only judged): (preset, row-spec prefix of its validation rows, why).
    carried_to: tuple[tuple[str, str, str], ...] = ()


EFF_UP = Param("eff_scaleup", 0.3, 1.0, 0.005, "")
EFF_OUT = Param("eff_scaleout", 0.5, 1.0, 0.005, "")
PLATFORMS = {
    "mi300x": Platform(
        "mi300x", ("mi300x:3", "mi300x:4"),
        (EFF_OUT, EFF_UP, Param("chunk_scaleout", 0, 4096, 64, "KiB"), Param("step_cost", 0, 50_000, 500, "ns"),
         Param("incast_goodput", 0.1, 1.0, 0.01, ""), Param("incast_min", 64, 8192, 64, "KiB")),
        (0.91, 0.6, 1024, 2000, 0.4, 1024),
        "RCCL point-to-point (FLASH, RCCL fan-out, SpreadOut) on 3-4 x 8 MI300X, 100 Gb/s RoCE per GPU",
        # Structural: grouped send/recv in stream order (rendezvous); incast beyond one
        # server's worth of concurrent senders into a NIC (its goodput and size gate are fitted).
        (("rendezvous", "1"), ("incast_flows", "8")),
    ),
    "perlmutter": Platform(
        "perlmutter", ("perlmutter:1",),
        (EFF_UP, Param("chunk_scaleup", 0, 16384, 64, "KiB")),
        (0.67, 4096),
        "NCCL all-to-all inside one 4 x A100 node (NVLink3)",
    ),
    # NCCL's collective kernels only: the nccl-tests rows of vpbench (the DeepEP rows that also
    # name h100 specs are H800 point-to-point kernels: another preset's, never fitted here).
    "h100": Platform(
        "h100", ("h100:",),
        # The collective kernels' NVLink efficiency is left neutral: these rows are NIC-bound at
        # large sizes, so it is not determined by them (a free fit trades it against the NIC's
        # and lands on NVLink-bound rings at 0.62, which the single-node rows contradict).
        (Param("coll_eff_scaleout", 0.5, 1.0, 0.005, ""), Param("coll_step_cost", 0, 20_000, 100, "ns"),
         Param("ll_alpha_scaleout", 100, 10_000, 100, "ns"), Param("ll_alpha_scaleup", 100, 5_000, 50, "ns"),
         Param("ll_bw", 0.2, 20, 0.05, "GB/s")),
        (0.8, 1100, 4600, 1200, 7.35),
        "NCCL collectives (ring/tree allgather and allreduce, Simple and LL protocols) on 4 x 8 H100, 8 x 400 Gb/s IB per node",
        files=("vpbench_nccl_multinode.csv", "vpbench_nccl_singlenode.csv"),
        carried_to=(("h200", "h200:", "same DGX design as H100 (NVLink4 switch at 450 GB/s per GPU, 8 x 400 Gb/s "
                     "ConnectX-7) and the same NCCL collective kernels"),),
    ),
}


def rows_of(platform: Platform, set_name: str):
    """The platform's rows of one set (excluded ones included)."""
    return [r for r in fidelity.load_rows(set_name) if r.cluster.startswith(platform.prefixes)
            and (not platform.files or r.file in platform.files)]


def extra_spec(platform: Platform, values) -> str:
    fixed = "".join(f",{k}={v}" for k, v in platform.fixed)
    return fixed + "".join(f",{p.key}={p.text(v)}" for p, v in zip(platform.params, values))


_PLANS: dict = {}


def _predict(row, extra: str) -> float:
    """``fidelity.predict(row, "hardware", extra)``, with all-to-all plans built once per row:
    the fitted terms do not change what the planners make (only alpha or bandwidth keys
    would, and those rows are planned afresh)."""
    if row.operation != "all_to_all" or any(k in extra for k in ("alpha_", "nic=", "scaleup=")):
        return fidelity.predict(row, "hardware", extra)
    from collsched import Cluster, plan_all_to_all, simulate

    if row not in _PLANS:
        base = Cluster.parse(row.cluster)
        _PLANS[row] = plan_all_to_all(fidelity.traffic_matrix(row), base, row.algorithm)
    return simulate(_PLANS[row], Cluster.parse(row.cluster + extra), model="hardware").time_s


def errors(rows, extra: str) -> list[float]:
    """predicted / measured - 1 of each row, with the constants in ``extra``."""
    return [fidelity.error(_predict(r, extra), r.measured_s) for r in rows]


def loss(errs: list[float]) -> float:
    """Mean squared log error: a point 10% fast costs as much as one 10% slow."""
    return sum(math.log1p(e) ** 2 for e in errs) / max(1, len(errs))


def fit(platform: Platform, sweeps: int = 2, verbose: bool = False) -> tuple[tuple[float, ...], float]:
    """Coordinate descent over the platform's params on its non-excluded fit rows.

    Returns:
        (values on the grid, loss at them).
    """
    rows = [r for r in rows_of(platform, "fit") if not r.excluded]
    if not rows:
        raise ValueError(f"{platform.preset}: no fit rows")
    x = [p.snap(v) for p, v in zip(platform.params, platform.start)]
    cache: dict[tuple, float] = {}

    def f(vals) -> float:
        key = tuple(vals)
        if key not in cache:
            cache[key] = loss(errors(rows, extra_spec(platform, vals)))
        return cache[key]

    best = f(x)
    for sweep in range(sweeps):
        before = best
        for i, p in enumerate(platform.params):
            def at(v, i=i, p=p):
                y = list(x)
                y[i] = p.snap(v)
                return f(y), y[i]
            # Golden-section search on the grid, then keep the best point seen.
            a, b = p.lo, p.hi
            g = (math.sqrt(5) - 1) / 2
            c, d = b - g * (b - a), a + g * (b - a)
            fc, fd = at(c)[0], at(d)[0]
            while b - a > p.step:
                if fc <= fd:
                    b, d, fd = d, c, fc
                    c = b - g * (b - a)
                    fc = at(c)[0]
                else:
                    a, c, fc = c, d, fd
                    d = a + g * (b - a)
                    fd = at(d)[0]
            for v in (a, b, (a + b) / 2, x[i]):
                val, snapped = at(v)
                if val < best:
                    best, x[i] = val, snapped
        if verbose:
            print(f"  sweep {sweep + 1}: loss {best:.5f} {extra_spec(platform, x)}", file=sys.stderr)
        if best >= before - 1e-12:
            break
    return tuple(x), best


def summary(rows, errs) -> dict:
    """Error summary of one set: per row and aggregated over the non-excluded rows."""
    kept = [abs(e) for r, e in zip(rows, errs) if not r.excluded]
    return {
        "rows": len(kept),
        "mean_abs_error": round(sum(kept) / len(kept), 4) if kept else None,
        "max_abs_error": round(max(kept), 4) if kept else None,
        "per_row": [[f"{r.file}:{r.line}", r.algorithm, r.size_bytes, round(e, 4), r.excluded is not None]
                    for r, e in zip(rows, errs)],
    }


def fitted_entry(platform: Platform, values) -> dict:
    """hardware.json's entry of a platform: constants, provenance and residuals."""
    extra = extra_spec(platform, values)
    out = {}
    for set_name in fidelity.SETS:
        rows = rows_of(platform, set_name)
        out[set_name] = summary(rows, errors(rows, extra))
    sources = sorted({r.source.split(",")[0].split(" amd/")[0] for r in rows_of(platform, "fit")})
    return {
        "constants": {**dict(platform.fixed), **{p.key: p.text(v) for p, v in zip(platform.params, values)}},
        "source": f"{platform.note}; fitted to the fit rows of benchmarks/data/hardware ({'; '.join(sources)}) "
                  "by benchmarks/fit_hardware_model.py",
        "date": DATE,
        "residuals": out,
    }


def carried_entry(platform: Platform, values, entry: dict, preset: str, prefix: str, why: str) -> dict:
    """hardware.json's entry of a preset that takes ``platform``'s fitted constants (``values``,
    ``entry``) unchanged: the same constants and fit residuals, its own rows' (``prefix``)
    errors under those constants as validation."""
    rows = [r for r in fidelity.load_rows("validation") if r.cluster.startswith(prefix)]
    extra = extra_spec(platform, values)
    return {
        "constants": dict(entry["constants"]),
        "source": f"carried over from {platform.preset}: {why}; {entry['source']}",
        "date": DATE,
        "residuals": {"fit": entry["residuals"]["fit"], "validation": summary(rows, errors(rows, extra))},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--platform", action="append", choices=sorted(PLATFORMS), help="only these (repeatable)")
    ap.add_argument("--write", action="store_true", help=f"write {JSON_PATH.relative_to(ROOT)}")
    ap.add_argument("--json", action="store_true", help="print the entries as JSON")
    args = ap.parse_args()
    table = json.loads(JSON_PATH.read_text())
    for name in args.platform or sorted(PLATFORMS):
        platform = PLATFORMS[name]
        print(f"fitting {name} ...", file=sys.stderr)
        values, best = fit(platform, verbose=True)
        entry = fitted_entry(platform, values)
        table["platforms"][name] = entry
        for preset, prefix, why in platform.carried_to:
            table["platforms"][preset] = carried_entry(platform, values, entry, preset, prefix, why)
        r = entry["residuals"]
        print(f"{name}: {entry['constants']}  fit |err| mean {r['fit']['mean_abs_error']} max {r['fit']['max_abs_error']}"
              f" ({r['fit']['rows']} rows); validation mean {r['validation']['mean_abs_error']}"
              f" max {r['validation']['max_abs_error']} ({r['validation']['rows']} rows)", file=sys.stderr)
    if args.json:
        print(json.dumps(table, indent=2))
    if args.write:
        JSON_PATH.write_text(json.dumps(table, indent=2) + "\n")
        print(f"wrote {JSON_PATH}", file=sys.stderr)


if __name__ == "__main__":
    main()
