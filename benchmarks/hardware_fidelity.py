"""The simulator against published hardware measurements, side by side.

    .venv/bin/python benchmarks/hardware_fidelity.py [--set fit|validation|all] [--model hardware|fluid]
        [--source NAME] [--json] [--markdown] [--plot PATH]

Every row of benchmarks/data/hardware/*.csv (sources cited in its README.md) is reproduced with
collsched's planners and simulator (`collsched.fidelity.predict`): error = predicted / measured − 1.
Rows with an `excluded` reason are shown but left out of the summaries. Summaries per set,
platform and operation, per set and platform, and per set: mean |error|, geometric mean of
|error|, bias (geometric mean of predicted / measured, minus 1), max |error|, and how many rows
lie within ±15 %. Predictions are simulated, nothing is executed.

`--json` prints {"rows": [{"source", "platform", "operation", "algorithm", "size_bytes",
"measured_s", "predicted_s", "error", "excluded"}], "summary": [...]}; `--markdown` prints the
table and summaries as Markdown (for docs/results/); `--plot PATH` writes a log-log scatter of
measured vs predicted seconds, one marker per platform, with y = x and ±15 % bands.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time

from collsched import fidelity
from collsched.cli.core import fmt_time as _seconds
from collsched.units import format_bytes

BAND = 0.15
ALL = "all"  # the summary row over every platform or operation


def _short_source(r: fidelity.Row) -> str:
    return r.file.removesuffix(".csv")


def evaluate(which: str, model: str, source: str | None = None) -> list[dict]:
    """One dict per row (of files whose name contains ``source``, if given): the row, its
    prediction and its error."""
    rows = fidelity.load_rows(None if which == "all" else which)
    if source:
        rows = [r for r in rows if source in r.file]
        if not rows:
            raise SystemExit(f"--source {source!r} matches no measurement file in {fidelity.DATA_DIR}")
    out = []
    for r in rows:
        p = fidelity.predict(r, model=model)
        out.append({"row": r, "predicted_s": p, "error": fidelity.error(p, r.measured_s)})
    return out


def summarise(results: list[dict]) -> list[dict]:
    """Per (set, platform, operation), per (set, platform) and per set: count, mean |error|,
    geomean |error|, bias, max |error|, rows within ±15 %."""
    groups: dict = {}
    for x in results:
        r = x["row"]
        if r.excluded:
            continue
        for key in ((r.set, r.platform, r.operation), (r.set, r.platform, ALL), (r.set, ALL, r.operation),
                    (r.set, ALL, ALL)):
            groups.setdefault(key, []).append(x)
    out = []
    for (which, platform, operation), xs in sorted(groups.items(), key=lambda kv: _summary_order(kv[0])):
        errs = [abs(x["error"]) for x in xs]
        out.append({
            "set": which, "platform": platform, "operation": operation, "rows": len(xs),
            "mean_abs_error": statistics.fmean(errs),
            "geomean_abs_error": math.exp(statistics.fmean(math.log(max(e, 1e-9)) for e in errs)),
            "bias": math.exp(statistics.fmean(math.log(x["predicted_s"] / x["row"].measured_s) for x in xs)) - 1,
            "max_abs_error": max(errs),
            "within_15pct": sum(e <= BAND for e in errs),
        })
    return out


def _summary_order(key: tuple) -> tuple:
    which, platform, operation = key
    return (which, platform == ALL, platform, operation == ALL, operation)


def _table_rows(results: list[dict]) -> list[list[str]]:
    out = []
    for x in results:
        r = x["row"]
        out.append([r.set, _short_source(r), r.platform, r.cluster.split(",")[0], r.operation, r.algorithm, r.workload,
                    format_bytes(r.size_bytes), _seconds(r.measured_s), _seconds(x["predicted_s"]),
                    f"{x['error']:+.1%}", "excluded" if r.excluded else ""])
    return out


HEADER = ["set", "source", "platform", "cluster", "operation", "algorithm", "workload", "size", "measured",
          "predicted", "error", "excluded"]
SUMMARY_HEADER = ["set", "platform", "operation", "rows", "mean |err|", "geomean |err|", "bias", "max |err|", "within ±15%"]


def _summary_cells(s: dict) -> list[str]:
    return [s["set"], s["platform"], s["operation"], str(s["rows"]), f"{s['mean_abs_error']:.1%}", f"{s['geomean_abs_error']:.1%}",
            f"{s['bias']:+.1%}", f"{s['max_abs_error']:.1%}", f"{s['within_15pct']}/{s['rows']}"]


def print_rich(results: list[dict], summary: list[dict], model: str) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=200)
    t = Table(title=f"Published measurements vs collsched's simulator (model: {model}; simulated, not executed)")
    for h in HEADER:
        t.add_column(h, justify="right" if h in ("size", "measured", "predicted", "error") else "left")
    for cells, x in zip(_table_rows(results), results):
        style = "dim" if x["row"].excluded else ("red" if abs(x["error"]) > BAND else None)
        t.add_row(*cells, style=style)
    console.print(t)
    s = Table(title="Summary (excluded rows left out)")
    for h in SUMMARY_HEADER:
        s.add_column(h)
    for row in summary:
        s.add_row(*_summary_cells(row))
    console.print(s)
    reasons = sorted({x["row"].excluded for x in results if x["row"].excluded})
    for reason in reasons:
        console.print(f"excluded: {reason}", style="dim")


def print_markdown(results: list[dict], summary: list[dict]) -> None:
    def line(cells):
        print("| " + " | ".join(cells) + " |")

    line(SUMMARY_HEADER)
    line(["---"] * len(SUMMARY_HEADER))
    for row in summary:
        line(_summary_cells(row))
    print()
    line(HEADER)
    line(["---"] * len(HEADER))
    for cells in _table_rows(results):
        line(cells)
    reasons = sorted({x["row"].excluded for x in results if x["row"].excluded})
    print()
    for reason in reasons:
        print(f"Excluded: {reason}.")


def to_json(results: list[dict], summary: list[dict]) -> dict:
    return {
        "rows": [{"source": x["row"].source, "platform": x["row"].platform, "operation": x["row"].operation,
                  "algorithm": x["row"].algorithm, "size_bytes": x["row"].size_bytes,
                  "measured_s": x["row"].measured_s, "predicted_s": x["predicted_s"], "error": x["error"],
                  "excluded": x["row"].excluded} for x in results],
        "summary": summary,
    }


def plot(results: list[dict], path: str, model: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 6))
    markers = "osD^v<>Ph*X"
    platforms = sorted({x["row"].platform for x in results})
    lo = min(min(x["row"].measured_s, x["predicted_s"]) for x in results) / 1.5
    hi = max(max(x["row"].measured_s, x["predicted_s"]) for x in results) * 1.5
    for i, p in enumerate(platforms):
        for excluded in (False, True):
            xs = [x for x in results if x["row"].platform == p and bool(x["row"].excluded) == excluded]
            if not xs:
                continue
            ax.scatter([x["row"].measured_s for x in xs], [x["predicted_s"] for x in xs],
                       marker=markers[i % len(markers)],
                       label=p + (" (excluded)" if excluded else ""), alpha=0.35 if excluded else 0.8,
                       facecolors="none" if excluded else None, edgecolors=f"C{i}", color=f"C{i}", s=28)
    ax.plot([lo, hi], [lo, hi], "k-", lw=1, label="y = x")
    for f in (1 - BAND, 1 + BAND):
        ax.plot([lo, hi], [lo * f, hi * f], "k:", lw=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured (s)")
    ax.set_ylabel(f"predicted (s), model {model}")
    ax.set_title("collsched simulator vs published measurements (dotted: ±15%)")
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=130)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", choices=("fit", "validation", "all"), default="all")
    ap.add_argument("--model", choices=fidelity.MODELS, default="hardware")
    ap.add_argument("--source", help="only files whose name contains this (e.g. fast_amd, deepep)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of the table")
    ap.add_argument("--markdown", action="store_true", help="print Markdown tables instead of the rich table")
    ap.add_argument("--plot", metavar="PATH", help="write a measured-vs-predicted scatter (PNG)")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    results = evaluate(a.set, a.model, a.source)
    wall = time.perf_counter() - t0
    summary = summarise(results)
    if a.json:
        json.dump(to_json(results, summary), sys.stdout, indent=1)
        print()
    elif a.markdown:
        print_markdown(results, summary)
    else:
        print_rich(results, summary, a.model)
        print(f"{len(results)} rows predicted in {wall:.1f} s (wall clock, this machine)")
    if a.plot:
        plot(results, a.plot, a.model)
    return 0


if __name__ == "__main__":
    sys.exit(main())
