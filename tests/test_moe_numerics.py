"""Numerics of MoEBuffer's deduplicated combine in bfloat16 on 4 Gloo ranks (2 emulated nodes × 2).

Against a float64 reference (each token's expert outputs times its router weights, summed in
float64), the relative L2 error of ``MoEBuffer.combine`` must be no larger than a plain combine's
on the same inputs: each (token, expert) output weighted in float32, rounded to bfloat16 and
scatter-added into a bfloat16 [T, H] tensor (torchtitan's ``combine``; on CPU torch sums such a
scatter-add in float32 and rounds once, the most accurate a plain combine gets). Both the
weighted combine (router weights applied in combine, torchtitan) and the unweighted one (the
experts applied them, Megatron) are measured, for dedup "node" and "rank"; a buffer with
``combine_precision="native"`` (partials rounded to bfloat16 per node) is measured too, and a
float64 combine must keep float64 accuracy.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

pytest.importorskip("torch")

from collsched.comm.launch import RankFailure, run_local  # noqa: E402

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
WORLD, GPN, E, K, H, T = 4, 2, 16, 6, 32, 192


def _expert_out(x, e, h):
    """Expert ``e``'s output for rows ``x`` [n, H] bf16: a fixed affine map per expert, computed
    in float32 and rounded to bf16, so the token's rank can recompute the experts' outputs
    bit for bit for the reference and the plain combine."""
    import torch

    gen = torch.Generator().manual_seed(100 + int(e))
    a = torch.randn(h, generator=gen)
    b = torch.randn(h, generator=gen)
    return (x.float() * a + b).to(torch.bfloat16)


def numerics_worker(seed):
    import torch
    import torch.distributed as dist

    import collsched.moe as moe

    rank = dist.get_rank()
    gen = torch.Generator().manual_seed(seed * 100 + rank)
    x = torch.randn(T, H, generator=gen).to(torch.bfloat16)
    idx = torch.stack([torch.randperm(E, generator=gen)[:K] for _ in range(T)])
    w = torch.softmax(torch.randn(T, K, generator=gen) * 2, dim=-1)
    # The experts' outputs for every (token, k), as the experts will compute them.
    y_tk = torch.stack([_expert_out(x[t:t + 1], int(idx[t, k]), H)[0] for t in range(T) for k in range(K)])
    y_tk = y_tk.reshape(T, K, H)
    ref = (y_tk.double() * w.double()[..., None]).sum(1)  # float64 reference, weighted
    prod = (y_tk.float() * w[..., None]).to(torch.bfloat16)  # the experts' weighted outputs (bf16)
    ref_u = prod.double().sum(1)  # float64 reference of the unweighted combine
    tok = torch.arange(T).repeat_interleave(K)[:, None].expand(-1, H)

    def plain(rows):  # torchtitan's combine: a bf16 scatter-add of the weighted bf16 rows
        return torch.zeros(T, H, dtype=torch.bfloat16).scatter_add(0, tok, rows.reshape(T * K, H))

    def sq(a, r):
        return [float(((a.double() - r) ** 2).sum()), float((r ** 2).sum())]

    out = {"plain weighted": sq(plain(prod), ref), "plain unweighted": sq(plain(prod), ref_u)}
    for dedup in ("node", "rank"):
        for prec in ("float32", "native"):
            buf = moe.MoEBuffer(None, E, cluster=f"h100:2,gpus={GPN}", dedup=dedup, combine_precision=prec)
            d = buf.dispatch(x, idx, w)
            # Expert-major rows: each local expert's block through its map.
            ys, lo = [], 0
            for e, n in zip(buf.local_experts, d.tokens_per_expert):
                ys.append(_expert_out(d.x[lo:lo + n], e, H))
                lo += n
            y = torch.cat(ys) if ys else d.x
            out[f"{dedup}/{prec} weighted"] = sq(buf.combine(y, d.handle, weighted=True), ref)
            out[f"{dedup}/{prec} bytes"] = [buf.last_stats["combine_internode_wire_bytes"],
                                           buf.last_stats["internode_rows"] * H * 2]
            yw = (y.float() * d.weights[:, None]).to(torch.bfloat16)  # the experts apply the weights
            out[f"{dedup}/{prec} unweighted"] = sq(buf.combine(yw, d.handle, weighted=False), ref_u)
    # float64 rows: the partial sums and the origin's sum stay in float64 (they were float32 once).
    buf = moe.MoEBuffer(None, E, cluster=f"h100:2,gpus={GPN}", dedup="node")
    d = buf.dispatch(x.double(), idx, w)
    ys, lo = [], 0
    for e, n in zip(buf.local_experts, d.tokens_per_expert):
        ys.append(_expert_out(d.x[lo:lo + n], e, H).double())
        lo += n
    y = torch.cat(ys) if ys else d.x
    out["node float64 weighted"] = sq(buf.combine(y, d.handle, weighted=True), ref)
    return out


def test_bf16_combine_error_is_no_worse_than_a_plain_combine():
    res = run_local("test_moe_numerics:numerics_worker", WORLD, (7,), gpus_per_server=GPN, timeout_s=120,
                    extra_pythonpath=[TESTS_DIR], raise_on_failure=False)
    failures = [r for r in res if isinstance(r, RankFailure)]
    assert not failures, "\n".join(str(f) + "\n" + f.traceback for f in failures[:2])
    sent = {name: [sum(r[name][i] for r in res) for i in (0, 1)] for name in res[0] if name.endswith("bytes")}
    err = {name: float(np.sqrt(sum(r[name][0] for r in res) / sum(r[name][1] for r in res)))
           for name in res[0] if not name.endswith("bytes")}
    print({k: f"{v:.3e}" for k, v in err.items()})
    for dedup in ("node", "rank"):
        # Weighted: one rounding per token (plus one per one-pair unit, as plain rounds every
        # product), so strictly fewer roundings than the plain combine's K + 1.
        assert err[f"{dedup}/float32 weighted"] <= err["plain weighted"], err
        # Unweighted: both sum the same bf16 rows in float32 and round once; only the float32
        # summation order differs, far below a bf16 rounding.
        assert err[f"{dedup}/float32 unweighted"] <= err["plain unweighted"] * (1 + 1e-3), err
    # float64 rows sum in float64: far below float32's 6e-8.
    assert err["node float64 weighted"] < 1e-13, err
    # Bytes: "native" returns each cross-node unit as one bf16 row (the dispatch's rows); "float32"
    # returns the units with two or more pairs at twice that, the one-pair units at the same.
    for dedup in ("node", "rank"):
        wire, rows_b = sent[f"{dedup}/native bytes"]
        assert wire == rows_b, (dedup, sent)
        wire32, _ = sent[f"{dedup}/float32 bytes"]
        assert rows_b < wire32 <= 2 * rows_b, (dedup, sent)
    print({k: v[0] / v[1] for k, v in sent.items()})
    # The rounding per node is what float32 partials remove (so the test can tell them apart).
    assert err["node/native unweighted"] > err["node/float32 unweighted"] * 1.05, err
