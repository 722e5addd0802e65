"""Whole collsched Plans of an MoE dispatch, for small cases, and their verification.

`dispatch_plan` writes the dispatch that `MoEBuffer` executes as one Plan over every rank,
from the same per-rank planning (`routing.plan_local` / `plan_exchange`), so the Plan is the
executed schedule: step 0 holds the node-level forwarding transfers (one segment per
(token, destination node), input row -> the forwarder's scratch), step 1 the expert-level
distribution transfers (scratch, or the input for a rank's own node, -> the exact row of the
expert-major output). Segments are row runs, coalesced where both sides are contiguous.

`verify_dispatch_plan` proves it: the core verifier checks structure, bounds, tiers,
read-before-write, write-once and every hazard's ordering (by deps and by steps); its
final-state rules know the four built-in collectives only, so the final state, which an MoE
routing defines, is checked here by symbolic execution over rows: every output row must
hold exactly the (source rank, token) the routing puts there.
"""
from __future__ import annotations

import json
from collections import Counter

import numpy as np
import torch

import collsched
from collsched.moe.routing import Layout, hop_pairs, plan_exchange, plan_local, unit_ids

_TIER = ("local", "scale_up", "scale_out")


def expected_rows(routings: list, layout: Layout) -> list:
    """Per rank: [N, 2] (source rank, token) of each expert-major output row, straight from
    the routing (independent of the planner): expert ascending, then source rank, then token."""
    out = []
    for j in range(layout.ranks):
        rows = []
        for e in layout.experts_of[j]:
            for i, idx in enumerate(routings):
                toks = np.nonzero((np.asarray(idx) == e).any(axis=1))[0] if len(idx) else np.zeros(0, np.int64)
                rows.extend((i, int(t)) for t in toks)
        out.append(np.asarray(rows, dtype=np.int64).reshape(-1, 2))
    return out


