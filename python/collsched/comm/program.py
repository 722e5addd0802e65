"""A Plan as numpy columns, and the per-rank program the executor runs.

`plan_arrays` decodes `Plan._raw_arrays()` (little-endian rows) into numpy
structured arrays. `compile_rank_program` keeps only what one rank does, step by
step, as plain Python tuples: the executor's inner loop then does no numpy
indexing and no decoding. `RankProgram.overlap` is the same work as one list of
actions in the rank plan's row order, each with the actions of this rank it waits for
(`rank_deps` and conflicting accesses): what the dependency-driven executor runs.

Both are on the per-call path of a new matrix, so the layout (checks, staging offsets,
step cuts, dependency edges, conflicting accesses) is the core's, from the rank's
`RankPlan` (`plan::rank_program`; a whole Plan is cut to its rank first). Python only
maps the core's tuples onto the named tuples the executors read (one Message per
transfer, shared by the steps and the actions) and cuts the steps.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from itertools import compress, repeat
from operator import not_
from typing import NamedTuple

import numpy as np

from collsched import _core

TRANSFER_DTYPE = np.dtype([("src", "<u4"), ("dst", "<u4"), ("op", "<u4"), ("tier", "<u4"), ("step", "<u4"),
                           ("seg_begin", "<u4"), ("seg_end", "<u4"), ("dep_begin", "<u4"), ("dep_end", "<u4")])
SEGMENT_DTYPE = np.dtype([("src_buf", "<u8"), ("src_off", "<u8"), ("dst_buf", "<u8"), ("dst_off", "<u8"),
                          ("len", "<u8")])

BUF_INPUT, BUF_OUTPUT, BUF_SCRATCH = 0, 1, 2
OP_COPY, OP_REDUCE_SUM = 0, 1
BUFFER_NAMES = ("input", "output", "scratch")
# Staged messages start on this boundary so a slice can be viewed as any dtype.
STAGING_ALIGN = 16


@dataclass(frozen=True)
class PlanArrays:
    """The plan's flat arrays: `transfers` and `segments` are structured (index by field name)."""

    transfers: np.ndarray
    segments: np.ndarray
    deps: np.ndarray

    def transfer_bytes(self) -> np.ndarray:
        """Bytes carried by each transfer."""
        lens = self.segments["len"].astype(np.uint64)
        cum = np.concatenate([[0], np.cumsum(lens, dtype=np.uint64)])
        return cum[self.transfers["seg_end"].astype(np.int64)] - cum[self.transfers["seg_begin"].astype(np.int64)]


def plan_arrays(plan) -> PlanArrays:
    """Decode a Plan into numpy arrays (copies; the plan is not referenced afterwards)."""
    raw = plan._raw_arrays()
    return PlanArrays(
        transfers=np.frombuffer(raw["transfers"], dtype=TRANSFER_DTYPE).copy(),
        segments=np.frombuffer(raw["segments"], dtype=SEGMENT_DTYPE).copy(),
        deps=np.frombuffer(raw["deps"], dtype="<u4").copy(),
    )


class Message(NamedTuple):
    """One transfer as seen by one side.

    `segs` are ``(buf, off, len, msg_off)`` on this side: where the bytes come from
    (sender) or go to (receiver), and their place inside the message.
    `stage_off` is the message's offset in the step's staging area, or -1 when the
    message is sent from / received into the user's buffer directly (one segment).
    `tag` is the message's sequence number among this rank's transfers with the same
    ordered (src, dst) pair (`RankPlan.tags`): sender and receiver compute it alike.
    A named tuple: the compiler builds one per transfer from columns, at C speed.
    """

    tag: int
    peer: int
    op: int
    nbytes: int
    segs: list
    stage_off: int = -1


@dataclass
class AllToAllStep:
    """The step as one all_to_all_single (the "alltoallv" transport): per peer, its messages
    back to back in plan order. `*_direct` is (buf, start) when that side's bytes
    already lie contiguously in peer order in one buffer (no gather / no scatter)."""

    send_splits: list
    recv_splits: list
    send_msgs: list  # Messages in (peer, tag) order
    recv_msgs: list  # (Message, offset in the receive block) in (peer, tag) order
    send_direct: tuple | None
    recv_direct: tuple | None
    send_stage_off: int = 0
    recv_stage_off: int = 0
    staging_bytes: int = 0
    self_local: int = -1  # index in StepProgram.local of a local copy carried as the self block


