"""Executed MoE dispatch + combine on 8 Gloo ranks (2 nodes × 4, CPU): local loopback, or the testbed.

Same input for every method, interleaved rounds, median per call:
- torch: the nccl-style baseline from torch ops (Megatron's all-to-all dispatcher): counts
  all-to-all, permute by destination, all_to_all_single of (token, expert) rows, permute to
  expert-major; combine: permute back, all_to_all_single, weighted un-permute;
- collsched.moe.MoEBuffer with dedup = node (Fusco: forwarders, balanced), rank, none.

Also checks that every method's combine output equals the baseline's, and that the cross-node
payload bytes MoEBuffer sent (summed over ranks) equal the whole dispatch Plan's scale-out
bytes (`collsched.moe.plans.dispatch_plan`, the planner's count). Prints a table; --json one object.
Loopback Gloo has no slow inter-node link: times show host overheads, not Fusco's network gain.

With ``--testbed`` (root) the same workers run on the namespace testbed instead
(``collsched.testbed``: ``--servers`` × ``--gpus`` ranks, one NIC each shaped to ``--nic``,
built and always torn down by ``Fabric``, ranks started by ``testbed.launch.run_ranks``), with
the fabric's derived Cluster spec. There the table adds what each method's calls moved through
the emulated NICs (sum over ranks of the NIC's transmitted bytes, headers and metadata included,
read from /proc/net/dev inside each rank's namespace), and the lower bound of the node-dedup
traffic: the busiest NIC's dispatch + combine payload bytes at the NIC rate.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

WORLD, GPN = 8, 4
TORCH = "torch (nccl-style)"


def _routing(seed, rank, tokens, experts, k, kind, nodes=2):
    rng = np.random.default_rng([seed, rank])
    if kind == "single-node":  # all of a token's experts on one node
        per = experts // nodes
        node = rng.integers(0, nodes, size=tokens)
        base = np.argsort(rng.random((tokens, per)), axis=1)[:, :k]
        return (base + node[:, None] * per).astype(np.int64)
    return np.argsort(rng.random((tokens, experts)), axis=1)[:, :k].astype(np.int64)


def _nic_bytes():
    """(rx, tx) bytes of this network namespace's ``nic`` (a testbed rank's emulated NIC), or None.

    /proc/net/dev is per network namespace (unlike /sys/class/net, which shows the namespace
    sysfs was mounted in), so a rank that entered its namespace reads its own NIC."""
    try:
        with open("/proc/net/dev") as f:
            for line in f:
                name, _, rest = line.partition(":")
                if name.strip() == "nic":
                    v = rest.split()
                    return int(v[0]), int(v[8])
    except OSError:
        pass
    return None


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


def worker(tokens, hidden, topk, experts, iters, kind, seed, gpn=GPN, cluster=None, fast=False):
    """One rank: check every method against the baseline, then time them in interleaved rounds.

    Args:
        tokens, hidden, topk, experts: per-rank tokens, row width (bf16), experts per token, experts.
        iters: timed rounds; kind: ``uniform | single-node``; seed: the routing's and data's seed.
        gpn: ranks per node; cluster: the Cluster spec MoEBuffer plans for (default ``h100:<nodes>``).
        fast: also time dedup="node" with ``schedule="fast"`` (hop 1 on collsched's own transport).

    Returns:
        This rank's median seconds per method, exactness, cross-node payload bytes sent, per-call
        NIC bytes (testbed only; None on loopback) and, on rank 0, the planner's counts and bound.
    """
    import torch
    import torch.distributed as dist

    import collsched.moe as moe
    from collsched.comm.launch import report_progress
    from collsched.moe.plans import dispatch_plan

    torch.set_num_threads(1)
    rank, world = dist.get_rank(), dist.get_world_size()
    nodes = world // gpn
    idx = torch.from_numpy(_routing(seed, rank, tokens, experts, topk, kind, nodes))
    rng = np.random.default_rng([seed, 100 + rank])
    x = torch.from_numpy(rng.integers(-3, 4, size=(tokens, hidden))).to(torch.bfloat16)
    w = torch.from_numpy(rng.integers(0, 3, size=(tokens, topk))).float()
    owner = torch.arange(experts) // (experts // world)
    cluster = cluster or f"h100:{nodes},gpus={gpn}"
    bufs = {f"collsched dedup={d}": moe.MoEBuffer(None, experts, cluster=cluster, dedup=d) for d in ("node", "rank", "none")}
    if fast:
        bufs["collsched node+fast"] = moe.MoEBuffer(None, experts, cluster=cluster, dedup="node", schedule="fast")

    hop1 = {}  # each buffer's last hop-1 row matrix (every rank's rows, the same on every rank)

    def run_cs(name, buf):
        d = buf.dispatch(x, idx, w)
        hop1[name] = d.handle.plan.matrix1
        return buf.combine(d.x, d.handle)

    methods = {TORCH: lambda: _torch_moe(x, idx, w, owner)}
    methods.update({name: (lambda n=name, b=b: run_cs(n, b)) for name, b in bufs.items()})
    if rank == 0:
        report_progress("checking every method against the baseline")
    ref = methods[TORCH]()
    same = {name: bool(torch.equal(fn(), ref)) for name, fn in methods.items()}
    times = {name: [] for name in methods}
    nic = {name: [] for name in methods}
    for it in range(iters):
        if rank == 0:
            report_progress(f"timing round {it + 1}/{iters}")
        for name, fn in methods.items():
            dist.barrier()
            n0 = _nic_bytes()
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
            if n0 is None:
                continue
            # A rank's call can return while its last sends still sit in its socket and NIC queue;
            # after a barrier every byte of the call has reached its receiver.
            dist.barrier()
            n1 = _nic_bytes()
            if n1 is not None:
                nic[name].append((n1[0] - n0[0], n1[1] - n0[1]))
    payload = {name: b.last_stats["internode_bytes"] for name, b in bufs.items()}
    row = hidden * 2
    planner = bound_rows = None
    if rank == 0:
        routings = [_routing(seed, r, tokens, experts, topk, kind, nodes) for r in range(world)]
        planner = {name: dispatch_plan(routings, b.layout, row, b.dedup)[1]["internode_bytes"]
                   for name, b in bufs.items()}
        # The node-dedup dispatch's hop-1 rows, every rank's (the same on every rank): the busiest
        # NIC's cross-node rows out or in; the combine sends the same rows back.
        m = np.asarray(hop1["collsched dedup=node"])
        node = np.arange(world) // gpn
        cross = np.where(node[:, None] != node[None, :], m, 0)
        bound_rows = int(max(cross.sum(axis=1).max(), cross.sum(axis=0).max()))
    # The baseline's cross-node rows: every (token, expert) pair on another node.
    cross_t = int((((owner[idx.clamp(min=0)] // gpn) != rank // gpn) & (idx >= 0)).sum()) * row
    # Per call, the NIC's bytes in and out (the median round's; nothing on loopback).
    nic_med = {k: (tuple(int(statistics.median(c)) for c in zip(*v)) if v else None) for k, v in nic.items()}
    return {"times": {k: statistics.median(v) for k, v in times.items()}, "same": same, "payload": payload,
            "planner": planner, "torch_payload": cross_t, "nic": nic_med, "bound_rows": bound_rows}


def _run_testbed(a, args):
    """Build the fabric, run the workers in its namespaces, tear it down (always; also on Ctrl-C)."""
    from collsched.testbed import FabricSpec, cluster_spec
    from collsched.testbed.launch import run_on_new_fabric

    spec = FabricSpec.from_knobs(a.servers, a.gpus, a.nic)
    cluster = cluster_spec(spec)
    res = run_on_new_fabric(spec, worker, args + (a.gpus, cluster, a.fast), env={"COLLSCHED_TIMEOUT_S": "120"},
                            timeout_s=600, on_progress=lambda line: print(f"  {line}", file=sys.stderr))
    return res, spec, cluster


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
    ap.add_argument("--testbed", action="store_true",
                    help="run the ranks on the namespace testbed (root; docs/testbed.md) instead of loopback")
    ap.add_argument("--nic", default="200Mbps", help="--testbed: every emulated NIC's rate per direction")
    ap.add_argument("--servers", type=int, default=2, help="--testbed: emulated servers (nodes)")
    ap.add_argument("--gpus", type=int, default=GPN, help="--testbed: ranks per server")
    ap.add_argument("--fast", action="store_true",
                    help="also time dedup=node with schedule=fast (hop 1 on collsched's full-duplex transport)")
    a = ap.parse_args(argv)
    args = (a.tokens, a.hidden, a.topk, a.experts, a.iters, a.routing, a.seed)
    world, gpn = (a.servers * a.gpus, a.gpus) if a.testbed else (WORLD, GPN)
    if a.experts % world or (a.routing == "single-node" and a.experts // (world // gpn) < a.topk):
        ap.error(f"--experts {a.experts} must be a multiple of the {world} ranks"
                 + (f" with at least --topk {a.topk} per node" if a.routing == "single-node" else ""))
    spec = cluster = None
    if a.testbed:
        from collsched.testbed import TestbedError

        try:
            res, spec, cluster = _run_testbed(a, args)
        except TestbedError as e:
            print(f"error: {e}", file=sys.stderr)
            raise SystemExit(2) from None
        executed = (f"{world} Gloo ranks on the namespace testbed ({a.servers} servers x {a.gpus}, one NIC per rank "
                    f"shaped to {a.nic} per direction), executed-on-testbed")
    else:
        from collsched.comm.launch import run_local

        here = os.path.dirname(os.path.abspath(__file__))
        res = run_local("moe_gloo:worker", WORLD, args + (GPN, None, a.fast), gpus_per_server=GPN, timeout_s=600,
                        extra_pythonpath=[here])
        executed = "8 Gloo ranks on one CPU host (2 emulated nodes x 4), loopback"
    names = list(res[0]["times"])
    # A call ends when its slowest rank ends.
    t = {n: max(r["times"][n] for r in res) for n in names}
    payload = {n: sum(r["payload"].get(n, 0) for r in res) for n in names}
    payload[TORCH] = sum(r["torch_payload"] for r in res)
    planner = res[0]["planner"]
    out = {"config": vars(a), "executed": executed, "load_average": os.getloadavg()[0], "rows": []}
    if spec is not None:
        # Dispatch + combine each move the busiest NIC's node-dedup rows once, at best at the NIC rate.
        bound_bytes = 2 * res[0]["bound_rows"] * a.hidden * 2
        out.update(cluster=cluster, nic_bps=spec.nic_bps, node_dedup_bound_bytes=bound_bytes,
                   node_dedup_bound_s=bound_bytes / spec.nic_bps)
    for n in names:
        row = {"method": n, "time_s": t[n], "vs_torch": t[TORCH] / t[n],
               "internode_payload_bytes": payload[n], "planner_internode_bytes": planner.get(n),
               "equal_to_torch": all(r["same"][n] for r in res)}
        if spec is not None:  # what the NICs carried per call (tx summed over ranks = cross-node wire bytes)
            row["nic_tx_bytes_per_call"] = sum(r["nic"][n][1] for r in res)
            # The busiest NIC direction's measured bytes at the NIC rate: no call can be faster.
            row["nic_bound_s"] = max(max(r["nic"][n]) for r in res) / spec.nic_bps
        out["rows"].append(row)
    if a.json:
        print(json.dumps(out))
        return
    print(f"# executed: {out['executed']}; host load average {out['load_average']:.1f} (shared machine)")
    if spec is not None:
        print(f"# cluster (derived from the fabric): {cluster}")
    print(f"# {a.tokens} tokens/rank, H={a.hidden} bf16, top-{a.topk}, {a.experts} experts, routing {a.routing}, "
          f"median of {a.iters} (slowest rank)")
    nic_h = f" {'NIC MB/call':>11} {'NIC bound(ms)':>13} {'time/bound':>10}" if spec is not None else ""
    print(f"{'method':>22} {'time(ms)':>9} {'vs torch':>9} {'cross-node MB':>14} {'planner MB':>11} {'exact':>6}{nic_h}")
    for r in out["rows"]:
        pl = "" if r["planner_internode_bytes"] is None else f"{r['planner_internode_bytes'] / 1e6:.3f}"
        nic = (f" {r['nic_tx_bytes_per_call'] / 1e6:>11.3f} {r['nic_bound_s'] * 1e3:>13.1f} "
               f"{r['time_s'] / r['nic_bound_s']:>10.2f}") if spec is not None else ""
        print(f"{r['method']:>22} {r['time_s'] * 1e3:>9.2f} {r['vs_torch']:>9.2f} "
              f"{r['internode_payload_bytes'] / 1e6:>14.3f} {pl:>11} {str(r['equal_to_torch']):>6}{nic}")
    if spec is not None:
        print(f"# lower bound of the node-dedup traffic: the busiest NIC's dispatch + combine payload, "
              f"{out['node_dedup_bound_bytes'] / 1e6:.3f} MB, at {spec.nic_bps / 1e6:g} MB/s = "
              f"{out['node_dedup_bound_s'] * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
