"""Train a megatron-core MoELayer whose token dispatcher is collsched's (deduplicated dispatch/combine).

    torchrun --standalone --nproc-per-node 4 examples/megatron_moe.py --steps 2

Every rank is one expert-parallel rank (EP = world size); each routes its own tokens to the
experts of all ranks. The layer is Megatron's own (`MoELayer`: top-k router, `SequentialMLP`
experts), built with Megatron's all-to-all dispatcher; `use_collsched_dispatcher` then swaps the
dispatcher, so the router and the experts stay Megatron's. Needs megatron-core >=0.16.1,<0.20
(``pip install 'collsched[megatron]'``). With CUDA the ranks use NCCL and one GPU each; without,
Gloo on CPU with the settings in cpu_shims.py (CI runs this script that way on 4 ranks).
collsched assumes ``LOCAL_WORLD_SIZE`` GPUs per node; ``--cluster h200:2,gpus=2`` (or
``COLLSCHED_CLUSTER``) plans for another shape, e.g. 2 nodes of 2 on one machine.
"""
from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--experts", type=int, default=8, help="experts in total (a multiple of the world size)")
    p.add_argument("--topk", type=int, default=2)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--tokens", type=int, default=64, help="tokens per rank and step")
    p.add_argument("--dedup", default="node", choices=["node", "rank", "none"],
                   help="collsched.moe.MoEBuffer's dedup: one copy per token per node, per rank, or per pair")
    p.add_argument("--cluster", default=None, help="collsched cluster spec, e.g. h200:2,gpus=2")
    return p.parse_args()


def main():
    args = parse_args()
    on_gpu = torch.cuda.is_available()
    if on_gpu:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    else:
        import cpu_shims

        cpu_shims.megatron()
    dist.init_process_group("nccl" if on_gpu else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda") if on_gpu else torch.device("cpu")

    from megatron.core import parallel_state
    from megatron.core.models.gpt.moe_module_specs import get_moe_module_spec
    from megatron.core.process_groups_config import ProcessGroupCollection
    from megatron.core.transformer.spec_utils import ModuleSpec, build_module
    from megatron.core.transformer.transformer_config import TransformerConfig

    from collsched.moe.megatron import use_collsched_dispatcher

    parallel_state.initialize_model_parallel(expert_model_parallel_size=world)
    groups = ProcessGroupCollection.use_mpu_process_groups()
    config = TransformerConfig(
        num_layers=1, hidden_size=args.hidden, num_attention_heads=1, ffn_hidden_size=2 * args.hidden,
        moe_ffn_hidden_size=2 * args.hidden, num_moe_experts=args.experts, moe_router_topk=args.topk,
        moe_token_dispatcher_type="alltoall", moe_router_load_balancing_type="none", moe_grouped_gemm=False,
        add_bias_linear=False, use_cpu_initialization=True, expert_model_parallel_size=world)
    torch.manual_seed(0)  # the router starts equal on every rank; each rank's experts are its own
    spec = get_moe_module_spec(use_te=False, num_experts=args.experts, moe_grouped_gemm=False)
    # megatron-core 0.16 returns a ModuleSpec, 0.17 and later a builder (a partial of MoELayer).
    layer = (build_module(spec, config=config, pg_collection=groups) if isinstance(spec, ModuleSpec)
             else spec(config=config, pg_collection=groups)).to(device)

    # The one collsched line: collective over the layer's expert-parallel group, before the first forward.
    use_collsched_dispatcher(layer, dedup=args.dedup, cluster=args.cluster)

    optimizer = torch.optim.Adam(layer.parameters(), lr=1e-2)
    teacher = torch.randn(args.hidden, args.hidden, generator=torch.Generator().manual_seed(1)).to(device)
    data = torch.Generator().manual_seed(100 + rank)  # each rank its own tokens
    dp_size = dist.get_world_size(groups.dp)
    for step in range(1, args.steps + 1):
        x = torch.randn(args.tokens, 1, args.hidden, generator=data).to(device)  # [sequence, batch, hidden]
        target = torch.tanh(x @ teacher) / args.hidden ** 0.5
        out, _ = layer(x)
        loss = torch.nn.functional.mse_loss(out, target)
        optimizer.zero_grad()
        loss.backward()
        # The router is replicated over the data-parallel ranks, each routing its own tokens:
        # average its gradient (what Megatron's DistributedDataParallel does). Each expert lives
        # on one rank only (EP = world), so its gradient is already complete.
        for p in layer.router.parameters():
            dist.all_reduce(p.grad, group=groups.dp)
            p.grad /= dp_size
        optimizer.step()
        mean_loss = loss.detach().clone()
        dist.all_reduce(mean_loss)
        if rank == 0:
            print(f"step {step} loss {float(mean_loss) / world:.6f}", flush=True)
    stats = layer.token_dispatcher.buffer.last_stats
    if rank == 0:
        print(f"done: {args.steps} steps on {world} ranks ({device.type}), megatron-core MoELayer with "
              f"{type(layer.token_dispatcher).__name__}(dedup={args.dedup!r}), "
              f"rank 0's last dispatch sent {stats.get('internode_rows', 0)} rows across nodes", flush=True)
    parallel_state.destroy_model_parallel()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
