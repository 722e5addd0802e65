"""``collsched forest``: ForestColl's optimum and trees for a topology, with
MSCCL XML export and a drawing of one tree."""
from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import Optional

import typer

from collsched.cli.core import MAX_MEMORY_HELP, MAX_TIME_HELP, writable

COLLECTIVES = ("allgather", "reduce_scatter", "allreduce")


def gpu_count(topology: str) -> int:
    """GPUs of a ``--topology`` argument, without building the graph where it is a cluster spec
    (so an oversized spec is refused before anything big is built)."""
    import os

    from collsched import Cluster, forest

    t = topology.strip()
    if not t.startswith("{") and not t.lower().endswith(".json") and not os.path.isfile(t):
        try:
            return Cluster.parse(t).num_gpus
        except ValueError:
            pass  # a forest-only preset, or a bad spec that as_graph reports
    return int(forest.as_graph(topology).num_compute)


def _gbps(bytes_per_s) -> float:
    return float(bytes_per_s) / 1e9


def _exact(value) -> str:
    if isinstance(value, str):
        return value
    f = Fraction(value).limit_denominator(1 << 40)
    return f"{f.numerator}/{f.denominator}" if f.denominator != 1 else str(f.numerator)


def _tree_dict(t) -> dict:
    get = (lambda k: t[k]) if isinstance(t, dict) else (lambda k: getattr(t, k))
    edges = []
    for e in get("edges"):
        u, v = e[0], e[1]
        path = list(e[2]) if len(e) > 2 and e[2] is not None else []
        edges.append({"from": u, "to": v, "path": path})
    return {"root": get("root"), "multiplicity": int(get("multiplicity")), "edges": edges}


def summary(topology: str, k: Optional[int]) -> tuple[dict, object, object]:
    """The JSON summary for `topology`, plus the graph and schedule it came from.
    Bandwidths in GB/s (1e9 bytes/s); ``algbw_exact`` is the exact optimum in GB/s."""
    from collsched import forest

    graph = forest.as_graph(topology)
    if topology.strip().startswith("{"):
        topology = f"{graph.name} (JSON, {graph.num_compute} GPUs)"  # not the whole JSON as a title
    opt = forest.optimal(graph)
    sched = forest.schedule(graph, k=k)
    exact = Fraction(opt["algbw_exact"])  # bytes/s
    out = {
        "topology": topology,
        "gpus": int(graph.num_compute),
        "algbw_gbps": float(opt["algbw_gbps"]),
        "algbw_exact": _exact(exact / 10**9),
        "algbw_exact_bytes_per_s": _exact(exact),
        "k": int(sched.k),
        "optimal_k": int(opt["k"]),
        "tree_bandwidth_gbps": _gbps(getattr(sched, "tree_bandwidth", opt["tree_bandwidth"])),
        "schedule_algbw_gbps": float(getattr(sched, "algbw_gbps", opt["algbw_gbps"])),
        "bottleneck_cut": [str(x) for x in opt["bottleneck_cut"]],
        "trees": [_tree_dict(t) for t in sched.trees],
        "generation_s": float(sched.generation_s),
    }
    return out, graph, sched


def export_xml(sched, collective: str, nranks: int, channels: Optional[int] = None, pieces: int = 1,
               split_multiplicity: bool = False) -> tuple[str, list[str]]:
    """MSCCL XML of the schedule's `collective`, and the validator's verdict.

    The XML is size-independent (the runtime cuts the user's buffer into
    ``nchunksperloop`` chunks), so the plan is made for the smallest shard that
    splits into whole chunks over the trees: k × 2^j elements, j = 0, 1, ...
    Unmerged, so each tree's data on an edge is a stream of its own, on a channel of
    its own: the executor's loops then pipeline every tree independently. ``pieces``
    per tree (``split_multiplicity``: per unit of multiplicity, each its own stream)
    make the relays forward finer units than the executor's 2 MiB passes when the
    pieces are smaller (docs/msccl.md); more pieces mean more steps per threadblock.
    """
    from collsched import forest
    from collsched.export.msccl import to_xml
    from collsched.export.validate import validate_msccl_xml

    elem = 1 if collective == "allgather" else 4
    k = max(1, int(getattr(sched, "k", 1)))
    last = None
    kw = {"chunks": pieces, "merge": False, "split_multiplicity": split_multiplicity}
    for j in range(12):
        shard = k * pieces * (1 << j) * elem
        if collective == "allgather":
            plan = forest.plan_allgather(sched, shard, **kw)
        elif collective == "reduce_scatter":
            plan = forest.plan_reduce_scatter(sched, shard, elem_bytes=elem, **kw)
        else:
            plan = forest.plan_allreduce(sched, shard * nranks, elem_bytes=elem, **kw)
        try:
            xml = to_xml(plan, name=f"forestcoll_{collective}_{nranks}", channels=channels)
        except ValueError as e:
            last = e
            continue
        return xml, validate_msccl_xml(xml)
    raise ValueError(f"cannot express the schedule as MSCCL XML: {last}")


