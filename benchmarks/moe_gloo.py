"""Executed MoE dispatch + combine on 8 local Gloo ranks (2 emulated nodes × 4, CPU).

Same input for every method, interleaved rounds, median per call:
- torch: the nccl-style baseline from torch ops (Megatron's all-to-all dispatcher): counts
  all-to-all, permute by destination, all_to_all_single of (token, expert) rows, permute to
  expert-major; combine: permute back, all_to_all_single, weighted un-permute;
- collsched.moe.MoEBuffer with dedup = node (Fusco: forwarders, balanced), rank, none.

Also checks that every method's combine output equals the baseline's, and that the cross-node
payload bytes MoEBuffer sent (summed over ranks) equal the whole dispatch Plan's scale-out
bytes (`collsched.moe.plans.dispatch_plan`, the planner's count). Prints a table; --json one object.
Loopback Gloo has no slow inter-node link: times show host overheads, not Fusco's network gain.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np

WORLD, GPN = 8, 4


def _routing(seed, rank, tokens, experts, k, kind):
    rng = np.random.default_rng([seed, rank])
    if kind == "single-node":  # all of a token's experts on one node
        half = experts // 2
        node = rng.integers(0, 2, size=tokens)
        base = np.argsort(rng.random((tokens, half)), axis=1)[:, :k]
        return (base + node[:, None] * half).astype(np.int64)
    return np.argsort(rng.random((tokens, experts)), axis=1)[:, :k].astype(np.int64)


def _torch_moe(x, idx, w, owner, group=None):
    """nccl-style dispatch + combine from torch ops; returns the combined [T, H]."""
    import torch
    import torch.distributed as dist

    world = dist.get_world_size(group)
    valid = idx >= 0
    tk = valid.nonzero()
    e = idx[tk[:, 0], tk[:, 1]]
    own = owner[e]
    order = torch.sort(own * 100000 + e, stable=True).indices
    tok = tk[order, 0]
    send = torch.bincount(own, minlength=world)
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)
    sl, rl = send.tolist(), recv.tolist()
    rows = x.index_select(0, tok)
    got = x.new_empty((sum(rl), x.shape[1]))
    dist.all_to_all_single(got, rows, rl, sl, group=group)
    ids = torch.empty(sum(rl), dtype=torch.int64)
    dist.all_to_all_single(ids, e[order], rl, sl, group=group)
    o2 = torch.sort(ids, stable=True).indices
    y = got.index_select(0, o2)  # expert-major: the experts would run here
    back_in = torch.empty_like(y)
    back_in[o2] = y
    back = x.new_empty((sum(sl), x.shape[1]))
    dist.all_to_all_single(back, back_in, sl, rl, group=group)
    wt = w[tk[order, 0], tk[order, 1]]
    out = torch.zeros((x.shape[0], x.shape[1]), dtype=torch.float32).index_add_(0, tok, back.float() * wt[:, None])
    return out.to(x.dtype)


def worker(tokens, hidden, topk, experts, iters, kind, seed):
    import torch
    import torch.distributed as dist

    import collsched.moe as moe
    from collsched.moe.plans import dispatch_plan

    torch.set_num_threads(1)
    rank = dist.get_rank()
    idx = torch.from_numpy(_routing(seed, rank, tokens, experts, topk, kind))
    rng = np.random.default_rng([seed, 100 + rank])
    x = torch.from_numpy(rng.integers(-3, 4, size=(tokens, hidden))).to(torch.bfloat16)
    w = torch.from_numpy(rng.integers(0, 3, size=(tokens, topk))).float()
    owner = torch.arange(experts) // (experts // WORLD)
    cluster = f"h100:2,gpus={GPN}"
    bufs = {f"collsched dedup={d}": moe.MoEBuffer(None, experts, cluster=cluster, dedup=d) for d in ("node", "rank", "none")}

    def run_cs(buf):
        d = buf.dispatch(x, idx, w)
        return buf.combine(d.x, d.handle)

    methods = {"torch (nccl-style)": lambda: _torch_moe(x, idx, w, owner)}
    methods.update({name: (lambda b=b: run_cs(b)) for name, b in bufs.items()})
    ref = methods["torch (nccl-style)"]()
    same = {name: bool(torch.equal(fn(), ref)) for name, fn in methods.items()}
    times = {name: [] for name in methods}
    for _ in range(iters):
        for name, fn in methods.items():
            dist.barrier()
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    payload = {name: b.last_stats["internode_bytes"] for name, b in bufs.items()}
    planner = None
    if rank == 0:
        routings = [_routing(seed, r, tokens, experts, topk, kind) for r in range(WORLD)]
        row = hidden * 2
        planner = {name: dispatch_plan(routings, b.layout, row, b.dedup)[1]["internode_bytes"]
                   for name, b in bufs.items()}
    # The baseline's cross-node rows: every (token, expert) pair on the other node.
    cross = int((((owner[idx.clamp(min=0)] // GPN) != rank // GPN) & (idx >= 0)).sum()) * hidden * 2
    return {"times": {k: statistics.median(v) for k, v in times.items()}, "same": same, "payload": payload,
            "planner": planner, "torch_payload": cross}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--topk", type=int, default=8)
    ap.add_argument("--experts", type=int, default=32)
    ap.add_argument("--iters", type=int, default=7)
    ap.add_argument("--routing", default="uniform", choices=("uniform", "single-node"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    from collsched.comm.launch import run_local

    here = os.path.dirname(os.path.abspath(__file__))
    res = run_local("moe_gloo:worker", WORLD, (a.tokens, a.hidden, a.topk, a.experts, a.iters, a.routing, a.seed),
                    gpus_per_server=GPN, timeout_s=600, extra_pythonpath=[here])
    names = list(res[0]["times"])
    # A call ends when its slowest rank ends.
    t = {n: max(r["times"][n] for r in res) for n in names}
    payload = {n: sum(r["payload"].get(n, 0) for r in res) for n in names}
    payload["torch (nccl-style)"] = sum(r["torch_payload"] for r in res)
    planner = res[0]["planner"]
    out = {"config": vars(a), "executed": "8 Gloo ranks on one CPU host (2 emulated nodes x 4), loopback",
           "load_average": os.getloadavg()[0], "rows": []}
    for n in names:
        out["rows"].append({"method": n, "time_s": t[n], "vs_torch": t["torch (nccl-style)"] / t[n],
                            "internode_payload_bytes": payload[n], "planner_internode_bytes": planner.get(n),
                            "equal_to_torch": all(r["same"][n] for r in res)})
    if a.json:
        print(json.dumps(out))
        return
    print(f"# executed: {out['executed']}; host load average {out['load_average']:.1f} (shared machine)")
    print(f"# {a.tokens} tokens/rank, H={a.hidden} bf16, top-{a.topk}, {a.experts} experts, routing {a.routing}, "
          f"median of {a.iters} (slowest rank)")
    print(f"{'method':>22} {'time(ms)':>9} {'vs torch':>9} {'cross-node MB':>14} {'planner MB':>11} {'exact':>6}")
    for r in out["rows"]:
        pl = "" if r["planner_internode_bytes"] is None else f"{r['planner_internode_bytes'] / 1e6:.3f}"
        print(f"{r['method']:>22} {r['time_s'] * 1e3:>9.2f} {r['vs_torch']:>9.2f} "
              f"{r['internode_payload_bytes'] / 1e6:>14.3f} {pl:>11} {str(r['equal_to_torch']):>6}")


if __name__ == "__main__":
    main()
