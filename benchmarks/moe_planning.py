"""Per-call, per-rank planning cost of collsched.moe (host CPU, no communication).

One rank of EP 64 (8 nodes × 8 GPUs), 4096 tokens × top-8 × 256 experts, realistic-like
routing (each token's experts on at most 4 nodes). Timed phases, the median of --iters calls:
- local: `plan_local` (units per destination node, their metadata, counts) from topk_idx;
- exchange: `plan_exchange` (balancer, split sizes, the expert-major placement index) from
  every rank's gathered counts;
- hop: `hop_pairs` on the units this rank receives as a forwarder (sort by expert);
- validate: MoEBuffer's argument checks (range, duplicates).
The phases run in turn per call; "total" is the median (and minimum) of the per-call sums.
Prints a table; ``--json`` one object. Target (issue 34): total ≤ 1 ms.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np
import torch


def routing(rng, tokens, experts, k, nodes, per_node_max=4):
    per_node = experts // nodes
    chosen = np.argsort(rng.random((tokens, nodes)), axis=1)[:, :per_node_max]
    cand = (chosen[:, :, None] * per_node + np.arange(per_node)).reshape(tokens, -1)
    pick = np.argsort(rng.random(cand.shape), axis=1)[:, :k]
    return torch.from_numpy(np.take_along_axis(cand, pick, axis=1).astype(np.int64))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--topk", type=int, default=8)
    ap.add_argument("--experts", type=int, default=256)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    from collsched.moe.buffer import MoEBuffer
    from collsched.moe.routing import Layout, hop_pairs, plan_exchange, plan_local, unit_ids

    rng = np.random.default_rng(0)
    lay = Layout.build(a.ranks, a.gpus_per_node, a.experts)
    nodes = a.ranks // a.gpus_per_node
    idxs = [routing(rng, a.tokens, a.experts, a.topk, nodes) for _ in range(a.ranks)]
    lps = [plan_local(ix, lay, "node") for ix in idxs]
    ec = np.stack([lp.expert_counts for lp in lps])
    kc = np.stack([lp.key_counts for lp in lps])
    me = 0
    cp = plan_exchange(me, lay, "node", True, ec, kc)
    # The units rank 0 receives as a forwarder: from each source, its units for node 0.
    recv_ids = []
    for i in range(a.ranks):
        if cp.forwarders[i, 0] == me:
            sel = lps[i].unit_key == 0
            recv_ids.append(unit_ids(lps[i], idxs[i])[torch.from_numpy(sel)])
    hop_ids = torch.cat(recv_ids).to(torch.int32)  # ids travel as int32
    fake = MoEBuffer.__new__(MoEBuffer)
    fake.num_experts = a.experts
    x = torch.empty((a.tokens, 1))
    w = torch.empty((a.tokens, a.topk))
    phases = {"validate": lambda: fake._validate(x, idxs[me], w),
              "local": lambda: plan_local(idxs[me], lay, "node"),
              "exchange": lambda: plan_exchange(me, lay, "node", True, ec, kc),
              "hop": lambda: hop_pairs(hop_ids, lay, "node", me, experts=False)}
    # The phases run in turn inside each call (as a dispatch runs them), so a burst of load
    # on the shared machine hits one call, not one phase; "total" is the median per call.
    ts = {name: [] for name in phases}
    for fn in phases.values():
        fn()  # warm: the layout's per-rank tables are built on the first call
    for _ in range(a.iters):
        for name, fn in phases.items():
            t0 = time.perf_counter()
            fn()
            ts[name].append(time.perf_counter() - t0)
    ts["total"] = [sum(v) for v in zip(*ts.values())]
    res = {name: statistics.median(v) for name, v in ts.items()}
    best = {name: min(v) for name, v in ts.items()}
    if a.json:
        print(json.dumps({"config": vars(a), "median_s": res, "min_s": best, "units_received": int(hop_ids.shape[0]),
                          "load_average": os.getloadavg()[0]}))
        return
    print(f"# collsched.moe planning per call, rank 0 of EP {a.ranks} ({nodes}×{a.gpus_per_node}), "
          f"{a.tokens} tokens × top-{a.topk} × {a.experts} experts, 1 thread, median of {a.iters} calls")
    print(f"# host load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (shared machine)")
    print(f"{'phase':>10} {'median(ms)':>11} {'min(ms)':>9}")
    for k, v in res.items():
        print(f"{k:>10} {v * 1e3:>11.3f} {best[k] * 1e3:>9.3f}")
    print(f"# target ≤ 1 ms total: median {'met' if res['total'] <= 1e-3 else 'NOT met'}, "
          f"min {'met' if best['total'] <= 1e-3 else 'NOT met'}")


if __name__ == "__main__":
    main()
