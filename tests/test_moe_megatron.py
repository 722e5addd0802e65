"""collsched.moe.megatron inside megatron-core's own MoELayer, on 4 Gloo ranks (2 emulated nodes × 2).

One MoELayer (TopKRouter, SequentialMLP experts, EP 4) runs forward and backward twice on the
same weights and inputs: with Megatron's MoEAlltoAllTokenDispatcher, then with collsched's
dispatcher put in by `use_collsched_dispatcher`. Megatron-core needs four CPU patches here
(tests/_megatron_cpu.py, each with its reason); collsched needs none.

Tolerances (relative L2 over each tensor, per rank):
- parameter gradients (router and every expert weight): bit for bit, float32 and bfloat16;
- layer output and input gradient: float32 ≤ 1e-6 (the combine sums a token's outputs per node,
  then the nodes' sums, where Megatron's scatter-add sums them in one run: a different float32
  summation order); bfloat16 ≤ 1e-4 (float32 partials, one rounding per token, as Megatron's
  CPU scatter-add), and bit for bit with dedup="none" (one partial per pair).
The dispatcher alone, on integer-valued data (every sum exact), equals Megatron's dispatcher bit
for bit: rows, tokens per expert, output, gradients of the tokens and the probabilities; so does
Megatron's dispatcher with its all-to-alls swapped for `collsched.nn.all_to_all` (docs/megatron.md).
Skipped without megatron-core (tests/test_moe_megatron_import.py covers that case).
"""
from __future__ import annotations

import os

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("megatron.core.transformer.moe.moe_layer")
# Imported here so the forked ranks inherit megatron-core instead of each importing it.
pytest.importorskip("megatron.core.models.gpt.moe_module_specs")
pytest.importorskip("collsched.moe.megatron")

from collsched.comm.launch import RankFailure, run_local  # noqa: E402

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
WORLD, GPN = 4, 2
E, K, H, FFN = 8, 3, 16, 24
MODES = ("node", "rank", "none")
TOL_OUT = {"float32": 1e-6, "bfloat16": 1e-4}
VERSION_ENV = "COLLSCHED_TEST_MEGATRON_VERSION"  # set by tests/test_moe_megatron_versions.py


def _rel(a, b) -> float:
    import torch

    den = float(b.double().norm())
    num = float((a.double() - b.double()).norm())
    return num / den if den else num


def _layer_runs(dtype_name: str, pgs) -> dict:
    """The MoELayer with each dispatcher: {name: {"out", "x", params...: relative L2 vs Megatron's}}."""
    import torch
    import torch.distributed as dist

    import _megatron_cpu as mc
    from collsched.moe.megatron import CollschedTokenDispatcher, use_collsched_dispatcher

    dtype = getattr(torch, dtype_name)
    layer = mc.build_layer(pgs, H, FFN, E, K, dtype=dtype)
    megatrons = layer.token_dispatcher
    gen = torch.Generator().manual_seed(10 + dist.get_rank())
    x0 = torch.randn(5, 2, H, generator=gen).to(dtype)  # [sequence, batch, hidden]
    g0 = torch.randn(5, 2, H, generator=gen).to(dtype)

    def run():
        layer.zero_grad(set_to_none=True)
        x = x0.clone().requires_grad_(True)
        out, bias = layer(x)
        assert bias is None
        out.backward(g0)
        return out.detach(), x.grad, {n: p.grad.clone() for n, p in layer.named_parameters()}

    base = run()
    res = {}
    for mode in MODES:
        layer.token_dispatcher = megatrons
        disp = use_collsched_dispatcher(layer, dedup=mode)
        assert isinstance(layer.token_dispatcher, CollschedTokenDispatcher) and disp is layer.token_dispatcher
        out, xg, grads = run()
        row = {"out": _rel(out, base[0]), "x": _rel(xg, base[1])}
        row["params equal"] = [n for n in base[2] if not torch.equal(grads[n], base[2][n])]
        row["params"] = len(grads)
        row["router grad nonzero"] = bool(grads["router.weight"].abs().sum() > 0)
        res[mode] = row
    return res


