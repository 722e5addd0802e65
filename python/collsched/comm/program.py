"""A Plan as numpy columns, and the per-rank program the executor runs.

`plan_arrays` decodes `Plan._raw_arrays()` (little-endian rows) into numpy
structured arrays. `compile_rank_program` keeps only what one rank does, step by
step, as plain Python tuples: the executor's inner loop then does no numpy
indexing and no decoding. It reads the core's rank view (`Plan._rank_view`), so
only that rank's transfers are decoded, not the whole plan. `RankProgram.overlap`
is the same work as one list of actions in transfer-id order, each with the actions
of this rank it waits for (`rank_deps` and conflicting accesses): what the
dependency-driven executor runs.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

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


@dataclass(slots=True)
class Message:
    """One transfer as seen by one side.

    `segs` are ``(buf, off, len, msg_off)`` on this side: where the bytes come from
    (sender) or go to (receiver), and their place inside the message.
    `stage_off` is the message's offset in the step's staging area, or -1 when the
    message is sent from / received into the user's buffer directly (one segment).
    """

    tid: int
    peer: int
    op: int
    nbytes: int
    segs: list
    stage_off: int = -1


@dataclass
class AllToAllStep:
    """The step as one all_to_all_single (the "alltoallv" transport): per peer, its messages
    back to back in transfer-id order. `*_direct` is (buf, start) when that side's bytes
    already lie contiguously in peer order in one buffer (no gather / no scatter)."""

    send_splits: list
    recv_splits: list
    send_msgs: list  # Messages in (peer, tid) order
    recv_msgs: list  # (Message, offset in the receive block) in (peer, tid) order
    send_direct: tuple | None
    recv_direct: tuple | None
    send_stage_off: int = 0
    recv_stage_off: int = 0
    staging_bytes: int = 0
    self_local: int = -1  # index in StepProgram.local of a local copy carried as the self block


@dataclass(eq=False)
class StepProgram:
    step: int
    sends: list = field(default_factory=list)  # Messages, ascending transfer id
    recvs: list = field(default_factory=list)  # Messages, ascending transfer id
    local: list = field(default_factory=list)  # (op, [(src_buf, src_off, dst_buf, dst_off, len)]) in transfer order
    local_tids: list = field(default_factory=list)  # transfer id of each `local` entry
    staging_bytes: int = 0
    global_comm: bool = False  # some rank sends in this step (collective transports must join it)
    dense: bool = False  # at least half of all ordered rank pairs talk in this step (same on every rank)
    p2p_order: list = field(default_factory=list)  # (is_send, Message) by transfer id: the p2p posting order
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
        return (self.step, self.sends, self.recvs, self.local, self.local_tids, self.staging_bytes, self.global_comm,
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
    # (plan, arrays) it was compiled from: `overlap` reads the plan's deps on first use.
    _source: tuple = field(default=None, repr=False, compare=False)

    @cached_property
    def overlap(self) -> "OverlapProgram":
        """This rank's actions in transfer-id order with their dependencies (`rank_deps`),
        for the dependency-driven executor. Computed on first use: the step transports
        (NCCL, alltoallv, hybrid) never need it."""
        plan, arrays = self._source if self._source is not None else (None, None)
        if plan is None:
            raise ValueError("this program was built without its plan: compile it with compile_rank_program")
        return overlap_program(self, rank_deps(plan, self.rank, arrays))

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


@dataclass(frozen=True)
class RankRows:
    """What one rank takes part in: its transfers as (id, src, dst, op, step, segments) rows in
    id order, and per step the distinct ordered rank pairs that move bytes anywhere."""

    transfers: list
    moving_pairs: dict  # step -> pairs
    sizes: tuple | None = None  # (input, output, scratch) bytes of the rank, when at hand


def rank_rows(plan, rank: int, count_pairs: bool = True) -> RankRows:
    """`RankRows` from the Rust core's rank view of a whole Plan, or from a `RankPlan`
    (`collsched.plan_for_rank`, which always carries the moving pairs): only this rank's
    transfers are decoded. Without `count_pairs` a Plan's view skips the other transfers'
    segments and `moving_pairs` is empty."""
    if hasattr(plan, "_rows"):  # a RankPlan
        if plan.rank != rank:
            raise ValueError(f"this RankPlan is rank {plan.rank}'s, not rank {rank}'s")
        v = plan._rows()
    else:
        v = plan._rank_view(rank, count_pairs)
    ids = np.frombuffer(v["ids"], dtype="<u4").tolist()
    rows = np.frombuffer(v["transfers"], dtype=TRANSFER_DTYPE).tolist()
    segs = np.frombuffer(v["segments"], dtype=SEGMENT_DTYPE).tolist()
    moving = np.frombuffer(v["moving_pairs"], dtype="<u4").reshape(-1, 2).tolist()
    return RankRows(transfers=[(tid, src, dst, op, step, segs[sb:se])
                               for tid, (src, dst, op, _tier, step, sb, se, _db, _de) in zip(ids, rows)],
                    moving_pairs=dict(moving), sizes=v["sizes"])


def rank_rows_from_arrays(a: PlanArrays, rank: int, n: int) -> RankRows:
    """`RankRows` from the whole plan's decoded arrays (numpy): the reference for `rank_rows`."""
    t = a.transfers
    mine = np.nonzero((t["src"] == rank) | (t["dst"] == rank))[0]
    seg_rows = a.segments
    transfers = [(tid, src, dst, op, step, seg_rows[sb:se].tolist())
                 for tid, (src, dst, op, _tier, step, sb, se, _db, _de) in zip(mine.tolist(), t[mine].tolist())]
    tb = a.transfer_bytes()
    moving = (t["src"] != t["dst"]) & (tb > 0)
    pair_ids = np.unique(t["step"][moving].astype(np.int64) * (n * n) + t["src"][moving].astype(np.int64) * n
                         + t["dst"][moving])
    comm_steps, pairs = np.unique(pair_ids // (n * n), return_counts=True)
    return RankRows(transfers=transfers, moving_pairs=dict(zip(comm_steps.tolist(), pairs.tolist())))


def compile_rank_program(plan, rank: int, arrays: PlanArrays | None = None, *,
                         collective_steps: bool = True) -> RankProgram:
    """What `rank` sends, receives and copies in each step of `plan` (from the core's rank view,
    or from `arrays` when given). `collective_steps` also marks the steps every rank joins
    (`global_comm`, `dense`), which the alltoallv and hybrid transports need; the p2p
    transport does not, and without them the view reads only this rank's segments (at 1024
    GPUs, a fifth of the time)."""
    n = plan.num_ranks
    if not 0 <= rank < n:
        raise ValueError(f"rank {rank} is outside the plan's {n} ranks")
    rows = rank_rows(plan, rank, collective_steps) if arrays is None else rank_rows_from_arrays(arrays, rank, n)
    transfers = _checked(rows.transfers)
    steps: dict[int, StepProgram] = {}
    sent = received = 0
    uses_reduce = False
    # Rows come in transfer-id order, so each step's sends, receives and p2p posting order
    # are appended in that order (no sorting).
    for tid, src, dst, op, step, segs in transfers:
        sp = steps.get(step)
        if sp is None:
            sp = steps[step] = StepProgram(step, _n=n, _rank=rank)
        uses_reduce |= op == OP_REDUCE_SUM
        if src == dst:
            sp.local.append((op, segs))
            sp.local_tids.append(tid)
            continue
        sending = src == rank
        at = 0 if sending else 2  # the sender reads (src_buf, src_off), the receiver writes (dst_buf, dst_off)
        if len(segs) == 1:
            seg = segs[0]
            nbytes = seg[4]
            side = [(seg[at], seg[at + 1], nbytes, 0)]
        else:
            side, nbytes = [], 0
            for seg in segs:
                side.append((seg[at], seg[at + 1], seg[4], nbytes))
                nbytes += seg[4]
        msg = Message(tid, dst if sending else src, op, nbytes, side)
        sp.p2p_order.append((sending, msg))
        if sending:
            sp.sends.append(msg)
            sent += nbytes
        else:
            sp.recvs.append(msg)
            received += nbytes
    for st, k in (rows.moving_pairs.items() if collective_steps else ()):
        sp = steps.get(st)
        if sp is None:
            sp = steps[st] = StepProgram(st, _n=n, _rank=rank)
        sp.global_comm = True
        sp.dense = 2 * k >= n * (n - 1)
    ordered = [steps[k] for k in sorted(steps)]
    staging = 0
    for sp in ordered:
        at = 0
        for m in sp.sends:
            if len(m.segs) > 1:
                m.stage_off = at
                at = _align(at + m.nbytes)
        for m in sp.recvs:
            if len(m.segs) > 1 or m.op == OP_REDUCE_SUM:
                m.stage_off = at
                at = _align(at + m.nbytes)
        sp.staging_bytes = at
        staging = max(staging, at)
    if rows.sizes is not None:
        input_bytes, output_bytes, scratch_bytes = rows.sizes
    else:
        scratch = plan.scratch_bytes
        input_bytes, output_bytes = plan.input_sizes[rank], plan.output_sizes[rank]
        scratch_bytes = scratch[rank] if len(scratch) > rank else 0
    return RankProgram(
        rank=rank,
        num_ranks=n,
        collective=plan.collective,
        input_bytes=int(input_bytes),
        output_bytes=int(output_bytes),
        scratch_bytes=int(scratch_bytes),
        steps=ordered,
        staging_bytes=staging,
        bytes_sent=sent,
        bytes_received=received,
        uses_reduce=uses_reduce,
        collective_steps=collective_steps,
        _source=(plan, arrays),
    )


def _checked(transfers: list) -> list:
    """The rows without empty segments or transfers (both sides skip them alike), after
    checking ops and buffer ids. One pass that builds nothing when nothing is empty."""
    out = None
    for k, (tid, _src, _dst, op, _step, segs) in enumerate(transfers):
        if op != OP_COPY and op != OP_REDUCE_SUM:
            if any(s[4] > 0 for s in segs):
                raise ValueError(f"transfer {tid} has unknown op {op}")
        for s in segs:
            if s[4] == 0 or s[0] > BUF_SCRATCH or s[2] > BUF_SCRATCH:
                break
        else:
            if segs:
                if out is not None:
                    out.append(transfers[k])
                continue
        # Something to drop or to reject: the careful path, from here on.
        kept = [s for s in segs if s[4] > 0]
        for s in kept:
            if s[0] > BUF_SCRATCH or s[2] > BUF_SCRATCH:
                raise ValueError(f"transfer {tid} names an unknown buffer id")
        if out is None:
            out = transfers[:k]
        if kept:
            out.append(transfers[k][:5] + (kept,))
    return transfers if out is None else out


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
    step = _layout(sorted(sp.sends, key=lambda m: (m.peer, m.tid)), sorted(sp.recvs, key=lambda m: (m.peer, m.tid)), n)
    if step.send_direct is not None and step.recv_direct is not None:
        return step
    # Fan-out shape: the local block sits exactly in the gap between the blocks of lower and
    # higher peers on both sides; carrying it as the self block makes both sides zero-copy.
    for i, (op, segs) in enumerate(sp.local):
        if op != OP_COPY or len(segs) != 1:
            continue
        sb, so, db, do, ln = segs[0]
        snd = Message(tid=-1, peer=rank, op=OP_COPY, nbytes=ln, segs=[(sb, so, ln, 0)])
        rcv = Message(tid=-1, peer=rank, op=OP_COPY, nbytes=ln, segs=[(db, do, ln, 0)])
        trial = _layout(sorted(sp.sends + [snd], key=lambda m: (m.peer, m.tid)),
                        sorted(sp.recvs + [rcv], key=lambda m: (m.peer, m.tid)), n)
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


@dataclass(slots=True)
class Action:
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
    tid: int
    msg: Message | None
    local: tuple | None
    deps: tuple
    stage_off: int = -1
    post_after: tuple = ()


@dataclass
class OverlapProgram:
    actions: list  # Action, ascending transfer id (a topological order of `deps`)
    dependents: list  # per action: indices of the actions that wait for it
    staging_bytes: int
    early_recvs: list  # receives with nothing to wait for before posting: posted at the start
    post_waiters: list  # per action: the receives whose posting waits for it


def rank_deps(plan, rank: int, arrays: PlanArrays | None = None) -> dict:
    """The plan's deps between the transfers `rank` takes part in: transfer id -> ascending ids.

    The one source of plan dependencies for the runtime: each transfer of `rank` that moves
    bytes, with its deps cut to the transfers of `rank` that move bytes. A dep on another
    rank's transfer is that rank's to keep. Orderings that the plan's deps imply only through
    other ranks' transfers are not here; the ones that matter for the bytes (conflicting
    accesses to this rank's buffers) are restored from the accesses themselves by
    `overlap_program`.

    Args:
        plan: a whole Plan (its ``_raw_arrays()`` are read without copies) or this rank's
            ``RankPlan`` (``plan_for_rank``; its deps are already cut to the rank).
        rank: the rank, in ``range(plan.num_ranks)``.
        arrays: the whole plan's decoded arrays, when at hand (`plan_arrays`).

    Returns:
        dict: transfer id -> tuple of transfer ids (only transfers with such deps appear).
    """
    if arrays is not None:
        t, seg_len, deps = arrays.transfers, arrays.segments["len"], arrays.deps
        ids = None
    else:
        rows = hasattr(plan, "_rows")  # a RankPlan: its rows and their global ids
        if not rows and not plan.num_deps:
            return {}
        raw = plan._rows() if rows else plan._raw_arrays()
        t = np.frombuffer(raw["transfers"], dtype=TRANSFER_DTYPE)
        seg_len = np.frombuffer(raw["segments"], dtype=SEGMENT_DTYPE)["len"]
        deps = np.frombuffer(raw["deps"], dtype="<u4")
        ids = np.frombuffer(raw["ids"], dtype="<u4").astype(np.int64) if rows else None
    if not len(deps):
        return {}
    on = np.ones(len(t), dtype=bool) if ids is not None else (t["src"] == rank) | (t["dst"] == rank)
    db, de = t["dep_begin"].astype(np.int64), t["dep_end"].astype(np.int64)
    cum = np.concatenate([np.zeros(1, np.uint64), np.cumsum(seg_len, dtype=np.uint64)])
    on &= cum[t["seg_end"].astype(np.int64)] > cum[t["seg_begin"].astype(np.int64)]  # moves bytes
    mine = np.nonzero(on & (de > db))[0]
    if not len(mine):
        return {}
    counts = de[mine] - db[mine]
    starts = np.repeat(db[mine] - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
    dep_ids = deps[starts + np.arange(int(counts.sum()))].astype(np.int64)
    owner = np.repeat(mine, counts)
    if ids is None:
        keep = on[dep_ids]
    else:  # rows are local: find each dep (a global id) among the rank's ids
        pos = np.minimum(np.searchsorted(ids, dep_ids), len(ids) - 1)
        keep = (ids[pos] == dep_ids) & on[pos]
        owner = ids[owner]
    out: dict = {}
    for o, d in zip(owner[keep].tolist(), dep_ids[keep].tolist()):
        out.setdefault(o, []).append(d)
    return {o: tuple(sorted(ds)) for o, ds in out.items()}


def _accesses(kind: int, msg, local) -> list:
    """(buf, lo, hi, writes) of an action on this rank's buffers; Input is never written, so
    its reads can never conflict and are left out."""
    if kind == LOCAL:
        acc = [(sb, so, so + ln, False) for sb, so, _db, _do, ln in local[1] if sb != BUF_INPUT]
        return acc + [(db_, do, do + ln, True) for _sb, _so, db_, do, ln in local[1]]
    write = kind == RECV
    return [(b, off, off + ln, write) for b, off, ln, _ in msg.segs if write or b != BUF_INPUT]


def _conflicts(accesses: list) -> list:
    """Per action, the earlier actions it has a conflicting access with (overlapping bytes of one
    buffer, at least one of the two writing): a sweep over each buffer's intervals by start."""
    preds = [set() for _ in accesses]
    by_buf: dict = {}
    for i, acc in enumerate(accesses):
        for b, lo, hi, w in acc:
            by_buf.setdefault(b, []).append((lo, hi, i, w))
    for ivs in by_buf.values():
        ivs.sort()
        active: list = []  # heap of (hi, lo, i, w) still open at the sweep position
        for lo, hi, i, w in ivs:
            while active and active[0][0] <= lo:
                heapq.heappop(active)
            for _hi, _lo, j, w2 in active:
                if j != i and (w or w2):
                    preds[max(i, j)].add(min(i, j))
            heapq.heappush(active, (hi, lo, i, w))
    return preds


def overlap_program(prog: RankProgram, deps: dict) -> OverlapProgram:
    """`prog`'s sends, receives and local copies as one list in transfer-id order, each with
    the indices of the actions it waits for: its deps (as `rank_deps` returns them) and every
    earlier action of this rank it has a conflicting access with; a receive is posted once
    the latter are done (`Action.post_after`). The verifier proves the
    plan orders each such pair by its deps (possibly through other ranks' transfers) in id
    order, so adding them keeps the order acyclic, and with them any schedule the actions
    allow writes what id order writes."""
    items = []
    for sp in prog.steps:
        for is_send, m in sp.p2p_order:
            items.append((m.tid, SEND if is_send else RECV, m, None))
        for tid, loc in zip(sp.local_tids, sp.local):
            items.append((tid, LOCAL, None, loc))
    items.sort(key=lambda x: x[0])
    index = {it[0]: i for i, it in enumerate(items)}
    preds = _conflicts([_accesses(kind, msg, loc) for _tid, kind, msg, loc in items])
    actions, dependents, early, at = [], [[] for _ in items], [], 0
    post_waiters = [[] for _ in items]
    for i, (tid, kind, msg, loc) in enumerate(items):
        try:
            di = preds[i].union(index[d] for d in deps.get(tid, ()))
        except KeyError as e:
            raise ValueError(f"transfer {tid} of rank {prog.rank} depends on transfer {e.args[0]}, which this "
                             "rank does not execute (the plan and its deps disagree)") from None
        di = tuple(sorted(di))
        for d in di:
            dependents[d].append(i)
        off = -1
        if kind != LOCAL and (len(msg.segs) > 1 or (kind == RECV and msg.op == OP_REDUCE_SUM)):
            off, at = at, _align(at + msg.nbytes)
        post = ()
        if kind == RECV:
            post = () if off >= 0 else tuple(sorted(preds[i]))
            for d in post:
                post_waiters[d].append(i)
            if not post:
                early.append(i)
        actions.append(Action(kind, tid, msg, loc, di, off, post))
    return OverlapProgram(actions, dependents, at, early, post_waiters)
