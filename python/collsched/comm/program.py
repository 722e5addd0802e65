"""A Plan as numpy columns, and the per-rank program the executor runs.

`plan_arrays` decodes `Plan._raw_arrays()` (little-endian rows) into numpy
structured arrays. `compile_rank_program` keeps only what one rank does, step by
step, as plain Python tuples: the executor's inner loop then does no numpy
indexing and no decoding. It reads a `RankPlan`'s rows or the core's rank view
(`Plan._rank_view`), so only that rank's transfers are decoded, not the whole plan.
`RankProgram.overlap` is the same work as one list of actions in transfer-id order,
each with the actions of this rank it waits for (`rank_deps` and conflicting
accesses): what the dependency-driven executor runs.

Both are on the per-call path of a new matrix, so the checks, the layout (staging
offsets, step cuts, dependency edges, conflicting accesses) are numpy over the rows;
Python only builds the objects the executor reads (one Message per transfer, shared
by the steps and the actions), mostly with C-level zip/map.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property, partial
from itertools import compress, repeat
from operator import itemgetter
from typing import NamedTuple

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


class Message(NamedTuple):
    """One transfer as seen by one side.

    `segs` are ``(buf, off, len, msg_off)`` on this side: where the bytes come from
    (sender) or go to (receiver), and their place inside the message.
    `stage_off` is the message's offset in the step's staging area, or -1 when the
    message is sent from / received into the user's buffer directly (one segment).
    A named tuple: the compiler builds one per transfer from columns, at C speed.
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
    _cols: object = field(default=None, repr=False, compare=False)  # `_Columns`, for `overlap`

    @cached_property
    def overlap(self) -> "OverlapProgram":
        """This rank's actions in transfer-id order with their dependencies (`rank_deps`),
        for the dependency-driven executor. Computed on first use: the step transports
        (NCCL, alltoallv, hybrid) never need it."""
        plan, arrays = self._source if self._source is not None else (None, None)
        if plan is None:
            raise ValueError("this program was built without its plan: compile it with compile_rank_program")
        return overlap_program(self, _dep_pairs(plan, self.rank, arrays))

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
class _Columns:
    """One rank's byte-moving transfers in id order, as numpy columns, and what the program
    built from them shares with `overlap_program` (its messages and local copies)."""

    tid: np.ndarray  # int64, ascending
    kind: np.ndarray  # SEND / RECV / LOCAL
    op: np.ndarray
    nbytes: np.ndarray  # int64
    staged: np.ndarray  # bool: moved through staging (several segments, or a received ReduceSum)
    comm: np.ndarray  # indices of the transfers with a peer, and their Messages
    msgs: list
    loc: np.ndarray  # indices of the local copies, and their (op, segs)
    copies: list
    # The transfers' kept segments back to back (owner = index of the transfer).
    seg_owner: np.ndarray
    seg_src: tuple  # (buf, off) int64 arrays
    seg_dst: tuple
    seg_len: np.ndarray


