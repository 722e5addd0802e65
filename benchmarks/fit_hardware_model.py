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

Presets in ``CARRIED`` are not fitted: they carry named constants of another platform's fit over,
as a stated structural assumption (the same backend on a similar fabric), and their entry says so
(``carried_from``); their residuals are those of their validation rows, never fitted on.
``--platform NAME --write`` rewrites only NAME's entry; ``--refresh`` recomputes the residuals of
the committed constants without searching (after rows were added or re-labelled).

The search is deterministic: cyclic coordinate descent, each coordinate by golden-section
search over a fixed grid (the values written are the grid's, so a rerun gives the same text).

Usage:
    python benchmarks/fit_hardware_model.py [--platform mi300x] [--write] [--json] [--refresh]

``--write`` replaces only the entries of the platforms fitted in this run (all of them without
``--platform``); every other platform's entry of hardware.json is kept as it is.
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
    ),
    # DeepEP's normal kernels on 1-8 x 8 H800: the kernels' own copy engines (SMs) on each tier,
    # so only the two tiers' reachable fractions: EP8 and the NVLink forwarding of EP16 pin
    # eff_scaleup, EP32/EP64's RDMA hop pins eff_scaleout. No alpha, chunk or peer term: every
    # row moves 60-380 MB per rank, far from any start-up cost, and the forwarding pipeline is
    # the plan's (fidelity.DEEPEP_CHUNKS), not a fitted constant.
    "h800": Platform(
        "h800", ("h800:",),
        (EFF_OUT, EFF_UP),
        (0.9, 0.75),
        "DeepEP normal kernels (dispatch FP8, combine BF16) on 1-8 x 8 H800, 400 Gb/s CX7 IB per GPU",
    ),
}


@dataclass(frozen=True)
class Carried:
    """A preset that takes ``keys`` of ``carried_from``'s constants as they are, unfitted, judged
    on its own validation rows of ``operations`` (prefix match on the cluster spec)."""

    preset: str
    carried_from: str
    keys: tuple[str, ...]
    prefixes: tuple[str, ...]
    operations: tuple[str, ...]
    note: str
    files: tuple[str, ...] = ()  # as Platform.files: only rows of these files (empty: every file)


# NCCL's point-to-point copies over NVLink: SABRE's A100 node (NVLink3 mesh) is the only NVIDIA
# all-to-all in the fitting set. Judged on all-to-all only: until the efficiency splits into
# point-to-point and collective-kernel terms, eff_scaleup also slows the ring/tree kernels.
NVLINK_P2P = ("eff_scaleup", "chunk_scaleup")
NVLINK_NOTE = ("NCCL point-to-point over NVLink, fitted on 4 x A100 (SABRE, perlmutter) and carried to NVLink5 "
               "as a structural assumption (same NCCL p2p path; not fitted on these rows)")
# RCCL's own terms carry. The incast terms describe FAST's 100 Gb/s ConnectX-6 RoCE network under
# DCQCN (FLASH 6.1.1), not Oracle's 400 Gb/s NICs, so they do not; nor does eff_scaleup, which
# mi300x's fit rows leave undetermined (3-4 nodes at 100 Gb/s: xGMI never binds; their loss moves
# by < 0.5 % between eff_scaleup 0.5 and 1).
RCCL_STACK = ("rendezvous", "step_cost", "eff_scaleout", "chunk_scaleout")
CARRIED = {
    name: Carried(name, "perlmutter", NVLINK_P2P, (f"{name}:",), ("all_to_all",), NVLINK_NOTE)
    for name in ("b300", "gb200", "gb300")
}
# NCCL's collective kernels on the same DGX design as H100 (NVLink4 switch at 450 GB/s per GPU,
# 8 x 400 Gb/s ConnectX-7): H200's published rows are all-to-all, which these terms leave alone.
CARRIED["h200"] = Carried(
    "h200", "h100", ("coll_eff_scaleout", "coll_step_cost", "ll_alpha_scaleout", "ll_alpha_scaleup", "ll_bw"),
    ("h200:",), ("all_to_all",),
    "NCCL's collective kernels fitted on 4 x 8 H100 (vpbench nccl-tests) and carried to H200 as a structural "
    "assumption (same DGX design: NVLink4 switch at 450 GB/s per GPU, 8 x 400 Gb/s ConnectX-7; same NCCL)",
)
CARRIED["mi355x"] = Carried(
    "mi355x", "mi300x", RCCL_STACK, ("mi355x:",), ("all_to_all",),
    "RCCL's point-to-point terms fitted on 3-4 x 8 MI300X (FAST/FLASH) and carried to MI355X as a structural "
    "assumption (same RCCL stack; not fitted on these rows; not carried: the incast terms of FAST's 100 Gb/s "
    "DCQCN network, and eff_scaleup, which those rows leave undetermined)",
)


