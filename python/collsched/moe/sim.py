"""`collsched moe simulate`: MoE dispatch + combine of every variant as aggregated Plans (one
transfer per rank pair and phase, not per token) on the existing simulator.

Routing generators (per source rank, counts only):

- ``realistic``: DeepSeek-V3-like group-limited routing: each token picks at most 4 nodes
  (Gumbel top-4 over node popularity), then its top-K experts inside them; expert popularity
  is skewed (log-normal, sigma 0.5: the hottest of 256 experts gets about 3-4× the mean);
- ``single-node``: every token's K experts sit on one node (Fusco Fig. 8);
- ``imbalanced``: Fusco Fig. 10's bimodal per-GPU cross-node load: GPU ``i`` draws a load
  ``p_i ~ Beta(0.3, 0.3)``; each of its tokens is routed like ``realistic`` over the other
  nodes with probability ``p_i``, else to experts of its own node only.

Pipelining (``chunks``): every send is cut into pieces sent in order, and piece c of a
forwarder's next hop waits only for piece c of what reached it, as Fusco's slices (§3.2) and
DeepEP's chunks flow; rows a GPU sends to its own node wait for nothing of hop 1. Copies
(permutes) wait for everything before them. ``chunks=1``: each hop waits for the whole previous one.

Variants (dispatch; combine is the mirror, each phase's matrix transposed, the same copies):

| variant | phases |
|---|---|
| nccl | permute (copy at HBM bw) · all-to-all of (token, expert) pairs · permute to expert-major |
| deepep | one copy per (token, node) to the same-index GPU · one copy per (token, rank) inside the node · permute to expert-major |
| fusco | one copy per (token, node) to the balancer's forwarder · one row per (token, expert) straight into the expert-major output |
| fusco_fast | fusco with the scale-out phase planned by FAST (collsched's `fast`) where the simulator predicts FAST beats direct sends on that phase's matrix, else fusco |
| fusco_no_fusion | fusco plus a permute before the send and one after the arrival |
| fusco_no_dedup | (token, expert) pairs straight to the expert's GPU, fused (Table 3 "Planner-off") |
| fusco_no_balancer | fusco with the static same-index forwarders (Table 3 "Balancer-off") |
"""
from __future__ import annotations

import json

import numpy as np

import collsched
from collsched.moe.balancer import balance_forwarders

VARIANTS = ("nccl", "deepep", "fusco", "fusco_fast", "fusco_no_fusion", "fusco_no_dedup", "fusco_no_balancer")
ROUTINGS = ("realistic", "single-node", "imbalanced")
POPULARITY_SIGMA = 0.5  # log-normal expert popularity: the hottest of 256 experts ≈ 3-4× the mean
FUSCO_TESTBED = "h100:8,scaleup=480GB/s,nic=50GB/s"  # 8 × 8 H100, NVLink 480 GB/s, 400 Gb/s per GPU


def _popularity(e: int, rng) -> np.ndarray:
    p = np.exp(rng.normal(0.0, POPULARITY_SIGMA, size=e))
    return p / p.sum()


def _topk_gumbel(logw: np.ndarray, k: int, rng) -> np.ndarray:
    u = np.clip(rng.random(logw.shape, dtype=np.float32), 1e-7, 1 - 1e-7)
    g = logw - np.log(-np.log(u))
    return np.argpartition(-g, k - 1, axis=-1)[..., :k]