@dataclass(eq=False, slots=True)
class StepProgram:
    step: int
    sends: list = field(default_factory=list)  # Messages, in plan order
    recvs: list = field(default_factory=list)  # Messages, in plan order
    local: list = field(default_factory=list)  # (op, [(src_buf, src_off, dst_buf, dst_off, len)]) in transfer order
    local_rows: list = field(default_factory=list)  # the rank plan's row of each `local` entry
    staging_bytes: int = 0
    global_comm: bool = False  # some rank sends in this step (collective transports must join it)
    dense: bool = False  # at least half of all ordered rank pairs talk in this step (same on every rank)
    p2p_order: list = field(default_factory=list)  # (is_send, Message) in plan order: the p2p posting order
    _n: int = 0  # ranks and this rank: what the all_to_all layout needs
    _rank: int = 0
    _a2a: object = field(default=None, repr=False)

    @property
    def a2a(self) -> AllToAllStep | None:
        """The step as one all_to_all_single, for steps every rank joins (`global_comm`);
        computed on first use, since only the alltoallv and hybrid transports need it."""
        if self._a2a is None and self.global_comm:
            self._a2a = _all_to_all_step(self, self._n, self._rank)
        return self._a2a

    def __eq__(self, other) -> bool:
        return isinstance(other, StepProgram) and self._key() == other._key()

    def _key(self) -> tuple:
        return (self.step, self.sends, self.recvs, self.local, self.local_rows, self.staging_bytes, self.global_comm,
                self.dense, self.p2p_order, self._n, self._rank)


@dataclass
class RankProgram:
    rank: int
    num_ranks: int
    collective: str
    input_bytes: int
    output_bytes: int
    scratch_bytes: int
    steps: list  # StepProgram with at least one action, ascending step
    staging_bytes: int  # max over steps (p2p transport)
    bytes_sent: int
    bytes_received: int
    uses_reduce: bool
    # Whether steps every rank joins are marked (`compile_rank_program`'s `collective_steps`):
    # without, `steps` holds only the steps this rank acts in, and only p2p can run it.
    collective_steps: bool = True
    # The core's compiled layout (`_core.RankProgram`) and the Messages and local copies
    # built from it, in step order: `overlap` shares them.
    _core: object = field(default=None, repr=False, compare=False)
    _objs: tuple = field(default=None, repr=False, compare=False)

    @cached_property
    def overlap(self) -> "OverlapProgram":
        """This rank's actions in the rank plan's row order with their dependencies (the plan's deps
        cut to the rank, `rank_deps`, and conflicting accesses), for the dependency-driven
        executor; laid out by the core (`plan::rank_program::overlap`). Computed on first
        use: the step transports (NCCL, alltoallv, hybrid) never need it.

        Every action waits for its deps and for each earlier action of this rank it has a
        conflicting access with (overlapping bytes of one buffer, one of the two writing); a
        receive into the user's buffer is posted once the latter are done
        (`Action.post_after`). The verifier proves the plan orders each such pair by its deps
        (possibly through other ranks' transfers) in id order, so adding them keeps the order
        acyclic, and with them any schedule the actions allow writes what id order writes.
        Each staged message has its own aligned offset in the staging area, in row order.
        """
        if self._core is None:
            raise ValueError("this program was built without its plan: compile it with compile_rank_program")
        actions, dependents, staging, early, post_waiters = self._core._overlap(*self._objs)
        return OverlapProgram(list(map(tuple.__new__, repeat(Action), actions)), dependents, staging, early,
                              post_waiters)

    @property
    def active_steps(self) -> int:
        """Steps in which this rank sends, receives or copies (the same however compiled)."""
        return sum(1 for sp in self.steps if sp.sends or sp.recvs or sp.local)

    @cached_property
    def a2a_staging_bytes(self) -> int:
        """Max over steps of the alltoallv transport's staging (computes every step's `a2a`)."""
        return max([sp.a2a.staging_bytes for sp in self.steps if sp.a2a is not None] or [0])

    @cached_property
    def dense_a2a_staging_bytes(self) -> int:
        """The same over dense steps only: what the hybrid transport posts as all_to_all."""
        return max([sp.a2a.staging_bytes for sp in self.steps if sp.dense and sp.a2a is not None] or [0])


def _align(x: int) -> int:
    return (x + STAGING_ALIGN - 1) // STAGING_ALIGN * STAGING_ALIGN


