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
