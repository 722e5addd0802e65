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
    rows_decl, cols_decl = in_b.copy(), out_b.copy()
    diff = int(out_b.sum() - in_b.sum())
    if diff > 0:
        rows_decl[-1] += diff
    else:
        cols_decl[-1] -= diff
    matrix = _northwest(rows_decl, cols_decl)
    internode = sum(t_bytes for t_bytes, t in zip(_transfer_bytes(transfers, segments), transfers)
                    if t["tier"] == "scale_out")
    doc = {"algorithm": f"moe_dispatch_{dedup}" + ("" if balance else "_static"),
           "collective": {"kind": "all_to_all", "traffic": {"n": r, "data": matrix.reshape(-1).tolist()}},
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
    segs = doc["segments"]
    for tid, t in enumerate(doc["transfers"]):
        for s in segs[t["seg_begin"]:t["seg_end"]]:
            if s["src_off"] % row_bytes or s["dst_off"] % row_bytes or s["len"] % row_bytes:
                raise collsched.VerificationError(f"transfer {tid}: a segment is not whole rows of {row_bytes} bytes")
            a, b, n = s["src_off"] // row_bytes, s["dst_off"] // row_bytes, s["len"] // row_bytes
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


__all__ = ["dispatch_plan", "verify_dispatch_plan", "expected_rows"]
