"""Rank bodies for tests/test_compile.py (run by `collsched.comm.launch.run_local` on Gloo CPU ranks)."""
from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist

HIDDEN = 8


def _traffic(world: int, seed: int) -> torch.Tensor:
    """A skewed [P, P] int64 matrix of rows, the same on every rank (zeros included)."""
    rng = np.random.default_rng(seed)
    m = rng.integers(0, 7, size=(world, world))
    m[rng.integers(world), rng.integers(world)] += 20  # one hot pair
    m[0, world - 1] = 0
    return torch.from_numpy(m.astype(np.int64))


def _explain_breaks(fn, *args) -> int:
    torch._dynamo.reset()
    return int(torch._dynamo.explain(fn)(*args).graph_break_count)


def a2a_compiled(backend: str = "aot_eager"):
    """A module whose forward calls `collsched.nn.all_to_all_single` twice (planned with
    ``traffic=``/``checks=False``, then auto with its checks) and `collsched.all_to_all_single`
    in place: graph breaks under Dynamo, compiled against eager (outputs, gradients), bitwise."""
    import collsched
    import collsched.nn as cnn

    torch._dynamo.config.capture_scalar_outputs = True
    rank, world = dist.get_rank(), dist.get_world_size()
    group = dist.group.WORLD

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(HIDDEN, HIDDEN)

        def forward(self, x, traffic):
            send = traffic[rank].tolist()  # unbacked SymInts under the compiler
            recv = traffic[:, rank].tolist()
            y = cnn.all_to_all_single(self.lin(x), recv, send, group=group, algorithm="fast", traffic=traffic,
                                      checks=False)
            y = torch.tanh(y)
            z = cnn.all_to_all_single(y, send, recv, group=group)  # back, auto with its exchange
            out = z.new_empty((sum(recv), HIDDEN))
            collsched.all_to_all_single(out, z * 2, recv, send, group=group, algorithm="fast")  # in place
            return torch.cat([out, z])  # (the in-place call is not differentiable, in eager neither)

    torch.manual_seed(0)
    block = Block()
    res = {}
    for seed in (1, 2):
        traffic = _traffic(world, seed)
        x = torch.randn(int(traffic[rank].sum()), HIDDEN, generator=torch.Generator().manual_seed(10 * seed + rank))
        res[seed] = _compare(block, x, traffic, backend)
    traffic = _traffic(world, 3)
    res["breaks"] = _explain_breaks(block, torch.randn(int(traffic[rank].sum()), HIDDEN), traffic)
    return res


def _compare(module, x, traffic, backend: str) -> dict:
    """Eager against compiled (fullgraph): forward output and every gradient, bitwise."""
    xe = x.clone().requires_grad_(True)
    ye = module(xe, traffic)
    ye.sum().backward()
    grads_e = [p.grad.clone() for p in module.parameters()] + [xe.grad.clone()]
    module.zero_grad()
    compiled = torch.compile(module, backend=backend, fullgraph=True)
    xc = x.clone().requires_grad_(True)
    yc = compiled(xc, traffic)
    yc.sum().backward()
    grads_c = [p.grad.clone() for p in module.parameters()] + [xc.grad.clone()]
    module.zero_grad()
    return {"out": bool(torch.equal(ye, yc)), "grads": all(torch.equal(a, b) for a, b in zip(grads_e, grads_c)),
            "rows": int(ye.shape[0])}


EXPERTS, TOPK = 8, 3