def _dispatcher_integer_run(pgs) -> dict:
    """Megatron's dispatch/combine sequence on integer data, each dispatcher; the 'experts' scale
    rows by an integer per expert and apply the probabilities."""
    import torch
    import torch.distributed as dist
    from megatron.core.transformer.moe import token_dispatcher
    from megatron.core.transformer.moe.token_dispatcher import MoEAlltoAllTokenDispatcher
    from megatron.core.transformer.transformer_config import TransformerConfig

    from collsched import nn as collsched_nn
    from collsched.moe.megatron import CollschedTokenDispatcher

    megatron_a2a = token_dispatcher.all_to_all

    rank = dist.get_rank()
    cfg = TransformerConfig(num_layers=1, hidden_size=8, num_attention_heads=1, num_moe_experts=E,
                            moe_router_topk=K, moe_token_dispatcher_type="alltoall", use_cpu_initialization=True)
    local = list(range(rank * (E // WORLD), (rank + 1) * (E // WORLD)))
    rng = np.random.default_rng([3, rank])
    t = 5 + rank
    routing = np.zeros((t, E), bool)
    for i in range(t):
        routing[i, rng.permutation(E)[:K]] = True
    # Every token has exactly K experts, as from Megatron's top-k router: megatron-core 0.19's
    # dropless dispatcher sizes its permutation as tokens x topk.
    routing_map = torch.from_numpy(routing)
    probs = torch.from_numpy(rng.integers(1, 3, size=(t, E)) * routing).float()
    x0 = torch.from_numpy(rng.integers(-3, 4, size=(t, 8))).float()
    scale = torch.tensor([float(v % 3 + 1) for v in local])
    outs = {}
    runs = (("collsched", CollschedTokenDispatcher), ("megatron", MoEAlltoAllTokenDispatcher),
            ("megatron+collsched.nn", MoEAlltoAllTokenDispatcher))
    for name, cls in runs:
        # docs/megatron.md's one-line swap: Megatron's dispatcher with collsched.nn.all_to_all
        # in place of megatron.core.tensor_parallel.all_to_all (its three all-to-alls).
        token_dispatcher.all_to_all = collsched_nn.all_to_all if name == "megatron+collsched.nn" else megatron_a2a
        x = x0.clone().requires_grad_(True)
        pr = probs.clone().requires_grad_(True)
        disp = cls(len(local), local, cfg, pg_collection=pgs)
        h, p = disp.dispatch_preprocess(x, routing_map, pr)
        h, p = disp.token_dispatch(h, p)
        h, tpe, p = disp.dispatch_postprocess(h, p)
        s = torch.repeat_interleave(scale, torch.as_tensor(tpe, dtype=torch.int64))
        y = h * s[:, None] * p[:, None]
        out = disp.combine_postprocess(disp.token_combine(disp.combine_preprocess(y)))
        (out * torch.arange(1, 9).float()).sum().backward()
        outs[name] = (h.detach(), torch.as_tensor(tpe).clone(), out.detach(), x.grad.clone(), pr.grad.clone())
    token_dispatcher.all_to_all = megatron_a2a
    names = ("rows", "tokens_per_expert", "output", "grad x", "grad probs")
    return {"differ": [n for n, a, b in zip(names, outs["collsched"], outs["megatron"]) if not torch.equal(a, b)],
            "swap differ": [n for n, a, b in zip(names, outs["megatron+collsched.nn"], outs["megatron"])
                            if not torch.equal(a, b)],
            "grad probs nonzero": bool(outs["collsched"][4].abs().sum() > 0)}


def megatron_worker():
    import _megatron_cpu as mc
    from megatron.core import package_info

    mc.cpu_patches()
    pgs = mc.process_groups()
    return {"float32": _layer_runs("float32", pgs), "bfloat16": _layer_runs("bfloat16", pgs),
            "integer": _dispatcher_integer_run(pgs),
            "version": package_info.__version__.split("+")[0]}  # 0.18 appends the git hash of the working directory


@pytest.fixture(scope="module")
def ranks():
    res = run_local("test_moe_megatron:megatron_worker", WORLD, (), gpus_per_server=GPN, timeout_s=240,
                    extra_pythonpath=[TESTS_DIR], raise_on_failure=False)
    failures = [r for r in res if isinstance(r, RankFailure)]
    assert not failures, "\n".join(str(f) + "\n" + f.traceback for f in failures[:2])
    return res


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_megatron_moelayer_with_collsched_equals_megatrons_alltoall_dispatcher(ranks, dtype):
    for rank, r in enumerate(ranks):
        for mode, row in r[dtype].items():
            where = f"rank {rank} {dtype} dedup={mode}"
            assert row["params"] >= 5, where  # router + fc1/fc2 of each local expert
            assert row["params equal"] == [], f"{where}: parameter gradients differ: {row['params equal']}"
            assert row["router grad nonzero"], where
            tol = 0.0 if mode == "none" and dtype == "bfloat16" else TOL_OUT[dtype]
            assert row["out"] <= tol, f"{where}: output rel. L2 {row['out']:.2e} > {tol}"
            assert row["x"] <= tol, f"{where}: input gradient rel. L2 {row['x']:.2e} > {tol}"


def test_ranks_ran_the_megatron_core_under_test(ranks):
    # tests/test_moe_megatron_versions.py reruns this file with another release first on
    # PYTHONPATH and names it here: the ranks must have imported that one.
    from megatron.core import package_info

    want = os.environ.get(VERSION_ENV) or package_info.__version__.split("+")[0]
    assert [r["version"] for r in ranks] == [want] * WORLD


def test_megatron_dispatcher_alone_equals_megatrons_bit_for_bit_on_integer_data(ranks):
    for rank, r in enumerate(ranks):
        assert r["integer"]["differ"] == [], f"rank {rank}: {r['integer']['differ']} differ"
        assert r["integer"]["swap differ"] == [], f"rank {rank}, one-line swap: {r['integer']['swap differ']} differ"
        assert r["integer"]["grad probs nonzero"]
