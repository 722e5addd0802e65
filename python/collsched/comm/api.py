"""`collsched.all_to_all_single`: torch's signature, collsched's plans.

A call is a short pipeline; each stage is one function below and one field of `CallStats`::

    validate ─► [call site mode] ─► exchange ─► check ─► decide/plan ─► post ─► wait
                      │                 │
                      │ NATIVE          │ EAGER and every pair fits:
                      ▼                 ▼ the data rode in the exchange (one round)
                torch's own call     unpack

1. **validate** (`validate_local`, `_configure`): this rank's arguments, checked without
   talking to anyone; a problem is recorded, not raised (a rank that raised alone would leave
   the others waiting).
2. **call site** (`callsite.py`): the mode, a pure function of what the ranks already share.
   NATIVE between checks: torch's call, nothing else.
3. **exchange** (`exchange.py`): every rank's header to every rank in one round; in EAGER mode
   the pairs that fit ride along.
4. **check** (`descriptor.check_gathered`): every rank words the same error from the same
   headers.
5. **decide / plan**: the byte matrix is planned (cached; `auto` chooses, and may choose
   torch's own call); each rank expands only its own part (`collsched.plan_for_rank`).
6. **post / wait** (`executor.run_program`): the plan's messages.

The digest of each rank's plan travels in the call site's next exchange (a mismatch raises
`PlanMismatchError` there): every input of the planning (matrix, cluster, algorithm, options,
version, calibration) is compared before planning, so a plan cannot differ short of a bug.
"""
from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

import collsched
from collsched.calibration import load as load_calibration
from collsched.choose import candidate_list
from collsched.comm import callsite
from collsched.comm.cache import DEFAULT_CACHE, PlanCache
from collsched.comm.descriptor import (CallArgs, LocalProblem, check_gathered, check_traffic, gathered_rows, header,
                                       traffic_rows, validate_local, W_EAGER, W_SEQ)
from collsched.comm.culprits import culprits_named, note_group
from collsched.comm.errors import CollectiveInputError, PlanMismatchError, resolve_timeout
from collsched.comm.exchange import all_pairs_fit, eager_capable, exchange, exchange_room, unpack
from collsched.comm.executor import byte_view, choose_transport, needs_collective_steps, run_program
from collsched.comm.groups import blocking_waits, require_initialized, wait_all
from collsched.comm.inflight import one_call_per_group
from collsched.comm.ops import traced_all_to_all, tracing
from collsched.comm.pool import DEFAULT_POOL
from collsched.comm.stats import CallStats, last_call_stats, record
from collsched.planning import check_algorithm
from collsched.topology import as_cluster

DEFAULT_PRESET = "h200"
CLUSTER_ENV = "COLLSCHED_CLUSTER"


class CompletedWork:
    """Handle returned for async_op=True when collsched ran the call (Gloo: to completion;
    NCCL: enqueued on the current stream), so `wait()` returns at once. A call that torch
    runs alone (NATIVE) returns torch's own work instead."""

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
    ``LOCAL_WORLD_SIZE`` GPUs per server (servers = group size / that) on the h200 preset.
    The spec ``calibrated`` is what ``collsched calibrate --network`` measured (``collsched.network``).

    Raises:
        ValueError: the spec is invalid or its GPU count is not the group's size.
        TypeError: `cluster` is neither a Cluster nor a string.
    """
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
        cluster = as_cluster(cluster)  # `calibrated`: the measured cluster (collsched.network)
    if not isinstance(cluster, collsched.Cluster):
        raise TypeError(f"cluster must be a collsched.Cluster or a spec string, got {type(cluster).__name__}")
    if cluster.num_gpus != world:
        raise ValueError(f"cluster {cluster.name} has {cluster.num_gpus} GPUs but the group has {world} ranks")
    return cluster


@dataclass
class _Config:
    """A call's configuration, resolved once per distinct arguments (`_configure`)."""

    cluster: object = None
    run_opts: dict | None = None  # what the cache plans with (auto: backend and candidates)
    calibration: object = None
    cfg_hash: int = 0
    transport: str = "p2p"
    capacity: int = 0  # eager bytes per pair (0: header-only exchanges; NCCL, or eager_bytes=0)
    room: int = 0  # receive room per peer in the exchange (`exchange_room`: the group's, not the call's)
    blocking: bool = True  # waits block the host (not NCCL on a GPU)
    problem: LocalProblem | None = None