def _rank_view(plan, rank: int, arrays: PlanArrays | None, count_pairs: bool) -> tuple:
    """(ids, transfers, segments, moving pairs, sizes) of the transfers `rank` takes part in,
    in id order: from a `RankPlan`, from the core's rank view of a whole Plan (without
    `count_pairs` it skips the other transfers' segments and the moving pairs are empty), or
    from the whole plan's decoded `arrays` (numpy; the reference for the core's view)."""
    n = plan.num_ranks
    if arrays is not None:
        t = arrays.transfers
        mine = np.nonzero((t["src"] == rank) | (t["dst"] == rank))[0]
        moving = (t["src"] != t["dst"]) & (arrays.transfer_bytes() > 0)
        pair_ids = np.unique(t["step"][moving].astype(np.int64) * (n * n) + t["src"][moving].astype(np.int64) * n
                             + t["dst"][moving])
        steps, pairs = np.unique(pair_ids // (n * n), return_counts=True)
        return mine.astype(np.int64), t[mine], arrays.segments, dict(zip(steps.tolist(), pairs.tolist())), None
    if hasattr(plan, "_rows"):  # a RankPlan
        if plan.rank != rank:
            raise ValueError(f"this RankPlan is rank {plan.rank}'s, not rank {rank}'s")
        v = plan._rows()
    else:
        v = plan._rank_view(rank, count_pairs)
    moving = np.frombuffer(v["moving_pairs"], dtype="<u4").reshape(-1, 2).tolist()
    return (np.frombuffer(v["ids"], dtype="<u4").astype(np.int64), np.frombuffer(v["transfers"], dtype=TRANSFER_DTYPE),
            np.frombuffer(v["segments"], dtype=SEGMENT_DTYPE), dict(moving), v["sizes"])


def _by_step(steps: np.ndarray, values: list, in_order: bool) -> tuple:
    """`values` (in id order) ordered by step, stably, and their steps (to cut it per step);
    `in_order`: the steps already ascend."""
    if in_order or len(steps) < 2:
        return values, steps
    order = np.argsort(steps, kind="stable")
    return list(itemgetter(*order.tolist())(values)), steps[order]


def _sorted_unique(x: np.ndarray) -> np.ndarray:
    """np.unique for the small int arrays here (sort and compare: a fraction of its cost)."""
    x = np.sort(x)
    return x[np.concatenate([[True], x[1:] != x[:-1]])] if len(x) else x


_new_message = partial(tuple.__new__, Message)  # a Message from one tuple of its fields


def _kept(ids: np.ndarray, t: np.ndarray, seg: np.ndarray) -> tuple:
    """Empty segments and transfers dropped (both sides skip them alike), after checking ops
    and buffer ids of the rest: (indices of the transfers kept, their kept segment counts,
    the kept segments' indices back to back in transfer order).

    Raises:
        ValueError: naming the first transfer (in row order) with an unknown op or buffer id.
    """
    sb, se = t["seg_begin"].astype(np.int64), t["seg_end"].astype(np.int64)
    kept = seg["len"] > 0
    ck = np.concatenate([[0], np.cumsum(kept)])
    nk = ck[se] - ck[sb]
    bad_buf = kept & ((seg["src_buf"] > BUF_SCRATCH) | (seg["dst_buf"] > BUF_SCRATCH))
    cb = np.concatenate([[0], np.cumsum(bad_buf)])
    bad_op = (t["op"] > OP_REDUCE_SUM) & (nk > 0)
    bad = np.nonzero(bad_op | (cb[se] > cb[sb]))[0]
    if len(bad):
        k = int(bad[0])
        what = f"has unknown op {int(t['op'][k])}" if bad_op[k] else "names an unknown buffer id"
        raise ValueError(f"transfer {int(ids[k])} {what}")
    live = np.nonzero(nk > 0)[0]
    nk = nk[live]
    cnt = np.cumsum(nk)
    sidx = np.nonzero(kept)[0][np.repeat(ck[sb[live]] - cnt + nk, nk) + np.arange(int(cnt[-1]) if len(cnt) else 0)]
    return live, nk, sidx


def compile_rank_program(plan, rank: int, arrays: PlanArrays | None = None, *,
                         collective_steps: bool = True) -> RankProgram:
    """What `rank` sends, receives and copies in each step of `plan`.

    Empty segments and transfers are dropped (both sides skip them alike). The columns are
    checked, cut and laid out with numpy; Python builds only the objects the executor reads.

    Args:
        plan: a whole ``Plan`` (read through the core's rank view) or this rank's ``RankPlan``
            (``collsched.plan_for_rank``).
        rank: the rank, in ``range(plan.num_ranks)``.
        arrays: the whole plan's decoded arrays (`plan_arrays`): read instead of the core's view.
        collective_steps: also mark the steps every rank joins (`global_comm`, `dense`), which
            the alltoallv and hybrid transports need; the p2p transport does not, and without
            them a whole Plan's view reads only this rank's segments.

    Returns:
        RankProgram: the rank's steps, ascending.

    Raises:
        ValueError: `rank` is outside the plan, a RankPlan is another rank's, or a transfer
            names an unknown op or buffer id.
    """
    n = plan.num_ranks
    if not 0 <= rank < n:
        raise ValueError(f"rank {rank} is outside the plan's {n} ranks")
    ids, t, seg, moving_pairs, sizes = _rank_view(plan, rank, arrays, collective_steps)
    live, nk, sidx = _kept(ids, t, seg)
    tid = ids[live]
    src, dst = t["src"][live].astype(np.int64), t["dst"][live].astype(np.int64)
    op, step = t["op"][live].astype(np.int64), t["step"][live].astype(np.int64)
    cnt = np.concatenate([[0], np.cumsum(nk)])
    owner = np.repeat(np.arange(len(live)), nk)
    s_len = seg["len"][sidx].astype(np.int64)
    s_src = (seg["src_buf"][sidx].astype(np.int64), seg["src_off"][sidx].astype(np.int64))
    s_dst = (seg["dst_buf"][sidx].astype(np.int64), seg["dst_off"][sidx].astype(np.int64))
    cl = np.concatenate([[0], np.cumsum(s_len)])
    nbytes = cl[cnt[1:]] - cl[cnt[:-1]]
    local = src == dst
    sending = (src == rank) & ~local
    kind = np.where(local, LOCAL, np.where(sending, SEND, RECV))
    staged = ~local & ((nk > 1) | ((kind == RECV) & (op == OP_REDUCE_SUM)))

    # Staging (p2p transport): per step the staged sends, then the staged receives, in id
    # order, each on an aligned offset.
    stage = np.full(len(live), -1, dtype=np.int64)
    step_staging: dict = {}
    s_at = np.nonzero(staged)[0]
    if len(s_at):
        s_at = s_at[np.lexsort((kind[s_at], step[s_at]))]
        size = (nbytes[s_at] + STAGING_ALIGN - 1) // STAGING_ALIGN * STAGING_ALIGN
        end = np.cumsum(size)
        st = step[s_at]
        head = np.concatenate([[True], st[1:] != st[:-1]])
        base = (end - size)[head]
        stage[s_at] = end - size - base[np.cumsum(head) - 1]
        last = np.concatenate([np.nonzero(head)[0][1:], [len(s_at)]]) - 1
        step_staging = dict(zip(st[head].tolist(), (end[last] - base).tolist()))

    # Messages, in id order. A segment's (buf, off) on this side: the sender reads, the
    # receiver writes. Most messages have one segment: built from columns, without a loop.
    comm = np.nonzero(~local)[0]
    snd = sending[comm]
    first = cnt[:-1][comm]
    side_buf = np.where(sending[owner], s_src[0], s_dst[0])
    side_off = np.where(sending[owner], s_src[1], s_dst[1])
    segs = [[x] for x in zip(side_buf[first].tolist(), side_off[first].tolist(), nbytes[comm].tolist(), repeat(0))]
    multi = np.nonzero(nk[comm] > 1)[0]
    if len(multi):  # their segments back to back, each with its place in the message
        on = ((nk > 1) & ~local)[owner]
        msg_off = cl[:-1] - np.repeat(cl[cnt[:-1]], nk)
        flat = list(zip(side_buf[on].tolist(), side_off[on].tolist(), s_len[on].tolist(), msg_off[on].tolist()))
        ends = np.cumsum(nk[comm][multi]).tolist()
        for j, a, e in zip(multi.tolist(), [0] + ends[:-1], ends):
            segs[j] = flat[a:e]
    msgs = list(map(_new_message, zip(tid[comm].tolist(), np.where(snd, dst[comm], src[comm]).tolist(),
                                      op[comm].tolist(), nbytes[comm].tolist(), segs, stage[comm].tolist())))
    # Local copies keep whole segment rows: (src_buf, src_off, dst_buf, dst_off, len).
    loc = np.nonzero(local)[0]
    rows = list(zip(*(c[local[owner]].tolist() for c in (*s_src, *s_dst, s_len))))
    copies, at = [], 0
    for o, k in zip(op[loc].tolist(), nk[loc].tolist()):
        copies.append((o, rows[at:at + k]))
        at += k

    c_step, l_step = step[comm], step[loc]
    snd_l = snd.tolist()
    in_order = bool((step[1:] >= step[:-1]).all())  # then so is every part
    p2p, p2p_keys = _by_step(c_step, list(zip(snd_l, msgs)), in_order)
    sends, send_keys = _by_step(c_step[snd], list(compress(msgs, snd_l)), in_order)
    recvs, recv_keys = _by_step(c_step[~snd], list(compress(msgs, (~snd).tolist())), in_order)
    local_items, local_keys = _by_step(l_step, list(zip(copies, tid[loc].tolist())), in_order)
    all_steps = step
    if collective_steps and moving_pairs:
        all_steps = np.concatenate([step, np.fromiter(moving_pairs, dtype=np.int64)])
    all_steps = _sorted_unique(all_steps)
    # Each list's cut points per step: a step's part ends where the next step's begins.
    cuts = [np.searchsorted(keys, all_steps).tolist() + [len(keys)]
            for keys in (p2p_keys, send_keys, recv_keys, local_keys)]
    ordered = []
    for s, pa, pb, sa, sb_, ra, rb, la, lb in zip(all_steps.tolist(), *(x for c in cuts for x in (c[:-1], c[1:]))):
        k = moving_pairs.get(s) if collective_steps else None
        lc = local_items[la:lb]
        ordered.append(StepProgram(s, sends=sends[sa:sb_], recvs=recvs[ra:rb], local=[cp for cp, _ in lc],
                                   local_tids=[i for _, i in lc], staging_bytes=step_staging.get(s, 0),
                                   global_comm=k is not None, dense=k is not None and 2 * k >= n * (n - 1),
                                   p2p_order=p2p[pa:pb], _n=n, _rank=rank))
    if sizes is not None:
        input_bytes, output_bytes, scratch_bytes = sizes
    else:
        scratch = plan.scratch_bytes
        input_bytes, output_bytes = plan.input_sizes[rank], plan.output_sizes[rank]
        scratch_bytes = scratch[rank] if len(scratch) > rank else 0
    cols = _Columns(tid, kind, op, nbytes, staged, comm, msgs, loc, copies, owner, s_src, s_dst, s_len)
    return RankProgram(
        rank=rank,
        num_ranks=n,
        collective=plan.collective,
        input_bytes=int(input_bytes),
        output_bytes=int(output_bytes),
        scratch_bytes=int(scratch_bytes),
        steps=ordered,
        staging_bytes=max(step_staging.values(), default=0),
        bytes_sent=int(nbytes[sending].sum()),
        bytes_received=int(nbytes[kind == RECV].sum()),
        uses_reduce=bool((op == OP_REDUCE_SUM).any()),
        collective_steps=collective_steps,
        _source=(plan, arrays),
        _cols=cols,
    )


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
    tid: int
    msg: Message | None
    local: tuple | None
    deps: tuple
    stage_off: int = -1
    post_after: tuple = ()


_new_action = partial(tuple.__new__, Action)


@dataclass
class OverlapProgram:
    actions: list  # Action, ascending transfer id (a topological order of `deps`)
    dependents: list  # per action: indices (tuple, ascending) of the actions that wait for it
    staging_bytes: int
    early_recvs: list  # receives with nothing to wait for before posting: posted at the start
    post_waiters: list  # per action: the receives (tuple, ascending) whose posting waits for it


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
    owner, dep = _dep_pairs(plan, rank, arrays)
    out: dict = {}
    for o, d in zip(owner.tolist(), dep.tolist()):
        out.setdefault(o, []).append(d)
    return {o: tuple(ds) for o, ds in out.items()}


def _dep_pairs(plan, rank: int, arrays: PlanArrays | None = None) -> tuple:
    """`rank_deps` as two int64 arrays (transfer id, id it waits for), sorted by both."""
    none = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    if arrays is not None:
        t, seg_len, deps = arrays.transfers, arrays.segments["len"], arrays.deps
        ids = None
    else:
        rows = hasattr(plan, "_rows")  # a RankPlan: its rows and their global ids
        if not rows and not plan.num_deps:
            return none
        raw = plan._rows() if rows else plan._raw_arrays()
        t = np.frombuffer(raw["transfers"], dtype=TRANSFER_DTYPE)
        seg_len = np.frombuffer(raw["segments"], dtype=SEGMENT_DTYPE)["len"]
        deps = np.frombuffer(raw["deps"], dtype="<u4")
        ids = np.frombuffer(raw["ids"], dtype="<u4").astype(np.int64) if rows else None
    if not len(deps):
        return none
    on = np.ones(len(t), dtype=bool) if ids is not None else (t["src"] == rank) | (t["dst"] == rank)
    db, de = t["dep_begin"].astype(np.int64), t["dep_end"].astype(np.int64)
    cum = np.concatenate([np.zeros(1, np.uint64), np.cumsum(seg_len, dtype=np.uint64)])
    on &= cum[t["seg_end"].astype(np.int64)] > cum[t["seg_begin"].astype(np.int64)]  # moves bytes
    mine = np.nonzero(on & (de > db))[0]
    if not len(mine):
        return none
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
    owner, dep_ids = owner[keep], dep_ids[keep]
    order = np.lexsort((dep_ids, owner))
    return owner[order], dep_ids[order]


def _conflict_pairs(c: _Columns) -> tuple:
    """(later, earlier) action indices with a conflicting access to this rank's buffers
    (overlapping bytes of one buffer, at least one of the two writing), each pair once.

    Input is never written, so its reads are left out. Accesses are sorted per buffer by
    start; one that starts at or after the end of all before it opens a new cluster, and
    each access is compared with the earlier ones of its cluster.
    """
    kind = c.kind[c.seg_owner]
    reads = (kind != RECV) & (c.seg_src[0] != BUF_INPUT)  # sends and local copies read their source
    writes = kind != SEND  # receives and local copies write their destination
    act = np.concatenate([c.seg_owner[reads], c.seg_owner[writes]])
    buf = np.concatenate([c.seg_src[0][reads], c.seg_dst[0][writes]])
    lo = np.concatenate([c.seg_src[1][reads], c.seg_dst[1][writes]])
    hi = lo + np.concatenate([c.seg_len[reads], c.seg_len[writes]])
    w = np.concatenate([np.zeros(int(reads.sum()), bool), np.ones(int(writes.sum()), bool)])
    order = np.lexsort((lo, buf))
    act, buf, lo, hi, w = act[order], buf[order], lo[order], hi[order], w[order]
    if len(act) < 2:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    # The end reached by the accesses before each one, within its buffer.
    first_of_buf = np.concatenate([[True], buf[1:] != buf[:-1]])
    reach = np.empty_like(hi)
    for b in (BUF_OUTPUT, BUF_SCRATCH, BUF_INPUT):  # buffer ids are checked by the compiler
        at = buf == b
        if at.any():
            reach[at] = np.maximum.accumulate(hi[at])
    opens = first_of_buf.copy()
    opens[1:] |= lo[1:] >= reach[:-1]
    # Each access against the ones before it in its cluster (quadratic in a cluster's size,
    # as any sweep reporting every pair is; at most a dozen accesses in the benchmark's plans).
    back = np.arange(len(lo)) - np.nonzero(opens)[0][np.cumsum(opens) - 1]
    later = np.repeat(np.arange(len(lo)), back)
    earlier = later - (np.arange(len(later)) - np.repeat(np.cumsum(back) - back, back) + 1)
    hit = (hi[earlier] > lo[later]) & (w[earlier] | w[later]) & (act[earlier] != act[later])
    a, b = act[later[hit]], act[earlier[hit]]
    key = _sorted_unique(np.maximum(a, b) * len(c.tid) + np.minimum(a, b))
    return key // len(c.tid), key % len(c.tid)


def _cut(keys: np.ndarray, values: np.ndarray, n: int) -> list:
    """Per index in range(n), the tuple of `values` whose `keys` (sorted) equal it."""
    bounds = np.searchsorted(keys, np.arange(n + 1)).tolist()
    vals = tuple(values.tolist())
    return [vals[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def overlap_program(prog: RankProgram, deps: tuple) -> OverlapProgram:
    """`prog`'s sends, receives and local copies as one list in transfer-id order, each with
    the indices of the actions it waits for: its deps and every earlier action of this rank
    it has a conflicting access with; a receive is posted once the latter are done
    (`Action.post_after`). The verifier proves the plan orders each such pair by its deps
    (possibly through other ranks' transfers) in id order, so adding them keeps the order
    acyclic, and with them any schedule the actions allow writes what id order writes.

    Args:
        prog: a program from `compile_rank_program`.
        deps: (transfer ids, ids they wait for) as two int64 arrays (`_dep_pairs`).

    Returns:
        OverlapProgram: the actions, their dependents, the staging they need (each staged
        message on its own aligned offset, in id order) and when receives may be posted.

    Raises:
        ValueError: a dep names a transfer this rank does not execute.
    """
    c = prog._cols
    if c is None:
        raise ValueError("this program was built without its columns: compile it with compile_rank_program")
    n = len(c.tid)
    if not n:
        return OverlapProgram([], [], 0, [], [])
    msgs: list = [None] * n  # per action, its Message or its local copy
    copies: list = [None] * n
    for i, m in zip(c.comm.tolist(), c.msgs):
        msgs[i] = m
    for i, cp in zip(c.loc.tolist(), c.copies):
        copies[i] = cp
    owner, on = deps
    d_succ = np.searchsorted(c.tid, owner)
    known = (d_succ < n) & (c.tid[np.minimum(d_succ, n - 1)] == owner)
    d_succ, on = d_succ[known], on[known]
    d_pred = np.minimum(np.searchsorted(c.tid, on), n - 1)
    missing = np.nonzero(c.tid[d_pred] != on)[0]
    if len(missing):
        k = int(missing[0])
        raise ValueError(f"transfer {int(c.tid[d_succ[k]])} of rank {prog.rank} depends on transfer {int(on[k])}, "
                         "which this rank does not execute (the plan and its deps disagree)")
    c_succ, c_pred = _conflict_pairs(c)
    # Every edge once, sorted by (waiter, waited for) and by (waited for, waiter).
    key = _sorted_unique(np.concatenate([d_succ * n + d_pred, c_succ * n + c_pred]))
    succ, pred = key // n, key % n
    waits_for = _cut(succ, pred, n)
    by_pred = np.lexsort((succ, pred))
    dependents = _cut(pred[by_pred], succ[by_pred], n)
    # Staging: each staged message its own aligned offset, in id order.
    stage = np.full(n, -1, dtype=np.int64)
    s_at = np.nonzero(c.staged)[0]
    size = (c.nbytes[s_at] + STAGING_ALIGN - 1) // STAGING_ALIGN * STAGING_ALIGN
    end = np.cumsum(size)
    stage[s_at] = end - size
    # A receive into the user's buffer is posted after the accesses it conflicts with.
    recv = c.kind == RECV
    posted_after = recv[c_succ] & (stage[c_succ] < 0)
    p_succ, p_pred = c_succ[posted_after], c_pred[posted_after]
    post = _cut(p_succ, p_pred, n)
    by_pred = np.lexsort((p_succ, p_pred))
    post_waiters = _cut(p_pred[by_pred], p_succ[by_pred], n)
    early = np.nonzero(recv & (np.bincount(p_succ, minlength=n) == 0))[0].tolist()
    tid_l, kind_l = c.tid.tolist(), c.kind.tolist()
    actions = list(map(_new_action, zip(kind_l, tid_l, msgs, copies, waits_for, stage.tolist(), post)))
    return OverlapProgram(actions, dependents, int(end[-1]) if len(end) else 0, early, post_waiters)
