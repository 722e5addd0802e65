"""A call's descriptor: what each rank checks locally and tells every peer before data moves.

A rank never raises on a local problem before the exchange (a rank that raised alone would
leave the others waiting): it records a problem code that travels in its header, and every
rank words the same error from the gathered headers (`check_gathered`).

Header layout, ``HEADER_WORDS + 2 P`` int64 words per rank:

====  ===========================================================================
word  meaning
====  ===========================================================================
0-2   problem code and two details (0: none; see ``PROBLEMS``)
3     dtype code (``DTYPE_CODE``)
4     elements per row (trailing shape)
5     bytes per element
6     configuration hash (cluster, algorithm, options, transport, version, calibration)
7     traffic hash (``traffic=``), or 0
8     digest of the plan this rank executed at this call site's last planned call (0: none)
9     1 when ``traffic=`` was passed
10    the call site's mode on this rank (``callsite.MODES``): ranks must agree
11    the call's sequence number on its process group on this rank (``GroupCalls.begin``)
12-13 fingerprints of the rows sent and expected in the group's NATIVE calls since its
      last exchange (``callsite.split_fingerprint``; 0 when there were none)
14    bytes of eager payload following this header in this message (per destination)
====  ===========================================================================

then ``input_split_sizes`` (P words) and ``output_split_sizes`` (P words), in rows.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

import collsched
from collsched.comm.errors import (CollectiveInputError, PlanMismatchError, TrafficMismatchError,
                                   collapse_rank_messages, rank_ranges)

# dtype <-> small integer for the descriptor (order fixed forever; append only).
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.uint8, torch.int8, torch.int16,
          torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128]
for _name in ("float8_e4m3fn", "float8_e5m2", "uint16", "uint32", "uint64"):
    if hasattr(torch, _name):
        DTYPES.append(getattr(torch, _name))
DTYPE_CODE = {d: i + 1 for i, d in enumerate(DTYPES)}
UNKNOWN_DTYPE = 99


def dtype_name(code: int) -> str:
    """The torch name of a dtype code (``"bfloat16"``), for error messages."""
    return str(DTYPES[code - 1]).replace("torch.", "") if 1 <= code <= len(DTYPES) else f"dtype#{code}"


# Problem codes: (code, d1, d2) travel in the header so every rank can word the error.
PROBLEMS = {
    1: lambda a, b: "input is not a contiguous tensor",
    2: lambda a, b: "output is not a contiguous tensor",
    3: lambda a, b: f"input dtype {dtype_name(a)} differs from output dtype {dtype_name(b)}",
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
    21: lambda a, b: "unknown all-to-all algorithm (known: " + ", ".join(
        name for name, _ in collsched.all_to_all_algorithms()) + ")",
}

HEADER_WORDS = 15
# Words 3-11 (dtype through the sequence number) must be equal on every rank: one comparison.
W_CODE, W_DTYPE, W_ROW_ELEMS, W_ELEM_SIZE, W_CFG, W_TRAFFIC, W_PREV_DIGEST, W_HAS_TRAFFIC, W_MODE = (
    0, 3, 4, 5, 6, 7, 8, 9, 10)
W_SEQ, W_SENT_FP, W_RECV_FP, W_EAGER = 11, 12, 13, 14


class LocalProblem(Exception):
    """A problem found on this rank before the exchange: raised at once only where nothing
    is exchanged (``checks=False``, a call torch runs alone); otherwise it travels."""

    def __init__(self, code: int, d1: int = 0, d2: int = 0, text: str = ""):
        super().__init__(text)
        self.code, self.d1, self.d2, self.text = code, int(d1), int(d2), text

    def message(self) -> str:
        return PROBLEMS[self.code](self.d1, self.d2) + (f" ({self.text})" if self.text else "")


@dataclass
class CallArgs:
    """This rank's side of one call, validated locally.

    Attributes:
        in_splits: rows to each rank, ``[P]``; out_splits: rows from each rank, ``[P]``.
        dtype_code, row_elems, elem_size: the element type and row shape.
        problem: the first local problem, or None.
    """

    in_splits: list
    out_splits: list
    dtype_code: int = 0
    row_elems: int = 0
    elem_size: int = 0
    problem: LocalProblem | None = None

    @property
    def row_bytes(self) -> int:
        return self.row_elems * self.elem_size


def split_sizes(sizes, dim0: int, world: int, which: str) -> list[int]:
    """`sizes` as a list of ``world`` non-negative ints summing to `dim0` (None: equal split).

    Raises:
        LocalProblem: naming the entry or the sum that is wrong.
    """
    code_len, code_neg, code_sum, code_eq = (5, 7, 9, 11) if which == "input" else (6, 8, 10, 12)
    if sizes is None:
        if dim0 % world:
            raise LocalProblem(code_eq, dim0, world)
        return [dim0 // world] * world
    try:
        vals = [int(x) for x in (sizes.tolist() if isinstance(sizes, torch.Tensor) else sizes)]
    except (TypeError, ValueError):
        raise LocalProblem(20, text=f"{which}_split_sizes must be a sequence of integers") from None
    if len(vals) != world:
        raise LocalProblem(code_len, len(vals), world)
    if min(vals, default=0) < 0:
        j = next(j for j, v in enumerate(vals) if v < 0)
        raise LocalProblem(code_neg, j, vals[j])
    if sum(vals) != dim0:
        raise LocalProblem(code_sum, sum(vals), dim0)
    return vals


def _row_elems(t: torch.Tensor) -> int:
    n = 1
    for s in t.shape[1:]:
        n *= s
    return n


def validate_local(output, input, output_split_sizes, input_split_sizes, world: int) -> CallArgs:
    """Check one rank's arguments without talking to anyone; the problem is recorded, not raised."""
    args = CallArgs([0] * world, [0] * world)
    try:
        if not isinstance(input, torch.Tensor) or not isinstance(output, torch.Tensor) or input.dim() == 0 \
                or output.dim() == 0:
            raise LocalProblem(19)
        args.dtype_code = DTYPE_CODE.get(input.dtype, UNKNOWN_DTYPE)
        args.row_elems = _row_elems(input)
        args.elem_size = input.element_size()
        if not input.is_contiguous():
            raise LocalProblem(1)
        if not output.is_contiguous():
            raise LocalProblem(2)
        if input.device != output.device:
            raise LocalProblem(16)
        if output.dtype != input.dtype:
            raise LocalProblem(3, args.dtype_code, DTYPE_CODE.get(output.dtype, UNKNOWN_DTYPE))
        out_row = _row_elems(output)
        if out_row != args.row_elems:
            raise LocalProblem(4, args.row_elems, out_row)
        args.in_splits = split_sizes(input_split_sizes, input.size(0), world, "input")
        args.out_splits = split_sizes(output_split_sizes, output.size(0), world, "output")
    except LocalProblem as p:
        args.problem = p
    return args


