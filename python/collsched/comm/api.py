"""`collsched.all_to_all_single`: torch's signature, collsched's plans.

One call:
1. validate locally what can be validated (never raise yet: a rank that raised
   alone would leave the others waiting);
2. one small all_gather of a descriptor per rank: ok/error code, dtype, elements
   per row, a hash of (cluster, algorithm, options), the traffic hash when the
   caller passed `traffic=`, input and output split sizes; on the host (on NCCL a
   Gloo group over the same ranks, `groups.host_group`), so the call never waits for
   the GPU's queue;
3. every rank checks the gathered descriptors the same way and raises the same
   error, or builds the byte matrix and plans (cached; `auto` is cached like any
   algorithm: a new matrix is chosen and its winner expanded in one core call, a
   repeated one is a hit; when `native` wins torch's own call runs);
4. ranks compare the digest of the planning decisions (each rank plans only its own part,
   `collsched.plan_for_rank`; fused into step 2 when `traffic=` was given);
5. the executor moves the data.
"""
from __future__ import annotations

import hashlib
import os
import time
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

import collsched
from collsched.comm.cache import DEFAULT_CACHE, PlanCache, fast_matrix_hash, same_matrix
from collsched.comm.errors import (CollectiveInputError, CommTimeoutError, PlanMismatchError, TrafficMismatchError,
                                   collapse_rank_messages, name_missing_ranks, resolve_timeout)
from collsched.comm.executor import byte_view, choose_transport, needs_collective_steps, run_program
from collsched.comm.groups import exchange_i64, require_initialized
from collsched.comm.pool import DEFAULT_POOL

DEFAULT_PRESET = "h200"
CLUSTER_ENV = "COLLSCHED_CLUSTER"

# dtype <-> small integer for the descriptor (order fixed forever; append only).
_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.uint8, torch.int8, torch.int16,
           torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128]
_DTYPE_CODE = {d: i + 1 for i, d in enumerate(_DTYPES)}
for _name in ("float8_e4m3fn", "float8_e5m2", "uint16", "uint32", "uint64"):
    if hasattr(torch, _name):
        _DTYPES.append(getattr(torch, _name))
        _DTYPE_CODE[getattr(torch, _name)] = len(_DTYPES)


def _dtype_name(code: int) -> str:
    return str(_DTYPES[code - 1]).replace("torch.", "") if 1 <= code <= len(_DTYPES) else f"dtype#{code}"


# Local problem codes: (code, detail1, detail2) travel in the descriptor so every rank can word the error.
_PROBLEMS = {
    1: lambda a, b: "input is not a contiguous tensor",
    2: lambda a, b: "output is not a contiguous tensor",
    3: lambda a, b: f"input dtype {_dtype_name(a)} differs from output dtype {_dtype_name(b)}",
    4: lambda a, b: f"input has {a} elements per row (dim 0) but output has {b}",
    5: lambda a, b: f"input_split_sizes has {a} entries but the group has {b} ranks",
    6: lambda a, b: f"output_split_sizes has {a} entries but the group has {b} ranks",
    7: lambda a, b: f"input_split_sizes[{a}] is negative ({b})",
    8: lambda a, b: f"output_split_sizes[{a}] is negative ({b})",
    9: lambda a, b: f"input_split_sizes sum to {a} but input.size(0) is {b}",
    10: lambda a, b: f"output_split_sizes sum to {a} but output.size(0) is {b} (output too small or too large)",
    11: lambda a, b: f"input.size(0) = {a} cannot be split equally over {b} ranks (pass input_split_sizes)",
    12: lambda a, b: f"output.size(0) = {a} cannot be split equally over {b} ranks (pass output_split_sizes)",
    13: lambda a, b: f"traffic must be a {b}×{b} matrix of rows, got {a} entries or a bad shape",
    14: lambda a, b: f"traffic row of this rank disagrees with input_split_sizes at column {a}",
    15: lambda a, b: f"traffic column of this rank disagrees with output_split_sizes at row {a}",
    16: lambda a, b: "input and output are on different devices",
    17: lambda a, b: (f"the cluster has {a} GPUs but the group has {b} ranks" if a > 0
                      else "the cluster argument is invalid"),
    18: lambda a, b: "planning failed",
    19: lambda a, b: "input or output is not a tensor, or a 0-d tensor",
    20: lambda a, b: "bad argument",
}

