"""The numpy layout the core's `plan::rank_program` replaced, kept as the tests' oracle.

`compile_reference(plan, rank, arrays, collective_steps=...)` returns ``(RankProgram,
columns)`` as the former `compile_rank_program` built it (checks, staging offsets and step
cuts in numpy), and `overlap_reference(prog, columns, _dep_pairs(plan, rank, arrays))` the
former `overlap_program`: the dependency edges (`_dep_pairs`), the conflicting accesses
(`_conflict_pairs`), dependents, post_after / post_waiters, early receives and per-message
staging. tests/test_rank_program_core.py checks the core's programs equal these.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from itertools import compress, repeat
from operator import itemgetter

import numpy as np

from collsched.comm.program import (BUF_INPUT, BUF_OUTPUT, BUF_SCRATCH, LOCAL, OP_REDUCE_SUM, RECV, SEGMENT_DTYPE,
                                    SEND, STAGING_ALIGN, TRANSFER_DTYPE, Action, Message, OverlapProgram, PlanArrays,
                                    RankProgram, StepProgram, plan_arrays)

_new_action = partial(tuple.__new__, Action)


@dataclass(frozen=True)
class _Columns:
    """One rank's byte-moving transfers in plan order, as numpy columns, and what the program
    built from them shares with `overlap_program` (its messages and local copies)."""

    row: np.ndarray  # int64, ascending: the rows of the rank's plan
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


def _pair_tags(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Per row, its count of earlier rows with the same (src, dst) (the rows' tags)."""
    key = src.astype(np.int64) * (1 << 32) + dst.astype(np.int64)
    order = np.argsort(key, kind="stable")
    k = key[order]
    head = np.concatenate([[True], k[1:] != k[:-1]]) if len(k) else np.zeros(0, bool)
    first = np.nonzero(head)[0]
    rank_in_group = np.arange(len(k)) - first[np.cumsum(head) - 1]
    tags = np.empty(len(k), np.int64)
    tags[order] = rank_in_group
    return tags