def traffic_rows(traffic, world: int) -> np.ndarray:
    """`traffic` (P×P rows, any integer array-like) as int64.

    Raises:
        LocalProblem: not a P×P non-negative integer matrix.
    """
    m = np.asarray(traffic.tolist() if isinstance(traffic, torch.Tensor) else traffic)
    if m.shape != (world, world) or m.dtype.kind not in "iu" or (m.size and m.min() < 0):
        raise LocalProblem(13, m.size, world, text=f"got shape {m.shape} and dtype {m.dtype}")
    return m.astype(np.int64)


def check_traffic(rows: np.ndarray, args: CallArgs, rank: int) -> None:
    """`traffic=`'s row and column of this rank must be its split sizes."""
    bad = np.nonzero(rows[rank] != np.asarray(args.in_splits))[0]
    if len(bad):
        raise LocalProblem(14, int(bad[0]))
    bad = np.nonzero(rows[:, rank] != np.asarray(args.out_splits))[0]
    if len(bad):
        raise LocalProblem(15, int(bad[0]))


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= (1 << 63) else v


def header(args: CallArgs, world: int, cfg_hash: int, traffic_hash: int, prev_digest: int, has_traffic: bool,
           mode: int, seq: int = 0, fingerprints: tuple = (0, 0)) -> np.ndarray:
    """This rank's header, ``[HEADER_WORDS + 2 P]`` with ``numpy.int64`` (word `W_EAGER` is set
    per destination by the exchange)."""
    p = args.problem
    h = np.empty(HEADER_WORDS + 2 * world, dtype=np.int64)
    h[:HEADER_WORDS] = (p.code if p else 0, p.d1 if p else 0, p.d2 if p else 0, args.dtype_code, args.row_elems,
                        args.elem_size, cfg_hash, traffic_hash, prev_digest, int(has_traffic), mode, seq,
                        _signed(fingerprints[0]), _signed(fingerprints[1]), 0)
    h[HEADER_WORDS:HEADER_WORDS + world] = args.in_splits
    h[HEADER_WORDS + world:] = args.out_splits
    return h


