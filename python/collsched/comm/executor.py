"""Run any Plan on a torch.distributed process group, for this rank.

Two orders, by what the backend can do:

- **Gloo, point-to-point (the default there): dependency-driven.** A transfer starts when
  the transfers of this rank it depends on have completed (`program.rank_deps`), not at a
  step barrier: see `overlap.py`. Each direction of a rank pair travels on a process group
  of its own (`duplex.py`), because Gloo moves the two directions of one group's pair one
  after the other.
- **Steps** (NCCL point-to-point; the alltoallv and hybrid transports): per step, gather each
  outgoing message (one copy; none for a single segment), post the step's sends and
  receives in transfer-id order on both sides (NCCL matches point-to-point operations by
  order, Gloo by tag: a per-pair sequence number both sides compute), wait with a timeout, scatter each
  received message into its segments (copy, or add in the tensor's dtype), run the step's
  local copies. NCCL needs steps: its operations on one communicator run in issue order
  and only a group (one batch) runs concurrently, so a batch must hold no dependent pair,
  which a step guarantees; its waits only order the current stream, so no step blocks the
  host. all_to_all_single is a collective every rank joins, so those transports need steps too.

The verifier guarantees that conflicting accesses are ordered by deps and by steps, so both
orders are safe.
"""
from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass

import torch
import torch.distributed as dist

from collsched.comm.culprits import culprits_named, note_group
from collsched.comm.duplex import router
from collsched.comm.errors import classify_transport_error, resolve_timeout
from collsched.comm.groups import blocking_waits, require_initialized, wait_all
from collsched.comm.overlap import run_overlapped
from collsched.comm.pool import DEFAULT_POOL, BufferPool
from collsched.comm.program import BUFFER_NAMES, OP_COPY, OP_REDUCE_SUM, RankProgram, compile_rank_program

_TAG_SPACE = 2**31 - 1


@dataclass
class ExecStats:
    steps: int  # steps in which this rank sent, received or copied
    bytes_sent: int
    bytes_received: int
    seconds: float  # host time; on NCCL this is enqueue time unless the caller synchronises
    ops: int = 0  # backend operations posted (messages; one per all-to-all step)


