"""Allgather, reduce-scatter and allreduce: planning entry points and
torch.distributed wrappers that mirror torch's signatures.

Planning: ``plan_collective(kind, ranks, nbytes, algorithm=...)`` returns a
Plan from ForestColl (``algorithm="forest"``, via :mod:`collsched.forest`) or a
baseline (``"ring"``, ``"tree"``). ``nbytes`` is the per-rank shard for
allgather and reduce-scatter and the whole buffer for allreduce.

Execution: ``all_gather_into_tensor``, ``reduce_scatter_tensor`` and
``all_reduce`` plan (cached per shape) and run the plan with
:func:`collsched.comm.execute` on the group's backend (Gloo or NCCL). Every
rank computes the same plan from the same arguments; integer results are
byte-identical to torch's, floating-point ones equal up to summation order.
"""
from __future__ import annotations

import threading
from collections import OrderedDict

from collsched import _core

KINDS = ("allgather", "reduce_scatter", "allreduce")
ALGORITHMS = ("forest", "ring", "tree")
_KIND_ALIASES = {"all_gather": "allgather", "reducescatter": "reduce_scatter", "all_reduce": "allreduce"}


def _kind(kind: str) -> str:
    k = _KIND_ALIASES.get(kind, kind)
    if k not in KINDS:
        raise ValueError(f"unknown collective {kind!r} (known: {', '.join(KINDS)})")
    return k


def _cluster(topology):
    """A Cluster from a Cluster, a spec string, or None."""
    if topology is None or isinstance(topology, _core.Cluster):
        return topology
    if isinstance(topology, str):
        return _core.Cluster.parse(topology)
    return None


def _graph(topology, ranks: int):
    """A ForestColl Graph from a Graph, a preset/cluster spec (``"mi250:2"``, ForestColl's
    testbeds first), a Cluster, or None (one switch joining `ranks` GPUs)."""
    from collsched import forest

    if topology is None:
        topology = _core.Cluster.parse(f"h100:1,gpus={ranks}")
    return forest.as_graph(topology)


def _piece_latency_ns(topology) -> int | None:
    """Per-message latency of the topology's slowest tier when it is (or names) a Cluster, for
    ForestColl's automatic chunk count; None (ForestColl's default) for a bare Graph."""
    if isinstance(topology, str):
        try:
            topology = _core.Cluster.parse(topology)
        except ValueError:
            return None
    if isinstance(topology, _core.Cluster):
        d = topology.to_dict()
        return d["alpha_scaleout_ns"] if d["servers"] > 1 else d["alpha_scaleup_ns"]
    return None


def _forest_plan(kind: str, ranks: int, nbytes: int, elem_bytes: int, topology, chunks: int | None, k: int | None,
                 merge: bool = True, split_multiplicity: bool = False):
    from collsched import forest

    g = _graph(topology, ranks)
    sch = forest.schedule(g, k=k)
    kw = {"chunks": chunks, "latency_ns": _piece_latency_ns(topology), "merge": merge, "split_multiplicity": split_multiplicity}
    if kind == "allgather":
        plan = forest.plan_allgather(sch, nbytes, **kw)
    elif kind == "reduce_scatter":
        plan = forest.plan_reduce_scatter(sch, nbytes, elem_bytes=elem_bytes, **kw)
    else:
        plan = forest.plan_allreduce(sch, nbytes, elem_bytes=elem_bytes, **kw)
    if plan.num_ranks != ranks:
        raise ValueError(f"the topology has {plan.num_ranks} GPUs but the group has {ranks} ranks")
    return plan