def check_sequence(g: np.ndarray, last_check: int = -1) -> None:
    """The checks about the calls before this one, from the gathered headers: every rank at
    the same call of the group, and the NATIVE calls since the last check consistent. Skipped
    when the ranks' configurations differ (a rank whose configuration is bad or different
    has no fingerprints of its peers' call site to add).

    Args:
        g: the gathered headers ``[P, HEADER_WORDS + 2 P]``.
        last_check: the sequence number of the group's last checked call (-1: none).

    Raises:
        PlanMismatchError: the ranks' sequence numbers differ (naming the ranks behind or
            ahead and the calls that may have paired with the wrong peers' calls).
        CollectiveInputError: in a NATIVE call since the last check, some rank sent a
            different number of rows than its peer expected.
    """
    if (g[:, W_CFG] != g[0, W_CFG]).any():
        return  # the ranks called with different configurations: `check_gathered` says so
    seqs = g[:, W_SEQ]
    if (seqs != seqs[0]).any():
        by_seq: dict = {}
        for r, s in enumerate(seqs.tolist()):
            by_seq.setdefault(s, []).append(r)
        most = max(by_seq, key=lambda s: (len(by_seq[s]), -s))
        parts = ", ".join(f"{rank_ranges(rs)} at call #{s}" for s, rs in sorted(by_seq.items()))
        odd = "; ".join(f"{rank_ranges(rs)} {'is' if len(rs) == 1 else 'are'} {abs(s - most)} "
                        f"call{'s' if abs(s - most) > 1 else ''} {'ahead' if s > most else 'behind'}"
                        for s, rs in sorted(by_seq.items()) if s != most)
        lo, hi = last_check + 1, int(seqs.max())
        raise PlanMismatchError(
            f"collsched.all_to_all_single: ranks are at different calls of this process group ({parts}: {odd}). "
            f"The calls since its last check (#{lo}–#{hi}) may have met other calls of their peers and be wrong, "
            "and so will later ones: tear the process group down. Every rank must make the same calls in the same "
            "order; a call that raised on some ranks only, or torch's own call made in place of collsched's on "
            "some ranks, shifts their count")
    fps = g[:, W_SENT_FP:W_RECV_FP + 1]
    if not fps.any():  # no NATIVE call since the last exchange
        return
    sent, recv = fps.view(np.uint64).sum(axis=0, dtype=np.uint64)
    if sent != recv:
        raise CollectiveInputError(
            f"collsched.all_to_all_single: in at least one of calls #{last_check + 1}–#{int(seqs[0]) - 1} on this "
            "process group that ran torch's own all-to-all without an exchange, a rank sent a different number of rows "
            "than its peer expected (output_split_sizes contradicting input_split_sizes): their outputs may be "
            "wrong. checks='always' checks every call")


