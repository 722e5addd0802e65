"""Measure the constants of ``collsched.calibration`` on this machine and backend.

``collsched calibrate`` runs these: `measure_rank` on every rank of a process group, and
`measure_planning` in one process. Apart from ``collsched.calibration`` (which only loads and
stores the table) so that `choose` and the runtime never import the code that measures them.
"""
from __future__ import annotations

import statistics
import time

from collsched import _core


def measure_planning(iters: int = 5, spec: str = "h200:40", seed: int = 1) -> dict[str, float]:
    """Each planner's host cost of a new matrix on one rank, per transfer of the whole plan
    (median of ``iters`` Zipf(0.8) matrices, a different rank each).

    What the runtime pays per rank for a new matrix: ``plan_for_rank`` (the decisions and this
    rank's expansion) and compiling the rank's program. Divided by the whole plan's transfers,
    the quantity `choose` estimates for every candidate without planning it. Measured at 320
    GPUs (the default `spec`), the middle of the range the targets name: one rank's cost
    grows more slowly than the whole plan (a third to a quarter of this per transfer at 64
    GPUs it is two to four times this, for all but the SABRE planners; docs/auto.md).
    """
    from collsched import plan_all_to_all, plan_for_rank, traffic
    from collsched.comm.program import compile_rank_program

    c = _core.Cluster.parse(spec)
    n = c.num_gpus
    out = {}
    for name in _core.auto_candidates():
        if name == "native":
            continue
        per = []
        for k in range(iters):
            m = traffic.zipf(n, 0.8, (16 << 20) // n, seed=seed + k)
            rank = (k * 7919) % n
            t0 = time.perf_counter()
            compile_rank_program(plan_for_rank(m, c, rank, name), rank, collective_steps=False)
            spent = time.perf_counter() - t0
            if k == 0:
                transfers = max(plan_all_to_all(m, c, name).num_transfers, 1)
            per.append(spent * 1e9 / transfers)
        out[name] = round(statistics.median(per), 2)
    return out


def _median_us(fn, iters: int, sync, barrier) -> float:
    """Median host µs of ``fn`` until its work is done (`sync`: the device's queue drained),
    each run starting together on every rank (`barrier`)."""
    times = []
    for _ in range(iters):
        barrier()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def measure_rank(iters: int = 20, mib: int = 4) -> dict:
    """Run on every rank of an initialised process group: this rank's measurements (µs) for the
    group's backend (NCCL: on this rank's current GPU, each timing until the GPU is done).

    Every loop runs ``iters`` times (bounded); rank 0's numbers are what the table keeps.
    """
    import torch
    import torch.distributed as dist

    from collsched.comm.api import all_to_all_single
    from collsched.comm.stats import last_call_stats
    from collsched.comm.cache import PlanCache
    from collsched.comm.groups import host_group

    rank, world = dist.get_rank(), dist.get_world_size()
    nccl = "nccl" in str(dist.get_backend()).lower()
    dev = torch.device("cuda", torch.cuda.current_device()) if nccl else torch.device("cpu")
    sync = torch.cuda.synchronize if nccl else (lambda: None)
    hosts = host_group(None, 60.0)

    def barrier():
        sync()
        dist.barrier(group=hosts)

    one = torch.zeros(world, dtype=torch.float32, device=dev)
    out = torch.empty_like(one)
    native_tiny = _median_us(lambda: dist.all_to_all_single(out, one), iters, sync, barrier)

    # A step with one message each way (send to the next rank, receive from the previous),
    # and with a message to and from every peer.
    def step(sends, recvs):
        ops = [dist.P2POp(dist.isend, one[:1], d) for d in sends]
        ops += [dist.P2POp(dist.irecv, torch.empty(1, device=dev), d) for d in recvs]
        if ops:
            for w in dist.batch_isend_irecv(ops):
                w.wait()

    everyone = [d for d in range(world) if d != rank]
    step_one = _median_us(lambda: step([(rank + 1) % world], [(rank - 1) % world]) if world > 1 else None, iters,
                          sync, barrier)
    step_all = _median_us(lambda: step(everyone, everyone), iters, sync, barrier)
    extra = max(len(everyone) - 1, 1)
    message_us = max((step_all - step_one) / (2 * extra), 0.0)
    step_us = max(step_one - 2 * message_us, 0.0)

    # Staging: gather 64 segments into one message (what a multi-segment send costs).
    src = torch.empty(mib << 18, dtype=torch.float32, device=dev)
    segs = list(src.chunk(64))
    dst = torch.empty_like(src)
    copy_us_per_mib = _median_us(lambda: torch.cat(segs, out=dst), iters, sync, barrier) / mib

    # collsched's own call around a plan (fresh tiny matrices, planned: validation, planning,
    # program compile), less the exchange and the data movement: host time the GPU never hides.
    cache = PlanCache()
    fixed = []
    for k in range(iters):
        rows = [k % 3 + 1] * world
        inp = torch.zeros(sum(rows), dtype=torch.float32, device=dev)
        outp = torch.empty(sum(rows), dtype=torch.float32, device=dev)
        barrier()
        all_to_all_single(outp, inp, rows, rows, algorithm="fanout", cache=cache, eager_bytes=0)
        s = last_call_stats()
        fixed.append(s.total_s - s.exchange_s - s.execute_s)
    call_us = statistics.median(fixed) * 1e6

    # Duplex: pairs (0,1), (2,3), ... move `mib` MiB one way, then both ways at once through
    # torch's own all-to-all. Every rank runs the same loops (a rank without a pair idles).
    peer = rank ^ 1 if (rank ^ 1) < world else None
    count = mib << 18
    big = torch.zeros(count, dtype=torch.float32, device=dev)
    got = torch.empty_like(big)
    splits = [count if d == peer else 0 for d in range(world)]

    def one_way():
        if peer is not None:
            (dist.send(big, peer) if rank < peer else dist.recv(got, peer))

    def both_ways():
        dist.all_to_all_single(got[:sum(splits)], big[:sum(splits)], splits, splits)

    reps = max(iters // 4, 3)
    one_way()  # NCCL connects a pair on its first point-to-point transfer: not timed
    sync()
    t_one = _median_us(one_way, reps, sync, barrier)
    t_both = _median_us(both_ways, reps, sync, barrier)
    half = min(max((t_both - t_one) / max(t_one, 1e-9), 0.0), 1.0) if peer is not None else 0.0
    return {
        "native_call_us": max(native_tiny - 2 * (world - 1) * message_us, 0.0),
        "step_us": step_us,
        "message_us": message_us,
        "copy_us_per_mib": copy_us_per_mib,
        "call_us": call_us,
        "half_duplex": half,
        "world": world,
        "backend": "nccl" if nccl else "gloo",
    }
