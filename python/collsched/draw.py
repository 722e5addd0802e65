"""Drawings of a plan's simulated execution (matplotlib, Agg backend: no display needed).

``gantt(plan, cluster, out)``: one row per sending rank (per server on big clusters),
three lanes per row (local, scale-up, scale-out) showing when that row is busy on each tier,
with the plan's synchronous steps as shaded bands. ``link_utilisation(result, out)``: how busy
each link class was over the run.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

TIERS = ("local", "scale_up", "scale_out")
TIER_COLOURS = {"local": "#8c8c8c", "scale_up": "#2a7ab9", "scale_out": "#e4572e"}
TIER_LABELS = {"local": "local copy", "scale_up": "scale-up (NVLink/xGMI)", "scale_out": "scale-out (NIC)"}
# Above this many ranks, rows are servers rather than ranks so the chart stays legible.
MAX_RANK_ROWS = 64
# Steps drawn in the strip above the ranks; later steps wrap onto the same rows.
MAX_STEP_ROWS = 32

_TRANSFER_COLUMNS = ("src", "dst", "op", "tier", "step", "seg_begin", "seg_end", "dep_begin", "dep_end")


def transfer_columns(plan) -> dict[str, np.ndarray]:
    """The plan's transfers as numpy columns (src, dst, op, tier, step, ...), one entry per transfer."""
    raw = plan._raw_arrays()["transfers"]
    t = np.frombuffer(raw, dtype="<u4").reshape(-1, len(_TRANSFER_COLUMNS))
    return {name: t[:, i].copy() for i, name in enumerate(_TRANSFER_COLUMNS)}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _merge_intervals(starts: np.ndarray, ends: np.ndarray) -> list[tuple[float, float]]:
    """Union of [start, end) intervals as (start, width) pairs for broken_barh."""
    if len(starts) == 0:
        return []
    order = np.argsort(starts, kind="stable")
    out: list[list[float]] = []
    for s, e in zip(starts[order].tolist(), ends[order].tolist()):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e - s) for s, e in out]


def _draw_steps(sax, steps, step_rows: int, scale: float) -> None:
    """One thin bar per step from its first start to its last end; steps beyond MAX_STEP_ROWS share rows."""
    for k, t0, t1 in steps:
        y = step_rows - 1 - (k % step_rows)
        sax.broken_barh([(t0 * scale, max(t1 - t0, 0.0) * scale)], (y - 0.35, 0.7), facecolors="#6b6b6b",
                        edgecolor="none")
    sax.set_ylim(-0.6, step_rows - 0.4)
    label_every = max(1, step_rows // 8)
    ticks = [r for r in range(step_rows) if r % label_every == 0]
    sax.set_yticks([step_rows - 1 - r for r in ticks])
    sax.set_yticklabels([f"step {r}" for r in ticks], fontsize=7)
    sax.tick_params(axis="x", labelbottom=False)
    sax.grid(axis="x", alpha=0.3)
    sax.set_ylabel("steps", fontsize=8)


def _time_unit(seconds: float) -> tuple[float, str]:
    if seconds >= 1:
        return 1.0, "s"
    if seconds >= 1e-3:
        return 1e3, "ms"
    return 1e6, "µs"


def gantt(plan, cluster, out, result=None, title: str | None = None) -> Path:
    """Draw the plan's simulated execution as a Gantt chart into ``out`` (PNG/SVG/PDF by suffix).

    ``result`` is a ``collsched.sim.SimResult`` of this plan; it is simulated when omitted.
    Returns the path written.
    """
    if result is None:
        from collsched import sim

        result = sim.simulate(plan, cluster)
    cols = transfer_columns(plan)
    start = np.asarray(result.transfer_start_s, dtype=float)
    end = np.asarray(result.transfer_end_s, dtype=float)
    if len(start) != len(cols["src"]) or len(end) != len(cols["src"]):
        raise ValueError(f"simulation result has {len(start)} transfer times but the plan has {len(cols['src'])} transfers")
    ranks = int(plan.num_ranks)
    gps = int(plan.gpus_per_server) or 1
    by_server = ranks > MAX_RANK_ROWS
    row_of = cols["src"] // gps if by_server else cols["src"]
    rows = (ranks + gps - 1) // gps if by_server else ranks
    makespan = float(np.nanmax(end)) if len(end) else float(result.time_s)
    makespan = max(makespan, float(result.time_s), 1e-12)
    scale, unit = _time_unit(makespan)

    plt = _pyplot()
    # Steps get their own strip on top (one line per step, first start to last end): pipelined
    # plans overlap their steps, which background bands cannot show.
    steps = [(k, t0, t1) for k, (t0, t1) in enumerate(getattr(result, "step_times", []) or [])
             if np.isfinite(t0) and np.isfinite(t1)]
    step_rows = min(len(steps), MAX_STEP_ROWS)
    rows_h = min(1.5 + 0.32 * rows, 22.0)
    steps_h = 0.5 + 0.12 * step_rows if steps else 0.0
    fig = plt.figure(figsize=(12, rows_h + steps_h + 0.8), dpi=110)
    if steps:
        grid = fig.add_gridspec(2, 1, height_ratios=[steps_h, rows_h], hspace=0.04)
        sax = fig.add_subplot(grid[0])
        ax = fig.add_subplot(grid[1], sharex=sax)
        _draw_steps(sax, steps, step_rows, scale)
    else:
        ax = fig.add_subplot(1, 1, 1)
        sax = None
    lane_h = 0.8 / len(TIERS)
    tier_of = cols["tier"]
    for r in range(rows):
        on_row = row_of == r
        for k, tier in enumerate(TIERS):
            sel = on_row & (tier_of == k)
            spans = _merge_intervals(start[sel] * scale, end[sel] * scale)
            if spans:
                y = rows - 1 - r - 0.4 + k * lane_h
                ax.broken_barh(spans, (y, lane_h * 0.9), facecolors=TIER_COLOURS[tier], edgecolor="none")
    if not by_server and 1 < gps < rows:  # server boundaries between rank rows
        for b in range(gps, rows, gps):
            ax.axhline(rows - b - 0.5, color="#555555", lw=0.6, ls="--")
    ax.set_ylim(-0.6, rows + 0.2)
    tick_step = max(1, rows // 32)
    ticks = list(range(0, rows, tick_step))
    ax.set_yticks([rows - 1 - r for r in ticks])
    ax.set_yticklabels([f"{'server' if by_server else 'rank'} {r}" for r in ticks], fontsize=8)
    ax.set_xlim(0, makespan * scale * 1.02)
    ax.set_xlabel(f"time ({unit})")
    ax.set_ylabel("sending server" if by_server else "sending rank")
    for t in TIERS:
        ax.bar(0, 0, color=TIER_COLOURS[t], label=TIER_LABELS[t])
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.6 / rows_h), ncol=3, frameon=False, fontsize=9)
    (sax if sax is not None else ax).set_title(title or f"{plan.algorithm} on {ranks} ranks: {result.time_s * scale:.3g} {unit}, "
                          f"{plan.num_transfers} transfers, {plan.num_steps} step{'s' if plan.num_steps != 1 else ''}"
                          + (" (rows: servers)" if by_server else ""), fontsize=11)
    ax.grid(axis="x", alpha=0.3)
    out = Path(out)
    fig.savefig(out, bbox_inches="tight")
    plt.close(fig)
    return out