def _core_source(plan, rank: int, arrays: PlanArrays | None):
    """What the core compiles for `rank`: the Plan or RankPlan itself, or, from a whole plan's
    decoded `arrays`, the RankPlan of their rows cut to the rank (ops and buffer ids checked)."""
    if arrays is None:
        return plan
    t = arrays.transfers
    n = plan.num_ranks
    mine = np.nonzero((t["src"] == rank) | (t["dst"] == rank))[0]
    moving = (t["src"] != t["dst"]) & (arrays.transfer_bytes() > 0)
    pair_ids = np.unique(t["step"][moving].astype(np.int64) * (n * n) + t["src"][moving].astype(np.int64) * n
                         + t["dst"][moving])
    steps, pairs = np.unique(pair_ids // (n * n), return_counts=True)
    scratch = plan.scratch_bytes
    sizes = (plan.input_sizes[rank], plan.output_sizes[rank], scratch[rank] if len(scratch) > rank else 0)
    # Segment and dep ranges keep indexing the whole arrays; deps on other ranks' transfers drop out.
    return _core._rank_plan_from_rows(rank, n, mine.astype("<u4").tobytes(), t[mine].tobytes(),
                                      arrays.segments.tobytes(), arrays.deps.astype("<u4").tobytes(),
                                      list(zip(steps.tolist(), pairs.tolist())), sizes)


def compile_rank_program(plan, rank: int, arrays: PlanArrays | None = None, *,
                         collective_steps: bool = True) -> RankProgram:
    """What `rank` sends, receives and copies in each step of `plan`.

    The layout (empty segments and transfers dropped, checks, staging offsets, step cuts) is
    the core's (`plan::rank_program`); Python maps its tuples onto `Message` and cuts the
    steps. A whole Plan goes through its rank's `RankPlan`, so both compile alike.

    Args:
        plan: a whole ``Plan`` or this rank's ``RankPlan`` (``collsched.plan_for_rank``).
        rank: the rank, in ``range(plan.num_ranks)``.
        arrays: the whole plan's decoded arrays (`plan_arrays`): their rows are compiled
            instead of the plan's (ops and buffer ids checked).
        collective_steps: also mark the steps every rank joins (`global_comm`, `dense`), which
            the alltoallv and hybrid transports need; the p2p transport does not, and without
            them a whole Plan's rank is cut reading only this rank's segments.

    Returns:
        RankProgram: the rank's steps, ascending.

    Raises:
        ValueError: `rank` is outside the plan, a RankPlan is another rank's, or a transfer
            names an unknown op or buffer id.
    """
    n = plan.num_ranks
    if not 0 <= rank < n:
        raise ValueError(f"rank {rank} is outside the plan's {n} ranks")
    core, (raw_msgs, is_send, copies, local_rows, steps, totals) = _core._compile_rank_program(
        _core_source(plan, rank, arrays), rank, collective_steps)
    # Messages from the core's tuples at C speed (tuple.__new__ straight, not through a
    # partial: a third less per message), in step order: sends and receives share them.
    msgs = list(map(tuple.__new__, repeat(Message), raw_msgs))
    p2p = list(zip(is_send, msgs))
    sends = list(compress(msgs, is_send))
    recvs = list(compress(msgs, map(not_, is_send)))
    ordered = [StepProgram(s, sends[sa:sb], recvs[ra:rb], copies[la:lb], local_rows[la:lb], stg, g, dense, p2p[ca:cb],
                           n, rank)
               for s, ca, cb, sa, sb, ra, rb, la, lb, stg, g, dense in steps]
    input_bytes, output_bytes, scratch_bytes, staging, sent, received, uses_reduce = totals
    return RankProgram(rank, n, plan.collective, input_bytes, output_bytes, scratch_bytes, ordered, staging, sent,
                       received, uses_reduce, collective_steps, _core=core, _objs=(msgs, copies))


def _contiguous(pieces: list) -> tuple | None:
    """(buf, start) if the (buf, off, len) pieces follow each other in one buffer."""
    if not pieces:
        return None
    buf, start = pieces[0][0], pieces[0][1]
    at = start
    for b, off, ln in pieces:
        if b != buf or off != at:
            return None
        at += ln
    return (buf, start)


def _all_to_all_step(sp: StepProgram, n: int, rank: int) -> AllToAllStep:
    step = _layout(sorted(sp.sends, key=lambda m: (m.peer, m.tag)), sorted(sp.recvs, key=lambda m: (m.peer, m.tag)), n)
    if step.send_direct is not None and step.recv_direct is not None:
        return step
    # Fan-out shape: the local block sits exactly in the gap between the blocks of lower and
    # higher peers on both sides; carrying it as the self block makes both sides zero-copy.
    for i, (op, segs) in enumerate(sp.local):
        if op != OP_COPY or len(segs) != 1:
            continue
        sb, so, db, do, ln = segs[0]
        snd = Message(tag=-1, peer=rank, op=OP_COPY, nbytes=ln, segs=[(sb, so, ln, 0)])
        rcv = Message(tag=-1, peer=rank, op=OP_COPY, nbytes=ln, segs=[(db, do, ln, 0)])
        trial = _layout(sorted(sp.sends + [snd], key=lambda m: (m.peer, m.tag)),
                        sorted(sp.recvs + [rcv], key=lambda m: (m.peer, m.tag)), n)
        if trial.send_direct is not None and trial.recv_direct is not None:
            trial.self_local = i
            return trial
    return step


def _layout(sends: list, recvs: list, n: int) -> AllToAllStep:
    send_splits, recv_splits = [0] * n, [0] * n
    for m in sends:
        send_splits[m.peer] += m.nbytes
    recv_msgs, at = [], 0
    for m in recvs:
        recv_splits[m.peer] += m.nbytes
        recv_msgs.append((m, at))
        at += m.nbytes
    send_direct = _contiguous([(b, off, ln) for m in sends for b, off, ln, _ in m.segs])
    recv_direct = None
    if all(m.op == OP_COPY for m in recvs):
        recv_direct = _contiguous([(b, off, ln) for m in recvs for b, off, ln, _ in m.segs])
    step = AllToAllStep(send_splits, recv_splits, sends, recv_msgs, send_direct, recv_direct)
    total_send, total_recv = sum(send_splits), sum(recv_splits)
    at = 0
    if send_direct is None and total_send:
        step.send_stage_off, at = 0, _align(total_send)
    if recv_direct is None and total_recv:
        step.recv_stage_off, at = at, _align(at + total_recv)
    step.staging_bytes = at
    return step


# --- dependency-driven execution ------------------------------------------------------------

SEND, RECV, LOCAL = 0, 1, 2


class Action(NamedTuple):
    """One transfer of this rank for the dependency-driven executor.

    `kind` is SEND, RECV or LOCAL; `msg` the Message (SEND/RECV) or `local` the
    ``(op, segs)`` of a local copy; `deps` the indices of earlier actions that must
    complete first; `stage_off` the message's place in the run's staging area (each staged
    message has its own, since any number may be in flight), -1 when it moves directly
    from / into the user's buffer. `post_after` (RECV only): the actions that must complete
    before the receive may be posted, the earlier accesses its destination conflicts with
    (none when staged: its bytes land in a buffer of its own); the other deps only order
    what follows the receive, and its sender keeps its own.
    """

    kind: int
    row: int
    msg: Message | None
    local: tuple | None
    deps: tuple
    stage_off: int = -1
    post_after: tuple = ()




@dataclass
class OverlapProgram:
    actions: list  # Action, in row order (a topological order of `deps`)
    dependents: list  # per action: indices (tuple, ascending) of the actions that wait for it
    staging_bytes: int
    early_recvs: list  # receives with nothing to wait for before posting: posted at the start
    post_waiters: list  # per action: the receives (tuple, ascending) whose posting waits for it


def rank_deps(plan, rank: int, arrays: PlanArrays | None = None) -> dict:
    """The plan's deps between the transfers `rank` takes part in: row -> ascending rows.

    The one source of plan dependencies for the runtime: each transfer of `rank` that moves
    bytes, with its deps cut to the transfers of `rank` that move bytes. A dep on another
    rank's transfer is that rank's to keep. Orderings that the plan's deps imply only through
    other ranks' transfers are not here; the ones that matter for the bytes (conflicting
    accesses to this rank's buffers) are restored from the accesses themselves by
    `RankProgram.overlap`.

    Args:
        plan: a whole Plan or this rank's ``RankPlan`` (``plan_for_rank``; its deps are
            already cut to the rank).
        rank: the rank, in ``range(plan.num_ranks)``.
        arrays: the whole plan's decoded arrays, read instead of the plan (`plan_arrays`).

    Returns:
        dict: row of the rank's plan (``plan.rank_plan(rank)``) -> tuple of rows (only rows
            with such deps appear).
    """
    n = plan.num_ranks
    if not 0 <= rank < n:
        raise ValueError(f"rank {rank} is outside the plan's {n} ranks")
    core, _ = _core._compile_rank_program(_core_source(plan, rank, arrays), rank, False)
    out: dict = {}
    for o, d in core._dep_rows():
        out.setdefault(o, []).append(d)
    return {o: tuple(ds) for o, ds in out.items()}