_CONFIGS: dict = {}
_MAX_CONFIGS = 256


def _configure(algorithm: str, options: dict, cluster, transport: str, group, device: torch.device,
               world: int, eager_bytes) -> _Config:
    """Resolve cluster, auto's options and calibration, transport and the configuration hash;
    cached, since a training loop passes the same arguments every call."""
    calibration = None
    if algorithm == "auto":
        try:
            calibration = _calibration()
        except ValueError as e:
            return _Config(problem=LocalProblem(20, text=str(e)), room=exchange_room(group, world))
    env = (os.environ.get(CLUSTER_ENV, ""), os.environ.get("LOCAL_WORLD_SIZE", "")) if cluster is None else ()
    ckey = cluster if isinstance(cluster, (str, type(None))) else id(cluster)
    key = (ckey, env, world, algorithm, repr(sorted((str(k), repr(v)) for k, v in options.items())), transport,
           id(group) if group is not None else 0, device.type, id(calibration), eager_bytes)
    hit = _CONFIGS.get(key)
    if hit is not None and (hit[0] is cluster or isinstance(cluster, (str, type(None)))):
        return hit[1]
    cfg = _Config(room=exchange_room(group, world))
    try:
        try:
            cfg.cluster = resolve_cluster(cluster, world)
        except (ValueError, TypeError) as e:
            gpus = cluster.num_gpus if isinstance(cluster, collsched.Cluster) else -1
            if isinstance(cluster, str):
                try:
                    gpus = as_cluster(cluster).num_gpus
                except ValueError:
                    pass
            raise LocalProblem(17, gpus, world, text=str(e)) from None
        try:
            check_algorithm(algorithm)  # here, not at planning: eager and native calls plan nothing
        except ValueError as e:
            raise LocalProblem(21, text=str(e)) from None
        try:
            cfg.run_opts = _run_options(algorithm, options, group, device)
            cfg.transport = choose_transport(transport, group, device)
            cfg.capacity = _eager_capacity(eager_bytes, world) if eager_capable(group, device) else 0
        except ValueError as e:
            raise LocalProblem(20, text=str(e)) from None
    except LocalProblem as p:
        cfg.problem = p
        return cfg  # not cached: nothing to save, and the error must show every time
    cfg.calibration = calibration
    hashed = options if calibration is None else dict(options, _calibration=calibration.digest)
    text = "|".join([cfg.cluster.spec(), algorithm, repr(sorted((str(k), str(v)) for k, v in hashed.items())),
                     transport, str(cfg.capacity), collsched.__version__])
    cfg.cfg_hash = _i64(hashlib.blake2b(text.encode(), digest_size=8).digest())
    cfg.blocking = blocking_waits(group, device)
    if len(_CONFIGS) >= _MAX_CONFIGS:
        _CONFIGS.clear()
    _CONFIGS[key] = (cluster, cfg)
    return cfg


_CALIBRATION_RECHECK_S = 1.0
_calibration_memo: list = [float("-inf"), None]  # (when loaded, calibration)


def _calibration():
    """`collsched.calibration.load()`, looked at again at most once a second (a stat of the
    file and the environment per call was a tenth of a small call's host time)."""
    now = time.monotonic()
    if now - _calibration_memo[0] > _CALIBRATION_RECHECK_S or _calibration_memo[1] is None:
        _calibration_memo[1] = load_calibration()
        _calibration_memo[0] = now
    return _calibration_memo[1]