def _northwest(rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """A non-negative matrix with the given row and column sums (equal totals)."""
    m = np.zeros((rows.size, cols.size), dtype=np.uint64)
    r, c = rows.astype(np.int64).copy(), cols.astype(np.int64).copy()
    i = j = 0
    while i < r.size and j < c.size:
        v = min(r[i], c[j])
        m[i, j] += v
        r[i] -= v
        c[j] -= v
        if r[i] == 0:
            i += 1
        else:
            j += 1
    return m


def _runs(src: np.ndarray, dst: np.ndarray):
    """Coalesce row pairs (src[q] -> dst[q]) into runs where both advance by one."""
    if src.size == 0:
        return []
    brk = np.nonzero((np.diff(src) != 1) | (np.diff(dst) != 1))[0] + 1
    starts = np.concatenate([[0], brk])
    ends = np.concatenate([brk, [src.size]])
    return [(int(src[a]), int(dst[a]), int(b - a)) for a, b in zip(starts, ends)]


def dispatch_plan(routings: list, layout: Layout, row_bytes: int, dedup: str = "node", balance: bool = True):
    """The dispatch of every rank's routing as one Plan.

    Args:
        routings (list of array [T_i, K] int64): each rank's ``topk_idx`` (-1 = no expert).
        layout (Layout): ranks, GPUs per node, placement.
        row_bytes (int): bytes per token row (H × element size).
        dedup, balance: as `MoEBuffer`.
    Returns:
        (Plan, dict): the plan and ``{"input_bytes": [...], "output_bytes": [...], "internode_bytes",
        "forwarders"}``: the real buffer sizes per rank (the plan declares an all-to-all whose
        matrix has at least these sizes; pad tensors to ``plan.input_sizes``/``output_sizes``).
    """
    r, g = layout.ranks, layout.gpus_per_node
    routings = [np.asarray(ix, dtype=np.int64) for ix in routings]
    if len(routings) != r or any(ix.ndim != 2 for ix in routings):
        raise ValueError(f"routings must be {r} arrays [T_i, K] (one per rank)")
    lps = [plan_local(torch.as_tensor(ix), layout, dedup) for ix in routings]
    ec = np.stack([lp.expert_counts for lp in lps])
    kc = np.stack([lp.key_counts for lp in lps])
    cps = [plan_exchange(j, layout, dedup, balance, ec, kc) for j in range(r)]
    node = np.arange(r) // g
    transfers, segments, deps = [], [], []
    scratch = [0] * r
    into_hop: list = [[] for _ in range(r)]  # hop-1 transfer ids into each rank

    def add(src, dst, step, segs, dep_ids):
        tid = len(transfers)
        tier = 0 if src == dst else (1 if node[src] == node[dst] else 2)
        transfers.append({"src": int(src), "dst": int(dst), "op": "copy", "tier": _TIER[tier], "step": step,
                          "seg_begin": len(segments), "seg_end": len(segments) + len(segs),
                          "dep_begin": len(deps), "dep_end": len(deps) + len(dep_ids)})
        for sb, so, db, do, ln in segs:
            segments.append({"src_buf": sb, "src_off": so * row_bytes, "dst_buf": db, "dst_off": do * row_bytes,
                             "len": ln * row_bytes})
        deps.extend(int(d) for d in dep_ids)
        return tid

    # Where each rank's hop-1 units land on their hop: (hop, row in the hop's receive buffer).
    recv_base = [np.concatenate([[0], np.cumsum(cp.recv1)[:-1]]).astype(np.int64) for cp in cps]
    hop_src: list = [None] * r  # per hop, for each received unit: (buffer, row, source rank, token)
    hop_ids = []
    for h in range(r):
        ids_parts, buf_parts, row_parts = [], [], []
        for i in range(r):
            cnt = cps[i].send1[h]
            if not cnt:
                continue
            lo = int(np.sum(cps[i].send1[:h]))
            toks = lps[i].unit_token[lo:lo + cnt].numpy()
            ids_parts.append(unit_ids(lps[i], torch.as_tensor(routings[i]))[lo:lo + cnt])
            if i == h and dedup != "none":  # its own units: step 1 reads the input itself
                buf_parts.append(np.full(cnt, 0))
                row_parts.append(toks)
            else:
                base = int(recv_base[h][i])
                buf_parts.append(np.full(cnt, 2))
                row_parts.append(base + np.arange(cnt))
                if dedup == "none":  # each unit is one pair: straight to its output row below
                    continue
                segs = [("input", s, "scratch", d, n) for s, d, n in _runs(toks, base + np.arange(cnt))]
                into_hop[h].append(add(i, h, 0, segs, []))
        scratch[h] = 0 if dedup == "none" else int(sum(cps[h].recv1)) * row_bytes
        hop_ids.append(torch.cat(ids_parts) if ids_parts else torch.zeros((0, 1), dtype=torch.int64))
        hop_src[h] = (np.concatenate(buf_parts) if buf_parts else np.zeros(0, np.int64),
                      np.concatenate(row_parts) if row_parts else np.zeros(0, np.int64),
                      np.concatenate([np.full(cps[i].send1[h], i) for i in range(r)]) if buf_parts else np.zeros(0),
                      np.concatenate([lps[i].unit_token[int(np.sum(cps[i].send1[:h])):int(np.sum(cps[i].send1[:h]))
                                      + cps[i].send1[h]].numpy() for i in range(r)]) if buf_parts else np.zeros(0))
    # Step 1 (or the only step with dedup="none"): each hop's pairs to each owner's output row.
    recv2_base = [np.concatenate([[0], np.cumsum(cp.recv2 if dedup == "node" else [0] * r)[:-1]]).astype(np.int64)
                  for cp in cps]
    for h in range(r):
        bufk, rowk, srcrank, srctok = hop_src[h]
        pu, _, pexp = hop_pairs(hop_ids[h], layout, dedup, h)
        pu, powner = pu.numpy(), layout.owner[pexp]
        for j in np.unique(powner):
            sel = pu[powner == j]
            start = recv2_base[j][h] if dedup == "node" else 0
            dst_rows = cps[j].place[start:start + sel.size]
            if dedup == "none":
                # One pair per unit, written by the sender itself, straight from its input.
                for i in np.unique(srcrank[sel]):
                    m = srcrank[sel] == i
                    segs = [("input", s, "output", d, n) for s, d, n in _runs(srctok[sel][m], dst_rows[m])]
                    add(int(i), int(j), 0, segs, [])
                continue
            for bname, bcode in (("input", 0), ("scratch", 2)):
                m = bufk[sel] == bcode
                if not m.any():
                    continue
                segs = [(bname, s, "output", d, n) for s, d, n in _runs(rowk[sel][m], dst_rows[m])]
                add(h, int(j), 1, segs, into_hop[h] if bname == "scratch" else [])
    in_b = np.array([len(ix) * row_bytes for ix in routings], dtype=np.int64)
    out_b = np.array([cp.place.size * row_bytes for cp in cps], dtype=np.int64)
    internode = sum(t_bytes for t_bytes, t in zip(_transfer_bytes(transfers, segments), transfers)
                    if t["tier"] == "scale_out")
    doc = {"algorithm": f"moe_dispatch_{dedup}" + ("" if balance else "_static"),
           "collective": {"kind": "all_to_all", "traffic": {"n": r, "data": _declared(in_b, out_b)}},
           "gpus_per_server": g, "scratch_bytes": scratch, "transfers": transfers, "segments": segments,
           "deps": deps, "input_hash": 0, "meta": {"moe": "dispatch", "dedup": dedup, "row_bytes": str(row_bytes)}}
    plan = collsched.Plan.from_json(json.dumps(doc))
    info = {"input_bytes": in_b.tolist(), "output_bytes": out_b.tolist(), "internode_bytes": int(internode),
            "forwarders": cps[0].forwarders}
    return plan, info


def _transfer_bytes(transfers, segments):
    return [sum(s["len"] for s in segments[t["seg_begin"]:t["seg_end"]]) for t in transfers]


def verify_dispatch_plan(plan, routings: list, layout: Layout, row_bytes: int) -> dict:
    """Prove that ``plan`` dispatches ``routings``; raise ``collsched.VerificationError`` if not.

    Returns:
        dict: ``{"transfers", "rows_checked", "core": "passed" | "passed up to the final state"}``.
    """
    core = "passed"
    try:
        plan.verify()
    except collsched.VerificationError as exc:
        if not str(exc).startswith("final state:"):
            raise
        core = "passed up to the final state"
    doc = json.loads(plan.to_json())
    r = layout.ranks
    outs = [np.full((int(plan.output_sizes[j]) // row_bytes, 2), -1, dtype=np.int64) for j in range(r)]
    scr = [np.full((int(doc["scratch_bytes"][j]) // row_bytes, 2), -1, dtype=np.int64) for j in range(r)]
    for t, s, a, b, n in _row_segments(doc, row_bytes):
        if s["src_buf"] == "input":
            prov = np.stack([np.full(n, t["src"]), np.arange(a, a + n)], axis=1)
        else:
            prov = (scr if s["src_buf"] == "scratch" else outs)[t["src"]][a:a + n].copy()
        (scr if s["dst_buf"] == "scratch" else outs)[t["dst"]][b:b + n] = prov
    want = expected_rows(routings, layout)
    for j in range(r):
        got = outs[j][:want[j].shape[0]]
        if got.shape != want[j].shape or not np.array_equal(got, want[j]):
            bad = int(np.nonzero((got != want[j]).any(axis=1))[0][0]) if got.shape == want[j].shape else 0
            raise collsched.VerificationError(
                f"final state: output row {bad} of rank {j}: expected (rank, token) {tuple(want[j][bad])}, "
                f"found {tuple(got[bad]) if bad < got.shape[0] else 'nothing'}")
    return {"transfers": len(doc["transfers"]), "rows_checked": int(sum(w.shape[0] for w in want)), "core": core}


# ---------------------------------------------------------------- combine
def combine_plan(routings: list, layout: Layout, row_bytes: int, dedup: str = "node", balance: bool = True,
                 elem_bytes: int = 4):
    """The combine that `MoEBuffer.combine` executes, as one Plan with ``reduce_sum`` transfers.

    Every rank's Input holds its expert outputs ``[N_j, H]`` in the dispatched (expert-major)
    layout, each row already scaled by its router weight (the forwarder's weighted sum is a row
    scale followed by a sum, so the Plan sums unweighted rows); its Output is ``[T_i, H]``,
    rows of tokens without an expert left unwritten (the caller zero-fills them, as the
    runtime's combine returns zeros). Scratch of hop ``h``: the rows of its pairs (when they
    come from other ranks), one partial row per unit it forwarded, one row per unit it sent.

    - step 0 (``dedup="node"``): each expert GPU returns the rows of the pairs a forwarder
      sent it (hop 2 backwards), into the forwarder's pair rows;
    - steps 1 .. M: the forwarder's partial reduction: step ``1 + m`` adds the ``m``-th pair
      of every unit into the unit's partial row (a copy for ``m = 0``): rows into one row
      must be ordered, so one step per pair rank;
    - step M + 1: one partial row per (token, node) back to the token's rank (hop 1
      backwards; a rank's own node's partials stay in its scratch);
    - steps M + 2 ..: the origin adds its token's partials, one node per step, into the output.

    Args:
        routings, layout, row_bytes, dedup, balance: as `dispatch_plan`.
        elem_bytes (int): bytes per element (reductions add whole elements); divides row_bytes.
    Returns:
        (Plan, dict): the plan and ``{"input_bytes", "output_bytes", "internode_bytes"}``
        (the real buffer sizes; the plan declares an all-to-all at least that large, as
        `dispatch_plan` does; its final state is checked by `verify_combine_plan`).
    Raises:
        ValueError: routings not one [T_i, K] array per rank, or elem_bytes not dividing row_bytes.
    """
    r = layout.ranks
    routings = [np.asarray(ix, dtype=np.int64) for ix in routings]
    if len(routings) != r or any(ix.ndim != 2 for ix in routings):
        raise ValueError(f"routings must be {r} arrays [T_i, K] (one per rank)")
    if elem_bytes <= 0 or row_bytes % elem_bytes:
        raise ValueError(f"elem_bytes must be a positive divisor of row_bytes = {row_bytes}, got {elem_bytes}")
    lps = [plan_local(torch.as_tensor(ix), layout, dedup) for ix in routings]
    ec = np.stack([lp.expert_counts for lp in lps])
    kc = np.stack([lp.key_counts for lp in lps])
    cps = [plan_exchange(j, layout, dedup, balance, ec, kc) for j in range(r)]
    node = np.arange(r) // layout.gpus_per_node
    send_lo = [np.concatenate([[0], np.cumsum(cp.send1)]).astype(np.int64) for cp in cps]  # units per hop
    recv_lo = [np.concatenate([[0], np.cumsum(cp.recv1)]).astype(np.int64) for cp in cps]
    recv2_lo = [np.concatenate([[0], np.cumsum(cp.recv2)]).astype(np.int64) if dedup == "node" else None
                for cp in cps]
    # Per hop h: its units (from each source, ascending) and its pairs, in the executed order.
    # Scratch of hop h: [0, u_base) pair rows, [u_base, o_base) partial rows, then unit rows.
    pairs, u_base, o_base, scratch = [], [], [], []
    k = routings[0].shape[1] if routings else 1
    for h in range(r):
        ids = [unit_ids(lps[i], torch.as_tensor(routings[i]))[send_lo[i][h]:send_lo[i][h + 1]]
               for i in range(r) if cps[i].send1[h]]
        hop_ids = torch.cat(ids) if ids else torch.zeros((0, k), dtype=torch.int64)
        pu, _, pexp = hop_pairs(hop_ids, layout, dedup, h)
        pu, owner = pu.numpy(), layout.owner[pexp]
        # Input row (on the owner) of each pair: the owner placed hop h's rows at
        # place[recv2 offset of h ...] in this order (or, without hop 2, at place[q]).
        row = np.empty(pu.size, dtype=np.int64)
        for j in np.unique(owner):
            sel = np.flatnonzero(owner == j)
            start = recv2_lo[j][h] if dedup == "node" else 0
            row[sel] = cps[j].place[start:start + sel.size]
        pairs.append((pu, owner, row))
        remote = int((owner != h).sum()) if dedup == "node" else 0
        u_base.append(remote)
        o_base.append(remote + int(recv_lo[h][-1]))
        scratch.append((o_base[h] + int(send_lo[h][-1])) * row_bytes)

    transfers, segments, deps = [], [], []

    def add(src, dst, op, step, segs, dep_ids):
        tid = len(transfers)
        tier = 0 if src == dst else (1 if node[src] == node[dst] else 2)
        transfers.append({"src": int(src), "dst": int(dst), "op": op, "tier": _TIER[tier], "step": int(step),
                          "seg_begin": len(segments), "seg_end": len(segments) + len(segs),
                          "dep_begin": len(deps), "dep_end": len(deps) + len(dep_ids)})
        for sb, so, db, do, ln in segs:
            segments.append({"src_buf": sb, "src_off": int(so) * row_bytes, "dst_buf": db,
                             "dst_off": int(do) * row_bytes, "len": int(ln) * row_bytes})
        deps.extend(int(d) for d in dep_ids)
        return tid

    # Step 0: expert rows back to the forwarders (hop 2 backwards), into their pair rows.
    into = [[] for _ in range(r)]
    src_of_pair = []  # per hop: (buffer, row) each pair is read from by the partial reduction
    for h, (pu, owner, row) in enumerate(pairs):
        buf = np.where(owner == h, 0, 2) if dedup == "node" else np.zeros(pu.size, np.int64)
        at = row.copy()
        remote = np.flatnonzero(buf == 2)
        at[remote] = np.arange(remote.size)
        for j in np.unique(owner[remote]):
            m = remote[owner[remote] == j]
            segs = [("input", a, "scratch", b, n) for a, b, n in _runs(row[m], at[m])]
            into[h].append(add(j, h, "copy", 0, segs, []))
        src_of_pair.append((buf, at))
    # Steps 1 .. M: partial reduction on each hop, the m-th pair of every unit per step.
    last_on = [None] * r
    depth = 0
    for h, (pu, _, _) in enumerate(pairs):
        if not pu.size:
            continue
        buf, at = src_of_pair[h]
        rank_in_unit = _rank_within(pu)
        prev = None
        for m in range(int(rank_in_unit.max()) + 1):
            q = np.flatnonzero(rank_in_unit == m)
            segs = [("input" if buf[x] == 0 else "scratch", at[x], "scratch", u_base[h] + pu[x], 1) for x in q]
            prev = add(h, h, "copy" if m == 0 else "reduce_sum", 1 + m, segs, into[h] if m == 0 else [prev])
        last_on[h] = prev
        depth = max(depth, int(rank_in_unit.max()) + 1)
    # Step M + 1: one partial row per unit back to its source (hop 1 backwards).
    back = [[] for _ in range(r)]
    for h in range(r):
        for i in range(r):
            n = cps[i].send1[h]
            if not n or i == h:
                continue
            segs = [("scratch", u_base[h] + recv_lo[h][i], "scratch", o_base[i] + send_lo[i][h], n)]
            back[i].append(add(h, i, "copy", 1 + depth, segs, [last_on[h]]))
    # Steps M + 2 ..: each source adds its tokens' partials into the output, one per step.
    for i in range(r):
        tok = lps[i].unit_token.numpy()
        if not tok.size:
            continue
        # A unit's row: its own node's partials stay in this rank's partial rows.
        hop_of_unit = np.searchsorted(send_lo[i], np.arange(tok.size), side="right") - 1
        own = hop_of_unit == i
        unit_row = o_base[i] + np.arange(tok.size)
        unit_row[own] = u_base[i] + recv_lo[i][i] + (np.arange(tok.size)[own] - send_lo[i][i])
        rank_in_token = _rank_within(tok)
        prev = None
        for m in range(int(rank_in_token.max()) + 1):
            q = np.flatnonzero(rank_in_token == m)
            segs = [("scratch", unit_row[x], "output", tok[x], 1) for x in q]
            first = back[i] + ([last_on[i]] if own.any() else [])
            add(i, i, "copy" if m == 0 else "reduce_sum", 2 + depth + m, segs, first if m == 0 else [prev])
            prev = len(transfers) - 1
    in_b = np.array([cp.place.size * row_bytes for cp in cps], dtype=np.int64)
    out_b = np.array([len(ix) * row_bytes for ix in routings], dtype=np.int64)
    doc = {"algorithm": f"moe_combine_{dedup}" + ("" if balance else "_static"),
           "collective": {"kind": "all_to_all", "traffic": {"n": r, "data": _declared(in_b, out_b)}},
           "gpus_per_server": layout.gpus_per_node, "scratch_bytes": scratch, "transfers": transfers,
           "segments": segments, "deps": deps, "input_hash": 0,
           "meta": {"moe": "combine", "dedup": dedup, "row_bytes": str(row_bytes), "elem_bytes": str(elem_bytes)}}
    plan = collsched.Plan.from_json(json.dumps(doc))
    internode = sum(t_bytes for t_bytes, t in zip(_transfer_bytes(transfers, segments), transfers)
                    if t["tier"] == "scale_out")
    return plan, {"input_bytes": in_b.tolist(), "output_bytes": out_b.tolist(), "internode_bytes": int(internode)}


def _rank_within(keys: np.ndarray) -> np.ndarray:
    """For each entry, how many earlier entries share its key (0 for the first)."""
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    first = np.concatenate([[0], np.flatnonzero(np.diff(sk)) + 1]) if sk.size else np.zeros(0, np.int64)
    starts = np.repeat(first, np.diff(np.concatenate([first, [sk.size]])))
    out = np.empty(keys.size, dtype=np.int64)
    out[order] = np.arange(keys.size) - starts
    return out


def _row_segments(doc: dict, row_bytes: int):
    """A plan document's segments in transfer order as whole rows: (transfer, segment, source
    row, destination row, rows), for the symbolic final-state checks.

    Raises:
        VerificationError: a segment is not whole rows of `row_bytes` bytes.
    """
    segs = doc["segments"]
    for tid, t in enumerate(doc["transfers"]):
        for s in segs[t["seg_begin"]:t["seg_end"]]:
            if s["src_off"] % row_bytes or s["dst_off"] % row_bytes or s["len"] % row_bytes:
                raise collsched.VerificationError(f"transfer {tid}: a segment is not whole rows of {row_bytes} bytes")
            yield t, s, s["src_off"] // row_bytes, s["dst_off"] // row_bytes, s["len"] // row_bytes


def _declared(in_b: np.ndarray, out_b: np.ndarray) -> list:
    """An all-to-all matrix with at least these input and output sizes (the last rank pads)."""
    rows, cols = in_b.copy(), out_b.copy()
    diff = int(cols.sum() - rows.sum())
    if diff > 0:
        rows[-1] += diff
    else:
        cols[-1] -= diff
    return _northwest(rows, cols).reshape(-1).tolist()


def expected_contributions(routings: list, layout: Layout) -> list:
    """Per rank, per output row: the sorted list of (expert rank, input row) that the combine
    of ``routings`` sums there, derived from `expected_rows` (the routing alone)."""
    want = [[[] for _ in range(len(ix))] for ix in routings]
    for j, rows in enumerate(expected_rows(routings, layout)):
        for n, (i, t) in enumerate(rows.tolist()):
            want[i][t].append((j, n))
    return [[sorted(c) for c in per_rank] for per_rank in want]


def verify_combine_plan(plan, routings: list, layout: Layout, row_bytes: int, elem_bytes: int = 4) -> dict:
    """Prove that ``plan`` combines ``routings``; raise ``collsched.VerificationError`` if not.

    The core verifier runs every structural, bound, data-flow and hazard check with
    ``final_state="caller"`` (reduce_sum allowed, in ``elem_bytes`` elements); then symbolic
    execution over rows, where a row holds a multiset of (expert rank, input row)
    contributions, in transfer order (which the core proved every valid schedule matches):
    every output row must hold exactly the contributions the routing defines, each once;
    rows of tokens without an expert must stay unwritten.

    Returns:
        dict: ``{"transfers", "rows_checked", "contributions"}``.
    """
    plan.verify(final_state="caller", elem_bytes=elem_bytes)
    doc = json.loads(plan.to_json())
    r = layout.ranks
    outs = [[None] * (int(plan.output_sizes[j]) // row_bytes) for j in range(r)]
    scr = [[None] * (int(doc["scratch_bytes"][j]) // row_bytes) for j in range(r)]
    for t, s, a, b, n in _row_segments(doc, row_bytes):
        dst = scr[t["dst"]] if s["dst_buf"] == "scratch" else outs[t["dst"]]
        for x in range(n):
            if s["src_buf"] == "input":
                got = Counter({(t["src"], a + x): 1})
            else:
                got = Counter((scr if s["src_buf"] == "scratch" else outs)[t["src"]][a + x])
            if t["op"] == "reduce_sum":
                dst[b + x] = dst[b + x] + got  # the core proved the destination written
            else:
                dst[b + x] = got
    want = expected_contributions(routings, layout)
    total = 0
    for i in range(r):
        for t, cells in enumerate(outs[i]):
            exp = want[i][t] if t < len(want[i]) else []
            got = sorted((cells or Counter()).elements())
            if got != exp:
                raise collsched.VerificationError(
                    f"final state: output row {t} of rank {i}: expected the sum of {exp} (expert rank, input row), "
                    f"found {got}")
            total += len(exp)
    return {"transfers": len(doc["transfers"]), "rows_checked": sum(len(w) for w in want), "contributions": total}


__all__ = ["dispatch_plan", "verify_dispatch_plan", "expected_rows", "combine_plan", "verify_combine_plan",
           "expected_contributions"]
