"""ForestColl: throughput-optimal spanning-tree schedules (NSDI'26) for allgather,
reduce-scatter and allreduce on any Eulerian topology of GPUs and switches.

    >>> from collsched import forest
    >>> g = forest.Graph.parse("mi250:2")
    >>> forest.optimal(g)["algbw_exact"]          # exact, bytes/s
    '5312000000000/15'
    >>> s = forest.schedule(g, k=3)                # best schedule with 3 trees per root
    >>> p = forest.plan_allgather(s, 1 << 20)      # a collsched Plan

Graphs come from the paper testbeds (``a100:N``, ``mi250:N``, ``h100:N``), any cluster
spec (``h200:4``, lowered with :meth:`Graph.from_cluster`), or JSON
(``{"nodes": [{"name", "kind": "compute"|"switch", "box"?, "multicast"?}],
"links": [{"src", "dst", "bw"}]}`` with ``bw`` in bytes/s or a string like ``"300GB/s"``).
"""
from __future__ import annotations

from collsched import _core

Graph = _core.Graph
ForestSchedule = _core.ForestSchedule

__all__ = [
    "Graph",
    "ForestSchedule",
    "as_graph",
    "optimal",
    "schedule",
    "plan_allgather",
    "plan_reduce_scatter",
    "plan_allreduce",
]


def as_graph(graph) -> Graph:
    """Accept a :class:`Graph`, a :class:`collsched.Cluster`, a preset/cluster spec string,
    a JSON text/dict, or the path of a JSON file (a ``.json`` name or any existing file)."""
    import os
    from pathlib import Path

    if isinstance(graph, Graph):
        return graph
    if isinstance(graph, _core.Cluster):
        return Graph.from_cluster(graph)
    if isinstance(graph, dict):
        import json

        return Graph.from_json(json.dumps(graph))
    if isinstance(graph, os.PathLike) or (isinstance(graph, str) and is_file_reference(graph)):
        from collsched.guard import JSON_FILE_COPIES, check_input_file

        path = Path(graph)
        check_input_file(path, "topology file", JSON_FILE_COPIES)  # missing, a directory, or too large
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as e:  # removed or replaced since it was checked
            raise ValueError(f"topology file {str(path)!r} cannot be read ({e.strerror or e})") from None
        except UnicodeDecodeError:
            raise ValueError(f"topology file {str(path)!r} is not a UTF-8 JSON text") from None
        try:
            return Graph.from_json(text)
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from None
    if isinstance(graph, str):
        text = graph.strip()
        return Graph.from_json(text) if text.startswith("{") else Graph.parse(text)
    raise TypeError(f"graph must be a forest.Graph, Cluster, spec string, JSON or a JSON file path, "
                    f"got {type(graph).__name__}")


def is_file_reference(text: str) -> bool:
    """A topology argument that names a file rather than a spec: ends in .json, or exists."""
    import os

    t = text.strip()
    return not t.startswith("{") and (t.lower().endswith(".json") or ("/" in t and os.path.exists(t)) or os.path.isfile(t))



def optimal(graph) -> dict:
    """Exact allgather optimum: ``algbw_exact`` ("p/q" bytes/s), ``algbw_gbps``, ``k`` (trees
    per root), ``tree_bandwidth`` (bytes/s per tree), ``bottleneck_cut`` (node names)."""
    return _core.forest_optimal(as_graph(graph))


def schedule(graph, k: int | None = None, optimal: bool = False, spread_fan: int | None = None,
             interleave: bool | None = None) -> ForestSchedule:
    """Build the spanning-tree schedule.

    ``k=None``: the optimal k when it is below 10, else the best k in 1..9 (paper §5.5);
    ``optimal=True``: the exactly optimal k however large; ``k=n``: exactly n trees per root
    with the best bandwidth for that n. ``spread_fan``: edge splitting first spreads each
    egress of a small switch over that many partners (shallower trees, slower generation);
    default 8 up to 256 GPUs, 1 above. ``interleave``: the packing grows the trees in turns
    instead of one after another, so no tree takes all the short edges and the trees are
    shallower (h100:2 depth 6 -> 3) at the same throughput, for a costlier generation;
    default on up to 64 GPUs.
    """
    if k is not None and (not isinstance(k, int) or isinstance(k, bool) or k < 1):
        raise ValueError(f"k must be a positive integer, got {k!r}")
    if spread_fan is not None and (not isinstance(spread_fan, int) or isinstance(spread_fan, bool) or spread_fan < 1):
        raise ValueError(f"spread_fan must be a positive integer, got {spread_fan!r}")
    if interleave is not None and not isinstance(interleave, bool):
        raise ValueError(f"interleave must be True, False or None, got {interleave!r}")
    return _core.forest_schedule(as_graph(graph), k, optimal, spread_fan, interleave)


def _schedule(s) -> ForestSchedule:
    return s if isinstance(s, ForestSchedule) else schedule(s)