def _link_class(name: str) -> str:
    """Group per-link names like ``nic_up[3]`` or ``scaleup:1->2`` into their class."""
    return re.split(r"[\[\(:#@ ]|\d", str(name), maxsplit=1)[0].strip("_-.") or str(name)


def _class_stats(util: dict) -> dict[str, dict]:
    """{class: {mean, peak, links, busiest}} from either form of utilisation dict.

    The simulator reports per class (``{"nic_up": {"links", "utilisation", "busiest_link",
    "busiest_utilisation", ...}}``); a plain ``{link_name: fraction}`` dict is grouped by name.
    """
    out: dict[str, dict] = {}
    for name, v in util.items():
        if isinstance(v, dict) and "utilisation" in v:
            out[str(name)] = {"mean": float(v["utilisation"]), "peak": float(v.get("busiest_utilisation", v["utilisation"])),
                              "links": int(v.get("links", 1)), "busiest": str(v.get("busiest_link", ""))}
            continue
        a = np.asarray(v, dtype=float)
        value = float(a.mean()) if a.ndim else float(a)
        c = out.setdefault(_link_class(name), {"values": [], "names": []})
        c["values"].append(value)
        c["names"].append(str(name))
    for c in out.values():
        if "values" in c:
            vals = c.pop("values")
            names = c.pop("names")
            i = int(np.argmax(vals))
            c.update(mean=float(np.mean(vals)), peak=vals[i], links=len(vals), busiest=names[i])
    return out


def link_utilisation(result, out, title: str | None = None) -> Path:
    """Bar chart of link utilisation per link class from a ``SimResult`` (or its ``link_utilisation`` dict).

    Each class shows its mean utilisation (bytes carried / (capacity × run time)) and its busiest link.
    """
    util = result if isinstance(result, dict) else getattr(result, "link_utilisation", None)
    if not util:
        raise ValueError("the simulation result has no link utilisation to draw")
    stats = _class_stats(util)
    names = [c for c in sorted(stats) if stats[c]["links"] > 0]
    means = [stats[c]["mean"] for c in names]
    peaks = [stats[c]["peak"] for c in names]
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(7, 1.6 * len(names) + 2), 4.8), dpi=110)
    x = np.arange(len(names))
    ax.bar(x - 0.2, means, 0.4, label="class mean", color="#2a7ab9")
    bars = ax.bar(x + 0.2, peaks, 0.4, label="busiest link", color="#e4572e")
    for b, c in zip(bars, names):
        if stats[c]["busiest"]:
            ax.annotate(stats[c]["busiest"], (b.get_x() + b.get_width() / 2, b.get_height()), ha="center",
                        va="bottom", fontsize=7, rotation=0, xytext=(0, 2), textcoords="offset points")
    ax.set_xticks(x)
    ax.set_xticklabels([f"{c}\n({stats[c]['links']} links)" for c in names], fontsize=8)
    ax.set_ylabel("utilisation (bytes / (capacity × run time))")
    ax.set_ylim(0, max(1.0, max(peaks, default=0) * 1.15))
    ax.legend(frameon=False, loc="upper right")
    ax.grid(axis="y", alpha=0.3)
    ax.set_title(title or "link utilisation by class", fontsize=11)
    fig.tight_layout()
    out = Path(out)
    fig.savefig(out)
    plt.close(fig)
    return out