def check_gathered(g: np.ndarray, world: int, rank: int, problem: LocalProblem | None, last_check: int = -1) -> None:
    """Raise the same error on every rank from the gathered headers ``[P, HEADER_WORDS + 2 P]``:
    the same type and the same text (``str(e)``); a bad value only its own rank knows is in that
    rank's ``e.local_detail`` (and a note under the message).

    Raises:
        CollectiveInputError: a rank's arguments are bad, or ranks disagree on dtype, row
            shape, or on what they send each other (in this call, or in a NATIVE call since
            the last check: `check_sequence`).
        TrafficMismatchError: ``traffic=`` differs between ranks or is missing on some.
        PlanMismatchError: configurations, call sequences or the last plans differ.
    """
    shared_differ = bool((g[:, W_DTYPE:W_SENT_FP] != g[0, W_DTYPE:W_SENT_FP]).any())
    if shared_differ or g[:, W_SENT_FP:W_RECV_FP + 1].any():
        check_sequence(g, last_check)
    errors = []
    codes = g[:, W_CODE]
    for r in ([i for i, c in enumerate(codes.tolist()) if c] if codes.any() else []):
        code, d1, d2 = (int(x) for x in g[r, :3])
        errors.append((r, PROBLEMS.get(code, lambda a, b: f"error code {code}")(d1, d2)))
    if errors:
        err = CollectiveInputError("collsched.all_to_all_single: invalid arguments: " + collapse_rank_messages(errors))
        if problem is not None and problem.text:
            # Only codes travel, so the message is the same on every rank; what this rank alone
            # knows (the bad value itself) follows as a note, shown under it in a traceback.
            err.local_detail = f"rank {rank}: {problem.text}"
            if hasattr(err, "add_note"):  # Python 3.11+
                err.add_note(err.local_detail)
        raise err

    def differs(word: int) -> bool:
        return bool((g[:, word] != g[0, word]).any())

    ins = g[:, HEADER_WORDS:HEADER_WORDS + world]
    outs = g[:, HEADER_WORDS + world:HEADER_WORDS + 2 * world]
    # The common case: every shared word (dtype through the sequence number) equal and every
    # pair agreed on by both ends.
    if not shared_differ and not (outs.T != ins).any():
        return

    if differs(W_DTYPE):
        raise CollectiveInputError("collsched.all_to_all_single: ranks disagree on dtype: "
                                   + ", ".join(f"rank {r} {dtype_name(int(c))}" for r, c in enumerate(g[:, W_DTYPE])))
    if differs(W_ROW_ELEMS):
        raise CollectiveInputError("collsched.all_to_all_single: ranks disagree on the trailing shape (elements per "
                                   "row): " + ", ".join(f"rank {r} {int(c)}" for r, c in enumerate(g[:, W_ROW_ELEMS])))
    if differs(W_CFG):
        raise PlanMismatchError("collsched.all_to_all_single: ranks disagree on cluster, algorithm or options "
                                "(their configuration hashes differ)")
    if differs(W_MODE):
        raise PlanMismatchError("collsched.all_to_all_single: ranks are at different points of this call site's "
                                "sequence (modes " + ", ".join(f"rank {r} {int(c)}" for r, c in enumerate(g[:, W_MODE]))
                                + "): every rank must make the same calls in the same order")
    if differs(W_HAS_TRAFFIC):
        raise CollectiveInputError("collsched.all_to_all_single: some ranks passed traffic= and others did not: "
                                   f"ranks {[int(r) for r in np.nonzero(g[:, W_HAS_TRAFFIC])[0]]} did")
    if g[0, W_HAS_TRAFFIC] and differs(W_TRAFFIC):
        raise TrafficMismatchError("collsched.all_to_all_single: ranks passed different traffic matrices")
    mismatch = outs.T != ins  # outs[j][i] must equal ins[i][j]
    if mismatch.any():
        bad = np.argwhere(mismatch)
        i, j = (int(x) for x in bad[0])
        raise CollectiveInputError(f"collsched.all_to_all_single: rank {i} sends {int(ins[i, j])} rows to rank {j} "
                                   f"but rank {j} expects {int(outs[j, i])} (output_split_sizes disagree with "
                                   f"input_split_sizes; {len(bad)} such pairs)")
    if differs(W_PREV_DIGEST):
        parts = "; ".join(f"rank {r} {int(v) & ((1 << 64) - 1):016x}" for r, v in enumerate(g[:, W_PREV_DIGEST]))
        raise PlanMismatchError("collsched.all_to_all_single: the ranks executed different plans at this call site's "
                                f"last planned call ({parts}); check that every rank runs the same collsched version")


def gathered_rows(g: np.ndarray, world: int) -> np.ndarray:
    """The rows matrix ``[P, P]`` (int64) from gathered headers: entry [i][j] = rows i sends j."""
    return g[:, HEADER_WORDS:HEADER_WORDS + world]
