"""A Plan as numpy columns, and the per-rank program the executor runs.

`plan_arrays` decodes `Plan._raw_arrays()` (little-endian rows) into numpy
structured arrays. `compile_rank_program` keeps only what one rank does, step by
step, as plain Python tuples: the executor's inner loop then does no numpy
indexing and no decoding.
"""
from __future__ import annotations

from dataclasses import dataclass, field

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


@dataclass
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
class StepProgram:
    step: int
    sends: list = field(default_factory=list)  # Messages, ascending transfer id
    recvs: list = field(default_factory=list)  # Messages, ascending transfer id
    local: list = field(default_factory=list)  # (op, [(src_buf, src_off, dst_buf, dst_off, len)]) in transfer order
    staging_bytes: int = 0


@dataclass
class RankProgram:
    rank: int
    num_ranks: int
    collective: str
    input_bytes: int
    output_bytes: int
    scratch_bytes: int
    steps: list  # StepProgram with at least one action, ascending step
    staging_bytes: int  # max over steps
    bytes_sent: int
    bytes_received: int
    uses_reduce: bool


def _align(x: int) -> int:
    return (x + STAGING_ALIGN - 1) // STAGING_ALIGN * STAGING_ALIGN


def compile_rank_program(plan, rank: int, arrays: PlanArrays | None = None) -> RankProgram:
    """What `rank` sends, receives and copies in each step of `plan`."""
    n = plan.num_ranks
    if not 0 <= rank < n:
        raise ValueError(f"rank {rank} is outside the plan's {n} ranks")
    a = arrays if arrays is not None else plan_arrays(plan)
    t = a.transfers
    mine = np.nonzero((t["src"] == rank) | (t["dst"] == rank))[0]
    sub = t[mine]
    seg_rows = a.segments
    steps: dict[int, StepProgram] = {}
    sent = received = 0
    uses_reduce = False
    for tid, row in zip(mine.tolist(), sub.tolist()):
        src, dst, op, _tier, step, sb, se, _db, _de = row
        segs = [s for s in seg_rows[sb:se].tolist() if s[4] > 0]
        if not segs:
            continue  # an empty transfer moves nothing; both sides skip it alike
        if op not in (OP_COPY, OP_REDUCE_SUM):
            raise ValueError(f"transfer {tid} has unknown op {op}")
        for s in segs:
            if s[0] > BUF_SCRATCH or s[2] > BUF_SCRATCH:
                raise ValueError(f"transfer {tid} names an unknown buffer id")
        uses_reduce |= op == OP_REDUCE_SUM
        sp = steps.get(step)
        if sp is None:
            sp = steps[step] = StepProgram(step)
        if src == dst:
            sp.local.append((op, segs))
            continue
        nbytes = 0
        side = []
        for s in segs:
            if src == rank:
                side.append((s[0], s[1], s[4], nbytes))
            else:
                side.append((s[2], s[3], s[4], nbytes))
            nbytes += s[4]
        msg = Message(tid=tid, peer=dst if src == rank else src, op=op, nbytes=nbytes, segs=side)
        if src == rank:
            sp.sends.append(msg)
            sent += nbytes
        else:
            sp.recvs.append(msg)
            received += nbytes
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
    return RankProgram(
        rank=rank,
        num_ranks=n,
        collective=plan.collective,
        input_bytes=int(plan.input_sizes[rank]),
        output_bytes=int(plan.output_sizes[rank]),
        scratch_bytes=int(plan.scratch_bytes[rank]) if len(plan.scratch_bytes) > rank else 0,
        steps=ordered,
        staging_bytes=staging,
        bytes_sent=sent,
        bytes_received=received,
        uses_reduce=uses_reduce,
    )