def _xml_shape(text: str) -> dict:
    """Channels and the most threadblocks any GPU runs (each a CUDA block that must be resident)."""
    import re

    gpus = text.split("<gpu ")[1:]
    return {"channels": int(re.search(r'nchannels="(\d+)"', text).group(1)),
            "threadblocks": max((g.count("<tb ") for g in gpus), default=0)}


def _print_summary(s: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console()
    con.print(f"[bold]ForestColl[/bold] on [cyan]{s['topology']}[/cyan]")
    con.print(f"  optimal allgather algbw: [bold green]{s['algbw_gbps']:.3f} GB/s[/bold green] (exact {s['algbw_exact']} GB/s)")
    con.print(f"  trees per root k = {s['k']} (optimal k = {s['optimal_k']}), bandwidth per tree {s['tree_bandwidth_gbps']:.3f} GB/s, "
              f"schedule algbw {s['schedule_algbw_gbps']:.3f} GB/s")
    cut = s["bottleneck_cut"]
    con.print(f"  bottleneck cut ({len(cut)} nodes): {', '.join(cut[:16])}{' ...' if len(cut) > 16 else ''}")
    con.print(f"  generation time: {s['generation_s'] * 1e3:.1f} ms")
    t = Table(title=f"{len(s['trees'])} trees")
    for col in ("root", "multiplicity", "edges", "depth"):
        t.add_column(col, justify="right")
    for tr in s["trees"][:24]:
        t.add_row(str(tr["root"]), str(tr["multiplicity"]), str(len(tr["edges"])), str(_depth(tr)))
    con.print(t)
    if len(s["trees"]) > 24:
        con.print(f"  ... {len(s['trees']) - 24} more (use --json)")


def _depth(tree: dict) -> int:
    """Longest root-to-leaf path (edges go parent -> child)."""
    parent = {e["to"]: e["from"] for e in tree["edges"]}
    best = 0
    for v in parent:
        d, x, seen = 0, v, set()
        while x in parent and x not in seen:
            seen.add(x)
            x = parent[x]
            d += 1
        best = max(best, d)
    return best


def _layout(graph) -> tuple[dict, dict, int]:
    """Rank -> (box, index in box), switch name -> box, number of boxes, from the graph's nodes."""
    ranks, switches, seen = {}, {}, {}
    r = 0
    for n in graph.nodes:
        box = n.get("box")
        box = -1 if box is None else int(box)
        if n["kind"] == "compute":
            ranks[r] = (box, seen.get(box, 0))
            seen[box] = seen.get(box, 0) + 1
            r += 1
        else:
            switches[n["name"]] = box
    boxes = sorted(seen)
    remap = {b: i for i, b in enumerate(boxes)}
    return {k: (remap[b], i) for k, (b, i) in ranks.items()}, {k: remap.get(b, -1) for k, b in switches.items()}, len(boxes)


def draw_tree(s: dict, tree_index: int, path: Path, graph) -> None:
    """Draw one tree over the topology: GPUs laid out per box, the graph's links
    inside a box faint (switches as grey squares), the tree's edges as arrows
    (inter-box ones in a second colour), the root highlighted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    if not 0 <= tree_index < len(s["trees"]):
        raise ValueError(f"tree index {tree_index} out of range (0..{len(s['trees']) - 1})")
    tree = s["trees"][tree_index]
    where, switch_box, nboxes = _layout(graph)
    per_box = max((i + 1 for _, i in where.values()), default=1)
    cols = min(per_box, 4 if per_box <= 8 else 8)
    rows = (per_box + cols - 1) // cols
    box_w, box_h, gap = cols * 1.2 + 0.6, rows * 1.2 + 1.4, 1.2
    pos, names = {}, {}
    for r, (b, i) in where.items():
        pos[r] = (b * (box_w + gap) + 0.6 + (i % cols) * 1.2, 1.1 + (rows - 1 - i // cols) * 1.2)
    compute_names = list(graph.compute_nodes)
    for r, name in enumerate(compute_names):
        names[name] = r
    switch_pos = {}
    for name, b in switch_box.items():
        if b >= 0:
            k = sum(1 for x in switch_pos if switch_box[x] == b)
            switch_pos[name] = (b * (box_w + gap) + box_w / 2 + 0.5 * k, 0.3)
    fig, ax = plt.subplots(figsize=(max(6, nboxes * (box_w + gap) * 0.9), max(3.5, box_h * 1.1)))
    for b in range(nboxes):
        ax.add_patch(FancyBboxPatch((b * (box_w + gap), -0.1), box_w, box_h, boxstyle="round,pad=0.05", fc="#f4f4f8", ec="#888"))
        ax.text(b * (box_w + gap) + box_w / 2, box_h - 0.3, f"box {b}", ha="center", fontsize=10, color="#444")
    drawn = set()
    for src, dst, _ in graph.links:
        a = pos.get(names[src]) if src in names else switch_pos.get(src)
        c = pos.get(names[dst]) if dst in names else switch_pos.get(dst)
        if a is None or c is None or frozenset((src, dst)) in drawn:
            continue  # inter-box switches are not drawn; each undirected pair once
        drawn.add(frozenset((src, dst)))
        ax.plot([a[0], c[0]], [a[1], c[1]], color="#d8d8d8", lw=0.6, zorder=1)
    for name, (x, y) in switch_pos.items():
        ax.scatter([x], [y], s=160, marker="s", c="#bbb", edgecolors="#666", zorder=2)
    root = tree["root"]
    for e in tree["edges"]:
        u, v = e["from"], e["to"]
        if u not in pos or v not in pos:
            continue
        cross = where[u][0] != where[v][0]
        ax.add_patch(FancyArrowPatch(pos[u], pos[v], arrowstyle="-|>", mutation_scale=14, lw=2.2 if cross else 1.8,
                                     color="#d1495b" if cross else "#2e86ab", connectionstyle="arc3,rad=0.12", zorder=3,
                                     shrinkA=11, shrinkB=11))
    for r, (x, y) in pos.items():
        ax.scatter([x], [y], s=420, c="#ffd166" if r == root else "white", edgecolors="#222", linewidths=2.5 if r == root else 1.2, zorder=4)
        ax.text(x, y, str(r), ha="center", va="center", fontsize=9, zorder=5)
    ax.set_title(f"{s['topology']}: tree {tree_index} rooted at GPU {root} (×{tree['multiplicity']}), "
                 f"k={s['k']}, optimum {s['algbw_gbps']:.2f} GB/s\nblue: intra-box edge, red: inter-box edge", fontsize=10)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.autoscale_view()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def register(app: typer.Typer) -> None:
    @app.command("forest")
    def forest_cmd(
        topology: str = typer.Option(..., "--topology", "-t", "--cluster", "-c",
                                     help="a preset such as mi250:2, a100:2, h100:4, any cluster spec, "
                                          "a graph JSON file (topo.json) or inline JSON"),
        k: Optional[int] = typer.Option(None, "--k", min=1, help="trees per root (default: the optimal k)"),
        collective: str = typer.Option("allgather", "--collective", help="allgather, reduce_scatter or allreduce (for --xml)"),
        xml: Optional[Path] = typer.Option(None, "--xml", help="write the schedule as MSCCL XML to this file"),
        channels: Optional[int] = typer.Option(None, "--channels", min=1, max=32, help="MSCCL channels for parallel trees (--xml)"),
        pieces: int = typer.Option(1, "--pieces", min=1, max=64, help="pipeline pieces per tree in the XML (--xml; at most 64 steps per threadblock)"),
        split_multiplicity: bool = typer.Option(False, "--split-multiplicity", help="a tree of multiplicity m as m streams in the XML (--xml)"),
        as_json: bool = typer.Option(False, "--json", help="print the summary as JSON"),
        draw: Optional[Path] = typer.Option(None, "--draw", help="draw one tree over the topology to this PNG"),
        tree: int = typer.Option(0, "--tree", min=0, help="which tree --draw shows"),
        max_memory: Optional[str] = typer.Option(None, "--max-memory", help=MAX_MEMORY_HELP),
        max_time: Optional[float] = typer.Option(None, "--max-time", help=MAX_TIME_HELP),
    ):
        """ForestColl: optimal allgather bandwidth, bottleneck cut and spanning trees for a topology."""
        from collsched.guard import check, estimate_forest, progress

        if collective not in COLLECTIVES:
            raise typer.BadParameter(f"--collective must be one of {', '.join(COLLECTIVES)}, got {collective!r}")
        try:
            writable("--xml", xml)
            writable("--draw", draw)
            est = estimate_forest(gpu_count(topology))
            check(est, max_memory, max_time)
            with progress(est, enabled=not as_json):
                s, graph, sched = summary(topology, k)
            nranks = s["gpus"]
            if xml is not None:
                text, problems = export_xml(sched, collective, nranks, channels, pieces, split_multiplicity)
                xml.write_text(text)
                s["xml"] = {"path": str(xml), "collective": collective, "pieces": pieces, "split_multiplicity": split_multiplicity,
                            "problems": problems, **_xml_shape(text)}
            if draw is not None:
                draw_tree(s, tree, draw, graph)
                s["draw"] = str(draw)
        except (ValueError, ImportError, OSError) as e:
            hint = ""
            if str(e).startswith("cluster spec"):  # the topology was read as a spec: say what else it may be
                hint = "; --topology also takes a graph JSON file (topo.json) or inline JSON"
            typer.echo(f"error: {' '.join(str(e).split())}{hint}", err=True)
            raise typer.Exit(2)
        if as_json:
            typer.echo(json.dumps(s, indent=2))
        else:
            _print_summary(s)
            if xml is not None:
                verdict = "valid" if not s["xml"]["problems"] else f"{len(s['xml']['problems'])} problems: {s['xml']['problems'][:3]}"
                typer.echo(f"MSCCL XML ({collective}) written to {xml}: {verdict}; {s['xml']['channels']} channels, "
                           f"at most {s['xml']['threadblocks']} threadblocks per GPU")
            if draw is not None:
                typer.echo(f"tree {tree} drawn to {draw}")
        if xml is not None and s["xml"]["problems"]:
            raise typer.Exit(1)
