"""A tiny torchtitan 0.3.0 Qwen3-MoE model on CPU ranks (Gloo), built as torchtitan's Trainer builds it.

Used by tests/test_moe_torchtitan.py and benchmarks/moe_training.py, inside ranks started by
`collsched.comm.launch.run_local` (or the testbed launcher). The CPU shims, each with its reason,
are in `cpu_shims`; nothing in torchtitan is edited.
"""
from __future__ import annotations

import dataclasses

import numpy as np


def cpu_shims() -> None:
    """Settings that let torchtitan 0.3.0 train on CPU with Gloo. Call before importing torchtitan.

    - torchtitan picks its device at import from ``torch._utils._get_available_device_type``
      and falls back to ``"cuda"`` when it returns None (CPU only): make it say ``"cpu"``.
    - The rest is set where the model is built (`build`): scaled-dot-product attention instead
      of the default Flex attention (Flex has no backward on CPU); ``spmd_backend``
      ``"partial_dtensor"`` by default (the ``spmd_types`` path of torchtitan's own dispatcher
      uses a list all-to-all, which Gloo rejects for uneven splits); FSDP's force-sum
      reduction (Gloo has no PREMUL_SUM, which FSDP uses to divide gradients).
    """
    import torch._utils

    torch._utils._get_available_device_type = lambda: "cpu"


def model_config(*, dim=64, n_layers=2, experts=16, top_k=4, moe_hidden=64, vocab=256, heads=4, head_dim=16,
                 seq_len=32):
    """A small Qwen3-MoE config from torchtitan's own builders (SDPA attention)."""
    from torchtitan.models.common import CosSinRoPE, Embedding, Linear
    from torchtitan.models.common.attention import ScaledDotProductAttention
    from torchtitan.models.qwen3 import Qwen3Model, _build_qwen3_moe_layers, _EMBEDDING_INIT, _LINEAR_INIT, _qwen3_norm

    layers = _build_qwen3_moe_layers(n_layers=n_layers, dim=dim, n_heads=heads, n_kv_heads=heads, head_dim=head_dim,
                                     moe_hidden_dim=moe_hidden, num_experts=experts, top_k=top_k, attn_backend="flex",
                                     moe_comm_backend="standard",
                                     rope=CosSinRoPE.Config(dim=head_dim, max_seq_len=seq_len, theta=1e6))
    for layer in layers:
        # Flex attention has no backward on CPU.
        layer.attention.inner_attention = ScaledDotProductAttention.Config()
    return Qwen3Model.Config(vocab_size=vocab, dim=dim, norm=_qwen3_norm(dim),
                             tok_embeddings=Embedding.Config(num_embeddings=vocab, embedding_dim=dim,
                                                             param_init=_EMBEDDING_INIT),
                             lm_head=Linear.Config(in_features=dim, out_features=vocab, param_init=_LINEAR_INIT),
                             layers=layers)


def build(cfg, *, ep: int, spmd_backend: str = "partial_dtensor", dtype: str = "float32", seed: int = 0,
          router_bias: np.ndarray | None = None, fsdp: bool = True, compile_backend: str | None = None):
    """Build, parallelize (FSDP over all ranks, EP ``ep``) and initialise the model; returns (model, parallel_dims).

    ``router_bias`` [E] (optional) is added to every layer's expert bias: skewed routing that
    the (aux-loss-free) load balancer only corrects between optimizer steps. ``compile_backend``
    (optional) turns on torchtitan's ``compile.enable`` with that backend: each transformer
    block compiled with ``fullgraph=True`` (``torchtitan.distributed.compile.apply_compile``).
    """
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import FSDPModule
    from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig
    from torchtitan.distributed import utils as dist_utils
    from torchtitan.distributed.parallel_dims import ParallelDims
    from torchtitan.models.qwen3 import parallelize_qwen3
    from torchtitan.models.qwen3.sharding import set_qwen3_sharding_config

    world = dist.get_world_size()
    dist_utils.set_spmd_backend(spmd_backend)
    parallelism = ParallelismConfig(data_parallel_shard_degree=world, expert_parallel_degree=ep,
                                    spmd_backend=spmd_backend)
    training = TrainingConfig(local_batch_size=1, seq_len=cfg.layers[0].attention.rope.max_seq_len, dtype=dtype,
                              mixed_precision_param=dtype, disable_cuda_graphs=True)
    # What Qwen3Model.Config.update_from_config does for this setting (no TP/SP/CP/PP),
    # without importing torchtitan.trainer (which pulls tensorboard, wandb, datasets).
    set_qwen3_sharding_config(cfg, enable_sp=False, enable_ep=ep > 1)
    dims = ParallelDims(dp_replicate=1, dp_shard=world, cp=1, tp=1, pp=1, ep=ep, world_size=world,
                        spmd_backend=spmd_backend)
    dims.build_mesh()
    with torch.device("meta"):
        model = cfg.build()
    model = parallelize_qwen3(model, parallel_dims=dims, training=training, parallelism=parallelism,
                              compile_config=(CompileConfig(enable=True, backend=compile_backend) if compile_backend
                                              else CompileConfig()), ac_config=None,
                              dump_folder="/tmp", skip_dp=not fsdp)
    for m in model.modules():
        if isinstance(m, FSDPModule):
            m.set_force_sum_reduction_for_comms(True)  # Gloo has no PREMUL_SUM
    model.to_empty(device="cpu")
    torch.manual_seed(seed)
    with torch.no_grad():
        model.init_weights(buffer_device=None)
        if router_bias is not None:
            for layer in model.layers.values():
                b = layer.moe.expert_bias_E
                b.copy_(torch.as_tensor(router_bias, dtype=b.dtype))
    model.train()
    return model, dims


def batch(seed: int, rank: int, vocab: int, seq_len: int, batch_size: int = 1):
    """Random token ids and next-token labels, different per rank, the same for every dispatcher."""
    import torch

    g = torch.Generator().manual_seed(seed * 1000 + rank)
    tok = torch.randint(0, vocab, (batch_size, seq_len + 1), generator=g)
    return tok[:, :-1].contiguous(), tok[:, 1:].contiguous()


def loss_of(model, tokens, labels):
    """torchtitan's loss (sum over tokens), divided by this rank's tokens."""
    from torchtitan.components.loss import cross_entropy_loss

    return cross_entropy_loss(model(tokens), labels) / labels.numel()


def local_grads(model) -> dict:
    """Each parameter's gradient shard on this rank (a plain tensor), by name."""
    out = {}
    for name, p in model.named_parameters():
        g = p.grad
        if g is None:
            continue
        out[name] = (g.to_local() if hasattr(g, "to_local") else g).detach().clone()
    return out


def replace(cfg, **kw):
    """A copy of a dataclass config with some fields replaced (deep copy of the layer list)."""
    import copy

    c = copy.deepcopy(cfg)
    for k, v in kw.items():
        setattr(c, k, v)
    return c


__all__ = ["cpu_shims", "model_config", "build", "batch", "loss_of", "local_grads", "replace", "dataclasses"]
