"""Dependency-driven execution of one rank's program on a backend whose waits block the host (Gloo).

No step barrier: an action starts as soon as the actions it depends on (`rank_deps` and
conflicting accesses, see `program.RankProgram.overlap`) have completed. Sends are posted when
their deps are done (gathered first when staged); local copies run when their deps are
done. Receives are posted early: into staging at once (only the scatter waits for the
deps), into the user's buffer once the earlier accesses to those bytes are done
(`Action.post_after`), so a sender that is ahead never waits for the receiver's pacing.
A receive completes (scatter, dependents released) only once its deps are done too.
Everything posted moves on the backend's own threads, so the host only waits when nothing
else can start.

Gloo's point-to-point works never report completion by polling (``is_completed()`` stays
False until ``wait()`` is called), so the host waits, with the timeout, on one work at a
time: the lowest transfer id among the posted works that some action waits for, then,
once nothing else can start, on the rest in id order. That choice never deadlocks: ids are
a topological order of the deps on every rank, so every transfer below the lowest posted
one is done here, and its peer posts its side once its own lower transfers are done.
"""
from __future__ import annotations

import heapq
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from collsched.comm.errors import CommTimeoutError, classify_transport_error
from collsched.comm.program import LOCAL, RECV, SEND, OverlapProgram

_TAG_SPACE = 2**31 - 1


def run_overlapped(ov: OverlapProgram, bufs: tuple, staging: torch.Tensor | None, route, dtype: torch.dtype,
                   timeout_s: float, apply) -> None:
    """Run `ov` for this rank.

    Args:
        ov: the rank's `OverlapProgram` (``RankProgram.overlap``).
        bufs: (input, output, scratch) as flat uint8 tensors.
        staging: uint8 tensor of at least ``ov.staging_bytes`` (None when that is 0).
        route: a `Router` (``collsched.comm.duplex``): the group each direction travels on.
        dtype: the element type ReduceSum adds in.
        timeout_s: bound on the run's waits together, in seconds (one deadline, not per wait).
        apply: ``apply(op, dsts, srcs, dtype)``, the executor's copy / add.

    Raises:
        CommTimeoutError: a transfer did not complete within `timeout_s` (names it, its peer
            and what it waited for).
        PeerFailureError: the transport reported a broken connection.
    """
    acts = ov.actions
    n = len(acts)
    if not n:
        return
    deadline = time.monotonic() + timeout_s
    left = [len(a.deps) for a in acts]  # deps not yet complete
    works: list = [None] * n
    dependents = ov.dependents
    peers = route.peers
    ready = [i for i in range(n) if not left[i]]  # ascending: already a heap
    waiting: list = []  # (has no dependents, index) of posted works
    done = 0

    def post_recv(i: int):
        a = acts[i]
        m = a.msg
        buf = (bufs[m.segs[0][0]][m.segs[0][1]:m.segs[0][1] + m.nbytes] if a.stage_off < 0
               else staging[a.stage_off:a.stage_off + m.nbytes])
        try:
            return dist.irecv(buf, peers[m.peer], group=route.recv_group(m.peer), tag=m.tag % _TAG_SPACE)
        except RuntimeError as e:
            raise classify_transport_error(e, _what(acts, i, route.rank)) from e

    posted = [False] * n
    post_left = [len(a.post_after) for a in acts]
    post_waiters = ov.post_waiters

    def completed(i: int) -> None:
        nonlocal done
        done += 1
        for j in post_waiters[i]:
            post_left[j] -= 1
            if not post_left[j] and not posted[j]:
                posted[j] = True
                works[j] = post_recv(j)
        for j in dependents[i]:
            left[j] -= 1
            if not left[j]:
                heapq.heappush(ready, j)

    for i in ov.early_recvs:
        posted[i] = True
        works[i] = post_recv(i)
    while True:
        while ready:
            i = heapq.heappop(ready)
            a = acts[i]
            if a.kind == LOCAL:
                op, segs = a.local
                apply(op, [bufs[s[2]][s[3]:s[3] + s[4]] for s in segs], [bufs[s[0]][s[1]:s[1] + s[4]] for s in segs],
                      dtype)
                completed(i)
                continue
            m = a.msg
            if a.kind == SEND:
                posted[i] = True
                if a.stage_off < 0:
                    b, off, ln, _ = m.segs[0]
                    msg = bufs[b][off:off + ln]
                else:
                    msg = staging[a.stage_off:a.stage_off + m.nbytes]
                    torch.cat([bufs[b][off:off + ln] for b, off, ln, _ in m.segs], out=msg)
                try:
                    works[i] = dist.isend(msg, peers[m.peer], group=route.send_group(m.peer), tag=m.tag % _TAG_SPACE)
                except RuntimeError as e:
                    raise classify_transport_error(e, _what(acts, i, route.rank)) from e
            elif not posted[i]:  # its post_after are among its deps: normally posted already
                posted[i] = True
                works[i] = post_recv(i)
            heapq.heappush(waiting, (not dependents[i], i))
        if not waiting:
            break
        _, i = heapq.heappop(waiting)
        try:
            ok = works[i].wait(timeout=timedelta(seconds=max(deadline - time.monotonic(), 1e-3)))
        except RuntimeError as e:
            raise classify_transport_error(e, _what(acts, i, route.rank)) from e
        if ok is False:
            raise CommTimeoutError(f"{_what(acts, i, route.rank)}: timed out after {timeout_s:g} s")
        works[i] = None
        a = acts[i]
        if a.kind == RECV and a.stage_off >= 0:
            m = a.msg
            base = a.stage_off
            apply(m.op, [bufs[b][off:off + ln] for b, off, ln, _ in m.segs],
                  [staging[base + mo:base + mo + ln] for _, _, ln, mo in m.segs], dtype)
        completed(i)
    if done != n:  # only a program whose deps are not a DAG gets here: the compiler's bug
        stuck = [acts[i].row for i in range(n) if left[i]][:8]
        raise RuntimeError(f"collsched: rank {route.rank} cannot start the transfers of rows {stuck} of its plan: their dependencies never "
                           "complete on this rank (a bug: please report it with the plan)")


def _what(acts: list, i: int, rank: int) -> str:
    """The transfer a wait was for, its peer, and what it had waited for (for errors)."""
    a = acts[i]
    verb = "send to" if a.kind == SEND else "receive from"
    deps = [acts[d].row for d in a.deps]
    after = f", after rows {deps[:6]}{' ...' if len(deps) > 6 else ''}" if deps else ""
    return (f"collsched transfer on rank {rank} ({verb} rank {a.msg.peer}, tag {a.msg.tag}, {a.msg.nbytes} bytes, "
            f"row {a.row} of its plan{after}; "
            "dependency-driven p2p)")


__all__ = ["run_overlapped"]
