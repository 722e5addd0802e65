"""Rank bodies for tests/test_nccl_paths.py: the header exchange on the group itself and a
call site captured in a CUDA graph (run by `collsched.comm.launch.run_local`)."""
from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist

ROW = 16


def _traffic(world: int) -> np.ndarray:
    rng = np.random.default_rng(3)
    m = rng.integers(0, 9, size=(world, world)).astype(np.int64)
    m[0, world - 1] = 0
    return m


def exchange_on_group(device: str = "cpu"):
    """`exchange_i64_on_group` (the device exchange) against `exchange_i64` (the host group)."""
    from collsched.comm.groups import exchange_i64, exchange_i64_on_group

    rank = dist.get_rank()
    values = np.arange(5, dtype=np.int64) * 10 + rank - 3
    dev = torch.device(device) if device == "cpu" else torch.device("cuda", torch.cuda.current_device())
    on_group = exchange_i64_on_group(values, None, dev, 30.0, "test exchange")
    on_host = exchange_i64(values, None, 30.0, "test exchange")
    return {"equal": bool(np.array_equal(on_group, on_host)), "shape": list(on_group.shape),
            "rows_are_ranks": bool((on_group[:, 0] == np.arange(dist.get_world_size()) - 3).all())}


def device_exchange_call():
    """A checked `collsched.all_to_all_single` on NCCL with COLLSCHED_NCCL_EXCHANGE=device:
    output equal to torch's own call, for a planned and an auto call."""
    import os

    import collsched

    os.environ["COLLSCHED_NCCL_EXCHANGE"] = "device"
    rank, world = dist.get_rank(), dist.get_world_size()
    m = _traffic(world)
    dev = torch.device("cuda", torch.cuda.current_device())
    x = torch.randn(int(m[rank].sum()), ROW, device=dev)
    ins, outs = m[rank].tolist(), m[:, rank].tolist()
    want = torch.empty(sum(outs), ROW, device=dev)
    dist.all_to_all_single(want, x, outs, ins)
    res = {}
    for alg in ("fast", "auto"):
        got = torch.empty_like(want)
        collsched.all_to_all_single(got, x, outs, ins, algorithm=alg, timeout=60)
        torch.cuda.synchronize()
        res[alg] = bool(torch.equal(got, want))
    return res


def captured_call(algorithm: str = "fast"):
    """A fixed-traffic call site (``checks=False`` with ``traffic=``) captured in a CUDA graph:
    replays on new input data give what an eager call gives on that data."""
    import collsched

    rank, world = dist.get_rank(), dist.get_world_size()
    m = _traffic(world)
    dev = torch.device("cuda", torch.cuda.current_device())
    ins, outs = m[rank].tolist(), m[:, rank].tolist()
    x = torch.zeros(int(m[rank].sum()), ROW, device=dev)
    out = torch.empty(sum(outs), ROW, device=dev)

    def call(o):
        collsched.all_to_all_single(o, x, outs, ins, algorithm=algorithm, traffic=m, checks=False, timeout=60)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture: communicators, plan, program, pool
        for _ in range(2):
            call(out)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call(out)
    res = {"replays": []}
    for step in range(3):
        x.copy_(torch.randn(x.shape, generator=torch.Generator().manual_seed(10 * step + rank)).to(dev))
        graph.replay()
        torch.cuda.synchronize()
        want = torch.empty_like(out)
        call(want)
        torch.cuda.synchronize()
        res["replays"].append(bool(torch.equal(out, want)))
    return res
