"""Hand-built plans (through Plan.from_json) that exercise what fanout does not:
several steps, scratch, relays, multi-segment gather/scatter, ReduceSum, and the
allgather / reduce_scatter / allreduce collectives."""
from __future__ import annotations

import json

import collsched


def _plan(algorithm, collective, gps, n, scratch, transfers, segments, deps):
    return collsched.Plan.from_json(json.dumps({
        "algorithm": algorithm, "collective": collective, "gpus_per_server": gps, "scratch_bytes": scratch,
        "transfers": transfers, "segments": segments, "deps": deps, "input_hash": 0, "meta": {}}))


class _B:
    """Builds transfers and derives their deps: every earlier transfer whose accesses conflict
    (overlap, one of them writing) becomes a direct dependency, as the verifier requires."""

    def __init__(self, gps):
        self.gps = gps
        self.t, self.s, self.d = [], [], []
        self.access = []  # per transfer: [(rank, buf, lo, hi, writes)]

    def _deps(self, acc):
        out = []
        for tid, prev in enumerate(self.access):
            if any(r == r2 and b == b2 and lo < hi2 and lo2 < hi and (w or w2)
                   for r, b, lo, hi, w in acc for r2, b2, lo2, hi2, w2 in prev):
                out.append(tid)
        return out

    def add(self, src, dst, step, segs, op="copy", deps=()):
        tier = "local" if src == dst else ("scale_up" if src // self.gps == dst // self.gps else "scale_out")
        acc = [(src, sbuf, soff, soff + ln, False) for sbuf, soff, _, _, ln in segs]
        acc += [(dst, dbuf, doff, doff + ln, True) for _, _, dbuf, doff, ln in segs]
        deps = sorted(set(deps) | set(self._deps(acc)))
        self.access.append(acc)
        sb = len(self.s)
        for sbuf, soff, dbuf, doff, ln in segs:
            self.s.append({"src_buf": sbuf, "src_off": soff, "dst_buf": dbuf, "dst_off": doff, "len": ln})
        db = len(self.d)
        self.d.extend(deps)
        self.t.append({"src": src, "dst": dst, "op": op, "tier": tier, "step": step, "seg_begin": sb,
                       "seg_end": len(self.s), "dep_begin": db, "dep_end": len(self.d)})
        return len(self.t) - 1


def relay_all_to_all(matrix, gps):
    """Block i→j travels i → relay r → j through r's scratch, split in two segments sent
    in reverse order; the diagonal goes input → scratch → output locally over two steps."""
    n = len(matrix)
    send = [[sum(matrix[i][:j]) for j in range(n)] for i in range(n)]
    recv = [[sum(matrix[k][j] for k in range(i)) for j in range(n)] for i in range(n)]
    scratch = [0] * n
    b = _B(gps)
    second = []
    for i in range(n):
        for j in range(n):
            ln = int(matrix[i][j])
            if ln == 0:
                continue
            if i == j:
                at = scratch[i]
                scratch[i] += ln
                t = b.add(i, i, 0, [("input", send[i][j], "scratch", at, ln)])
                second.append((i, i, [("scratch", at, "output", recv[i][j], ln)], t))
                continue
            r = next(k for k in ((i + j + 1 + x) % n for x in range(n)) if k not in (i, j))
            at = scratch[r]
            scratch[r] += ln
            h = ln // 2
            segs = [("input", send[i][j] + h, "scratch", at + h, ln - h)]
            if h:
                segs.append(("input", send[i][j], "scratch", at, h))
            t = b.add(i, r, 0, segs)
            second.append((r, j, [("scratch", at + h, "output", recv[i][j] + h, ln - h)]
                           + ([("scratch", at, "output", recv[i][j], h)] if h else []), t))
    for src, dst, segs, dep in second:
        b.add(src, dst, 1, segs, deps=[dep])
    data = [int(x) for row in matrix for x in row]
    return _plan("relay_test", {"kind": "all_to_all", "traffic": {"n": n, "data": data}}, gps, n, scratch,
                 b.t, b.s, b.d)


def ring_allgather(n, shard, gps):
    b = _B(gps)
    for r in range(n):
        b.add(r, r, 0, [("input", 0, "output", r * shard, shard)])
    for s in range(1, n):
        for r in range(n):
            c = (r - s + 1) % n
            b.add(r, (r + 1) % n, s, [("output", c * shard, "output", c * shard, shard)])
    return _plan("ring_test", {"kind": "all_gather", "ranks": n, "shard_bytes": shard}, gps, n, [0] * n, b.t, b.s, b.d)


def direct_reduce_scatter(n, shard, elem, gps):
    b = _B(gps)
    for r in range(n):
        b.add(r, r, 0, [("input", r * shard, "output", 0, shard)])
    for s in range(1, n):
        for i in range(n):
            j = (i + s) % n
            b.add(i, j, s, [("input", j * shard, "output", 0, shard)], op="reduce_sum")
    return _plan("rs_test", {"kind": "reduce_scatter", "ranks": n, "shard_bytes": shard, "elem_bytes": elem},
                 gps, n, [0] * n, b.t, b.s, b.d)


def rs_ag_allreduce(n, chunk, elem, gps):
    """Reduce-scatter of chunks into the output, then a ring allgather; received partial sums land
    in scratch first and are added locally (a ReduceSum local transfer)."""
    b = _B(gps)
    for r in range(n):
        b.add(r, r, 0, [("input", 0, "output", 0, n * chunk)])
    for s in range(1, n):
        for i in range(n):
            j = (i + s) % n
            b.add(i, j, 2 * s - 1, [("input", j * chunk, "scratch", 0, chunk)])
            b.add(j, j, 2 * s, [("scratch", 0, "output", j * chunk, chunk)], op="reduce_sum")
    base = 2 * n - 1
    for s in range(1, n):
        for r in range(n):
            c = (r - s + 1) % n
            b.add(r, (r + 1) % n, base + s, [("output", c * chunk, "output", c * chunk, chunk)])
    return _plan("ar_test", {"kind": "all_reduce", "ranks": n, "bytes": n * chunk, "elem_bytes": elem}, gps, n,
                 [chunk] * n, b.t, b.s, b.d)
