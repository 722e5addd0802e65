"""collsched.moe.megatron on 4 Gloo ranks (2 emulated nodes × 2): the dispatcher runs Megatron's
dispatch/combine sequence and equals megatron-core's own MoEAlltoAllTokenDispatcher (outputs and
gradients, bit for bit on integer data) where that one runs (it needs CUDA), else the same
semantics from torch ops (permute + all_to_all_single + permute). Skipped without megatron-core."""
from __future__ import annotations

import os

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("megatron.core.transformer.moe.token_dispatcher")

from collsched.comm.launch import RankFailure, run_local  # noqa: E402

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
WORLD, GPN, E, K, H = 4, 2, 8, 3, 8


def _layer(dispatcher, x, routing_map, probs, scale):
    """Megatron MoELayer's sequence; the 'experts' scale rows by expert and apply the probabilities."""
    h, p = dispatcher.dispatch_preprocess(x, routing_map, probs)
    h, p = dispatcher.token_dispatch(h, p)
    h, tpe, p = dispatcher.dispatch_postprocess(h, p)
    s = torch_repeat(scale, tpe)
    y = (h.float() * s[:, None] * p.float()[:, None]).to(h.dtype)
    return dispatcher.combine_postprocess(dispatcher.token_combine(dispatcher.combine_preprocess(y))), tpe


def torch_repeat(scale, tpe):
    import torch

    return torch.repeat_interleave(scale, torch.as_tensor(tpe, dtype=torch.int64))


def megatron_worker(seed):
    import torch
    import torch.distributed as dist
    from megatron.core.process_groups_config import ProcessGroupCollection
    from megatron.core.transformer.moe.token_dispatcher import MoEAlltoAllTokenDispatcher
    from megatron.core.transformer.transformer_config import TransformerConfig

    from collsched.moe.megatron import CollschedTokenDispatcher

    rank = dist.get_rank()
    world = dist.group.WORLD
    pgs = ProcessGroupCollection(ep=world, expt_tp=None, tp_ep=world, tp=None)
    cfg = TransformerConfig(num_layers=1, hidden_size=H, num_attention_heads=1, num_moe_experts=E,
                            moe_router_topk=K, moe_token_dispatcher_type="alltoall", use_cpu_initialization=True)
    local = list(range(rank * (E // WORLD), (rank + 1) * (E // WORLD)))
    rng = np.random.default_rng([seed, rank])
    t = 5 + rank
    routing = np.zeros((t, E), bool)
    for i in range(t):
        routing[i, rng.permutation(E)[:K]] = True
    routing[0] = False  # a token with no expert
    routing_map = torch.from_numpy(routing)
    probs = torch.from_numpy(rng.integers(1, 3, size=(t, E)) * routing).float()
    x0 = torch.from_numpy(rng.integers(-3, 4, size=(t, H))).float()
    scale = torch.tensor([float(v % 3 + 1) for v in local])
    outs = {}
    for name, cls in (("collsched", CollschedTokenDispatcher), ("megatron", MoEAlltoAllTokenDispatcher)):
        kw = {"cluster": f"h100:2,gpus={GPN}"} if name == "collsched" else {}
        x = x0.clone().requires_grad_(True)
        pr = probs.clone().requires_grad_(True)
        try:
            disp = cls(len(local), local, cfg, pg_collection=pgs, **kw)
            out, tpe = _layer(disp, x, routing_map, pr, scale)
        except Exception as exc:  # noqa: BLE001 - megatron's own dispatcher may need CUDA
            outs[name] = f"{type(exc).__name__}: {exc}"
            continue
        (out * torch.arange(1, H + 1).float()).sum().backward()
        outs[name] = (out.detach(), torch.as_tensor(tpe).clone(), x.grad.clone(), pr.grad.clone())
    # Megatron's semantics from torch ops (permute, all_to_all_single, permute; experts apply probs),
    # for CPU machines where megatron-core's own all-to-all dispatcher cannot start (it needs CUDA).
    from test_moe import _ref_combine, _ref_dispatch

    from collsched.moe.megatron import routing_map_to_topk

    x = x0.clone().requires_grad_(True)
    pr = probs.clone().requires_grad_(True)
    idx, w = routing_map_to_topk(routing_map, pr, K)
    rx, rw, st = _ref_dispatch(x, idx, w, torch.arange(E) // (E // WORLD))
    cnt = torch.bincount(idx[idx >= 0], minlength=E)
    dist.all_reduce(cnt)
    tpe = cnt[local]
    y = rx * torch_repeat(scale, tpe)[:, None] * rw[:, None]
    out = _ref_combine(y, st, False)
    (out * torch.arange(1, H + 1).float()).sum().backward()
    outs["reference"] = (out.detach(), tpe, x.grad.clone(), pr.grad.clone())
    return outs


def test_megatron_dispatcher_equals_megatrons_alltoall_dispatcher():
    res = run_local("test_moe_megatron:megatron_worker", WORLD, (3,), gpus_per_server=GPN, timeout_s=120,
                    extra_pythonpath=[TESTS_DIR], raise_on_failure=False)
    failures = [r for r in res if isinstance(r, RankFailure)]
    assert not failures, "\n".join(str(f) + "\n" + f.traceback for f in failures[:2])
    import torch

    for r in res:
        assert not isinstance(r["collsched"], str), r["collsched"]
        base = r["reference"] if isinstance(r["megatron"], str) else r["megatron"]
        for a, b, what in zip(r["collsched"], base, ("output", "tokens_per_expert", "grad x", "grad probs")):
            assert torch.equal(a, b), what
        assert r["collsched"][3].abs().sum() > 0  # gradients reached the router probabilities