def plan_collective(kind: str, ranks: int, nbytes: int, algorithm: str = "forest", *, elem_bytes: int = 1,
                    topology=None, chunks: int | None = None, k: int | None = None, merge: bool = True,
                    split_multiplicity: bool = False, channels: int | None = None, options: dict | None = None):
    """Plan ``kind`` over ``ranks`` ranks. ``topology``: a Cluster or spec
    (``"mi250:2"``) for tiers and for ForestColl's graph, or a ``forest.Graph``.
    ``chunks`` pipelines each shard in that many pieces; ``k`` fixes ForestColl's
    trees per root; ``merge=False`` keeps each tree's piece a message of its own
    (ForestColl only: what an MSCCL export wants, one stream per tree and edge);
    ``split_multiplicity=True`` makes a tree of multiplicity m m streams (ForestColl only).
    ``channels`` runs that many rings side by side, each on an equal part of the data, as
    NCCL's channels do (``"ring"`` only; default: one ring per NIC of a server across
    servers, one per disjoint ring of a single full-mesh server, else 1; ``1`` is the single ring).
    ``options``: knobs as a dict, as ``plan_all_to_all`` and the runtime take them; here the
    keys are the keyword arguments above (``{"chunks": 4}``)."""
    if options:
        if not isinstance(options, dict):
            raise TypeError(f"options must be a dict, got {type(options).__name__}")
        known = {"chunks": chunks, "k": k, "merge": merge, "split_multiplicity": split_multiplicity, "channels": channels,
                 "elem_bytes": elem_bytes}
        bad = sorted(set(options) - set(known))
        if bad:
            raise ValueError(f"unknown collective option {bad[0]!r} (known: {', '.join(known)})")
        return plan_collective(kind, ranks, nbytes, algorithm, topology=topology, **{**known, **options})
    kind = _kind(kind)
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r} (known: {', '.join(ALGORITHMS)})")
    if ranks < 1:
        raise ValueError(f"ranks must be positive, got {ranks}")
    if nbytes < 0:
        raise ValueError(f"nbytes must be non-negative, got {nbytes}")
    if channels is not None and algorithm != "ring":
        raise ValueError(f"channels only applies to algorithm='ring', not {algorithm!r}")
    if algorithm == "forest":
        return _forest_plan(kind, ranks, nbytes, elem_bytes, topology, chunks, k, merge, split_multiplicity)
    if k is not None:
        raise ValueError("k (trees per root) only applies to algorithm='forest'")
    if not merge:
        raise ValueError("merge=False only applies to algorithm='forest'")
    if split_multiplicity:
        raise ValueError("split_multiplicity=True only applies to algorithm='forest'")
    opts = {}
    if chunks:
        opts["chunks"] = str(chunks)
    if channels is not None:
        if isinstance(channels, bool) or not isinstance(channels, int):
            raise TypeError(f"channels must be an int, got {type(channels).__name__}")
        opts["channels"] = str(channels)
    return _core.plan_collective(kind, algorithm, ranks, nbytes, elem_bytes, _cluster(topology), opts or None)


def plan_all_gather(shard_bytes: int, ranks: int, algorithm: str = "forest", **kw):
    return plan_collective("allgather", ranks, shard_bytes, algorithm, **kw)


def plan_reduce_scatter(shard_bytes: int, ranks: int, algorithm: str = "forest", *, elem_bytes: int = 4, **kw):
    return plan_collective("reduce_scatter", ranks, shard_bytes, algorithm, elem_bytes=elem_bytes, **kw)


def plan_all_reduce(nbytes: int, ranks: int, algorithm: str = "forest", *, elem_bytes: int = 4, **kw):
    return plan_collective("allreduce", ranks, nbytes, algorithm, elem_bytes=elem_bytes, **kw)


# ---------------------------------------------------------------------------
# torch.distributed wrappers

_CACHE_SIZE = 64
_cache: OrderedDict = OrderedDict()
_cache_lock = threading.Lock()


def _topology_key(topology):
    if topology is None or isinstance(topology, str):
        return topology
    if isinstance(topology, _core.Cluster):
        return ("cluster", repr(topology))
    return ("object", id(topology))


