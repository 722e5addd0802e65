"""collsched.moe on NCCL with CUDA tensors (8 ranks, 2 emulated nodes × 4; skipped without a GPU).

The Gloo tests (test_moe.py) compare with a torch permute + all_to_all_single + permute
reference; here the oracle needs no communication at all: every rank regenerates every
rank's tokens, expert ids and weights from their seeds, so it knows which rows its experts
must receive and what each of its tokens must combine to. Data are small integers, so
every sum is exact in float32 and bf16 whatever the order of additions.

On a machine with fewer GPUs than ranks the launcher gives each rank a host id of its own
(`use_gpu_for_nccl`), so NCCL accepts several ranks on one GPU and moves their bytes over
loopback sockets: slow, but every NCCL code path of the MoE layer runs.
"""
from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

from collsched.comm.launch import RankFailure, run_local  # noqa: E402

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
WORLD, GPN, EXPERTS, TOKENS, HIDDEN, TOPK = 8, 4, 16, 10, 6, 3

pytestmark = pytest.mark.skipif(not (torch.cuda.is_available() and dist.is_nccl_available()),
                                reason="needs a CUDA GPU and NCCL")


def _inputs(src: int, seed: int, tokens: int):
    """Rank `src`'s tokens [T, H], expert ids [T, K] (distinct per row, some -1) and weights [T, K]."""
    g = torch.Generator().manual_seed(seed * 1000 + src)
    x = torch.randint(-4, 5, (tokens, HIDDEN), generator=g).float()
    idx = torch.stack([torch.randperm(EXPERTS, generator=g)[:TOPK] for _ in range(tokens)]) if tokens else \
        torch.zeros((0, TOPK), dtype=torch.int64)
    idx[torch.rand(idx.shape, generator=g) < 0.2] = -1
    w = torch.randint(1, 4, (tokens, TOPK), generator=g).float()
    return x, idx, w


def _tokens(src: int, seed: int) -> int:
    return 0 if (seed + src) % 5 == 0 else TOKENS  # some ranks have no tokens


def nccl_worker(cases):
    import collsched.moe as moe

    rank = dist.get_rank()
    nccl = "nccl" in str(dist.get_backend()).lower()  # Gloo too, to check the oracle without a GPU
    dev = torch.device("cuda", torch.cuda.current_device()) if nccl else torch.device("cpu")
    per_rank = EXPERTS // WORLD
    mine = range(rank * per_rank, (rank + 1) * per_rank)
    problems, checked = [], 0
    for dedup, dtype_name, seed in cases:
        dtype = getattr(torch, dtype_name)
        tag = f"{dedup}/{dtype_name}/seed {seed}"
        ins = [_inputs(s, seed, _tokens(s, seed)) for s in range(WORLD)]
        rows, wts, counts = [], [], []
        for e in mine:  # expert-major, then source rank, then token
            n = 0
            for x_s, idx_s, w_s in ins:
                hit = (idx_s == e).nonzero()
                for t, k in hit.tolist():
                    rows.append(x_s[t])
                    wts.append(w_s[t, k])
                    n += 1
            counts.append(n)
        want_x = torch.stack(rows) if rows else torch.zeros((0, HIDDEN))
        x, idx, w = ins[rank]
        buf = moe.MoEBuffer(None, EXPERTS, cluster=f"h100:2,gpus={GPN}", dedup=dedup)
        d = buf.dispatch(x.to(dev, dtype), idx.to(dev), w.to(dev))
        y = d.x * 2 + 1  # exact in bf16 for these magnitudes
        out = buf.combine(y, d.handle)
        out_plain = buf.combine(y, d.handle, weighted=False)
        valid = (idx >= 0).float()
        want_out = ((2 * x + 1)[:, None, :] * (w * valid)[:, :, None]).sum(1)
        want_plain = ((2 * x + 1)[:, None, :] * valid[:, :, None]).sum(1)
        checks = {
            "rows on the data's device": d.x.device == dev and out.device == dev,
            "dispatch rows": torch.equal(d.x.float().cpu(), want_x),
            "weights": torch.equal(d.weights.cpu(), torch.tensor(wts, dtype=torch.float32)),
            "tokens per expert": list(d.tokens_per_expert) == counts,
            "weighted combine": torch.equal(out.float().cpu(), want_out),
            "unweighted combine": torch.equal(out_plain.float().cpu(), want_plain),
        }
        # Autograd: d(sum(combine(dispatch(x)))) / dx = per token the sum of its valid weights.
        xg = x.to(dev, dtype).requires_grad_(True)
        dd = moe.dispatch(xg, idx.to(dev), w.to(dev), buf)
        moe.combine(dd.x, dd.handle).float().sum().backward()
        checks["gradient"] = torch.equal(xg.grad.float().cpu(), (w * valid).sum(1, keepdim=True).expand(-1, HIDDEN))
        for what, good in checks.items():
            checked += 1
            if not good:
                problems.append(f"rank {rank} {tag}: {what} differs")
    if nccl:
        torch.cuda.synchronize()
    return checked, problems


CASES = [(dedup, dt, seed) for seed in (1, 2) for dedup, dt in
         (("node", "float32"), ("node", "bfloat16"), ("rank", "float32"), ("none", "bfloat16"))]


def test_dispatch_combine_and_gradients_are_exact_on_nccl():
    res = run_local("test_moe_nccl:nccl_worker", WORLD, (CASES,), gpus_per_server=GPN, timeout_s=300.0,
                    extra_pythonpath=[TESTS_DIR], raise_on_failure=False, backend="nccl", start_method="spawn")
    failures = [r for r in res if isinstance(r, RankFailure)]
    assert not failures, "\n".join(str(f) + "\n" + f.traceback for f in failures[:2])
    problems = [p for _, ps in res for p in ps]
    assert not problems, "\n".join(problems[:20])
    assert all(c == len(CASES) * 7 for c, _ in res)
