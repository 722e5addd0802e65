"""Test fixtures: megatron-core's MoELayer (0.16 to 0.19) on CPU ranks (Gloo), without CUDA or TransformerEngine.

Megatron-core assumes a GPU in four places on the MoE path; `cpu_patches()` replaces each, in
the calling (rank) process only, and each patch says why. They are test scaffolding: nothing
in `collsched` needs them, and on a GPU none is needed. docs/megatron.md shows the same lines.

`build_layer()` builds one MoELayer (TopKRouter + SequentialMLP) over an expert-parallel group
the size of the world, with explicit process groups (no `parallel_state` initialisation).
"""
from __future__ import annotations

import torch
import torch.distributed as dist

_PATCHED = False


def cpu_patches() -> None:
    """Let megatron-core's (0.16.1 to 0.19) MoELayer and MoEAlltoAllTokenDispatcher run on CPU. Idempotent."""
    global _PATCHED
    if _PATCHED:
        return
    from megatron.core.transformer.moe import moe_utils
    from megatron.core.transformer.moe.token_dispatcher import MoEAlltoAllTokenDispatcher

    # 1. The all-to-all dispatcher creates a class-wide side stream for its device-to-host copies
    #    in __init__ when none exists (torch.cuda.Stream() fails without CUDA): give it a
    #    placeholder, which (2) never uses.
    if MoEAlltoAllTokenDispatcher.cuda_dtoh_stream is None:
        MoEAlltoAllTokenDispatcher.cuda_dtoh_stream = object()

    # 2. At its copy point the dispatcher moves the split sizes to the host on that stream and
    #    later waits for a CUDA event. On CPU the tensors are on the host already; only the
    #    conversion it does there matters (split sizes as numpy arrays, which the all-to-all
    #    and the chunk sort take), so do that, with no stream and no event.
    def _cpu_dtoh_and_synchronize(self, point, tokens_per_expert=None):
        if not self.drop_and_pad and point == self.cuda_dtoh_point:
            for name in ("input_splits", "output_splits", "output_splits_tp"):
                value = getattr(self, name)
                if torch.is_tensor(value):
                    setattr(self, name, value.numpy())
        return tokens_per_expert

    MoEAlltoAllTokenDispatcher._maybe_dtoh_and_synchronize = _cpu_dtoh_and_synchronize

    # 3. The router moves its CPU-initialised weight to torch.cuda.current_device() on first use,
    #    and the all-to-all / all-gather helpers allocate their outputs there: make "the
    #    current device" the CPU.
    torch.cuda.current_device = lambda: torch.device("cpu")

    # 4. moe_utils imports te_general_gemm only inside its TransformerEngine try-block, but the
    #    router's gating linear reads the name unconditionally; None selects its torch.mm path.
    if not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None
    _PATCHED = True


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