def route_counts(routing: str, tokens: int, ranks: int, gpn: int, experts: int, k: int, seed: int = 0):
    """Counts of one routing: ``pairs[i, j]`` (token, expert) pairs from rank i to rank j,
    ``node_units[i, s]`` tokens of i with an expert on node s, ``rank_units[i, j]`` tokens of i
    with an expert on rank j. Experts in contiguous blocks (expert e on rank e // (E / R))."""
    if routing not in ROUTINGS:
        raise ValueError(f"routing must be one of {ROUTINGS}, got {routing!r}")
    rng = np.random.default_rng(seed)
    nodes = ranks // gpn
    per_node = experts // nodes
    per_rank = experts // ranks
    logpop = np.log(_popularity(experts, rng)).reshape(nodes, per_node)
    node_logpop = np.log(np.exp(logpop).sum(1))
    max_nodes = min(4, nodes)
    pairs = np.zeros((ranks, ranks), np.int64)
    node_units = np.zeros((ranks, nodes), np.int64)
    rank_units = np.zeros((ranks, ranks), np.int64)
    loads = rng.beta(0.3, 0.3, size=ranks)
    for i in range(ranks):
        own = i // gpn
        if routing == "single-node":
            chosen = rng.integers(0, nodes, size=(tokens, 1))
        else:
            lw = np.broadcast_to(node_logpop, (tokens, nodes)).copy()
            if routing == "imbalanced":
                lw[:, own] = -np.inf  # remote tokens avoid the own node
            chosen = _topk_gumbel(lw, max_nodes if routing != "imbalanced" else min(max_nodes, nodes - 1), rng)
            if routing == "imbalanced":
                local = rng.random(tokens) >= loads[i]
                chosen[local] = own  # a local token's experts all sit on its own node
        m = chosen.shape[1]
        cand = (chosen[:, :, None] * per_node + np.arange(per_node)[None, None, :]).reshape(tokens, m * per_node)
        lw = logpop.reshape(-1)[cand]
        if m > 1:  # duplicated nodes (local tokens) must not pick one expert twice
            dup = np.zeros_like(lw, dtype=bool)
            dup[:, per_node:] = (chosen[:, 1:] == chosen[:, :1]).repeat(per_node, axis=1)
            lw = np.where(dup, -np.inf, lw)
        pick = np.take_along_axis(cand, _topk_gumbel(lw, k, rng), axis=1)  # [T, K] expert ids
        owner = pick // per_rank
        pairs[i] = np.bincount(owner.reshape(-1), minlength=ranks)
        tok = np.repeat(np.arange(tokens), k)
        hit_r = np.zeros((tokens, ranks), bool)
        hit_r[tok, owner.reshape(-1)] = True
        rank_units[i] = hit_r.sum(0)
        hit_n = np.zeros((tokens, nodes), bool)
        hit_n[tok, (owner // gpn).reshape(-1)] = True
        node_units[i] = hit_n.sum(0)
    return pairs, node_units, rank_units


class _PlanWriter:
    """Aggregated plan arrays: one transfer per (src, dst, phase), one segment each."""

    def __init__(self, ranks: int, gpn: int):
        self.r, self.g = ranks, gpn
        self.transfers, self.segments, self.deps = [], [], []
        self.scratch = [0] * ranks
        self.max_read = [0] * ranks
        self.into: list = [[] for _ in range(ranks)]  # transfer ids that deliver into each rank
        self.used_fast = False

    def add(self, src: int, dst: int, nbytes: int, step: int, deps) -> int:
        tid = len(self.transfers)
        deps = sorted(set(deps))
        tier = "local" if src == dst else ("scale_up" if src // self.g == dst // self.g else "scale_out")
        self.transfers.append({"src": src, "dst": dst, "op": "copy", "tier": tier, "step": step,
                               "seg_begin": len(self.segments), "seg_end": len(self.segments) + 1,
                               "dep_begin": len(self.deps), "dep_end": len(self.deps) + len(deps)})
        self.segments.append({"src_buf": "input", "src_off": 0, "dst_buf": "scratch",
                              "dst_off": self.scratch[dst], "len": int(nbytes)})
        self.scratch[dst] += int(nbytes)
        self.max_read[src] = max(self.max_read[src], int(nbytes))
        self.deps.extend(deps)
        self.into[dst].append(tid)
        return tid

    def phase(self, matrix: np.ndarray, step: int, dep_of) -> list:
        """A transfer per non-zero entry; ``dep_of(src)``: ids it waits for. Returns per-dst ids."""
        got: list = [[] for _ in range(self.r)]
        for i, j in zip(*np.nonzero(matrix)):
            got[j].append(self.add(int(i), int(j), int(matrix[i, j]), step, dep_of(int(i))))
        return got

    def plan(self, name: str):
        d = np.array([max(m, 1) for m in self.max_read], dtype=np.uint64)
        doc = {"algorithm": name, "collective": {"kind": "all_to_all",
                                                 "traffic": {"n": self.r, "data": np.diag(d).reshape(-1).tolist()}},
               "gpus_per_server": self.g, "scratch_bytes": self.scratch, "transfers": self.transfers,
               "segments": self.segments, "deps": self.deps, "input_hash": 0, "meta": {"moe": name}}
        return collsched.Plan.from_json(json.dumps(doc))


def _phases(variant: str, pairs, node_units, rank_units, gpn: int, row: int):
    """The variant's dispatch as phases: ("copy", per-rank rows) or ("send", R×R rows) or ("fast", R×R rows)."""
    r = pairs.shape[0]
    nodes = r // gpn
    node = np.arange(r) // gpn
    if variant in ("nccl", "fusco_no_dedup"):
        out = [("send", pairs)]
        if variant == "nccl":
            out = [("copy", pairs.sum(1))] + out + [("copy", pairs.sum(0))]
        return out
    remote = node[:, None] != np.arange(nodes)[None, :]
    load = (node_units * remote).sum(1)
    balance = variant not in ("deepep", "fusco_no_balancer")
    fwd = balance_forwarders(load, gpn, balance)
    hop1 = np.zeros((r, r), np.int64)
    for s in range(nodes):
        np.add.at(hop1, (np.arange(r), fwd[:, s]), np.where(node != s, node_units[:, s], 0))
    per = rank_units if variant == "deepep" else pairs  # deepep: one copy per rank; fusco: per expert
    hop2 = np.zeros((r, r), np.int64)
    for j in range(r):
        np.add.at(hop2[:, j], fwd[:, node[j]], per[:, j])
    # A token's own node is reached from the token's GPU itself (F[i, node(i)] = i): those rows
    # move in hop 2 but wait for nothing of hop 1 ("own").
    same = node[:, None] == node[None, :]
    own = np.where(same, per, 0)
    first = ("fast" if variant == "fusco_fast" else "send", hop1)
    out = [first, ("own", own), ("send", hop2 - own)]
    if variant == "deepep":
        out.append(("copy", pairs.sum(0)))
    if variant == "fusco_no_fusion":
        out = [("copy", node_units.sum(1))] + out + [("copy", pairs.sum(0))]
    return out


def _build(phases, cluster, row: int, name: str, reverse: bool, chunks: int = 1):
    """The phases as one plan. With ``chunks`` > 1 every send is cut into that many pieces and
    piece c of a rank's next send waits only for piece c of what reached it: the pipelined
    forwarding of Fusco §3.2 and DeepEP (copies still wait for everything before them)."""
    r = cluster.num_gpus
    g = cluster.gpus_per_server
    w = _PlanWriter(r, g)
    seq = list(reversed(phases)) if reverse else phases
    done = [[[] for _ in range(chunks)] for _ in range(r)]  # done[i][c]: ids piece c of i's next send waits for
    extra: list = [[] for _ in range(r)]  # arrivals only later copies wait for ("own" rows)
    pre = None  # the state before the first network phase: what "own" rows wait for
    step = 0
    for kind, data in seq:
        data = np.asarray(data)
        if kind == "copy":
            for i in range(r):
                if data[i]:
                    tid = w.add(i, i, int(data[i]) * row, step, [d for c in done[i] for d in c] + extra[i])
                    done[i] = [[tid] for _ in range(chunks)]
                    extra[i] = []
            step += 1
            continue
        if pre is None:
            pre = [[list(c) for c in done[i]] for i in range(r)]
        m = (data.T if reverse else data) * row
        if kind == "fast" and _fast_pays(m, cluster):
            got, step = _fast_phase(w, m, cluster, step, [[d for c in done[i] for d in c] for i in range(r)])
            w.used_fast = True
            done = [[list(done[i][c]) + got[i] for c in range(chunks)] for i in range(r)]
            continue
        waits = pre if kind == "own" else done
        new = [[[] for _ in range(chunks)] for _ in range(r)]
        for i, j in zip(*np.nonzero(m)):
            total = int(m[i, j])
            prev = []  # a stream sends its pieces in order, one after another
            for c in range(chunks):
                piece = total // chunks + (1 if c < total % chunks else 0)
                if piece:
                    prev = [w.add(int(i), int(j), piece, step + c, waits[i][c] + prev)]
                    new[j][c].extend(prev)
        if kind == "own":
            extra = [extra[i] + [d for c in new[i] for d in c] for i in range(r)]
        else:
            done = [[done[i][c] + new[i][c] for c in range(chunks)] for i in range(r)]
        step += chunks
    return w.plan(name), w.used_fast


def _fast_pays(m: np.ndarray, cluster) -> bool:
    """FAST for the node-level matrix only where the simulator predicts it beats direct sends
    (its balancing stage costs time when the matrix is already even)."""
    direct = _PlanWriter(cluster.num_gpus, cluster.gpus_per_server)
    direct.phase(m, 0, lambda i: [])
    fast = collsched.plan_all_to_all(m.astype(np.uint64), cluster, algorithm="fast")
    return collsched.simulate(fast, cluster).time_s < collsched.simulate(direct.plan("direct"), cluster).time_s


def _fast_phase(w: _PlanWriter, m: np.ndarray, cluster, step0: int, done_into):
    """Append FAST's plan of matrix ``m`` (bytes), every transfer after its source's earlier phases."""
    plan = collsched.plan_all_to_all(m.astype(np.uint64), cluster, algorithm="fast")
    doc = json.loads(plan.to_json())
    got: list = [[] for _ in range(w.r)]
    ids = []
    last = step0
    for t in doc["transfers"]:
        nbytes = sum(s["len"] for s in doc["segments"][t["seg_begin"]:t["seg_end"]])
        deps = [ids[d] for d in doc["deps"][t["dep_begin"]:t["dep_end"]]] + list(done_into[t["src"]])
        tid = w.add(t["src"], t["dst"], max(nbytes, 1), step0 + t["step"], deps)
        ids.append(tid)
        got[t["dst"]].append(tid)
        last = max(last, step0 + t["step"])
    return got, last + 1


def simulate_variant(variant: str, counts, cluster, hidden: int, elem_bytes: int = 2, chunks: int = 1) -> dict:
    """Simulated dispatch + combine of one variant; times in seconds (simulated, not executed).
    ``chunks`` > 1 pipelines the hops (see `_build`)."""
    if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1:
        raise ValueError(f"chunks must be a positive int, got {chunks!r}")
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    pairs, node_units, rank_units = counts
    row = hidden * elem_bytes
    phases = _phases(variant, pairs, node_units, rank_units, cluster.gpus_per_server, row)
    res = {"fast_used": []}
    for which, rev in (("dispatch", False), ("combine", True)):
        plan, used = _build(phases, cluster, row, f"moe_{variant}_{which}", rev, chunks)
        sim = collsched.simulate(plan, cluster)
        res[which] = sim.time_s
        if used:
            res["fast_used"].append(which)
        if which == "dispatch":
            res["internode_bytes"] = int(plan.bytes_per_tier()["scale_out"])
    return {"variant": variant, "time_s": res["dispatch"] + res["combine"], "dispatch_s": res["dispatch"],
            "combine_s": res["combine"], "internode_bytes": res["internode_bytes"],
            "fast_used": ",".join(res["fast_used"])}


def run(cluster, tokens: list, hidden: int, topk: int, experts: int, routing: str, variants: list,
        seed: int = 0, elem_bytes: int = 2, chunks: int = 1) -> list:
    """Rows of {tokens, routing, variant, time_s, dispatch_s, combine_s, internode_bytes} (simulated)."""
    if isinstance(cluster, str):
        cluster = collsched.Cluster.parse(cluster)
    r, g = cluster.num_gpus, cluster.gpus_per_server
    if experts % r:
        raise ValueError(f"experts ({experts}) must be a multiple of the {r} GPUs")
    if topk > experts // (r // g):
        raise ValueError(f"topk ({topk}) exceeds the experts of one node ({experts // (r // g)})")
    for v in variants:
        if v not in VARIANTS:
            raise ValueError(f"unknown variant {v!r} (known: {', '.join(VARIANTS)})")
    rows = []
    for t in tokens:
        counts = route_counts(routing, int(t), r, g, experts, topk, seed)
        for v in variants:
            rows.append({"tokens": int(t), "routing": routing, "chunks": chunks,
                         **simulate_variant(v, counts, cluster, hidden, elem_bytes, chunks)})
    return rows


__all__ = ["VARIANTS", "ROUTINGS", "FUSCO_TESTBED", "route_counts", "simulate_variant", "run"]
