"""`MoEBuffer`: token-level MoE dispatch and combine over a torch.distributed group.

A dispatch is one count exchange and one or two all-to-alls of packed rows:

1. every rank all-gathers a descriptor: problem code, row shape, and its counts (tokens per
   expert, units per destination key). Each rank checks every descriptor the same way, so a
   bad argument anywhere raises the same error everywhere, before any data moves;
2. hop 1: each unit (one copy per token and destination node with ``dedup="node"``) goes to
   its hop rank (the node's forwarder chosen by the balancer; a rank is its own node's
   forwarder), with the token's expert ids and weights for that node packed behind its row;
3. hop 2 (``dedup="node"`` only, inside each node): the forwarder sends one row per
   (token, expert) pair to the expert's GPU; the receiver scatters the rows straight into
   their place in the expert-major output (``plan.place``: the expert-level distribution
   descriptors as one index).

Combine runs the hops backwards: the expert GPU returns rows to the forwarder, which sums
them with their weights per token (partial reduction) and sends one vector per token and
node back; the origin sums the nodes' vectors in token order.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.distributed as dist

from collsched.comm.descriptor import DTYPE_CODE, UNKNOWN_DTYPE, dtype_name
from collsched.comm.errors import CollectiveInputError, resolve_timeout
from collsched.comm.culprits import culprits_named, note_group
from collsched.comm.groups import blocking_waits, exchange_i64, require_initialized, wait_all
from collsched.comm.ops import tracing
from collsched.moe.ops import register as register_for_ops, traced_combine, traced_dispatch
from collsched.moe.routing import (DEDUP_MODES, SCHEDULES, CallPlan, Layout, hop_pairs, plan_exchange, plan_local,
                                   unit_ids)

_IDS = itertools.count(1)
_FLOAT_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)

# Problem codes: (code, a, b) travel in the descriptor so every rank words the same error.
_PROBLEMS = {
    1: lambda a, b: "x must be a 2-D floating-point tensor [T, H] (float32, float64, float16 or bfloat16)",
    2: lambda a, b: f"topk_idx must be an int64 tensor [T, K] with T = x.size(0) = {a}",
    3: lambda a, b: f"topk_idx holds expert id {a}, outside [-1, {b}) (-1 marks no expert)",
    4: lambda a, b: f"topk_weights must be a float32 tensor of topk_idx's shape [T, K] (T = {a}, K = {b})",
    5: lambda a, b: f"topk_idx row {a} names expert {b} twice",
    6: lambda a, b: "x, topk_idx and topk_weights must be on one device",
    7: lambda a, b: f"y must be the [N, H] expert outputs of this handle: N = {a}, H = {b}, the dispatched dtype",
    8: lambda a, b: "the handle belongs to another MoEBuffer or is not a dispatch handle",
    9: lambda a, b: "combine(weighted=True) needs topk_weights, but the dispatch was called without them",
    11: lambda a, b: f"dedup must be one of {DEDUP_MODES}",
    12: lambda a, b: f"schedule must be one of {SCHEDULES}",
    13: lambda a, b: f"num_experts must be a positive int, got {a if a >= 0 else 'a non-integer'}",
    14: lambda a, b: (f"num_experts = {a} is not a multiple of the group size {b} (experts sit in equal "
                      f"contiguous blocks; pass placement= otherwise)"),
    15: lambda a, b: f"the cluster (cluster=, COLLSCHED_CLUSTER or LOCAL_WORLD_SIZE) does not fit the group of {a} ranks",
    16: lambda a, b: f"placement must be {a} integer ranks in [0, {b}) (one per expert)",
    17: lambda a, b: f"combine_precision must be one of {COMBINE_PRECISIONS}",
}
# How a forwarder's partial sums of 16-bit rows cross the network in combine (see MoEBuffer).
COMBINE_PRECISIONS = ("float32", "native")
_WIDE_DTYPES = (torch.bfloat16, torch.float16)
_HDR = 8  # code, a, b, T, H, dtype, K, has_weights


def _problem_text(rank: int, code: int, a: int, b: int) -> str:
    text = _PROBLEMS.get(code, lambda a, b: f"problem #{code}")(a, b)
    return f"rank {rank}: {text}"


@dataclass
class DispatchHandle:
    """What combine needs to undo a dispatch. Opaque; pass it back to ``MoEBuffer.combine``."""

    buffer_id: int
    call_id: int
    tokens: int  # T on this rank
    rows: int  # N on this rank
    hidden: int
    dtype: torch.dtype
    topk: int
    has_weights: bool
    plan: CallPlan
    unit_token: torch.Tensor  # [U_out] token of each unit this rank sent in hop 1
    unit_ids: torch.Tensor  # [U_out, K] expert ids each unit carried
    hop_ids: torch.Tensor  # [U_in, K] ids of the units this rank received as a hop
    hop_weights: torch.Tensor | None  # [U_in, K] float32
    pair_unit: torch.Tensor  # [P] hop unit of each pair this rank sent in hop 2, in send order
    pair_k: torch.Tensor  # [P]
    place_t: torch.Tensor  # [N] output row of each incoming row (on the data's device)
    buffer: object = field(default=None, repr=False)  # the MoEBuffer (for the autograd functions)
    row_weights: torch.Tensor | None = field(default=None, repr=False)  # Dispatched.weights (combine's backward)
    unit_key: np.ndarray | None = field(default=None, repr=False)  # [U_out] destination key of each unit sent
    _unit_pairs: np.ndarray | None = field(default=None, repr=False)  # [U_out] pairs per unit (cached)
    _hop_multi_cache: np.ndarray | None = field(default=None, repr=False)  # [U_in] forwarded units with 2+ pairs

    def unit_pairs(self) -> np.ndarray:
        """[U_out] int64: the (token, expert) pairs each unit this rank sent serves on its hop
        (the hop keeps the ids of its node, or rank, of the unit's key; one with dedup="none")."""
        if self._unit_pairs is None:
            lay = self.buffer.layout
            ids = self.unit_ids.detach().cpu().numpy()
            mode = self.buffer.dedup
            if mode == "none" or not ids.size:
                self._unit_pairs = np.ones(ids.shape[0], dtype=np.int64)
            else:
                table = lay.node_key if mode == "node" else lay.rank_key  # index id + 1; -1 -> a spare key
                self._unit_pairs = (table[ids + 1] == self.unit_key[:, None]).sum(1).astype(np.int64)
        return self._unit_pairs

    @property
    def internode_rows(self) -> int:
        """Rows this rank sent across nodes in hop 1 (dispatch; the same come back in combine)."""
        return self._internode


@dataclass
class Dispatched:
    """Result of `MoEBuffer.dispatch`.

    Attributes:
        x (Tensor [N, H], x.dtype): rows for this rank's local experts, expert-major (expert
            ``e``'s rows contiguous, ascending expert id; inside, by (source rank, token)).
        weights (Tensor [N] float32 or None): router weight of each row's (token, expert) pair.
        tokens_per_expert (list[int]): rows per local expert, ascending expert id.
        handle (DispatchHandle): for `MoEBuffer.combine`.
    """

    x: torch.Tensor
    weights: torch.Tensor | None
    tokens_per_expert: list
    handle: DispatchHandle = field(repr=False)


class MoEBuffer:
    """Token-level MoE dispatch and combine on a process group (Fusco's design, see docs/moe.md).

    Creating a buffer is collective: every rank of ``group`` must construct it with the same
    arguments (checked: a disagreement raises the same error on every rank).

    Args:
        group (ProcessGroup, optional): the expert-parallel group (default: the world).
        num_experts (int): E, experts over the whole group.
        cluster (Cluster | str, optional): gives GPUs per node; default ``COLLSCHED_CLUSTER``,
            else ``LOCAL_WORLD_SIZE`` GPUs per node (as ``collsched.all_to_all_single``).
        dedup (str): ``"node"`` one copy per token per destination node through forwarders
            (Fusco), ``"rank"`` one per token per destination rank, ``"none"`` one per
            (token, expert) pair (the plain all-to-all dispatcher).
        balance (bool): choose forwarders with Fusco's sort-and-shift balancer; False: the
            GPU of the same local index (DeepEP's static choice).
        schedule (str): ``"direct"`` sends hop 1 directly; ``"fast"`` moves hop 1 (the
            deduplicated node-level matrix) with collsched's FAST plan.
        placement (sequence of int [E], optional): rank of each expert; default contiguous
            blocks, expert ``e`` on rank ``e // (E / R)``.
        timeout (float, optional): seconds each wait may take (default ``COLLSCHED_TIMEOUT_S`` or 60).
        combine_precision (str): for bfloat16/float16 rows, how a forwarder's partial sum (a
            token's outputs from one node, summed in float32) returns: ``"float32"`` (default)
            unrounded, so a token's output is rounded to the row dtype once, at the end (no
            less accurate than a plain combine); a unit that carried a single pair returns in
            the row dtype, as a plain combine rounds it. ``"native"``: every partial rounded to
            the row dtype (half the bytes of the float32 partials; one more rounding per node,
            as DeepEP's combine). Ignored for float32/float64 rows (partials keep their dtype).

    Raises:
        CollectiveInputError: on every rank, when any rank passes a bad argument or the ranks
            disagree (num_experts, dedup, balance, schedule, GPUs per node, placement,
            combine_precision).
    """

    def __init__(self, group=None, num_experts: int = 0, cluster=None, dedup: str = "node", balance: bool = True,
                 schedule: str = "direct", placement=None, timeout: float | None = None,
                 combine_precision: str = "float32"):
        require_initialized()
        from collsched.comm.api import resolve_cluster

        self.group = group
        self.rank = dist.get_rank(group)
        self.world = dist.get_world_size(group)
        self.timeout_s = resolve_timeout(timeout)
        # The small exchanges run on the host (on NCCL a Gloo group over the same ranks,
        # `groups.host_group`), so they never wait for the GPU's queue.
        # Local checks never raise alone (the peers would wait in the exchange below): the
        # problem travels as a code and every rank raises the same error.
        code, a, b = 0, 0, 0
        if dedup not in DEDUP_MODES:
            code = 11
        elif schedule not in SCHEDULES:
            code = 12
        elif combine_precision not in COMBINE_PRECISIONS:
            code = 17
        elif isinstance(num_experts, bool) or not isinstance(num_experts, (int, np.integer)) or num_experts <= 0:
            code, a = 13, (int(num_experts) if isinstance(num_experts, (int, np.integer)) else -1)
        else:
            try:
                self.cluster = resolve_cluster(cluster, self.world)
            except (ValueError, TypeError):
                code, a = 15, self.world
            if not code:
                if placement is None and int(num_experts) % self.world:
                    code, a, b = 14, int(num_experts), self.world
                else:
                    try:
                        self.layout = Layout.build(self.world, self.cluster.gpus_per_server, int(num_experts),
                                                   placement)
                    except ValueError:
                        code, a, b = 16, int(num_experts), self.world
        if code:
            self._check_config(torch.tensor([code, a, b, 0, 0, 0, 0, 0, 0, 0], dtype=torch.int64))
        self.num_experts = int(num_experts)
        self.dedup, self.balance, self.schedule = dedup, bool(balance), schedule
        self.combine_precision = combine_precision
        self.id = next(_IDS)
        self._calls = 0
        register_for_ops(self)  # reachable from the torch.library operators (moe/ops.py) by id
        self.last_stats: dict = {}
        # Every rank must agree on the configuration: one exchange now, none per call.
        own = self.layout.owner
        digest = int(np.bitwise_xor.reduce((own * 1000003 + np.arange(own.size)) * 2654435761 % (2**61 - 1))) \
            if own.size else 0
        got = self._check_config(torch.tensor([0, 0, 0, self.num_experts, DEDUP_MODES.index(dedup), int(self.balance),
                                               SCHEDULES.index(schedule), self.layout.gpus_per_node, digest,
                                               COMBINE_PRECISIONS.index(combine_precision)], dtype=torch.int64))
        names = ("num_experts", "dedup", "balance", "schedule", "GPUs per node (cluster)", "placement",
                 "combine_precision")
        for col, name in enumerate(names):
            vals = got[:, 3 + col]
            if (vals != vals[0]).any():
                bad = int(np.nonzero(vals != vals[0])[0][0])
                shown = {1: lambda v: DEDUP_MODES[v], 3: lambda v: SCHEDULES[v],
                         6: lambda v: COMBINE_PRECISIONS[v]}.get(col, int)
                raise CollectiveInputError(
                    f"ranks disagree on {name}: rank 0 has {shown(int(vals[0]))}, rank {bad} has {shown(int(vals[bad]))}"
                    if col != 5 else f"ranks disagree on the expert placement (rank 0 vs rank {bad})")

    def _check_config(self, desc: torch.Tensor) -> np.ndarray:
        note_group(self.group)  # this rank's ports, so that a later fault names its rank
        with culprits_named(self.group, self.timeout_s):
            got = exchange_i64(desc.numpy(), self.group, self.timeout_s, "MoEBuffer configuration exchange")
        bad = np.nonzero(got[:, 0])[0]
        if bad.size:
            r = int(bad[0])
            raise CollectiveInputError(_problem_text(r, int(got[r, 0]), int(got[r, 1]), int(got[r, 2])))
        return got

    @property
    def local_experts(self) -> list:
        """Global ids of this rank's experts, ascending (the order of `Dispatched.x`'s blocks)."""
        return self.layout.experts_of[self.rank].tolist()

    # ---------------------------------------------------------------- helpers
    def _a2a(self, out: torch.Tensor, inp: torch.Tensor, out_splits: list, in_splits: list, what: str,
             matrix: np.ndarray | None = None) -> None:
        if self.schedule == "fast" and matrix is not None:
            from collsched.comm.api import all_to_all_single as cs_a2a

            # Every rank derived the same matrix from the checked exchange: no second check.
            cs_a2a(out, inp, out_splits, in_splits, group=self.group, algorithm="fast", cluster=self.cluster,
                   traffic=matrix, checks=False, timeout=self.timeout_s)
            return
        with culprits_named(self.group, self.timeout_s):
            work = dist.all_to_all_single(out, inp, out_splits, in_splits, group=self.group, async_op=True)
            wait_all([work], self.timeout_s, blocking_waits(self.group, inp.device), what)

    def _check_all(self, desc: torch.Tensor, what: str) -> np.ndarray:
        with culprits_named(self.group, self.timeout_s):
            got = exchange_i64(desc.numpy(), self.group, self.timeout_s, what)
        bad = np.nonzero(got[:, 0])[0]
        if bad.size:
            r = int(bad[0])
            raise CollectiveInputError(_problem_text(r, int(got[r, 0]), int(got[r, 1]), int(got[r, 2])))
        return got

    # ---------------------------------------------------------------- dispatch
    def dispatch(self, x: torch.Tensor, topk_idx: torch.Tensor, topk_weights: torch.Tensor | None = None) -> Dispatched:
        """Send each token's row to the GPUs of its experts, expert-major on arrival.

        Under ``torch.compile`` the call is the operator ``collsched::moe_dispatch``
        (moe/ops.py): ``tokens_per_expert`` is then an int64 tensor and the handle a
        ``TracedHandle`` for combine in the same graph.

        Collective: every rank of the group calls it (a rank without tokens passes T = 0).

        Args:
            x (Tensor [T, H], float32/float64/float16/bfloat16): this rank's tokens.
            topk_idx (Tensor [T, K] int64): expert ids per token, -1 = no expert; an id at most once per row.
            topk_weights (Tensor [T, K] float32, optional): router weights; needed for a weighted combine.
        Returns:
            Dispatched: ``.x [N, H]``, ``.weights [N]``, ``.tokens_per_expert``, ``.handle``.
        Raises:
            CollectiveInputError: on every rank when any rank's arguments are bad (out-of-range ids,
                shapes, dtypes, devices) or ranks disagree on H, dtype, K or on passing weights.
            CommTimeoutError, PeerFailureError: a peer is stuck or gone.
        """
        if tracing(x, topk_idx):
            return traced_dispatch(self, x, topk_idx, topk_weights)
        return self._dispatch(x, topk_idx, topk_weights)

    def _dispatch(self, x: torch.Tensor, topk_idx: torch.Tensor, topk_weights: torch.Tensor | None) -> Dispatched:
        """`dispatch`, eagerly (what the operator runs)."""
        code, a, b = self._validate(x, topk_idx, topk_weights)
        ok = code == 0
        lay = self.layout
        if ok:
            lp = plan_local(topk_idx, lay, self.dedup)
            ekeys, kkeys = lp.expert_counts, lp.key_counts
        else:
            ekeys = np.zeros(lay.num_experts, np.int64)
            kkeys = np.zeros(lay.ranks, np.int64)
        t = int(x.shape[0]) if ok else 0
        hdr = [code, a, b, t, int(x.shape[1]) if ok else 0, DTYPE_CODE.get(x.dtype, UNKNOWN_DTYPE) if ok else 0,
               int(topk_idx.shape[1]) if ok else 0, int(topk_weights is not None)]
        desc = torch.from_numpy(np.concatenate([np.asarray(hdr, np.int64), ekeys, kkeys]))
        got = self._check_all(desc, f"MoE dispatch count exchange on rank {self.rank}")
        for col, name in ((4, "hidden size H"), (5, "dtype"), (6, "top-k K"), (7, "passing topk_weights")):
            vals = got[:, col]
            if (vals != vals[0]).any():
                j = int(np.nonzero(vals != vals[0])[0][0])
                show = dtype_name if col == 5 else int  # the dtype column holds codes: name them
                raise CollectiveInputError(f"ranks disagree on {name}: rank 0 has {show(vals[0])}, rank {j} has "
                                           f"{show(vals[j])}" + (" (1 = given)" if col == 7 else ""))
        e = lay.num_experts
        plan = plan_exchange(self.rank, lay, self.dedup, self.balance, got[:, _HDR:_HDR + e],
                             got[:, _HDR + e:_HDR + e + lay.ranks])
        self._calls += 1
        x = x.contiguous()
        dev, dtype, h, k = x.device, x.dtype, x.shape[1], topk_idx.shape[1]
        has_w = topk_weights is not None
        row_b = h * x.element_size()
        wd, ws = _word(row_b)
        row_w, id_w = row_b // ws, 4 * k // ws
        wt_w = 4 * k // ws if has_w else 0  # weights travel only when given (the same on every rank)
        # Hop 1: the row, then the unit's K expert ids and K weights (metadata with the data),
        # packed in 4-byte words (byte-wise copies are several times slower on the CPU). Expert
        # ids travel as int32 (E < 2^31): half the metadata, and the hop filters them faster.
        ids_out = unit_ids(lp, topk_idx)
        parts = [_words(x, wd, row_w).index_select(0, lp.unit_token), _words(ids_out.to(torch.int32), wd, id_w)]
        if has_w:
            parts.append(_words(topk_weights.contiguous().index_select(0, lp.unit_token), wd, wt_w))
        send1 = torch.cat(parts, dim=1)
        recv1 = torch.empty((sum(plan.recv1), row_w + id_w + wt_w), dtype=wd, device=dev)
        self._a2a(recv1, send1, plan.recv1, plan.send1, f"MoE dispatch hop 1 on rank {self.rank}", plan.matrix1)
        hop_ids = _from_words(recv1[:, row_w:row_w + id_w], torch.int32, k)
        hop_w = _from_words(recv1[:, row_w + id_w:], torch.float32, k) if has_w else None
        pu, pk, _ = hop_pairs(hop_ids, lay, self.dedup, self.rank, experts=False)
        # Hop 2 rows: the row and the pair's weight.
        w2 = 4 // ws if has_w else 0
        send2 = recv1[:, :row_w].index_select(0, pu)
        if has_w:
            send2 = torch.cat([send2, _words(hop_w[pu, pk], wd, w2)], dim=1)
        if self.dedup == "node":
            recv2 = torch.empty((sum(plan.recv2), row_w + w2), dtype=wd, device=dev)
            self._a2a(recv2, send2, plan.recv2, plan.send2, f"MoE dispatch hop 2 on rank {self.rank}")
        else:
            recv2 = send2  # the hop is the expert's own GPU
        n_rows = int(plan.place.size)
        place_t = torch.from_numpy(plan.place).to(dev)
        out = torch.empty((n_rows, h), dtype=dtype, device=dev)
        if out.numel():
            _words(out, wd, row_w).index_copy_(0, place_t, recv2[:, :row_w])
        weights = None
        if has_w:
            weights = torch.empty(n_rows, dtype=torch.float32, device=dev)
            weights.index_copy_(0, place_t, _from_words(recv2[:, row_w:], torch.float32, 1).reshape(-1))
        handle = DispatchHandle(self.id, self._calls, t, n_rows, h, dtype, k, has_w, plan, lp.unit_token,
                                ids_out, hop_ids, hop_w, pu, pk, place_t, self, weights, lp.unit_key)
        cross = lay.node_of_rank != lay.node_of_rank[self.rank]
        handle._internode = int(plan.matrix1[self.rank][cross].sum())  # my hop-1 row = plan.send1
        self.last_stats = {"internode_rows": handle._internode, "row_bytes": row_b,
                           "internode_bytes": handle._internode * row_b,  # payload, as the planner counts
                           "internode_wire_bytes": handle._internode * (row_w + id_w + wt_w) * ws}
        return Dispatched(out, weights, plan.tokens_per_expert, handle)

    def _validate(self, x, idx, w) -> tuple[int, int, int]:
        if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.dtype not in _FLOAT_DTYPES:
            return 1, 0, 0
        t = x.shape[0]
        if not isinstance(idx, torch.Tensor) or idx.dtype != torch.int64 or idx.dim() != 2 or idx.shape[0] != t \
                or idx.shape[1] < 1:
            return 2, t, 0
        if w is not None and (not isinstance(w, torch.Tensor) or w.dtype != torch.float32 or w.shape != idx.shape):
            return 4, t, idx.shape[1]
        if idx.device != x.device or (w is not None and w.device != x.device):
            return 6, 0, 0
        if idx.numel():
            a = idx.detach().cpu().numpy()
            lo, hi = int(a.min()), int(a.max())
            if lo < -1 or hi >= self.num_experts:
                return 3, (lo if lo < -1 else hi), self.num_experts
            row = _first_repeat(a, self.num_experts)
            if row >= 0:
                srt = np.sort(a[row])
                return 5, row, int(srt[1:][(srt[1:] == srt[:-1]) & (srt[1:] >= 0)][0])
        return 0, 0, 0

    # ---------------------------------------------------------------- combine
    def combine(self, y: torch.Tensor, handle: DispatchHandle, weighted: bool = True) -> torch.Tensor:
        """Return each token's expert outputs to it and sum them: ``out[t] = Σ_k w_k · y(t, k)``.

        Collective. The forwarder of each node sums its node's outputs for a token (with the
        weights when ``weighted``) and returns one vector per token and node.

        Args:
            y (Tensor [N, H], the dispatched dtype): expert outputs, rows as in `Dispatched.x`.
            handle (DispatchHandle): from this buffer's `dispatch`.
            weighted (bool): multiply by the router weights (needs ``topk_weights`` at dispatch).
        Returns:
            Tensor [T, H]: in the original token order; tokens with no expert are zeros.
        Raises:
            CollectiveInputError: on every rank when any rank passes a bad ``y``, a foreign handle,
                a weighted combine without weights, or ranks pass handles of different calls.
        """
        if tracing(y):
            return traced_combine(y, handle, weighted, self.op_key)
        return self._combine_call(y, handle, weighted)

    def _combine_call(self, y: torch.Tensor, handle: DispatchHandle, weighted: bool) -> torch.Tensor:
        """`combine`, eagerly (what the operator runs)."""
        code, a, b = 0, 0, 0
        if not isinstance(handle, DispatchHandle) or handle.buffer_id != self.id:
            code = 8
        elif not isinstance(y, torch.Tensor) or y.dim() != 2 or y.shape[0] != handle.rows or \
                y.shape[1] != handle.hidden or y.dtype != handle.dtype:
            code, a, b = 7, handle.rows, handle.hidden
        elif weighted and not handle.has_weights:
            code = 9
        call = handle.call_id if code == 0 else 0
        got = self._check_all(torch.tensor([code, a, b, call], dtype=torch.int64),
                              f"MoE combine check on rank {self.rank}")
        if (got[:, 3] != got[0, 3]).any():
            raise CollectiveInputError(f"ranks pass handles of different dispatch calls (call ids {got[:, 3].tolist()})")
        out, _ = self._combine(y, handle, weighted)
        return out

    def _combine(self, y: torch.Tensor | None, handle: DispatchHandle, weighted: bool,
                 pair_scalar: torch.Tensor | None = None, hidden: bool = True):
        """The hops backwards. ``pair_scalar`` [N] float32 (optional) travels back beside the rows
        and lands at its (token, k) slot: the weight gradient. Returns ([T, H] or None, [T, K] or None)."""
        plan = handle.plan
        dev = handle.place_t.device
        h, k, dtype = handle.hidden, handle.topk, handle.dtype
        row_b = h * torch.empty(0, dtype=dtype).element_size() if hidden else 0
        wd, ws = _word(row_b)
        row_w, sc_w = row_b // ws, 4 // ws
        has_s = pair_scalar is not None
        n_rows = handle.rows
        parts = []
        if hidden:
            parts.append(_words(y, wd, row_w).index_select(0, handle.place_t))
        if has_s:
            parts.append(_words(pair_scalar.index_select(0, handle.place_t), wd, sc_w))
        back2 = torch.cat(parts, dim=1) if len(parts) > 1 else parts[0]
        p = handle.pair_unit.numel()
        if self.dedup == "node":
            got2 = torch.empty((p, back2.shape[1]), dtype=wd, device=dev)
            self._a2a(got2, back2, plan.send2, plan.recv2, f"MoE combine hop 2 on rank {self.rank}")
        else:
            got2 = back2
        u_in = handle.hop_ids.shape[0]
        u_out = handle.unit_token.numel()
        # Partial reduction on the hop: one vector per unit (token and node), summed in float32
        # (float64 for float64 rows), the unit's pairs in hop-2 order (ascending expert id).
        acc_dt = torch.float64 if dtype == torch.float64 else torch.float32
        part = grid = None
        if hidden:
            rows = _from_words(got2[:, :row_w], dtype, h).to(acc_dt)
            if weighted:
                rows.mul_(handle.hop_weights[handle.pair_unit, handle.pair_k].to(acc_dt)[:, None])
            part = torch.zeros((u_in, h), dtype=acc_dt, device=dev)
            part.index_add_(0, handle.pair_unit, rows)
        if has_s:
            grid = torch.zeros((u_in, k), dtype=torch.float32, device=dev)
            grid[handle.pair_unit, handle.pair_k] = _from_words(got2[:, row_w:], torch.float32, 1).reshape(-1)
        wide = hidden and dtype in _WIDE_DTYPES and self.combine_precision == "float32"
        what = f"MoE combine hop 1 on rank {self.rank}"
        pw = 4 * h // ws  # words of a float32 partial row
        if wide and self.schedule != "fast":
            # A unit with one pair returns in the row dtype (rounded once, as a plain combine
            # rounds each weighted output); a unit with several returns its float32 sum, so a
            # token's output is rounded once in all. Each destination's block: its one-pair
            # units, then the others; both sides know which are which (hop 2's pairs here,
            # the routing there), so the sizes need no exchange.
            multi_in = self._hop_multi(handle, u_in)
            multi_out = handle.unit_pairs() > 1
            gw = [_words(grid, wd, k * sc_w)] if has_s else []
            one = torch.cat([_words(part.to(dtype), wd, row_w)] + gw, dim=1)
            many = torch.cat([_words(part, wd, pw)] + gw, dim=1)
            back1, send_w = _pack_mixed(one, many, multi_in, plan.recv1)
            recv_w = _mixed_sizes(multi_out, plan.send1, one.shape[1], many.shape[1])
            got1 = torch.empty(sum(recv_w), dtype=wd, device=dev)
            self._a2a(got1, back1, recv_w, send_w, what)
            sent_words = send_w
            one_in, many_in = _unpack_mixed(got1, multi_out, plan.send1, one.shape[1], many.shape[1])
            sel1 = torch.from_numpy(np.flatnonzero(~multi_out)).to(dev)
            selm = torch.from_numpy(np.flatnonzero(multi_out)).to(dev)
            vals = torch.empty((u_out, h), dtype=torch.float32, device=dev)
            vals.index_copy_(0, sel1, _from_words(one_in[:, :row_w], dtype, h).float())
            vals.index_copy_(0, selm, _from_words(many_in[:, :pw], torch.float32, h))
            gvals = None
            if has_s:
                gvals = torch.empty((u_out, k), dtype=torch.float32, device=dev)
                gvals.index_copy_(0, sel1, _from_words(one_in[:, row_w:], torch.float32, k))
                gvals.index_copy_(0, selm, _from_words(many_in[:, pw:], torch.float32, k))
        else:
            # One row width: the row dtype ("native", or rows of float32/float64), or float32
            # partials for every unit with schedule="fast" (its plan takes one row size).
            parts = []
            if hidden:
                parts.append(_words(part, wd, pw) if wide else _words(part.to(dtype), wd, row_w))
            if has_s:
                parts.append(_words(grid, wd, k * sc_w))
            back1 = torch.cat(parts, dim=1) if len(parts) > 1 else parts[0]
            got1 = torch.empty((u_out, back1.shape[1]), dtype=wd, device=dev)
            self._a2a(got1, back1, plan.send1, plan.recv1, what,
                      plan.matrix1.T.copy() if self.schedule == "fast" else None)
            sent_words = [n * back1.shape[1] for n in plan.recv1]
            cut = pw if wide else row_w if hidden else 0
            vals = None
            if hidden:
                vals = _from_words(got1[:, :cut], torch.float32, h) if wide else _from_words(got1[:, :cut], dtype, h)
            gvals = _from_words(got1[:, cut:], torch.float32, k) if has_s else None
        lay = self.layout
        cross = lay.node_of_rank != lay.node_of_rank[self.rank]
        # What this rank's hop 1 sent to other nodes (partials, and the weight gradients in a
        # backward): float32 partials make it larger than the dispatch's rows.
        self.last_stats["combine_internode_wire_bytes"] = int(np.asarray(sent_words, dtype=np.int64)[cross].sum()) * ws
        out = None
        if hidden:
            # The origin adds its units in receive order (by forwarder rank, then token), in
            # float32 (float64), and rounds to the row dtype once.
            acc = torch.zeros((handle.tokens, h), dtype=acc_dt, device=dev)
            acc.index_add_(0, handle.unit_token, vals.to(acc_dt))
            out = acc.to(dtype)
        grad_w = None
        if has_s:
            grad_w = torch.zeros((handle.tokens, k), dtype=torch.float32, device=dev)
            # Each (token, k) is served by exactly one unit; the others carry zeros in its slot.
            grad_w.index_add_(0, handle.unit_token, gvals)
        return out, grad_w

    @staticmethod
    def _hop_multi(handle: DispatchHandle, u_in: int) -> np.ndarray:
        """[U_in] bool: units this rank forwarded that serve more than one pair (cached)."""
        hit = getattr(handle, "_hop_multi_cache", None)
        if hit is None:
            hit = np.bincount(handle.pair_unit.cpu().numpy(), minlength=u_in) > 1
            handle._hop_multi_cache = hit
        return hit

    def _redispatch(self, g: torch.Tensor, handle: DispatchHandle) -> torch.Tensor:
        """Dispatch rows ``g`` [T, H] along an earlier dispatch's routes (no exchange): the
        backward of combine. Returns [N, H] in the dispatched layout."""
        plan = handle.plan
        dev = handle.place_t.device
        h, dtype = handle.hidden, g.dtype
        row_b = h * g.element_size()
        wd, ws = _word(row_b)
        row_w = row_b // ws
        send1 = _words(g, wd, row_w).index_select(0, handle.unit_token)
        recv1 = torch.empty((handle.hop_ids.shape[0], row_w), dtype=wd, device=dev)
        self._a2a(recv1, send1, plan.recv1, plan.send1, f"MoE backward hop 1 on rank {self.rank}", plan.matrix1)
        send2 = recv1.index_select(0, handle.pair_unit)
        if self.dedup == "node":
            recv2 = torch.empty((handle.rows, row_w), dtype=wd, device=dev)
            self._a2a(recv2, send2, plan.recv2, plan.send2, f"MoE backward hop 2 on rank {self.rank}")
        else:
            recv2 = send2
        out = torch.empty((handle.rows, h), dtype=dtype, device=dev)
        if out.numel():
            _words(out, wd, row_w).index_copy_(0, handle.place_t, recv2)
        return out


def _mixed_sizes(multi: np.ndarray, counts: list, w_one: int, w_many: int) -> list:
    """Words per peer of a mixed block: ``counts[p]`` consecutive units of ``multi`` for peer p,
    ``w_one`` words each for a one-pair unit, ``w_many`` for the others."""
    bounds = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    many = np.concatenate([[0], np.cumsum(multi)]).astype(np.int64)[bounds]
    n_many = np.diff(many)
    return (np.diff(bounds) * w_one + n_many * (w_many - w_one)).tolist()


def _pack_mixed(one: torch.Tensor, many: torch.Tensor, multi: np.ndarray, counts: list):
    """One flat word buffer for an all-to-all: per peer (``counts[p]`` consecutive units), the
    rows of ``one`` [U, w1] of its one-pair units, then the rows of ``many`` [U, w2] of the
    others, each in unit order. Returns (buffer [words], words per peer)."""
    bounds = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    cut_m = np.concatenate([[0], np.cumsum(multi)]).astype(np.int64)[bounds]  # multi units before each peer
    cut_1 = bounds - cut_m
    # One gather per width (units are grouped by peer, so each peer's rows stay one run).
    idx1, idxm = np.flatnonzero(~multi), np.flatnonzero(multi)
    g1 = one if idx1.size == multi.size else one.index_select(0, torch.from_numpy(idx1).to(one.device))
    gm = many if idxm.size == multi.size else many.index_select(0, torch.from_numpy(idxm).to(many.device))
    pieces = []
    for p in range(len(counts)):
        if cut_1[p + 1] > cut_1[p]:
            pieces.append(g1[int(cut_1[p]):int(cut_1[p + 1])].reshape(-1))
        if cut_m[p + 1] > cut_m[p]:
            pieces.append(gm[int(cut_m[p]):int(cut_m[p + 1])].reshape(-1))
    sizes = (np.diff(cut_1) * one.shape[1] + np.diff(cut_m) * many.shape[1]).tolist()
    flat = torch.cat(pieces) if pieces else torch.empty(0, dtype=one.dtype, device=one.device)
    return flat, sizes


def _unpack_mixed(flat: torch.Tensor, multi: np.ndarray, counts: list, w_one: int, w_many: int):
    """The inverse layout of `_pack_mixed` on the receiving side: (rows of the one-pair units
    [n1, w_one], rows of the others [nm, w_many]), each in unit order."""
    ones, manys = [], []
    off = lo = 0
    for n in counts:
        m = multi[lo:lo + n]
        n_many = int(m.sum())
        n_one = n - n_many
        ones.append(flat[off:off + n_one * w_one].reshape(n_one, w_one))
        off += n_one * w_one
        manys.append(flat[off:off + n_many * w_many].reshape(n_many, w_many))
        off += n_many * w_many
        lo += n
    empty1 = flat.new_empty((0, w_one))
    emptym = flat.new_empty((0, w_many))
    return (torch.cat(ones) if ones else empty1), (torch.cat(manys) if manys else emptym)


def _first_repeat(a: np.ndarray, num_experts: int) -> int:
    """First row of ``a`` [T, K] (ids in [-1, E)) naming an expert twice, or -1; -1 may repeat.

    For small K, compares of int16 columns beat sorting every row: column i against column
    i + s for each shift s, K - 1 array compares in all; -1 in column j is made -1 - j
    first, so masked slots never match."""
    t, k = a.shape
    if k < 2:
        return -1
    if k > 16 or num_experts + k >= 2**15:
        srt = np.sort(a, axis=1)
        dup = ((srt[:, 1:] == srt[:, :-1]) & (srt[:, 1:] >= 0)).any(1)
    else:
        cols = a.T.astype(np.int16, order="C")  # one contiguous row per column
        cols -= (cols < 0) * np.arange(k, dtype=np.int16)[:, None]
        dup = np.zeros(t, dtype=bool)
        for shift in range(1, k):
            dup |= np.logical_or.reduce(cols[:-shift] == cols[shift:], axis=0)
    return int(dup.argmax()) if dup.any() else -1


def _word(row_b: int):
    """Packing unit: 4-byte words when rows are whole words (metadata always is), else bytes."""
    return (torch.int32, 4) if row_b % 4 == 0 else (torch.uint8, 1)


def _words(t: torch.Tensor, wd: torch.dtype, width: int) -> torch.Tensor:
    """``t``'s rows as [rows, width] elements of ``wd`` (a view when ``t`` is dense; empty-safe)."""
    rows = t.shape[0] if t.dim() else 0
    if t.numel() == 0:
        return torch.empty((rows, width), dtype=wd, device=t.device)
    if not t.is_contiguous():
        t = t.contiguous()
    return t.view(wd).reshape(rows, width) if t.dim() > 1 or t.dtype != wd else t.reshape(rows, width)


def _from_words(cols: torch.Tensor, dtype: torch.dtype, width: int) -> torch.Tensor:
    """A packed column slice, copied dense, as [rows, width] of ``dtype``."""
    rows = cols.shape[0]
    if cols.numel() == 0:
        return torch.empty((rows, width), dtype=dtype, device=cols.device)
    whole = cols.stride(1) == 1 and cols.stride(0) == cols.shape[1] and cols.storage_offset() == 0
    dense = cols if whole else _fresh(cols)
    return dense.view(dtype).reshape(rows, width)


def _fresh(t: torch.Tensor) -> torch.Tensor:
    """A packed column slice copied into its own dense buffer, so it can be viewed as another dtype."""
    out = torch.empty(t.shape, dtype=t.dtype, device=t.device)
    out.copy_(t)
    return out


__all__ = ["MoEBuffer", "Dispatched", "DispatchHandle"]