_HEADER = 11  # code, d1, d2, dtype, row_elems, elem_size, cfg_hash, traffic_hash, plan_hash, has_traffic, verified
_LAST_VERIFIED = 10

# Per (group, configuration): (key, cache entry) of the last plan whose hash every rank
# confirmed. When every rank reports that same key for the current call, the plan-hash
# exchange is skipped: all ranks already hold a plan they proved equal (steady-state MoE
# steps, repeated shapes, benchmarks interleaving algorithms). Bounded; a rank that evicted
# its slot reports 0 and the whole group simply checks again.
_verified: "OrderedDict[tuple, tuple]" = OrderedDict()
_VERIFIED_SLOTS = 64


def _group_key(group) -> int:
    return 0 if group is None or group is dist.GroupMember.WORLD else id(group)


class _Local(Exception):
    def __init__(self, code: int, d1: int = 0, d2: int = 0, text: str = ""):
        super().__init__(text)
        self.code, self.d1, self.d2, self.text = code, int(d1), int(d2), text


@dataclass
class CallStats:
    """What one `all_to_all_single` call did and how long each phase took (host seconds)."""

    algorithm: str = ""
    planned_by: str = ""
    plan_hash: str = ""
    cache_hit: bool = False
    prefetched: bool = False  # the plan came from a background prefetch (`prefetch_transpose`)
    note: str = ""
    exchange_s: float = 0.0  # descriptor all_gather
    plan_s: float = 0.0  # cache lookup + planning on a miss
    decide_s: float = 0.0  # of plan_s on a miss: the decisions every rank computes alike
    expand_s: float = 0.0  # of plan_s on a miss: expanding this rank's transfers
    compile_s: float = 0.0  # compiling this rank's program (0 when cached)
    check_s: float = 0.0  # plan-hash all_gather (0 when fused)
    execute_s: float = 0.0
    total_s: float = 0.0
    bytes_sent: int = 0
    bytes_received: int = 0
    steps: int = 0
    choice: str = ""  # algorithm="auto": what it chose ("native" = torch's own call), also on a cache hit
    choose_s: float = 0.0  # of decide_s: choosing (0 on a cache hit: a repeated matrix is not chosen again)


class _Last:
    stats: CallStats | None = None


# Process-wide, not per thread: autograd runs the backward of CUDA tensors on a thread of its
# own, and the caller of `.backward()` wants that call's stats.
_last = _Last()


def last_call_stats() -> CallStats | None:
    """Stats of the last `all_to_all_single` call in this process, on any thread (autograd's
    backward included; None before the first)."""
    return _last.stats