def _cached_plan(kind, ranks, nbytes, algorithm, elem_bytes, topology, chunks, channels=None):
    key = (kind, ranks, nbytes, algorithm, elem_bytes, _topology_key(topology), chunks, channels)
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    plan = plan_collective(kind, ranks, nbytes, algorithm, elem_bytes=elem_bytes, topology=topology, chunks=chunks,
                           channels=channels)
    with _cache_lock:
        _cache[key] = plan
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return plan


def _check_sum(op) -> None:
    import torch.distributed as dist

    if op is not None and op != dist.ReduceOp.SUM:
        raise ValueError(f"collsched collectives support op=ReduceOp.SUM only, got {op}")


def _check_tensors(name: str, output, input, out_factor: int, in_factor: int) -> None:
    if output.dtype != input.dtype:
        raise ValueError(f"{name}: output dtype {output.dtype} differs from input dtype {input.dtype}")
    if output.device != input.device:
        raise ValueError(f"{name}: output is on {output.device} but input on {input.device}")
    if not (output.is_contiguous() and input.is_contiguous()):
        raise ValueError(f"{name}: tensors must be contiguous")
    if output.numel() * in_factor != input.numel() * out_factor:
        raise ValueError(f"{name}: output has {output.numel()} elements but input {input.numel()}; expected a ratio of {out_factor}:{in_factor}")


def _world(group) -> int:
    import torch.distributed as dist

    return dist.get_world_size(group)


def _execute(plan, input, output, group, timeout):
    from collsched import comm

    kw = {} if timeout is None else {"timeout": timeout}
    return comm.execute(plan, input, output, group, **kw)


def _no_async(async_op: bool) -> None:
    if async_op:
        raise ValueError("async_op=True is not supported: collsched collectives run synchronously")


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op: bool = False, *, algorithm: str = "forest",
                           topology=None, chunks: int | None = None, channels: int | None = None, timeout=None):
    """Like ``torch.distributed.all_gather_into_tensor``: ``output_tensor`` gets
    every rank's ``input_tensor`` concatenated in rank order."""
    _no_async(async_op)
    n = _world(group)
    _check_tensors("all_gather_into_tensor", output_tensor, input_tensor, n, 1)
    shard = input_tensor.numel() * input_tensor.element_size()
    if shard == 0:
        return None
    plan = _cached_plan("allgather", n, shard, algorithm, 1, topology, chunks, channels)
    _execute(plan, input_tensor, output_tensor, group, timeout)
    return None


def reduce_scatter_tensor(output, input, op=None, group=None, async_op: bool = False, *, algorithm: str = "forest",
                          topology=None, chunks: int | None = None, channels: int | None = None, timeout=None):
    """Like ``torch.distributed.reduce_scatter_tensor`` with ``op=SUM``: rank r's
    ``output`` is the element-wise sum over ranks of block r of ``input``."""
    _no_async(async_op)
    _check_sum(op)
    n = _world(group)
    _check_tensors("reduce_scatter_tensor", output, input, 1, n)
    shard = output.numel() * output.element_size()
    if shard == 0:
        return None
    plan = _cached_plan("reduce_scatter", n, shard, algorithm, output.element_size(), topology, chunks, channels)
    _execute(plan, input, output, group, timeout)
    return None


def all_reduce(tensor, op=None, group=None, async_op: bool = False, *, algorithm: str = "forest", topology=None,
               chunks: int | None = None, channels: int | None = None, timeout=None):
    """Like ``torch.distributed.all_reduce`` with ``op=SUM``: ``tensor`` becomes
    the element-wise sum over ranks, in place."""
    _no_async(async_op)
    _check_sum(op)
    n = _world(group)
    if not tensor.is_contiguous():
        raise ValueError("all_reduce: tensor must be contiguous")
    nbytes = tensor.numel() * tensor.element_size()
    if nbytes == 0:
        return None
    plan = _cached_plan("allreduce", n, nbytes, algorithm, tensor.element_size(), topology, chunks, channels)
    source = tensor.clone()  # plans read input and write output: keep the input intact while writing in place
    _execute(plan, source, tensor, group, timeout)
    return None