def byte_view(t: torch.Tensor, name: str) -> torch.Tensor:
    """The tensor's bytes as a flat uint8 view (no copy)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous (call .contiguous() first)")
    flat = t.reshape(-1)
    if flat.dtype == torch.uint8:
        return flat
    if flat.numel() == 0:
        return torch.empty(0, dtype=torch.uint8, device=t.device)
    return flat.view(torch.uint8)


class _ProgramCache:
    """Compiled rank programs of recently executed plans (keyed by plan identity; holds the plan)."""

    def __init__(self, capacity: int = 32):
        self.capacity = capacity
        self._d: OrderedDict = OrderedDict()

    def get(self, plan, rank: int, collective_steps: bool = True) -> RankProgram:
        for full in (True, False) if not collective_steps else (True,):
            key = (id(plan), rank, full)
            hit = self._d.get(key)
            if hit is not None and hit[0] is plan:
                self._d.move_to_end(key)
                return hit[1]
        key = (id(plan), rank, collective_steps)
        prog = compile_rank_program(plan, rank, collective_steps=collective_steps)
        self._d[key] = (plan, prog)
        while len(self._d) > self.capacity:
            self._d.popitem(last=False)
        return prog


_PROGRAMS = _ProgramCache()


TRANSPORTS = ("auto", "p2p", "alltoallv", "hybrid")


def choose_transport(transport: str, group, device: torch.device) -> str:
    """"auto" is "p2p" on every backend: on NCCL a batch_isend_irecv per step; on Gloo
    dependency-driven and full duplex, which on the shaped testbed ran FAST and auto faster
    than the former default "hybrid" (dense steps as one all_to_all_single, which is half
    duplex) and fanout on a par (docs/runtime-internals.md). Every rank must choose the same."""
    if transport not in TRANSPORTS:
        raise ValueError(f"transport must be one of {TRANSPORTS}, got {transport!r}")
    return "p2p" if transport == "auto" else transport


def execute(plan, input: torch.Tensor, output: torch.Tensor, group=None, *, dtype: torch.dtype | None = None,
            timeout: float | None = None, program: RankProgram | None = None,
            pool: BufferPool | None = None, transport: str = "auto", overlap: bool = True,
            duplex: bool = True) -> ExecStats:
    """Execute `plan` for this rank of `group`: read `input`, write `output`.

    Args:
        plan: a verified Plan for ``group.size()`` ranks.
        input: contiguous tensor, any shape and dtype; its bytes are what the plan's Input
            offsets index (at least the plan's input size of this rank).
        output: contiguous tensor on input's device; at least the plan's output size in bytes.
        group: the process group (default: the default group).
        dtype: the element type ReduceSum adds in (default: input's dtype).
        timeout: seconds the run's waits may take together (default ``COLLSCHED_TIMEOUT_S``
            or 60).
        program: this rank's compiled program (default: compiled and cached here).
        pool: where scratch and staging come from (default ``DEFAULT_POOL``).
        transport: "p2p" (point-to-point messages; dependency-driven on Gloo, a
            batch_isend_irecv per step on NCCL), "alltoallv" (one all_to_all_single per step:
            every rank joins every step that moves data), "hybrid" (alltoallv for dense steps,
            p2p step batches for sparse ones) or "auto" ("p2p").
        overlap: Gloo p2p only; False runs step by step (a barrier-like wait per step).
        duplex: Gloo only; False sends both directions of a rank pair on `group` itself.

    Every rank of the group must call this with the same plan, transport, overlap and duplex.

    Returns:
        ExecStats of this rank.

    Raises:
        ValueError: sizes, devices or ranks disagree with the plan.
        CommTimeoutError: the run's waits ran past `timeout` (names the transfer or step, and
            the ranks that never reached it: ``comm.culprits``).
        PeerFailureError: the transport reported a broken connection (names the rank whose
            connection closed).
    """
    require_initialized()
    timeout_s = resolve_timeout(timeout)
    rank = dist.get_rank(group)
    world = dist.get_world_size(group)
    if plan.num_ranks != world:
        raise ValueError(f"plan is for {plan.num_ranks} ranks but the process group has {world}")
    in_b = byte_view(input, "input")
    out_b = byte_view(output, "output")
    transport = choose_transport(transport, group, in_b.device)
    prog = program if program is not None else _PROGRAMS.get(plan, rank, needs_collective_steps(transport))
    if in_b.numel() < prog.input_bytes:
        raise ValueError(f"input has {in_b.numel()} bytes but the plan reads {prog.input_bytes} on rank {rank}")
    if out_b.numel() < prog.output_bytes:
        raise ValueError(f"output too small: {out_b.numel()} bytes but the plan writes {prog.output_bytes} on rank {rank}")
    if in_b.device != out_b.device:
        raise ValueError(f"input is on {in_b.device} but output on {out_b.device}")
    red_dtype = dtype if dtype is not None else input.dtype
    note_group(group)
    with culprits_named(group, timeout_s):
        return run_program(prog, in_b, out_b, group, red_dtype, timeout_s, pool or DEFAULT_POOL, transport,
                           overlap=overlap, duplex=duplex)


def needs_collective_steps(transport: str) -> bool:
    """Whether `transport` runs steps every rank joins (see `compile_rank_program`); "auto" is
    "p2p" (`choose_transport`)."""
    return transport not in ("p2p", "auto")


def run_program(prog: RankProgram, in_b: torch.Tensor, out_b: torch.Tensor, group, dtype: torch.dtype,
                timeout_s: float, pool: BufferPool, transport: str = "p2p", *, overlap: bool = True,
                duplex: bool = True) -> ExecStats:
    """Run a compiled program for this rank (what `execute` does after its checks).

    `overlap` and `duplex` apply to point-to-point messages on Gloo: dependency-driven
    (no step barrier) and one process group per direction. False gives the step-by-step,
    single-group execution (the benchmark's baselines). NCCL always runs step batches on
    the group itself (see the module docstring).
    """
    if needs_collective_steps(transport) and not prog.collective_steps:
        raise ValueError(f"the {transport} transport needs a program compiled with collective_steps=True "
                         f"(this one has only the steps rank {prog.rank} acts in)")
    t0 = time.perf_counter()
    # One deadline for the whole run (not per step): a survivor raises within the timeout even
    # when some of its waits completed before a peer stopped.
    deadline = time.monotonic() + timeout_s
    device = in_b.device
    blocking = blocking_waits(group, device)
    route = router(group, timeout_s, duplex=duplex and blocking and transport != "alltoallv")
    dep_driven = blocking and overlap and transport == "p2p"
    ov = prog.overlap if dep_driven else None
    # The all_to_all layouts are computed only for the transports that use them.
    stage_bytes = {"p2p": lambda: ov.staging_bytes if dep_driven else prog.staging_bytes,
                   "alltoallv": lambda: prog.a2a_staging_bytes,
                   "hybrid": lambda: max(prog.dense_a2a_staging_bytes, prog.staging_bytes)}[transport]()
    scratch = pool.acquire(prog.scratch_bytes, device) if prog.scratch_bytes else None
    staging = pool.acquire(stage_bytes, device) if stage_bytes else None
    empty = in_b[:0]
    bufs = (in_b, out_b, scratch if scratch is not None else empty)
    ok = False
    ops = 0
    try:
        if dep_driven:
            ops = sum(len(sp.p2p_order) for sp in prog.steps)
            run_overlapped(ov, bufs, staging, route, dtype, timeout_s, _apply)
        else:
            for sp in prog.steps:
                if transport == "alltoallv" or (transport == "hybrid" and sp.dense):
                    skip = -1
                    if sp.a2a is not None:
                        ops += 1
                        _a2a_step(prog, sp, bufs, staging, group, dtype, _left(deadline, timeout_s), blocking)
                        skip = sp.a2a.self_local
                    _locals(sp, bufs, dtype, skip)
                    continue
                if sp.p2p_order:
                    ops += len(sp.p2p_order)
                    _p2p_step(prog, sp, bufs, staging, route, _left(deadline, timeout_s), blocking)
                for m in sp.recvs:
                    if m.stage_off < 0:
                        continue
                    base = m.stage_off
                    _apply(m.op, [bufs[b][off:off + ln] for b, off, ln, _ in m.segs],
                           [staging[base + mo:base + mo + ln] for _, _, ln, mo in m.segs], dtype)
                _locals(sp, bufs, dtype)
        ok = True
    finally:
        # After a failure a posted receive may still land: its buffers are not reused.
        if ok and staging is not None:
            pool.release(staging)
        if ok and scratch is not None:
            pool.release(scratch)
    return ExecStats(steps=prog.active_steps, bytes_sent=prog.bytes_sent, bytes_received=prog.bytes_received,
                     seconds=time.perf_counter() - t0, ops=ops)


def _left(deadline: float, timeout_s: float) -> float:
    """Seconds left until `deadline` (at least a millisecond, so the wait reports the timeout)."""
    return min(timeout_s, max(deadline - time.monotonic(), 1e-3))


def _locals(sp, bufs, dtype, skip: int = -1) -> None:
    for i, (op, segs) in enumerate(sp.local):
        if i != skip:
            _apply(op, [bufs[s[2]][s[3]:s[3] + s[4]] for s in segs], [bufs[s[0]][s[1]:s[1] + s[4]] for s in segs],
                   dtype)


def _p2p_step(prog, sp, bufs, staging, route, timeout_s: float, blocking: bool) -> None:
    """One step's messages, posted in transfer-id order on both sides (NCCL matches point-to-point
    operations by order, Gloo by tag: a per-pair sequence number), then waited for. On NCCL one
    batch_isend_irecv on the group (the wait orders the stream, the host goes on); on Gloo each
    message on its direction's group."""
    ops = []
    for is_send, m in sp.p2p_order:
        if m.stage_off < 0:
            b, off, ln, _ = m.segs[0]
            msg = bufs[b][off:off + ln]
        else:
            msg = staging[m.stage_off:m.stage_off + m.nbytes]
            if is_send:
                torch.cat([bufs[b][off:off + ln] for b, off, ln, _ in m.segs], out=msg)
        ops.append((is_send, msg, m))
    try:
        if not blocking:
            works = dist.batch_isend_irecv([dist.P2POp(dist.isend if s else dist.irecv, msg, route.peers[m.peer],
                                                       route.group, m.tag % _TAG_SPACE) for s, msg, m in ops])
        else:
            works = [dist.isend(msg, route.peers[m.peer], group=route.send_group(m.peer), tag=m.tag % _TAG_SPACE)
                     if s else
                     dist.irecv(msg, route.peers[m.peer], group=route.recv_group(m.peer), tag=m.tag % _TAG_SPACE)
                     for s, msg, m in ops]
    except RuntimeError as e:
        raise classify_transport_error(e, _step_what(prog, sp)) from e
    wait_all(works, timeout_s, blocking, _step_what(prog, sp) if blocking else "")


