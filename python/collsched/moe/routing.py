"""Routing bookkeeping for MoE dispatch and combine: expert placement, the sort-and-shift
forwarder balancer (Fusco §3.4, Algorithm 1), and the per-rank plan of one call.

Planning is split in two halves around the one count exchange of a dispatch:

- `plan_local` (before): from this rank's ``topk_idx`` alone, the *units* it sends (one per
  token and destination node with ``dedup="node"``, per token and destination rank with
  ``"rank"``, per (token, expert) pair with ``"none"``), in send order, and the counts that
  describe them to the peers (tokens per expert, units per destination key);
- `plan_exchange` (after): from every rank's counts, the forwarder table, this rank's split
  sizes of both hops and, for the receiving side, where each incoming row lands in the
  expert-major output (Fusco's expert-level distribution descriptors, as one index).

Everything is vectorised (torch on the routing's device for per-token work, numpy for the
per-rank count matrices), integer-only and deterministic, so every rank derives the same
forwarders and sizes from the same gathered counts.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from collsched.moe.balancer import balance_forwarders  # noqa: F401  (re-exported)

DEDUP_MODES = ("node", "rank", "none")
SCHEDULES = ("direct", "fast")


def default_placement(num_experts: int, ranks: int) -> np.ndarray:
    """Contiguous blocks: expert ``e`` on rank ``e // (E / R)`` (Megatron's and DeepEP's placement).

    Raises:
        ValueError: when ``num_experts`` is not a positive multiple of ``ranks``.
    """
    if num_experts <= 0 or num_experts % ranks:
        raise ValueError(f"num_experts must be a positive multiple of the group size {ranks} "
                         f"(experts sit in equal contiguous blocks), got {num_experts}; pass placement= otherwise")
    return np.arange(num_experts, dtype=np.int64) // (num_experts // ranks)


def check_placement(placement, num_experts: int, ranks: int) -> np.ndarray:
    """``placement`` as an int64 array of length E with every entry a rank of the group."""
    if placement is None:
        return default_placement(num_experts, ranks)
    if isinstance(placement, torch.Tensor):
        placement = placement.detach().cpu().numpy()
    p = np.asarray(placement)
    if p.ndim != 1 or p.shape[0] != num_experts or not np.issubdtype(p.dtype, np.integer):
        raise ValueError(f"placement must be {num_experts} integer ranks (one per expert), got shape {p.shape} "
                         f"and dtype {p.dtype}")
    if p.size and (p.min() < 0 or p.max() >= ranks):
        raise ValueError(f"placement entries must be ranks in [0, {ranks}), got values in [{p.min()}, {p.max()}]")
    return p.astype(np.int64)


@dataclass(frozen=True)
class Layout:
    """The group's shape and the expert placement, as every rank sees it."""

    ranks: int  # R
    gpus_per_node: int  # G
    num_experts: int  # E
    owner: np.ndarray  # [E] rank of each expert
    local_index: np.ndarray  # [E] position of each expert among its owner's experts (ascending ids)
    experts_of: tuple  # per rank: np.ndarray of its experts, ascending
    sort_pos: np.ndarray  # [E] position of each expert in (owner, local index) order
    by_owner: np.ndarray  # [E] experts in (owner, local index) order
    owner_starts: np.ndarray  # [R] first position of each rank's experts in by_owner
    owner_ends: np.ndarray  # [R]
    node_of_expert: np.ndarray  # [E + 1]: -1, then the node of each expert (index = id + 1)
    owner_of_expert: np.ndarray  # [E + 1]: -1, then the owner of each expert
    ids_sorted: bool  # owners never decrease with the expert id (contiguous blocks)
    node_key: np.ndarray  # [E + 1]: S (spare key for id -1), then each expert's node
    rank_key: np.ndarray  # [E + 1]: R, then each expert's owner
    equal_blocks: bool  # ids_sorted and every rank owns E / R experts (the default placement)
    node_of_rank: np.ndarray  # [R]
    remote: np.ndarray  # [R, S] bool: node s is not rank i's node
    # Per-call planning reads these tables instead of rebuilding them (see `_rank_tables`).
    cache: dict = field(default_factory=dict, compare=False, repr=False)

    def id_span(self, dedup: str, which: int):
        """(lo, hi): the expert ids of node/rank ``which`` when they form one range [lo, hi), else None."""
        if not self.ids_sorted or dedup == "none":
            return None
        if dedup == "node":
            lo_r, hi_r = which * self.gpus_per_node, (which + 1) * self.gpus_per_node
        else:
            lo_r, hi_r = which, which + 1
        return int(self.owner_starts[lo_r]), int(self.owner_ends[hi_r - 1])

    @property
    def nodes(self) -> int:
        return self.ranks // self.gpus_per_node

    @staticmethod
    def build(ranks: int, gpus_per_node: int, num_experts: int, placement=None) -> "Layout":
        if gpus_per_node <= 0 or ranks % gpus_per_node:
            raise ValueError(f"{ranks} ranks are not a whole number of nodes of {gpus_per_node} GPUs")
        owner = check_placement(placement, num_experts, ranks)
        order = np.lexsort((np.arange(num_experts), owner))
        counts = np.bincount(owner, minlength=ranks)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        local_index = np.empty(num_experts, dtype=np.int64)
        local_index[order] = np.arange(num_experts) - np.repeat(starts, counts)
        experts_of = tuple(order[starts[r]:starts[r] + counts[r]] for r in range(ranks))
        sort_pos = np.empty(num_experts, dtype=np.int64)
        sort_pos[order] = np.arange(num_experts)
        owner_of = np.concatenate([[-1], owner]).astype(np.int64)
        node_of = np.concatenate([[-1], owner // gpus_per_node]).astype(np.int64)
        node_of_rank = np.arange(ranks, dtype=np.int64) // gpus_per_node
        ids_sorted = bool(np.all(np.diff(owner) >= 0))
        return Layout(ranks, gpus_per_node, num_experts, owner, local_index, experts_of, sort_pos, order,
                      starts.astype(np.int64), (starts + counts).astype(np.int64), node_of, owner_of, ids_sorted,
                      np.concatenate([[ranks // gpus_per_node], owner // gpus_per_node]).astype(np.int64),
                      np.concatenate([[ranks], owner]).astype(np.int64),
                      ids_sorted and bool(np.all(counts == num_experts // ranks)), node_of_rank,
                      node_of_rank[:, None] != np.arange(ranks // gpus_per_node)[None, :])

    def pairs_per_owner(self, n: np.ndarray) -> np.ndarray:
        """[R', R]: ``n`` [R', E] (pairs per expert) summed over each rank's experts."""
        r, e = self.ranks, self.num_experts
        if self.equal_blocks:  # contiguous blocks of b = E / R: b strided adds (numpy's
            b = e // r             # reduction over a short inner axis is several times slower)
            if b > 8:
                return np.add.reduceat(n, self.owner_starts, axis=1)
            out = n[:, 0::b].copy()
            for j in range(1, b):
                out += n[:, j::b]
            return out
        cs = np.zeros((n.shape[0], e + 1), dtype=np.int64)
        np.cumsum(n[:, self.by_owner], axis=1, out=cs[:, 1:])
        return cs[:, self.owner_ends] - cs[:, self.owner_starts]


@dataclass
class LocalPlan:
    """What one rank sends in a dispatch, from its own routing (before any exchange)."""

    unit_token: torch.Tensor  # [U] int64: token of each unit, in send order (by hop rank, then token)
    unit_ids: torch.Tensor | None  # [U, K] int64, dedup="none" only: the pair's expert (others -1);
    # with "node"/"rank" a unit carries its token's whole topk_idx row and the hop keeps its own experts
    unit_key: np.ndarray  # [U] destination key (node, rank or owner) of each unit, ascending
    expert_counts: np.ndarray  # [E] tokens routed to each expert (pairs)
    key_counts: np.ndarray  # [R] units per key (node keys use the first S entries)


_TOKEN_OF_PAIR: dict = {}


def _token_of_pair(t: int, k: int) -> np.ndarray:
    """[T * K] token index of each flat (token, k) entry (kept per shape: calls repeat shapes)."""
    hit = _TOKEN_OF_PAIR.get((t, k))
    if hit is None:
        if len(_TOKEN_OF_PAIR) > 16:
            _TOKEN_OF_PAIR.clear()
        hit = _TOKEN_OF_PAIR[(t, k)] = np.repeat(np.arange(t, dtype=np.int64), k)
    return hit


def _stable_order(keys: np.ndarray, bound: int) -> np.ndarray:
    """Stable argsort of small non-negative keys (< bound): numpy's radix sort on 16-bit keys."""
    return np.argsort(keys.astype(np.int16 if bound < 2**15 else np.int64), kind="stable")


def plan_local(idx: torch.Tensor, layout: Layout, dedup: str) -> LocalPlan:
    """Units of this rank's tokens for ``dedup``; ``idx`` is a validated [T, K] int64 tensor (-1 = none).

    Planning runs on the host (numpy): the counts must reach the host for the exchange anyway,
    and the unit lists go back to the routing's device once."""
    dev = idx.device
    ix = idx.detach().cpu().numpy()
    t_count, k = ix.shape
    # Tables indexed by id + 1, so -1 (no expert) needs no masking pass.
    f1 = ix.reshape(-1) + 1
    expert_counts = np.bincount(f1, minlength=layout.num_experts + 1)[1:]
    key_counts = np.zeros(layout.ranks, dtype=np.int64)
    if dedup == "none":
        flat = f1 - 1
        p = np.flatnonzero(f1)  # (t, k) row-major: by token, then k
        own = layout.owner[flat[p]]
        order = _stable_order(own, layout.ranks)
        p, keys_np = p[order], own[order]
        ids = np.full((p.size, k), -1, dtype=np.int64)
        ids[np.arange(p.size), p % k] = flat[p]
        key_counts[:] = np.bincount(keys_np, minlength=layout.ranks)
        unit_token = p // k
    else:
        # key[e + 1]: the node (or rank) of expert e; masked pairs land in a spare row nkeys.
        table, nkeys = (layout.node_key, layout.nodes) if dedup == "node" else (layout.rank_key, layout.ranks)
        lin = (table * t_count)[f1]
        lin += _token_of_pair(t_count, k)
        present = np.zeros((nkeys + 1) * t_count, dtype=bool)
        present[lin] = True
        q = np.flatnonzero(present[:nkeys * t_count])  # units by key, then token
        # q ascends, so each key's units are one run: its bounds by binary search.
        key_counts[:nkeys] = np.diff(np.searchsorted(q, np.arange(nkeys + 1) * t_count))
        keys_np = np.repeat(np.arange(nkeys), key_counts[:nkeys])
        unit_token = q - keys_np * t_count if t_count & (t_count - 1) else q & (t_count - 1)
        ids = None
    return LocalPlan(torch.from_numpy(unit_token).to(dev), None if ids is None else torch.from_numpy(ids).to(dev),
                     keys_np, expert_counts, key_counts)


def unit_ids(lp: LocalPlan, idx: torch.Tensor) -> torch.Tensor:
    """[U, K] expert ids each unit carries: its token's topk_idx row (the pair's expert alone with "none")."""
    return lp.unit_ids if lp.unit_ids is not None else idx.index_select(0, lp.unit_token)


def _bincount2(cells: np.ndarray, weights: np.ndarray, r: int) -> np.ndarray:
    """An r×r matrix summing ``weights`` into flat ``cells`` (row * r + col)."""
    m = np.bincount(cells.reshape(-1), weights=weights.reshape(-1).astype(np.float64), minlength=r * r)
    return np.rint(m).astype(np.int64).reshape(r, r)


@dataclass
class CallPlan:
    """One rank's split sizes and placement index for a dispatch (and, mirrored, its combine)."""

    forwarders: np.ndarray | None  # [R, S] (dedup="node") else None
    send1: list  # rows this rank sends each rank in hop 1 (to forwarders / owners)
    recv1: list  # rows it receives from each rank in hop 1
    send2: list  # hop 2 (node-internal distribution; dedup="node" only, else [])
    recv2: list
    place: np.ndarray  # [N] output row of each incoming hop-2 row (message order)
    tokens_per_expert: list  # per local expert
    matrix1: np.ndarray  # [R, R] hop-1 rows i -> j (every rank's, for a FAST schedule and the byte count)


def _rank_tables(layout: Layout, me: int) -> dict:
    """What `plan_exchange` needs that depends on the layout and the rank alone: built on
    the first call and kept in ``layout.cache`` (a buffer plans every call with one Layout)."""
    hit = layout.cache.get(("rank", me))
    if hit is None:
        r = layout.ranks
        mine = layout.experts_of[me]
        e_loc = mine.size
        lo = int(mine[0]) if e_loc else 0
        contiguous = e_loc > 0 and np.array_equal(mine, np.arange(lo, lo + e_loc))
        src_grid = np.repeat(np.arange(r), e_loc)
        exp_grid = np.tile(np.arange(e_loc), r)
        hit = layout.cache[("rank", me)] = {
            "cols": slice(lo, lo + e_loc) if contiguous else mine,  # my experts' columns of [R, E]
            "e_loc": e_loc, "src_grid": src_grid, "exp_grid": exp_grid,
            # Message order when every source arrives through one hop (dedup "rank"/"none").
            "order_one_hop": np.lexsort((src_grid, exp_grid)),
            "row_cells": np.arange(r)[:, None] * r,
        }
    return hit


def plan_exchange(me: int, layout: Layout, dedup: str, balance: bool, expert_counts: np.ndarray,
                  key_counts: np.ndarray) -> CallPlan:
    """From every rank's counts (``expert_counts`` [R, E], ``key_counts`` [R, R]), this rank's sizes.

    The receiver's rows arrive from each hop rank ``h`` (ascending) as blocks ordered by
    (local expert, source rank), each block in the source's token order; ``place`` maps
    them to the expert-major output, where expert ``e``'s block holds its rows by
    (source rank, token).
    """
    r, g = layout.ranks, layout.gpus_per_node
    tab = _rank_tables(layout, me)
    c = expert_counts[:, tab["cols"]]  # [R, E_local] rows of source i for my expert e
    node_of = layout.node_of_rank
    fwd = None
    if dedup == "node":
        s_count = layout.nodes
        load = (key_counts[:, :s_count] * layout.remote).sum(1)
        fwd = balance_forwarders(load, g, balance)
        # Sums of counts through float64 bincount: exact below 2^53.
        m1 = _bincount2(tab["row_cells"] + fwd, key_counts[:, :s_count], r)
        # pairs[i, j]: rows of source i for rank j's experts; they travel hop h = F[i, node(j)] -> j.
        pairs = layout.pairs_per_owner(expert_counts)
        hop_of_source = fwd[:, node_of[me]]  # [R] hop through which source i reaches me
        # My row of the hop-2 matrix: I forward source i's rows for rank j iff F[i, node(j)] = me,
        # so j is on my node and i is one of the sources I forward for on it.
        mine = hop_of_source == me
        lo = node_of[me] * g
        send2 = np.zeros(r, dtype=np.int64)
        send2[lo:lo + g] = pairs[mine, lo:lo + g].sum(0)
        send2 = send2.tolist()
        recv2 = np.rint(np.bincount(hop_of_source, weights=pairs[:, me].astype(np.float64), minlength=r)
                        ).astype(np.int64).tolist()
        order = np.lexsort((tab["src_grid"], tab["exp_grid"], hop_of_source[tab["src_grid"]]))
    else:
        m1 = key_counts.copy()
        send2, recv2 = [], []
        order = tab["order_one_hop"]
    totals = c.sum(0)
    base = np.zeros(totals.size, dtype=np.int64)  # [E_local] first output row of each local expert
    np.cumsum(totals[:-1], out=base[1:])
    within = np.cumsum(c, axis=0) - c  # [R, E_local] exclusive prefix over sources
    # Blocks in message order: by hop, then local expert, then source.
    lens = c.reshape(-1)[order]
    starts = (base[tab["exp_grid"]] + within.reshape(-1))[order]
    offs = np.cumsum(lens) - lens
    total = int(offs[-1] + lens[-1]) if lens.size else 0
    place = np.repeat(starts - offs, lens) + np.arange(total, dtype=np.int64)
    return CallPlan(fwd, m1[me].tolist(), m1[:, me].tolist(), send2, recv2, place, totals.tolist(), m1)


def hop_pairs(ids: torch.Tensor, layout: Layout, dedup: str, me: int, experts: bool = True):
    """Pairs (unit, k) of the units hop ``me`` holds that it serves (experts on its node with
    ``dedup="node"``, its own experts otherwise), sorted by (owner, local expert); stable, so
    rows of one expert stay in (source rank, token) order. Returns (unit, k) tensors on
    ``ids``' device and the pairs' expert ids (numpy; None unless ``experts``)."""
    dev = ids.device
    a = ids.detach().cpu().numpy()
    k = a.shape[1] if a.ndim == 2 else 1
    flat = a.reshape(-1)
    mine = me // layout.gpus_per_node if dedup == "node" else me
    span = layout.id_span(dedup, mine)
    if span is not None and dedup != "none":  # contiguous placement: the hop's experts are one id range
        rel = flat - span[0]  # ids below the range wrap to large unsigned values
        p = np.flatnonzero(rel.view(np.uint32 if rel.dtype.itemsize == 4 else np.uint64) < span[1] - span[0])
        rel = rel[p]
        e = rel + span[0] if experts else None
        if span[1] - span[0] <= 256:  # one radix pass on 8-bit keys
            order = np.argsort(rel.astype(np.uint8), kind="stable")
        else:
            order = _stable_order(rel, layout.num_experts)
    else:
        if dedup == "none":
            p = np.flatnonzero(flat >= 0)
        else:
            # domain[e + 1]: the node (or rank) of expert e; domain[0] (id -1) matches nothing.
            domain = layout.node_of_expert if dedup == "node" else layout.owner_of_expert
            p = np.flatnonzero(domain[flat + 1] == mine)
        e = flat[p]
        order = _stable_order(e if layout.ids_sorted else layout.sort_pos[e], layout.num_experts)
    p = p[order]
    if k & (k - 1) == 0:  # a power of two: shifts, several times cheaper than numpy's division
        shift = k.bit_length() - 1
        pu, pk = p >> shift, p & (k - 1)
    else:
        pu, pk = np.divmod(p, k)
    return torch.from_numpy(pu).to(dev), torch.from_numpy(pk).to(dev), e[order] if experts else None


__all__ = ["DEDUP_MODES", "SCHEDULES", "Layout", "default_placement", "check_placement", "balance_forwarders",
           "LocalPlan", "plan_local", "unit_ids", "CallPlan", "plan_exchange", "hop_pairs"]
