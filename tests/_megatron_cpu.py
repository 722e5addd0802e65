"""Test fixtures: megatron-core's MoELayer (0.16 to 0.19) on CPU ranks (Gloo), without CUDA or TransformerEngine.

Megatron-core assumes a GPU in four places on the MoE path; `cpu_patches()` replaces each, in
the calling (rank) process only, with examples/cpu_shims.py (each patch says why). Nothing in
`collsched` needs them, and on a GPU none is needed.

`build_layer()` builds one MoELayer (TopKRouter + SequentialMLP) over an expert-parallel group
the size of the world, with explicit process groups (no `parallel_state` initialisation).
"""
from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist

# The CPU patches live in examples/cpu_shims.py (one copy for the examples, the tests and the docs).
sys.path.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
import cpu_shims  # noqa: E402


def cpu_patches() -> None:
    """Let megatron-core's (0.16.1 to 0.19) MoELayer and MoEAlltoAllTokenDispatcher run on CPU
    (examples/cpu_shims.py, each patch with its reason). Idempotent."""
    cpu_shims.megatron()


def process_groups():
    """A ProcessGroupCollection for expert parallelism over the whole world (EP = world size,
    tensor parallel 1). Collective: every rank calls it (each singleton group is created by all)."""
    from megatron.core.process_groups_config import ProcessGroupCollection

    world, rank = dist.get_world_size(), dist.get_rank()
    mine = None
    for r in range(world):
        g = dist.new_group([r])
        if r == rank:
            mine = g
    everyone = dist.group.WORLD
    # Data parallel (and tensor x data x context) spans the world too: each rank holds its own
    # tokens, as EP ranks do in Megatron; the singletons are the size-1 parallel dimensions.
    return ProcessGroupCollection(ep=everyone, tp_ep=everyone, dp=everyone, tp_dp_cp=everyone, expt_tp=mine,
                                  tp=mine, cp=mine, tp_cp=mine, pp=mine, expt_dp=mine)


def build_layer(pgs, hidden: int, ffn: int, experts: int, topk: int, dtype=torch.float32, seed: int = 0):
    """One Megatron MoELayer (top-k softmax router, SequentialMLP experts, all-to-all dispatcher),
    weights drawn from ``seed`` (the same router on every rank, each rank's experts its own).

    Returns:
        MoELayer: in training mode, parameters in ``dtype``.
    """
    from megatron.core.models.gpt.moe_module_specs import get_moe_module_spec
    from megatron.core.transformer.spec_utils import ModuleSpec, build_module
    from megatron.core.transformer.transformer_config import TransformerConfig

    cfg = TransformerConfig(
        num_layers=1, hidden_size=hidden, ffn_hidden_size=ffn, moe_ffn_hidden_size=ffn, num_attention_heads=1,
        num_moe_experts=experts, moe_router_topk=topk, moe_token_dispatcher_type="alltoall",
        moe_router_load_balancing_type="none", moe_grouped_gemm=False, use_cpu_initialization=True,
        params_dtype=dtype, bf16=dtype == torch.bfloat16, add_bias_linear=False,
        expert_model_parallel_size=dist.get_world_size())
    spec = get_moe_module_spec(use_te=False, num_experts=experts, moe_grouped_gemm=False)
    torch.manual_seed(seed)
    # megatron-core 0.16 returns a ModuleSpec, 0.19 a builder (a partial of MoELayer).
    layer = (build_module(spec, config=cfg, pg_collection=pgs) if isinstance(spec, ModuleSpec)
             else spec(config=cfg, pg_collection=pgs))
    # Each rank's experts differ (seeded by their global ids); the router is the same everywhere.
    with torch.no_grad():
        for local, expert in zip(layer.local_expert_indices, layer.experts.local_experts):
            gen = torch.Generator().manual_seed(1000 + local)
            for p in expert.parameters():
                p.copy_((torch.randn(p.shape, generator=gen) * 0.3).to(p.dtype))
        gen = torch.Generator().manual_seed(seed)
        layer.router.weight.copy_((torch.randn(layer.router.weight.shape, generator=gen)).to(dtype))
    return layer.train()
