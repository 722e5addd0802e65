"""CPU-only settings for the examples: run them on Gloo ranks without a GPU (a laptop, CI).

torchtitan and megatron-core assume a GPU in a few places. Each function below replaces one such
assumption with its CPU equivalent and says why; no framework file is edited, and collsched itself
needs none of them. On a GPU machine the examples skip this file. These are the only lines of
the examples that touch a framework's private names (``torch._utils._get_available_device_type``,
``MoEAlltoAllTokenDispatcher._maybe_dtoh_and_synchronize``). tests/_megatron_cpu.py applies the
same Megatron patches.
"""
from __future__ import annotations

import torch

_MEGATRON_PATCHED = False


def megatron() -> None:
    """Let megatron-core's (0.16.1 to 0.19) ``MoELayer`` run on CPU. Idempotent.

    Call after ``import torch`` and before building the layer.
    """
    global _MEGATRON_PATCHED
    if _MEGATRON_PATCHED:
        return
    from megatron.core.transformer.moe import moe_utils
    from megatron.core.transformer.moe.token_dispatcher import MoEAlltoAllTokenDispatcher

    # 1. MoELayer builds Megatron's all-to-all dispatcher (before collsched's replaces it), whose
    #    __init__ creates a class-wide CUDA side stream when none exists: a placeholder, which
    #    (2) never uses.
    if MoEAlltoAllTokenDispatcher.cuda_dtoh_stream is None:
        MoEAlltoAllTokenDispatcher.cuda_dtoh_stream = object()

    # 2. Only to run Megatron's own all-to-all dispatcher (the tests compare against it): it copies
    #    its split sizes to the host on that stream and waits on a CUDA event. On CPU the tensors
    #    are on the host already; only its conversion to numpy (which the all-to-all and the
    #    chunk sort take) remains.
    def _cpu_dtoh_and_synchronize(self, point, tokens_per_expert=None):
        if not self.drop_and_pad and point == self.cuda_dtoh_point:
            for name in ("input_splits", "output_splits", "output_splits_tp"):
                value = getattr(self, name)
                if torch.is_tensor(value):
                    setattr(self, name, value.numpy())
        return tokens_per_expert

    MoEAlltoAllTokenDispatcher._maybe_dtoh_and_synchronize = _cpu_dtoh_and_synchronize

    # 3. The router moves its CPU-initialised weight to torch.cuda.current_device() on first use,
    #    and Megatron's all-to-all / all-gather helpers allocate there: make that the CPU.
    torch.cuda.current_device = lambda: torch.device("cpu")

    # 4. Without TransformerEngine, moe_utils never defines te_general_gemm, which the router's
    #    gating linear reads unconditionally; None selects its torch.mm path.
    if not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None
    _MEGATRON_PATCHED = True


def torchtitan_before_import() -> None:
    """torchtitan (0.3.0) picks its device when imported, from
    ``torch._utils._get_available_device_type``, and falls back to ``"cuda"`` when that finds
    none: make it say ``"cpu"``. Call before the first ``import torchtitan``."""
    import torch._utils

    torch._utils._get_available_device_type = lambda: "cpu"


def torchtitan_model_config(model_config) -> None:
    """Scaled-dot-product attention in every layer of a torchtitan model config: the language
    models' default, Flex attention, has no backward on CPU. Call before building the model."""
    from torchtitan.models.common.attention import ScaledDotProductAttention

    for layer in model_config.layers:
        layer.attention.inner_attention = ScaledDotProductAttention.Config()


def fsdp_on_gloo(model: torch.nn.Module) -> None:
    """FSDP2 divides gradients with a PREMUL_SUM reduction, which Gloo lacks: sum instead (FSDP
    then divides after the reduction). Call on the model after FSDP has wrapped it."""
    from torch.distributed.fsdp import FSDPModule

    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_force_sum_reduction_for_comms(True)