def _step_what(prog, sp) -> str:
    peers = sorted({m.peer for _, m in sp.p2p_order})
    return f"collsched step {sp.step} on rank {prog.rank} (peers {peers})"


def _a2a_step(prog, sp, bufs, staging, group, dtype, timeout_s: float, blocking: bool) -> None:
    a = sp.a2a
    total_send, total_recv = sum(a.send_splits), sum(a.recv_splits)
    if a.send_direct is not None:
        b, start = a.send_direct
        sbuf = bufs[b][start:start + total_send]
    elif not total_send:
        sbuf = bufs[0][:0]
    else:
        sbuf = staging[a.send_stage_off:a.send_stage_off + total_send]
        if total_send:
            torch.cat([bufs[b][off:off + ln] for m in a.send_msgs for b, off, ln, _ in m.segs], out=sbuf)
    if a.recv_direct is not None:
        b, start = a.recv_direct
        rbuf = bufs[b][start:start + total_recv]
    elif not total_recv:
        rbuf = bufs[1][:0]
    else:
        rbuf = staging[a.recv_stage_off:a.recv_stage_off + total_recv]
    what = f"collsched step {sp.step} (all-to-all) on rank {prog.rank}"
    try:
        work = dist.all_to_all_single(rbuf, sbuf, a.recv_splits, a.send_splits, group=group, async_op=True)
    except RuntimeError as e:
        raise classify_transport_error(e, what) from e
    wait_all([work], timeout_s, blocking, what)
    if a.recv_direct is None and total_recv:
        by_op: dict = {}
        for m, at in a.recv_msgs:
            d, s_ = by_op.setdefault(m.op, ([], []))
            for b, off, ln, mo in m.segs:
                d.append(bufs[b][off:off + ln])
                s_.append(rbuf[at + mo:at + mo + ln])
        for op, (d, s_) in by_op.items():
            _apply(op, d, s_, dtype)


def _apply(op: int, dsts: list, srcs: list, dtype: torch.dtype) -> None:
    """dst = src (Copy) or dst += src element-wise in `dtype` (ReduceSum), for each pair."""
    if op == OP_COPY:
        if len(dsts) == 1:
            dsts[0].copy_(srcs[0])
        else:
            torch._foreach_copy_(dsts, srcs)
        return
    assert op == OP_REDUCE_SUM
    esize = torch.empty(0, dtype=dtype).element_size()
    dv, sv = [], []
    for d, s in zip(dsts, srcs):
        if d.numel() % esize:
            raise ValueError(f"a ReduceSum segment of {d.numel()} bytes is not a whole number of {dtype} elements")
        dv.append(d.view(dtype))
        sv.append(s.view(dtype))
    if len(dv) == 1:
        dv[0].add_(sv[0])
    else:
        torch._foreach_add_(dv, sv)


__all__ = ["execute", "run_program", "ExecStats", "byte_view", "BUFFER_NAMES"]