def rows_of(platform: Platform | Carried, set_name: str):
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


def carried_preset_entry(carried: Carried, table: dict) -> dict:
    """hardware.json's entry of a carried preset: the source platform's constants it names (as the
    table holds them now), where they come from, and the residuals on its validation rows."""
    source = table["platforms"].get(carried.carried_from)
    if source is None:
        raise ValueError(f"{carried.preset}: {carried.carried_from} has no entry in {JSON_PATH.name} to carry over")
    constants = {k: v for k, v in source["constants"].items() if k in carried.keys}
    extra = "".join(f",{k}={v}" for k, v in constants.items())
    rows = [r for r in rows_of(carried, "validation") if r.operation in carried.operations]
    return {
        "constants": constants,
        "carried_from": carried.carried_from,
        "source": f"carried over from {carried.carried_from}'s fit, not fitted: {carried.note}; judged on the "
                  f"{'/'.join(carried.operations)} validation rows of benchmarks/data/hardware by "
                  "benchmarks/fit_hardware_model.py",
        "date": DATE,
        "residuals": {"fit": summary([], []), "validation": summary(rows, errors(rows, extra))},
    }


def committed_values(platform: Platform, table: dict) -> tuple[float, ...]:
    """The committed constants of a fitted platform as grid values (for --refresh)."""
    have = table["platforms"][platform.preset]["constants"]
    out = []
    for p in platform.params:
        v = have[p.key]
        if p.unit == "":
            out.append(float(v))
        else:  # sizes and durations in the unit they were written in
            out.append(float(v.removesuffix(p.unit)))
    return tuple(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--platform", action="append", choices=sorted({**PLATFORMS, **CARRIED}),
                    help="only these (repeatable); the others' entries are left as they are")
    ap.add_argument("--write", action="store_true", help=f"write {JSON_PATH.relative_to(ROOT)}")
    ap.add_argument("--json", action="store_true", help="print the entries as JSON")
    ap.add_argument("--refresh", action="store_true",
                    help="keep the committed constants of fitted platforms, recompute their residuals only")
    args = ap.parse_args()
    table = json.loads(JSON_PATH.read_text())
    names = args.platform or sorted(PLATFORMS) + sorted(CARRIED)
    # Fitted platforms first, so a carried preset takes its source's new constants.
    for name in sorted(names, key=lambda n: n in CARRIED):
        if name in CARRIED:
            print(f"carrying {CARRIED[name].carried_from} -> {name} ...", file=sys.stderr)
            entry = carried_preset_entry(CARRIED[name], table)
        else:
            platform = PLATFORMS[name]
            if args.refresh:
                print(f"refreshing {name}'s residuals ...", file=sys.stderr)
                values = committed_values(platform, table)
            else:
                print(f"fitting {name} ...", file=sys.stderr)
                values, _ = fit(platform, verbose=True)
            entry = fitted_entry(platform, values)
        table["platforms"][name] = entry
        if name in PLATFORMS:  # presets carrying this platform's constants take the new ones
            for carried in (c for c in CARRIED.values() if c.carried_from == name and c.preset not in names):
                table["platforms"][carried.preset] = carried_preset_entry(carried, table)
        r = entry["residuals"]
        print(f"{name}: {entry['constants']}  fit |err| mean {r['fit']['mean_abs_error']} max {r['fit']['max_abs_error']}"
              f" ({r['fit']['rows']} rows); validation mean {r['validation']['mean_abs_error']}"
              f" max {r['validation']['max_abs_error']} ({r['validation']['rows']} rows)", file=sys.stderr)
    if args.json:
        print(json.dumps(table, indent=2))
    if args.write:
        # Platforms in name order: a platform written by one branch lands apart from another's.
        table["platforms"] = dict(sorted(table["platforms"].items()))
        JSON_PATH.write_text(json.dumps(table, indent=2) + "\n")
        print(f"wrote {JSON_PATH}", file=sys.stderr)


if __name__ == "__main__":
    main()