def _eager_capacity(eager_bytes, world: int) -> int:
    """Bytes per pair that ride in the exchange: `eager_bytes` (rounded down to 8, at most
    `callsite.eager_room`), or the default `callsite.eager_capacity`."""
    if eager_bytes is None:
        return callsite.eager_capacity(world)
    if isinstance(eager_bytes, bool) or not isinstance(eager_bytes, (int, np.integer)) or eager_bytes < 0:
        raise ValueError(f"eager_bytes must be a non-negative int (bytes per pair; 0 turns eager pairs off), "
                         f"got {eager_bytes!r}")
    return min(int(eager_bytes) // 8 * 8, callsite.eager_room(world))


def _backend_name(group, device: torch.device) -> str:
    """The group's backend as `choose` names it (NCCL for CUDA tensors on an NCCL group)."""
    b = str(dist.get_backend(group)).lower()
    if "nccl" in b and device.type == "cuda":
        return "nccl"
    return "gloo" if "gloo" in b else b


def _run_options(algorithm: str, options: dict, group, device) -> dict:
    """The options the cache plans `algorithm` with: for auto its backend (the group's) and
    candidates; any other algorithm its own options."""
    if algorithm != "auto":
        return options
    unknown = set(options) - {"candidates"}
    if unknown:
        raise ValueError(f"algorithm='auto' in the runtime takes only the option 'candidates', got {sorted(unknown)}")
    opts = {"backend": _backend_name(group, device)}
    if options.get("candidates") is not None:
        opts["candidates"] = candidate_list(options["candidates"])
    return opts


def _group_key(group) -> int:
    return 0 if group is None or group is dist.GroupMember.WORLD else id(group)


def _checks_always(checks) -> bool:
    """Whether `checks` asks for an exchange on every call ("always").

    Raises:
        ValueError: `checks` is not True, False or "always".
    """
    if checks is True or checks is False or isinstance(checks, np.bool_):
        return False
    if checks == "always":
        return True
    raise ValueError(f"checks must be True, False or 'always', got {checks!r}")


@one_call_per_group(4)
def all_to_all_single(output: torch.Tensor, input: torch.Tensor, output_split_sizes=None, input_split_sizes=None,
                      group=None, async_op: bool = False, *, algorithm: str = "auto", cluster=None, traffic=None,
                      options: dict | None = None, timeout: float | None = None, cache: PlanCache | None = None,
                      transport: str = "auto", checks: bool | str = True, prefetch_transpose: bool = False,
                      eager_bytes: int | None = None):
    """Drop-in for ``torch.distributed.all_to_all_single`` (dim-0 splits, any dtype and trailing shape).

    Args:
        output: `[sum(output_split_sizes), *row]`, contiguous, input's dtype and device.
        input: `[sum(input_split_sizes), *row]`, contiguous.
        output_split_sizes: rows received from each rank, `[P]` ints (None: equal split).
        input_split_sizes: rows sent to each rank, `[P]` ints (None: equal split).
        group: the process group (None: the default group).
        async_op: return a work handle (torch's own, when torch runs the call alone).
        algorithm: any name of ``collsched.all_to_all_algorithms()``, or "auto".
        cluster: Cluster or spec string; default from ``COLLSCHED_CLUSTER`` or ``LOCAL_WORLD_SIZE``.
        traffic: optional `[P, P]` integer matrix in *rows along dim 0* (entry [i][j] = rows rank
            i sends to rank j, Megatron's ``num_global_tokens_per_local_expert`` summed per
            rank), equal on every rank and agreeing with the split sizes; needed by
            ``checks=False``.
        options: the algorithm's knobs (auto: ``candidates``).
        timeout: seconds each wait may take (default ``COLLSCHED_TIMEOUT_S`` or 60).
        cache: the plan cache (default ``DEFAULT_CACHE``).
        transport: how a plan's steps move data (see ``collsched.comm.execute``); the same on
            every rank.
        checks: True: every call that exchanges descriptors checks every rank's arguments
            and call count; a call site that runs torch's own call checks every 16th call,
            covering the calls since. "always": every call exchanges and checks first (torch's
            call then costs one more round). False skips the exchange entirely (needs
            `traffic=`, which Megatron already all-gathers): a rank with bad arguments raises
            alone, its peers stop at the timeout.
        prefetch_transpose: also plan the transposed matrix on a background thread while this
            call moves its data (what an MoE combine after this dispatch, or the backward of
            this call, moves); its call then finds the plan cached.

    Returns:
        None, or a work handle when `async_op`.

    Raises:
        CollectiveInputError / TrafficMismatchError / PlanMismatchError: on every rank alike,
            from the exchanged headers (PlanMismatchError also when ranks are at different
            calls of the call site).
        ConcurrentCallError: another thread of this process is inside a call on `group`.
        CommTimeoutError / PeerFailureError: a peer is stuck, dead, or raised alone (a call
            torch runs without an exchange, or ``checks=False``).
    """
    if tracing(input, output):
        # torch.compile / make_fx: one graph node, the operator (comm/ops.py), which calls
        # this function eagerly when the graph runs. Not differentiable, as in eager.
        output.copy_(traced_all_to_all(input.detach(), output_split_sizes, input_split_sizes, group,
                                       algorithm=algorithm, cluster=cluster, traffic=traffic, options=options,
                                       timeout=timeout, cache=cache, transport=transport, checks=checks,
                                       prefetch_transpose=prefetch_transpose, eager_bytes=eager_bytes))
        return CompletedWork() if async_op else None
    require_initialized()
    t_start = time.perf_counter()
    note_group(group)
    timeout_s = resolve_timeout(timeout)
    cache = cache if cache is not None else DEFAULT_CACHE
    options = dict(options or {})
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    stats = CallStats(algorithm=algorithm)
    always = _checks_always(checks)

    args = validate_local(output, input, output_split_sizes, input_split_sizes, world)
    device = input.device if isinstance(input, torch.Tensor) else torch.device("cpu")
    cfg = _configure(algorithm, options, cluster, transport, group, device, world, eager_bytes)
    rows, traffic_hash = None, 0
    if args.problem is None:
        args.problem = cfg.problem
    if traffic is not None and args.problem is None:
        try:
            rows = traffic_rows(traffic, world)
            check_traffic(rows, args, rank)
            traffic_hash = _i64(hashlib.blake2b(rows.tobytes(), digest_size=8).digest())
        except LocalProblem as p:
            args.problem = p
    stats.validate_s = time.perf_counter() - t_start
    if not checks:
        return _unchecked(output, input, args, rows, cfg, group, async_op, algorithm, timeout_s, cache,
                          prefetch_transpose, stats, t_start, rank)

    site = callsite.SITES.get((_group_key(group), cfg.cfg_hash))
    calls = callsite.GROUPS.get(dist.GroupMember.WORLD if group is None else group)
    seq = calls.begin()
    if site.skips_exchange() and cfg.problem is None and not always:
        # A call that raises here (bad arguments on this rank) counts, but not as a call that
        # reached the wire: its peers' next check sees this rank ahead.
        if args.problem is None:
            site.ran_unchecked()
            calls.ran_native(seq, rank, args.in_splits, args.out_splits)
        return _native(output, input, args, group, async_op, timeout_s, cfg, stats, t_start, rank, "native")

    # 3. exchange (with the small pairs, in EAGER mode), 4. the same verdict on every rank.
    capacity = cfg.capacity
    hdr = header(args, world, cfg.cfg_hash, traffic_hash, site.last_digest, traffic is not None, site.mode, seq,
                 (calls.sent_fp, calls.recv_fp))
    in_b = byte_view(input, "input") if args.problem is None and capacity else None
    t0 = time.perf_counter()
    what = f"collsched.all_to_all_single descriptor exchange on rank {rank}"
    with culprits_named(group, timeout_s):
        ex = exchange(hdr, args, in_b, group, rank, timeout_s, what, DEFAULT_POOL, cfg.room, capacity,
                      site.mode == callsite.EAGER)
    stats.exchange_s = time.perf_counter() - t0
    stats.exchanged, stats.ops = True, 1
    last_check = calls.last_check
    calls.exchanged(ex.gathered[:, W_SEQ])
    check_gathered(ex.gathered, world, rank, args.problem, last_check)
    rows_g = gathered_rows(ex.gathered, world)
    row_bytes = args.row_bytes
    fits = all_pairs_fit(rows_g, row_bytes, capacity)

    if site.mode == callsite.EAGER and fits:
        _finish_eager(output, ex, args, stats, rank)
        site.checked(callsite.EAGER)
        return _done(stats, t_start, async_op)
    if ex.recv is not None:
        DEFAULT_POOL.release(ex.recv)

    # 5. decide and plan (every rank holds the same matrix and configuration).
    matrix = rows_g.astype(np.uint64) * np.uint64(row_bytes)
    entry = _plan(matrix, cfg, algorithm, cache, timeout_s, rank, stats)
    site.checked(callsite.next_mode(fits, capacity > 0, entry.plan is None))
    if entry.plan is None:
        return _native(output, input, args, group, async_op, timeout_s, cfg, stats, t_start, rank, "native")
    site.last_digest = _i64(entry.plan_hash)
    # 6. post and wait.
    if prefetch_transpose:
        _prefetch_transpose(cache, matrix, cfg, algorithm, rank)
    stats.mode = callsite.MODES[callsite.PLANNED]
    _execute(entry, input, output, group, timeout_s, cfg, stats, rank)
    return _done(stats, t_start, async_op)


def _finish_eager(output, ex, args: CallArgs, stats: CallStats, rank: int) -> None:
    """Every pair rode in the exchange: copy each peer's payload into place."""
    t0 = time.perf_counter()
    rb = args.row_bytes
    got = ex.gathered[:, W_EAGER]
    want = np.asarray(args.out_splits, dtype=np.int64) * rb
    if (got != want).any():  # cannot happen when every rank follows the same rule; never copy garbage
        i = int(np.nonzero(got != want)[0][0])
        raise PlanMismatchError(f"collsched.all_to_all_single: rank {i} sent {int(got[i])} eager bytes where "
                                f"{int(want[i])} were due (ranks disagree on the eager rule: mixed versions?)")
    unpack(ex, byte_view(output, "output"), args.out_splits, rb, rank)
    DEFAULT_POOL.release(ex.recv)
    stats.wait_s = time.perf_counter() - t0
    stats.execute_s = stats.wait_s
    stats.mode = stats.planned_by = callsite.MODES[callsite.EAGER]
    stats.steps = 1
    stats.bytes_sent = sum(args.in_splits) * rb
    stats.bytes_received = sum(args.out_splits) * rb


def _plan(matrix: np.ndarray, cfg: _Config, algorithm: str, cache: PlanCache, timeout_s: float, rank: int,
          stats: CallStats):
    """The cache entry for this matrix (planning only this rank's part on a miss).

    Raises:
        CollectiveInputError: planning failed (on every rank alike: the same inputs).
    """
    t0 = time.perf_counter()
    try:
        entry, stats.cache_hit = cache.get(matrix, cfg.cluster, algorithm, cfg.run_opts, wait_s=timeout_s, rank=rank,
                                           calibration=cfg.calibration, copy=False,
                                           moving_pairs=needs_collective_steps(cfg.transport))
    except ValueError as e:
        raise CollectiveInputError(f"collsched.all_to_all_single: planning failed: {e}") from None
    stats.plan_s = time.perf_counter() - t0
    if not stats.cache_hit:
        stats.decide_s, stats.expand_s = entry.decide_s, entry.expand_s
    if entry.choice:
        stats.choice = stats.planned_by = entry.choice
        stats.choose_s = 0.0 if stats.cache_hit else entry.choose_s
    return entry


def _execute(entry, input, output, group, timeout_s: float, cfg: _Config, stats: CallStats, rank: int) -> None:
    """Compile (cached) and run this rank's program."""
    stats.planned_by = entry.algorithm
    stats.plan_hash, stats.note = entry.plan_hash, entry.note
    stats.prefetched = stats.cache_hit and entry.prefetched
    compiled = len(entry.programs)
    prog = entry.program(rank, needs_collective_steps(cfg.transport))
    stats.compile_s = entry.compile_s if len(entry.programs) > compiled else 0.0
    t0 = time.perf_counter()
    with culprits_named(group, timeout_s):
        ex = run_program(prog, byte_view(input, "input"), byte_view(output, "output"), group, input.dtype, timeout_s,
                         DEFAULT_POOL, cfg.transport)
    stats.execute_s = time.perf_counter() - t0
    stats.ops += ex.ops
    stats.steps, stats.bytes_sent, stats.bytes_received = ex.steps, ex.bytes_sent, ex.bytes_received


def _native(output, input, args: CallArgs, group, async_op: bool, timeout_s: float, cfg: _Config, stats: CallStats,
            t_start: float, rank: int, mode: str):
    """torch's own all-to-all: auto chose it, here (after a check) or for this call site.

    Raises:
        CollectiveInputError: this rank's own arguments are bad (only when nothing was
            exchanged: its peers then stop at the timeout).
        CommTimeoutError: the call did not complete within the timeout.
    """
    if args.problem is not None:
        raise CollectiveInputError(f"collsched.all_to_all_single on rank {rank}: {args.problem.message()} (this call "
                                   "ran torch's all-to-all without an exchange: the other ranks will time out)")
    stats.mode, stats.planned_by = mode, "native"
    if not stats.choice and stats.algorithm == "auto":
        stats.choice = "native"
    t0 = time.perf_counter()
    started = time.monotonic()
    work = dist.all_to_all_single(output, input, args.out_splits, args.in_splits, group=group, async_op=True)
    stats.post_s = time.perf_counter() - t0
    stats.ops += 1
    stats.steps = 1
    rb = args.row_bytes
    stats.bytes_sent, stats.bytes_received = sum(args.in_splits) * rb, sum(args.out_splits) * rb
    if async_op:
        stats.execute_s = stats.post_s
        stats.total_s = time.perf_counter() - t_start
        record(stats)
        return work
    t0 = time.perf_counter()
    with culprits_named(group, timeout_s, started):
        wait_all([work], timeout_s, cfg.blocking, f"collsched.all_to_all_single (torch's all-to-all) on rank {rank}")
    stats.wait_s = time.perf_counter() - t0
    stats.execute_s = stats.post_s + stats.wait_s
    return _done(stats, t_start, False)


def _done(stats: CallStats, t_start: float, async_op: bool):
    stats.total_s = time.perf_counter() - t_start
    record(stats)
    return CompletedWork() if async_op else None


def _prefetch_transpose(cache: PlanCache, matrix: np.ndarray, cfg: _Config, algorithm: str, rank: int) -> None:
    """Queue the transposed demand on the cache's background planner (which transposes it, and
    plans nothing for a symmetric matrix; auto chooses for it there too)."""
    cache.prefetch(matrix, cfg.cluster, algorithm, cfg.run_opts, rank, needs_collective_steps(cfg.transport),
                   transpose=True, per_rank=True, calibration=cfg.calibration)


def _unchecked(output, input, args: CallArgs, rows, cfg: _Config, group, async_op: bool, algorithm: str,
               timeout_s: float, cache: PlanCache, prefetch_transpose: bool, stats: CallStats, t_start: float,
               rank: int):
    """checks=False: local problems raise here at once; plan from `traffic`, execute; no exchange."""
    if rows is None and args.problem is None:
        raise ValueError("checks=False needs traffic= (the P×P matrix of rows), since nothing is exchanged")
    if args.problem is not None:
        raise CollectiveInputError(f"collsched.all_to_all_single (checks=False) on rank {rank}: "
                                   + args.problem.message()) from None
    stats.mode = "unchecked"
    matrix = (rows * args.row_bytes).astype(np.uint64)
    entry = _plan(matrix, cfg, algorithm, cache, timeout_s, rank, stats)
    if entry.plan is None:
        return _native(output, input, args, group, async_op, timeout_s, cfg, stats, t_start, rank, "unchecked")
    if prefetch_transpose:
        _prefetch_transpose(cache, matrix, cfg, algorithm, rank)
    _execute(entry, input, output, group, timeout_s, cfg, stats, rank)
    return _done(stats, t_start, async_op)


__all__ = ["all_to_all_single", "last_call_stats", "CallStats", "CompletedWork", "resolve_cluster", "DEFAULT_PRESET"]