def _rank_view(plan, rank: int, arrays: PlanArrays | None, count_pairs: bool) -> tuple:
    """(ids, tags, transfers, segments, moving pairs, sizes) of the transfers `rank` takes part
    in, in plan order (`ids`: global ids from a whole plan, rows from a RankPlan; they only
    name transfers in errors): from a `RankPlan`'s rows, or from the whole plan's decoded
    `arrays` (numpy, independent of the core's cut; a whole Plan is decoded here when they are
    not given)."""
    n = plan.num_ranks
    if arrays is None and not hasattr(plan, "_rows"):
        arrays = plan_arrays(plan)
    if arrays is not None:
        t = arrays.transfers
        mine = np.nonzero((t["src"] == rank) | (t["dst"] == rank))[0]
        moving = (t["src"] != t["dst"]) & (arrays.transfer_bytes() > 0)
        pair_ids = np.unique(t["step"][moving].astype(np.int64) * (n * n) + t["src"][moving].astype(np.int64) * n
                             + t["dst"][moving])
        steps, pairs = np.unique(pair_ids // (n * n), return_counts=True)
        return (mine.astype(np.int64), _pair_tags(t["src"][mine], t["dst"][mine]), t[mine], arrays.segments,
                dict(zip(steps.tolist(), pairs.tolist())), None)
    if plan.rank != rank:
        raise ValueError(f"this RankPlan is rank {plan.rank}'s, not rank {rank}'s")
    v = plan._rows()
    moving = None if v["moving_pairs"] is None else dict(np.frombuffer(v["moving_pairs"], dtype="<u4").reshape(-1, 2).tolist())
    tags = np.frombuffer(v["tags"], dtype="<u4").astype(np.int64)
    return (np.arange(len(tags), dtype=np.int64), tags, np.frombuffer(v["transfers"], dtype=TRANSFER_DTYPE),
            np.frombuffer(v["segments"], dtype=SEGMENT_DTYPE), moving, v["sizes"])


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


def compile_reference(plan, rank: int, arrays: PlanArrays | None = None, *,
                      collective_steps: bool = True) -> tuple:
    """What `rank` sends, receives and copies in each step of `plan`.

    Empty segments and transfers are dropped (both sides skip them alike). The columns are
    checked, cut and laid out with numpy; Python builds only the objects the executor reads.

    Args:
        plan: a whole ``Plan`` (decoded and cut in numpy) or this rank's ``RankPlan``
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
    ids, tags, t, seg, moving_pairs, sizes = _rank_view(plan, rank, arrays, collective_steps)
    if collective_steps and moving_pairs is None:
        raise ValueError("collective steps need the rank plan's moving pairs, which were not counted")
    live, nk, sidx = _kept(ids, t, seg)
    row, tag = live.astype(np.int64), tags[live]
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
    msgs = list(map(_new_message, zip(tag[comm].tolist(), np.where(snd, dst[comm], src[comm]).tolist(),
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
    local_items, local_keys = _by_step(l_step, list(zip(copies, row[loc].tolist())), in_order)
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
                                   local_rows=[i for _, i in lc], staging_bytes=step_staging.get(s, 0),
                                   global_comm=k is not None, dense=k is not None and 2 * k >= n * (n - 1),
                                   p2p_order=p2p[pa:pb], _n=n, _rank=rank))
    if sizes is not None:
        input_bytes, output_bytes, scratch_bytes = sizes
    else:
        scratch = plan.scratch_bytes
        input_bytes, output_bytes = plan.input_sizes[rank], plan.output_sizes[rank]
        scratch_bytes = scratch[rank] if len(scratch) > rank else 0
    cols = _Columns(row, kind, op, nbytes, staged, comm, msgs, loc, copies, owner, s_src, s_dst, s_len)
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
    ), cols


def _dep_pairs(plan, rank: int, arrays: PlanArrays | None = None) -> tuple:
    """`rank_deps` as two int64 arrays (row, row it waits for) of the rank's plan, sorted by both."""
    none = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    rows = arrays is None and hasattr(plan, "_rows")  # a RankPlan: its deps are rows already
    if arrays is not None:
        t, seg_len, deps = arrays.transfers, arrays.segments["len"], arrays.deps
    else:
        if not rows and not plan.num_deps:
            return none
        raw = plan._rows() if rows else plan._raw_arrays()
        t = np.frombuffer(raw["transfers"], dtype=TRANSFER_DTYPE)
        seg_len = np.frombuffer(raw["segments"], dtype=SEGMENT_DTYPE)["len"]
        deps = np.frombuffer(raw["deps"], dtype="<u4")
    if not len(deps):
        return none
    on = np.ones(len(t), dtype=bool) if rows else (t["src"] == rank) | (t["dst"] == rank)
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
    keep = on[dep_ids]
    owner, dep_ids = owner[keep], dep_ids[keep]
    if not rows:  # global ids -> rows: positions among the transfers the rank takes part in
        part = np.nonzero((t["src"] == rank) | (t["dst"] == rank))[0]
        owner, dep_ids = np.searchsorted(part, owner), np.searchsorted(part, dep_ids)
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
    key = _sorted_unique(np.maximum(a, b) * len(c.row) + np.minimum(a, b))
    return key // len(c.row), key % len(c.row)


def _cut(keys: np.ndarray, values: np.ndarray, n: int) -> list:
    """Per index in range(n), the tuple of `values` whose `keys` (sorted) equal it."""
    bounds = np.searchsorted(keys, np.arange(n + 1)).tolist()
    vals = tuple(values.tolist())
    return [vals[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def overlap_reference(prog: RankProgram, c: _Columns, deps: tuple) -> OverlapProgram:
    """`prog`'s sends, receives and local copies as one list in plan order, each with
    the indices of the actions it waits for: its deps and every earlier action of this rank
    it has a conflicting access with; a receive is posted once the latter are done
    (`Action.post_after`). The verifier proves the plan orders each such pair by its deps
    (possibly through other ranks' transfers) in id order, so adding them keeps the order
    acyclic, and with them any schedule the actions allow writes what id order writes.

    Args:
        prog: a program from `compile_rank_program`.
        deps: (rows, rows they wait for) as two int64 arrays (`_dep_pairs`).

    Returns:
        OverlapProgram: the actions, their dependents, the staging they need (each staged
        message on its own aligned offset, in id order) and when receives may be posted.

    Raises:
        ValueError: a dep names a transfer this rank does not execute.
    """
    n = len(c.row)
    if not n:
        return OverlapProgram([], [], 0, [], [])
    msgs: list = [None] * n  # per action, its Message or its local copy
    copies: list = [None] * n
    for i, m in zip(c.comm.tolist(), c.msgs):
        msgs[i] = m
    for i, cp in zip(c.loc.tolist(), c.copies):
        copies[i] = cp
    owner, on = deps
    d_succ = np.searchsorted(c.row, owner)
    known = (d_succ < n) & (c.row[np.minimum(d_succ, n - 1)] == owner)
    d_succ, on = d_succ[known], on[known]
    d_pred = np.minimum(np.searchsorted(c.row, on), n - 1)
    missing = np.nonzero(c.row[d_pred] != on)[0]
    if len(missing):
        k = int(missing[0])
        raise ValueError(f"row {int(c.row[d_succ[k]])} of rank {prog.rank} depends on row {int(on[k])}, "
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
    row_l, kind_l = c.row.tolist(), c.kind.tolist()
    actions = list(map(_new_action, zip(kind_l, row_l, msgs, copies, waits_for, stage.tolist(), post)))
    return OverlapProgram(actions, dependents, int(end[-1]) if len(end) else 0, early, post_waiters)