def _moe_block(buffer):
    """Router, dispatch, one matrix per local expert, combine: the shape of an MoE layer."""
    from collsched.moe import combine, dispatch

    local = len(buffer.local_experts)

    class MoEBlock(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.router = torch.nn.Linear(HIDDEN, EXPERTS)
            self.experts = torch.nn.Parameter(torch.randn(local, HIDDEN, HIDDEN) / HIDDEN ** 0.5)

        def forward(self, x):
            scores, idx = torch.topk(self.router(x).softmax(-1), TOPK)
            d = dispatch(x, idx, scores, buffer)
            counts = torch.as_tensor(d.tokens_per_expert, dtype=torch.int64)  # a list in eager, a tensor traced
            owner = torch.repeat_interleave(torch.arange(local), counts, output_size=d.x.shape[0])
            y = torch.tanh(torch.bmm(d.x[:, None, :], self.experts[owner])[:, 0]) * d.weights[:, None]
            return combine(y, d.handle, weighted=False)

    return MoEBlock()


def moe_compiled(backend: str = "aot_eager", dedup: str = "node"):
    """An MoE block (router, `collsched.moe.dispatch`, experts, `combine`) compiled with
    fullgraph against eager: graph breaks, output and every gradient bitwise; the handle
    registry empty after each backward."""
    from collsched.moe import MoEBuffer

    torch._dynamo.config.capture_scalar_outputs = True  # the rows arrive as an unbacked SymInt, as torch's splits
    rank = dist.get_rank()
    buffer = MoEBuffer(num_experts=EXPERTS, dedup=dedup)
    torch.manual_seed(0)
    block = _moe_block(buffer)
    res = {}
    for seed in (1, 2):
        x = torch.randn(5 + 3 * rank + seed, HIDDEN, generator=torch.Generator().manual_seed(10 * seed + rank))
        xe = x.clone().requires_grad_(True)
        ye = block(xe)
        ye.square().sum().backward()
        grads_e = [p.grad.clone() for p in block.parameters()] + [xe.grad.clone()]
        block.zero_grad()
        compiled = torch.compile(block, backend=backend, fullgraph=True)
        xc = x.clone().requires_grad_(True)
        yc = compiled(xc)
        live_after_forward = len(buffer._live_handles)
        yc.square().sum().backward()
        grads_c = [p.grad.clone() for p in block.parameters()] + [xc.grad.clone()]
        block.zero_grad()
        res[seed] = {"out": bool(torch.equal(ye, yc)),
                     "grads": all(torch.equal(a, b) for a, b in zip(grads_e, grads_c)),
                     "live_after_forward": live_after_forward, "live_after_backward": len(buffer._live_handles)}
    with torch.no_grad():  # no autograd: the handle goes with the graph's key
        torch.compile(block, backend=backend, fullgraph=True)(torch.randn(4, HIDDEN))
    res["live_no_grad"] = len(buffer._live_handles)
    res["breaks"] = _explain_breaks(block, torch.randn(6, HIDDEN))
    return res


def opchecks():
    """torch.library.opcheck (schema, fake, autograd registration, AOT dispatch) of each operator."""
    from torch.library import opcheck

    from collsched.comm.ops import call_config, group_name
    from collsched.moe import MoEBuffer

    rank, world = dist.get_rank(), dist.get_world_size()
    traffic = _traffic(world, 5)
    x = torch.randn(int(traffic[rank].sum()), HIDDEN, requires_grad=True)
    name = group_name(None)
    out = {}
    opcheck(torch.ops.collsched.all_to_all_single.default,
            (x, traffic[:, rank].tolist(), traffic[rank].tolist(), name, traffic, call_config(algorithm="fast",
                                                                                              checks=False), False))
    out["all_to_all_single"] = True
    opcheck(torch.ops.collsched.exchange_i64.default, (torch.arange(3) + rank, name, 30.0, "opcheck exchange"))
    out["exchange_i64"] = True
    buffer = MoEBuffer(num_experts=EXPERTS)
    g = torch.Generator().manual_seed(rank)
    tok = torch.randn(6, HIDDEN, generator=g, requires_grad=True)
    idx = torch.stack([torch.randperm(EXPERTS, generator=g)[:TOPK] for _ in range(6)])
    w = torch.rand(6, TOPK, generator=g, requires_grad=True)
    # Its second output is a fresh key per call (the registry's), so two runs of one input differ
    # by design: the AOT check, which compares two runs, is left to moe_compiled.
    opcheck(torch.ops.collsched.moe_dispatch.default, (tok, idx, w, buffer.op_key),
            test_utils=("test_schema", "test_autograd_registration", "test_faketensor"))
    out["moe_dispatch"] = True
    counts, key = torch.ops.collsched.moe_dispatch(tok.detach(), idx, w.detach(), buffer.op_key)
    rows = int(counts.sum())
    opcheck(torch.ops.collsched.moe_dispatch_rows.default, (tok, w, buffer.op_key, key, rows))
    out["moe_dispatch_rows"] = True
    x_out, _ = torch.ops.collsched.moe_dispatch_rows(tok.detach(), w.detach(), buffer.op_key, key, rows)
    y = x_out.detach().clone().requires_grad_(True)
    opcheck(torch.ops.collsched.moe_combine.default, (y, buffer.op_key, key, 6, True))
    out["moe_combine"] = True
    return out


def everything():
    """`a2a_compiled`, `moe_compiled` and `opchecks` in one launch (ranks start and import the
    compiler stack once)."""
    return {"a2a": a2a_compiled(), "moe": moe_compiled(), "opcheck": opchecks()}