class CompletedWork:
    """Handle returned for async_op=True. The work already ran (Gloo: to completion;
    NCCL: enqueued on the current stream), so `wait()` returns at once."""

    def wait(self, timeout=None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True


def _i64(hex_or_bytes) -> int:
    v = int(hex_or_bytes, 16) if isinstance(hex_or_bytes, str) else int.from_bytes(hex_or_bytes, "little")
    return v - (1 << 64) if v >= (1 << 63) else v


def resolve_cluster(cluster, world: int):
    """The cluster to plan for: `cluster=` (Cluster or spec), else ``COLLSCHED_CLUSTER``, else
    ``LOCAL_WORLD_SIZE`` GPUs per server (servers = group size / that) on the h200 preset."""
    if cluster is None:
        spec = os.environ.get(CLUSTER_ENV, "").strip()
        if spec:
            cluster = spec
        else:
            local = int(os.environ.get("LOCAL_WORLD_SIZE", "0") or 0)
            if local <= 0 or local > world:
                local = world
            if world % local:
                raise ValueError(f"group of {world} ranks is not a whole number of servers of LOCAL_WORLD_SIZE={local} "
                                 f"GPUs; pass cluster= or set {CLUSTER_ENV}")
            cluster = f"{DEFAULT_PRESET}:{world // local},gpus={local}"
    if isinstance(cluster, str):
        cluster = collsched.Cluster.parse(cluster)
    if not isinstance(cluster, collsched.Cluster):
        raise TypeError(f"cluster must be a collsched.Cluster or a spec string, got {type(cluster).__name__}")
    if cluster.num_gpus != world:
        raise ValueError(f"cluster {cluster.name} has {cluster.num_gpus} GPUs but the group has {world} ranks")
    return cluster


def _config_hash(cluster, algorithm: str, options: dict, transport: str) -> int:
    text = "|".join([cluster.spec(), algorithm, repr(sorted((str(k), str(v)) for k, v in options.items())),
                     transport, collsched.__version__])
    return _i64(hashlib.blake2b(text.encode(), digest_size=8).digest())


def _splits(sizes, dim0: int, world: int, which: str) -> list[int]:
    code_len, code_neg, code_sum, code_eq = (5, 7, 9, 11) if which == "input" else (6, 8, 10, 12)
    if sizes is None:
        if dim0 % world:
            raise _Local(code_eq, dim0, world)
        return [dim0 // world] * world
    try:
        vals = [int(x) for x in (sizes.tolist() if isinstance(sizes, torch.Tensor) else sizes)]
    except (TypeError, ValueError):
        raise _Local(20, text=f"{which}_split_sizes must be a sequence of integers") from None
    if len(vals) != world:
        raise _Local(code_len, len(vals), world)
    for j, v in enumerate(vals):
        if v < 0:
            raise _Local(code_neg, j, v)
    if sum(vals) != dim0:
        raise _Local(code_sum, sum(vals), dim0)
    return vals


def _traffic_rows(traffic, world: int) -> np.ndarray:
    m = np.asarray(traffic.tolist() if isinstance(traffic, torch.Tensor) else traffic)
    if m.shape != (world, world) or m.dtype.kind not in "iu" or (m.size and m.min() < 0):
        raise _Local(13, m.size, world, text=f"got shape {m.shape} and dtype {m.dtype}")
    return m.astype(np.int64)


def all_to_all_single(output: torch.Tensor, input: torch.Tensor, output_split_sizes=None, input_split_sizes=None,
                      group=None, async_op: bool = False, *, algorithm: str = "auto", cluster=None, traffic=None,
                      options: dict | None = None, timeout: float | None = None, cache: PlanCache | None = None,
                      transport: str = "auto", checks: bool = True, prefetch_transpose: bool = False):
    """Drop-in for ``torch.distributed.all_to_all_single`` (dim-0 splits, any dtype and trailing shape).

    algorithm: any name of ``collsched.all_to_all_algorithms()``; options: its knobs.
    cluster: Cluster or spec string; default from ``COLLSCHED_CLUSTER`` or ``LOCAL_WORLD_SIZE``.
    traffic: optional P×P matrix in *rows along dim 0* (entry [i][j] = rows rank i sends to rank j,
        Megatron's ``num_global_tokens_per_local_expert`` summed per rank); must be equal on every rank
        and agree with the split sizes. Saves nothing in messages but lets the plan-hash check ride
        on the single descriptor all_gather.
    timeout: seconds each wait may take (default ``COLLSCHED_TIMEOUT_S`` or 60).
    transport: how steps move data (see ``collsched.comm.execute``); must match on every rank.
    checks: False skips the descriptor exchange and the plan-hash check (needs `traffic=`, which
        Megatron already all-gathers): one collective round less per call, but a rank with bad
        arguments raises alone and its peers only stop at the timeout.
    prefetch_transpose: also plan the transposed matrix (and compile this rank's program) on a
        background thread while this call moves its data: what an MoE combine after this
        dispatch, or the backward of this call, moves (same dtype and row size). Its call then
        finds the plan in the cache (``last_call_stats().prefetched``). ``collsched.nn`` sets it
        when a backward will follow.
    Raises CollectiveInputError / TrafficMismatchError / PlanMismatchError on every rank together,
    CommTimeoutError / PeerFailureError when a peer is stuck or dead.
    """
    require_initialized()
    timeout_s = resolve_timeout(timeout)
    cache = cache if cache is not None else DEFAULT_CACHE
    options = dict(options or {})
    if not checks:
        return _unchecked(output, input, output_split_sizes, input_split_sizes, group, async_op, algorithm, cluster,
                          traffic, options, timeout_s, cache, transport, prefetch_transpose)
    stats = CallStats(algorithm=algorithm)
    t_start = time.perf_counter()
    rank = dist.get_rank(group)
    world = dist.get_world_size(group)

    # 1. local validation, recorded instead of raised.
    problem: _Local | None = None
    dtype_code = row_elems = elem_size = 0
    in_splits = out_splits = [0] * world
    cfg_hash = traffic_hash = plan_hash = 0
    rows = None
    clus = calibration = None
    run_opts = options  # what the cache plans with (auto: the backend and candidates)
    device = torch.device("cpu")
    try:
        if not isinstance(input, torch.Tensor) or not isinstance(output, torch.Tensor) or input.dim() == 0 \
                or output.dim() == 0:
            raise _Local(19)
        device = input.device
        dtype_code = _DTYPE_CODE.get(input.dtype, 99)
        row_elems = int(np.prod(input.shape[1:], dtype=np.int64)) if input.dim() > 1 else 1
        elem_size = input.element_size()
        if not input.is_contiguous():
            raise _Local(1)
        if not output.is_contiguous():
            raise _Local(2)
        if input.device != output.device:
            raise _Local(16)
        if output.dtype != input.dtype:
            raise _Local(3, dtype_code, _DTYPE_CODE.get(output.dtype, 99))
        out_row = int(np.prod(output.shape[1:], dtype=np.int64)) if output.dim() > 1 else 1
        if out_row != row_elems:
            raise _Local(4, row_elems, out_row)
        in_splits = _splits(input_split_sizes, input.size(0), world, "input")
        out_splits = _splits(output_split_sizes, output.size(0), world, "output")
        try:
            clus = resolve_cluster(cluster, world)
        except (ValueError, TypeError) as e:
            gpus = cluster.num_gpus if isinstance(cluster, collsched.Cluster) else -1
            if isinstance(cluster, str):
                try:
                    gpus = collsched.Cluster.parse(cluster).num_gpus
                except ValueError:
                    pass
            raise _Local(17, gpus, world, text=str(e)) from None
        try:
            run_opts, calibration = _run_options(algorithm, options, group, device)
        except ValueError as e:
            raise _Local(20, text=str(e)) from None
        cfg_hash = _config_hash(clus, algorithm, _auto_config(algorithm, options, calibration), transport)
        if traffic is not None:
            rows = _traffic_rows(traffic, world)
            for j in range(world):
                if rows[rank, j] != in_splits[j]:
                    raise _Local(14, j)
                if rows[j, rank] != out_splits[j]:
                    raise _Local(15, j)
            traffic_hash = _i64(fast_matrix_hash(rows.astype(np.uint64))[:16])
    except _Local as e:
        problem = e

    # With the matrix known up front, plan now so the hash check rides on the one all_gather.
    entry = None
    if problem is None and rows is not None:
        t0 = time.perf_counter()
        try:
            run_matrix = (rows * (row_elems * elem_size)).astype(np.uint64)
            entry, stats.cache_hit = cache.get(run_matrix, clus, algorithm, run_opts, wait_s=timeout_s, rank=rank,
                                               calibration=calibration, copy=False,
                                               moving_pairs=needs_collective_steps(transport))
            _record(stats, entry)
            if entry.plan is not None:
                plan_hash = _i64(entry.plan_hash)
        except ValueError as e:
            problem = _Local(18, text=str(e))
        stats.plan_s = time.perf_counter() - t0

    # 2. one all_gather of every rank's descriptor.
    desc = [problem.code if problem else 0, problem.d1 if problem else 0, problem.d2 if problem else 0,
            dtype_code, row_elems, elem_size, cfg_hash, traffic_hash, plan_hash, int(traffic is not None)]
    gkey = (_group_key(group), cfg_hash)
    last = _verified.get(gkey)
    desc.append(last[0] if last is not None else 0)
    desc += list(in_splits) + list(out_splits)
    t0 = time.perf_counter()
    try:
        gathered = exchange_i64(desc, group, timeout_s,
                                f"collsched.all_to_all_single descriptor exchange on rank {rank}")
    except CommTimeoutError as e:
        raise name_missing_ranks(e, group, timeout_s) from None
    stats.exchange_s = time.perf_counter() - t0

    # 3. identical verdict on every rank.
    _check_descriptors(gathered, world, rank, problem)
    in_rows = gathered[:, _HEADER:_HEADER + world]
    row_bytes = row_elems * elem_size
    matrix = (in_rows.astype(np.uint64) * np.uint64(row_bytes))

    if entry is not None and entry.plan is None:  # auto chose torch's own call (every rank alike)
        return _native(output, input, out_splits, in_splits, row_bytes, group, async_op, stats, t_start)
    mhash = fast_matrix_hash(matrix)
    call_key = _i64(hashlib.blake2b(f"{mhash}|{cfg_hash}".encode(), digest_size=8).digest())
    # The key is a 64-bit hash: the matrix itself is compared too (the same verdict on every
    # rank, which all hold the same gathered matrix and the same verified entry).
    if entry is None and last is not None and last[0] == call_key and (gathered[:, _LAST_VERIFIED] == call_key).all() \
            and same_matrix(last[1].matrix, matrix):
        entry = last[1]  # every rank proved this very plan equal before
        stats.cache_hit = True
        _record(stats, entry)
    elif entry is None:
        t0 = time.perf_counter()
        try:
            entry, stats.cache_hit = cache.get(matrix, clus, algorithm, run_opts, wait_s=timeout_s, rank=rank,
                                               calibration=calibration, matrix_hash=mhash, copy=False,
                                               moving_pairs=needs_collective_steps(transport))
            _record(stats, entry)
            err = ""
        except ValueError as e:
            err = str(e)
        stats.plan_s = time.perf_counter() - t0
        # Every rank holds the same gathered matrix and constants (the configuration hash
        # covers the calibration): auto chose the same on every rank.
        if not err and entry.plan is None:
            return _native(output, input, out_splits, in_splits, row_bytes, group, async_op, stats, t_start)
        # 4. compare plan hashes (a planning failure also travels here so nobody is left waiting).
        t0 = time.perf_counter()
        mine = -1 if err else _i64(entry.plan_hash)
        hashes = exchange_i64([mine], group, timeout_s,
                              f"collsched.all_to_all_single plan-hash check on rank {rank}")[:, 0]
        stats.check_s = time.perf_counter() - t0
        if err or (hashes == -1).any():
            bad = [int(r) for r in np.nonzero(hashes == -1)[0]]
            raise CollectiveInputError(f"collsched.all_to_all_single: planning failed on rank(s) {bad}"
                                       + (f": {err}" if err else ""))
        _check_hashes(hashes, "plan")
    else:
        _check_hashes(gathered[:, 8], "plan")

    _verified[gkey] = (call_key, entry)
    _verified.move_to_end(gkey)
    while len(_verified) > _VERIFIED_SLOTS:
        _verified.popitem(last=False)
    stats.planned_by = entry.algorithm
    stats.plan_hash = entry.plan_hash
    stats.note = entry.note
    stats.prefetched = stats.cache_hit and entry.prefetched
    # 5. move the data (the transposed demand planned beside it, when asked).
    transport = choose_transport(transport, group, input.device)
    if prefetch_transpose:
        _prefetch_transpose(cache, matrix, clus, algorithm, run_opts, rank, transport, calibration)
    prog = _program(entry, rank, transport, stats)
    t0 = time.perf_counter()
    ex = run_program(prog, byte_view(input, "input"), byte_view(output, "output"), group, input.dtype, timeout_s,
                     DEFAULT_POOL, transport)
    stats.execute_s = time.perf_counter() - t0
    stats.steps, stats.bytes_sent, stats.bytes_received = ex.steps, ex.bytes_sent, ex.bytes_received
    stats.total_s = time.perf_counter() - t_start
    _last.stats = stats
    return CompletedWork() if async_op else None


def _check_hashes(values: np.ndarray, what: str) -> None:
    if (values != values[0]).any():
        groups: dict[int, list[int]] = {}
        for r, v in enumerate(values.tolist()):
            groups.setdefault(v, []).append(r)
        parts = "; ".join(f"ranks {rs} have {v & ((1 << 64) - 1):016x}" for v, rs in groups.items())
        raise PlanMismatchError(f"collsched.all_to_all_single: ranks computed different {what}s ({parts}); "
                                "check that every rank passes the same cluster, algorithm, options and collsched version")


def _check_descriptors(g: np.ndarray, world: int, rank: int, problem: _Local | None) -> None:
    errors = []
    for r in range(world):
        code, d1, d2 = (int(x) for x in g[r, :3])
        if code:
            text = _PROBLEMS.get(code, lambda a, b: f"error code {code}")(d1, d2)
            if r == rank and problem is not None and problem.text:
                text += f" ({problem.text})"
            errors.append((r, text))
    if errors:
        raise CollectiveInputError("collsched.all_to_all_single: invalid arguments: " + collapse_rank_messages(errors))
    if (g[:, 3] != g[0, 3]).any():
        raise CollectiveInputError("collsched.all_to_all_single: ranks disagree on dtype: "
                                   + ", ".join(f"rank {r} {_dtype_name(int(c))}" for r, c in enumerate(g[:, 3])))
    if (g[:, 4] != g[0, 4]).any():
        raise CollectiveInputError("collsched.all_to_all_single: ranks disagree on the trailing shape (elements per "
                                   "row): " + ", ".join(f"rank {r} {int(c)}" for r, c in enumerate(g[:, 4])))
    if (g[:, 6] != g[0, 6]).any():
        raise PlanMismatchError("collsched.all_to_all_single: ranks disagree on cluster, algorithm or options "
                                "(their configuration hashes differ)")
    if (g[:, 9] != g[0, 9]).any():
        raise CollectiveInputError("collsched.all_to_all_single: some ranks passed traffic= and others did not: "
                                   f"ranks {[int(r) for r in np.nonzero(g[:, 9])[0]]} did")
    if g[0, 9] and (g[:, 7] != g[0, 7]).any():
        raise TrafficMismatchError("collsched.all_to_all_single: ranks passed different traffic matrices")
    ins = g[:, _HEADER:_HEADER + world]
    outs = g[:, _HEADER + world:_HEADER + 2 * world]
    bad = np.argwhere(outs.T != ins)  # outs[j][i] must equal ins[i][j]
    if len(bad):
        i, j = (int(x) for x in bad[0])
        raise CollectiveInputError(f"collsched.all_to_all_single: rank {i} sends {int(ins[i, j])} rows to rank {j} "
                                   f"but rank {j} expects {int(outs[j, i])} (output_split_sizes disagree with "
                                   f"input_split_sizes; {len(bad)} such pairs)")


def _program(entry, rank: int, transport: str, stats: CallStats):
    """This rank's program from the cache entry, with the planning phases' times in `stats`."""
    if not stats.cache_hit:
        stats.decide_s, stats.expand_s = entry.decide_s, entry.expand_s
    compiled = len(entry.programs)
    prog = entry.program(rank, needs_collective_steps(transport))
    stats.compile_s = entry.compile_s if len(entry.programs) > compiled else 0.0
    return prog


def _prefetch_transpose(cache: PlanCache, matrix: np.ndarray, clus, algorithm: str, options: dict, rank: int,
                        transport: str, calibration=None) -> None:
    """Queue the transposed demand on the cache's background planner (which transposes it, and
    plans nothing for a symmetric matrix; auto chooses for it there too)."""
    cache.prefetch(matrix, clus, algorithm, options, rank, needs_collective_steps(transport), transpose=True,
                   per_rank=True, calibration=calibration)


def _unchecked(output, input, output_split_sizes, input_split_sizes, group, async_op, algorithm, cluster, traffic,
               options, timeout_s, cache, transport, prefetch_transpose=False):
    """checks=False: validate locally (raising here), plan from `traffic`, execute; no exchange."""
    if traffic is None:
        raise ValueError("checks=False needs traffic= (the P×P matrix of rows), since nothing is exchanged")
    stats = CallStats(algorithm=algorithm)
    t_start = time.perf_counter()
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    try:
        if not isinstance(input, torch.Tensor) or not isinstance(output, torch.Tensor) or input.dim() == 0 \
                or output.dim() == 0:
            raise _Local(19)
        if not input.is_contiguous() or not output.is_contiguous():
            raise _Local(1 if not input.is_contiguous() else 2)
        if output.dtype != input.dtype:
            raise _Local(3, _DTYPE_CODE.get(input.dtype, 99), _DTYPE_CODE.get(output.dtype, 99))
        row_elems = int(np.prod(input.shape[1:], dtype=np.int64)) if input.dim() > 1 else 1
        out_row = int(np.prod(output.shape[1:], dtype=np.int64)) if output.dim() > 1 else 1
        if out_row != row_elems:
            raise _Local(4, row_elems, out_row)
        in_splits = _splits(input_split_sizes, input.size(0), world, "input")
        out_splits = _splits(output_split_sizes, output.size(0), world, "output")
        rows = _traffic_rows(traffic, world)
        for j in range(world):
            if rows[rank, j] != in_splits[j]:
                raise _Local(14, j)
            if rows[j, rank] != out_splits[j]:
                raise _Local(15, j)
    except _Local as e:
        raise CollectiveInputError(f"collsched.all_to_all_single (checks=False) on rank {rank}: "
                                   + _PROBLEMS[e.code](e.d1, e.d2) + (f" ({e.text})" if e.text else "")) from None
    clus = resolve_cluster(cluster, world)
    run_opts, calibration = _run_options(algorithm, options, group, input.device)
    t0 = time.perf_counter()
    matrix = (rows * (row_elems * input.element_size())).astype(np.uint64)
    entry, stats.cache_hit = cache.get(matrix, clus, algorithm, run_opts, wait_s=timeout_s, rank=rank,
                                       calibration=calibration, copy=False,
                                       moving_pairs=needs_collective_steps(transport))
    stats.plan_s = time.perf_counter() - t0
    _record(stats, entry)
    if entry.plan is None:
        return _native(output, input, out_splits, in_splits, row_elems * input.element_size(), group, async_op,
                       stats, t_start)
    stats.planned_by, stats.plan_hash, stats.note = entry.algorithm, entry.plan_hash, entry.note
    stats.prefetched = stats.cache_hit and entry.prefetched
    t0 = time.perf_counter()
    transport = choose_transport(transport, group, input.device)
    if prefetch_transpose:
        _prefetch_transpose(cache, matrix, clus, algorithm, run_opts, rank, transport, calibration)
    ex = run_program(_program(entry, rank, transport, stats), byte_view(input, "input"),
                     byte_view(output, "output"), group, input.dtype, timeout_s, DEFAULT_POOL, transport)
    stats.execute_s = time.perf_counter() - t0
    stats.steps, stats.bytes_sent, stats.bytes_received = ex.steps, ex.bytes_sent, ex.bytes_received
    stats.total_s = time.perf_counter() - t_start
    _last.stats = stats
    return CompletedWork() if async_op else None


def _auto_config(algorithm: str, options: dict, calibration) -> dict:
    """What the configuration hash covers: for auto also the calibration's digest, so ranks
    whose constants differ (and could choose differently) fail together instead of hanging."""
    if algorithm != "auto" or calibration is None:
        return options
    return dict(options, _calibration=calibration.digest)


def _backend_name(group, device: torch.device) -> str:
    """The group's backend as `choose` names it (NCCL for CUDA tensors on an NCCL group)."""
    b = str(dist.get_backend(group)).lower()
    if "nccl" in b and device.type == "cuda":
        return "nccl"
    return "gloo" if "gloo" in b else b


def _run_options(algorithm: str, options: dict, group, device) -> tuple[dict, object]:
    """(options, calibration) the cache plans `algorithm` with: for auto its backend (the
    group's) and candidates, and the constants of `collsched.calibration.load()`; for any
    other algorithm its own options and None."""
    if algorithm != "auto":
        return options, None
    unknown = set(options) - {"candidates"}
    if unknown:
        raise ValueError(f"algorithm='auto' in the runtime takes only the option 'candidates', got {sorted(unknown)}")
    from collsched.calibration import load
    from collsched.choose import candidate_list

    opts = {"backend": _backend_name(group, device)}
    if options.get("candidates") is not None:
        opts["candidates"] = candidate_list(options["candidates"])
    return opts, load()


def _record(stats: CallStats, entry) -> None:
    """What auto chose for this call (from the cache entry: on a hit nothing was chosen now)."""
    if entry.choice:
        stats.choice = stats.planned_by = entry.choice
        stats.choose_s = 0.0 if stats.cache_hit else entry.choose_s


def _native(output, input, out_splits, in_splits, row_bytes: int, group, async_op: bool, stats: CallStats,
            t_start: float):
    """auto chose torch's own all-to-all: one call, no plan."""
    t0 = time.perf_counter()
    dist.all_to_all_single(output, input, out_splits, in_splits, group=group)
    stats.execute_s = time.perf_counter() - t0
    stats.steps = 1
    stats.bytes_sent, stats.bytes_received = sum(in_splits) * row_bytes, sum(out_splits) * row_bytes
    stats.total_s = time.perf_counter() - t_start
    _last.stats = stats
    return CompletedWork() if async_op else None