def _chunks(schedule: ForestSchedule, chunks, output_bytes: int, latency_ns) -> int:
    """``chunks``, or (None) the automatic choice for ``output_bytes`` per rank."""
    if chunks is None:
        if latency_ns is not None and (isinstance(latency_ns, bool) or int(latency_ns) < 0):
            raise ValueError(f"latency_ns must be a non-negative integer, got {latency_ns!r}")
        return schedule.auto_chunks(int(output_bytes), None if latency_ns is None else int(latency_ns))
    if isinstance(chunks, bool) or int(chunks) < 1:
        raise ValueError(f"chunks must be a positive integer or None (automatic), got {chunks!r}")
    return int(chunks)


def _knobs(options, **given) -> dict:
    """The keyword knobs with ``options`` (a dict, as ``plan_all_to_all`` and the runtime take
    them) laid over them; unknown keys are refused by name."""
    if not options:
        return given
    if not isinstance(options, dict):
        raise TypeError(f"options must be a dict, got {type(options).__name__}")
    bad = sorted(k for k in options if k not in given)
    if bad:
        raise ValueError(f"unknown ForestColl option {bad[0]!r} (known: {', '.join(given)})")
    return {**given, **options}


def plan_allgather(schedule, shard_bytes: int, chunks: int | None = None, merge: bool = True,
                   latency_ns: int | None = None, split_multiplicity: bool = False,
                   options: dict | None = None) -> _core.Plan:
    """Allgather plan: every rank contributes ``shard_bytes``; ranks are the graph's compute
    nodes in order. ``schedule`` may also be a graph (the automatic schedule is built).
    ``chunks``: pipeline chunks per tree; None picks them for the size
    (``ForestSchedule.auto_chunks``: ⌊√(bandwidth time / per-piece latency)⌋, 1..64, with
    ``latency_ns`` per piece, default 6 µs across boxes, 3 µs in one); ``merge``: one
    multi-segment message per rank pair and step instead of one per tree;
    ``split_multiplicity``: a tree of multiplicity m travels as m streams of one share each
    (a stream gets one fair share of a link; see docs/forestcoll.md). ``options``: the same
    knobs as a dict (``{"chunks": 4}``)."""
    k = _knobs(options, chunks=chunks, merge=merge, latency_ns=latency_ns, split_multiplicity=split_multiplicity)
    chunks, merge, latency_ns, split_multiplicity = k["chunks"], k["merge"], k["latency_ns"], k["split_multiplicity"]
    s = _schedule(schedule)
    chunks = _chunks(s, chunks, int(shard_bytes) * s.num_ranks, latency_ns)
    return _core.forest_plan_allgather(s, int(shard_bytes), chunks, bool(merge), bool(split_multiplicity))


def plan_reduce_scatter(schedule, shard_bytes: int, elem_bytes: int = 4, chunks: int | None = None, merge: bool = True,
                        latency_ns: int | None = None, split_multiplicity: bool = False,
                        options: dict | None = None) -> _core.Plan:
    """Reduce-scatter plan along the reversed trees: input ``ranks × shard_bytes``
    (``chunks``/``latency_ns``/``split_multiplicity``/``options`` as for :func:`plan_allgather`)."""
    k = _knobs(options, chunks=chunks, merge=merge, latency_ns=latency_ns, split_multiplicity=split_multiplicity,
               elem_bytes=elem_bytes)
    chunks, merge, latency_ns, split_multiplicity = k["chunks"], k["merge"], k["latency_ns"], k["split_multiplicity"]
    elem_bytes = k["elem_bytes"]
    s = _schedule(schedule)
    chunks = _chunks(s, chunks, int(shard_bytes) * s.num_ranks, latency_ns)
    return _core.forest_plan_reduce_scatter(s, int(shard_bytes), int(elem_bytes), chunks, bool(merge), bool(split_multiplicity))


def plan_allreduce(schedule, bytes: int, elem_bytes: int = 4, chunks: int | None = None, merge: bool = True,
                   latency_ns: int | None = None, split_multiplicity: bool = False,
                   options: dict | None = None) -> _core.Plan:
    """Allreduce plan: reduce-scatter along the in-trees, then allgather along the out-trees
    (``chunks``/``latency_ns``/``split_multiplicity``/``options`` as for :func:`plan_allgather`,
    each phase moving ``bytes``)."""
    k = _knobs(options, chunks=chunks, merge=merge, latency_ns=latency_ns, split_multiplicity=split_multiplicity,
               elem_bytes=elem_bytes)
    chunks, merge, latency_ns, split_multiplicity = k["chunks"], k["merge"], k["latency_ns"], k["split_multiplicity"]
    elem_bytes = k["elem_bytes"]
    s = _schedule(schedule)
    chunks = _chunks(s, chunks, int(bytes), latency_ns)
    return _core.forest_plan_allreduce(s, int(bytes), int(elem_bytes), chunks, bool(merge), bool(split_multiplicity))
