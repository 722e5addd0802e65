"""Train torchtitan's Qwen3-MoE with collsched's token dispatcher (FSDP + expert parallelism).

    torchrun --standalone --nproc-per-node 4 examples/torchtitan_moe.py --steps 2

The model is torchtitan's ``debugmodel_moe`` flavour (64 experts, top-8; the first ``--layers``
layers), sharded with FSDP over all ranks and experts spread over all ranks (EP = world size),
the way torchtitan's Trainer builds it; one call, `use_collsched_dispatcher`, gives every MoE
layer collsched's dispatcher before the model is built. The batches are random token ids: this
shows the wiring, not a training recipe. Needs torchtitan 0.3.0 (``pip install
'collsched[torchtitan]'``). With CUDA the ranks use NCCL and one GPU each; without, Gloo on CPU
with the settings in cpu_shims.py (CI runs this script that way on 4 ranks). collsched assumes
``LOCAL_WORLD_SIZE`` GPUs per node; ``--cluster h200:2,gpus=2`` (or ``COLLSCHED_CLUSTER``) plans
for another shape, e.g. 2 nodes of 2 on one machine.

In torchtitan's own Trainer the same line goes where the model config is final, e.g. in a
config-registry function: ``use_collsched_dispatcher(config.model_spec.model, exchange="dedup")``.
"""
from __future__ import annotations

import argparse
import os
import tempfile

import torch
import torch.distributed as dist


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--layers", type=int, default=2, help="keep the first N layers of debugmodel_moe (8)")
    p.add_argument("--seq-len", type=int, default=64, help="tokens per rank and step")
    p.add_argument("--exchange", default="dedup", choices=["dedup", "all_to_all"],
                   help="dedup: one copy per token per node (collsched.moe.MoEBuffer); all_to_all: "
                        "torchtitan's layout moved by collsched's planned all-to-all")
    p.add_argument("--cluster", default=None, help="collsched cluster spec, e.g. h200:2,gpus=2")
    return p.parse_args()


def main():
    args = parse_args()
    on_gpu = torch.cuda.is_available()
    if on_gpu:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    else:
        import cpu_shims

        cpu_shims.torchtitan_before_import()
    dist.init_process_group("nccl" if on_gpu else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda") if on_gpu else torch.device("cpu")

    from torchtitan.components.loss import cross_entropy_loss
    from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig
    from torchtitan.distributed.parallel_dims import ParallelDims
    from torchtitan.models.qwen3 import model_registry
    from torchtitan.models.qwen3.sharding import set_qwen3_sharding_config

    from collsched.moe.torchtitan import use_collsched_dispatcher

    spec = model_registry("debugmodel_moe")
    model_config = spec.model
    model_config.layers = model_config.layers[:args.layers]
    if not on_gpu:
        cpu_shims.torchtitan_model_config(model_config)
    # The one collsched line: before the model is built.
    use_collsched_dispatcher(model_config, exchange=args.exchange, cluster=args.cluster)

    parallelism = ParallelismConfig(data_parallel_shard_degree=world, expert_parallel_degree=world)
    training = TrainingConfig(local_batch_size=1, seq_len=args.seq_len)
    # What Qwen3Model.Config.update_from_config does here (no tensor, sequence, context or
    # pipeline parallelism), without importing torchtitan.trainer and its training extras.
    set_qwen3_sharding_config(model_config, enable_sp=False, enable_ep=world > 1)
    dims = ParallelDims(dp_replicate=1, dp_shard=world, cp=1, tp=1, pp=1, ep=world, world_size=world)
    dims.build_mesh()
    with torch.device("meta"):
        model = model_config.build()
    with tempfile.TemporaryDirectory() as dump_folder:
        model = spec.parallelize_fn(model, parallel_dims=dims, training=training, parallelism=parallelism,
                                    compile_config=CompileConfig(), ac_config=None, dump_folder=dump_folder)
    if not on_gpu:
        cpu_shims.fsdp_on_gloo(model)
    model.to_empty(device=device)
    torch.manual_seed(0)
    with torch.no_grad():
        model.init_weights(buffer_device=None)
    model.train()

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.Generator().manual_seed(100 + rank)  # each rank its own batch
    for step in range(1, args.steps + 1):
        ids = torch.randint(0, model_config.vocab_size, (1, args.seq_len + 1), generator=data).to(device)
        inputs, labels = ids[:, :-1], ids[:, 1:]
        loss = cross_entropy_loss(model(inputs), labels) / labels.numel()  # torchtitan's loss sums
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        mean_loss = loss.detach().clone()
        dist.all_reduce(mean_loss)
        if rank == 0:
            print(f"step {step} loss {float(mean_loss) / world:.6f}", flush=True)
    dispatchers = {type(m.token_dispatcher).__name__ for m in model.modules() if hasattr(m, "token_dispatcher")}
    if rank == 0:
        print(f"done: {args.steps} steps on {world} ranks ({device.type}), torchtitan Qwen3-MoE "
              f"(layers={args.layers}) with {', '.join(sorted(dispatchers))}(exchange={args.exchange!r})", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
