"""`collsched testbed run`: execute algorithms on a fabric, check them against torch, time them.

Every rank moves the bytes of one traffic matrix (uint8 rows, so split sizes are bytes):
first through ``torch.distributed.all_to_all_single`` (the reference), then through
``collsched.all_to_all_single(algorithm=..., cluster=<the fabric's spec>, transport=...)``.
Outputs are compared byte for byte on every rank; then every method is timed in
interleaved rounds (a load spike on the shared host hits every method alike). A method's
time is, per round, the slowest rank's call; the reported time is the median over rounds.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from collsched.testbed.fabric import Fabric, FabricSpec, TestbedError, check_available
from collsched.testbed.launch import report_progress, run_ranks, teardown_on_signals
from collsched.testbed.model import DEFAULT_PARAMS, ModelParams, cluster_spec, predict

TORCH = "torch"
NATIVE = "native"  # auto's name for torch's own call
EAGER = "eager"  # the whole call rode in the descriptor exchange (no plan to simulate)
# The whole run's host memory: every rank holds input, output and torch's reference.
MAX_BYTES_PER_RANK = 256 * 2**20
MAX_SECONDS = 600.0  # longest run we start (predicted from the fabric's lower bound)


@dataclass
class RunConfig:
    """One testbed run.

    Args:
        workload: ``balanced | uniform | zipf:S | hot:S | path``; ``mean``: mean bytes per rank pair.
        algorithms: names (``torch`` = torch's own all_to_all_single).
        iters: timed rounds; ``warmup``: untimed calls per method before them.
        transport: passed to ``collsched.all_to_all_single`` (auto | p2p | alltoallv | hybrid | ...).
        timeout_s: deadline of the whole rank run.
    """

    workload: str = "zipf:0.8"
    mean: int = 2**20
    algorithms: list[str] = field(default_factory=lambda: [TORCH, "fanout", "fast", "auto"])
    iters: int = 5
    warmup: int = 1
    transport: str = "auto"
    seed: int = 0
    timeout_s: float = 300.0
    params: ModelParams = DEFAULT_PARAMS


def rank_worker(matrix_rows: list, cluster: str, algorithms: list, iters: int, warmup: int,
                transport: str) -> dict:
    """Runs in every rank (see the module docstring).

    Args:
        matrix_rows: P×P bytes rank i sends to rank j (the same on every rank).
        cluster: the fabric's Cluster spec, passed to every collsched call.
        algorithms: method names; ``torch`` is ``torch.distributed.all_to_all_single``.
        iters, warmup: timed rounds and untimed calls per method.
        transport: passed to ``collsched.all_to_all_single``.

    Returns:
        ``{"times": {method: [seconds per round]}, "info": {method: {"identical", "steps"}}}`` for this rank.
    """
    import torch
    import torch.distributed as dist

    import collsched
    from collsched import comm

    rank = dist.get_rank()
    m = np.asarray(matrix_rows, dtype=np.int64)
    in_s, out_s = [int(v) for v in m[rank]], [int(v) for v in m[:, rank]]
    x = torch.randint(0, 256, (sum(in_s),), dtype=torch.uint8, generator=torch.Generator().manual_seed(rank))
    ref = torch.empty(sum(out_s), dtype=torch.uint8)
    dist.all_to_all_single(ref, x, out_s, in_s)
    outs, calls, info = {}, {}, {}
    for a in algorithms:
        out = torch.empty_like(ref)
        if a == TORCH:
            calls[a] = lambda out=out: dist.all_to_all_single(out, x, out_s, in_s)
        else:
            calls[a] = lambda out=out, a=a: collsched.all_to_all_single(out, x, out_s, in_s, algorithm=a,
                                                                        cluster=cluster, transport=transport)
        outs[a] = out
    for a in algorithms:
        if rank == 0:
            report_progress(f"checking {a}")
        outs[a].zero_()
        for _ in range(max(1, warmup)):
            dist.barrier()
            calls[a]()
        same = bool(torch.equal(outs[a], ref))
        st = comm.last_call_stats() if a != TORCH else None
        # What this rank ran: auto's choice as the runtime made it (its backend, its calibration).
        info[a] = {"identical": same, "steps": st.steps if st else 0,
                   "chose": (st.choice or st.planned_by or a) if st else TORCH}
    times = {a: [] for a in algorithms}
    for it in range(iters):
        if rank == 0:
            report_progress(f"timing round {it + 1}/{iters}")
        for a in algorithms:
            dist.barrier()
            t0 = time.perf_counter()
            calls[a]()
            times[a].append(time.perf_counter() - t0)
    return {"times": times, "info": info}


def check_size(spec: FabricSpec, matrix: np.ndarray, cfg: RunConfig) -> float:
    """Refuse a run the host cannot hold or finish; returns the lower bound in seconds."""
    import collsched

    worst = int(max(matrix.sum(axis=1).max(), matrix.sum(axis=0).max()))
    if worst > MAX_BYTES_PER_RANK:
        raise TestbedError(f"--mean {cfg.mean / 2**20:g} MiB gives a rank {worst / 2**20:.0f} MiB to send or receive; this host "
                           f"holds at most {MAX_BYTES_PER_RANK >> 20} MiB per rank ({spec.ranks} ranks × 3 buffers)")
    cluster = cluster_spec(spec, cfg.params)
    bound = collsched.lower_bound(matrix, cluster).seconds
    calls = len(cfg.algorithms) * (cfg.iters + max(1, cfg.warmup)) + 1
    if bound * calls > MAX_SECONDS:
        raise TestbedError(f"this run would take at least {bound * calls:.0f} s ({calls} calls × {bound:.2f} s lower "
                           f"bound at the NIC rate); the testbed runs at most {MAX_SECONDS:.0f} s: lower --mean or --iters")
    return bound


def make_matrix(spec: FabricSpec, cfg: RunConfig) -> np.ndarray:
    from collsched.workloads import make_workload

    try:
        return make_workload(cfg.workload, spec.ranks, cfg.mean, cfg.seed).astype(np.int64)
    except ValueError as e:
        raise TestbedError(f"--workload: {e}") from None


def check_algorithms(names: list[str]) -> None:
    import collsched

    known = [n for n, _ in collsched.all_to_all_algorithms()]
    bad = [a for a in names if a != TORCH and a not in known]
    if bad:
        raise TestbedError(f"unknown algorithm {bad[0]!r} (known: {TORCH}, {', '.join(known)})")
    if not names:
        raise TestbedError("--algorithms is empty")


def run_on_fabric(fabric: Fabric, matrix: np.ndarray, cfg: RunConfig, on_progress=None) -> dict:
    """Run ``cfg`` on a built fabric; returns the result dict (see ``run``)."""
    import collsched

    spec = fabric.spec
    cluster = cluster_spec(spec, cfg.params)
    res = run_ranks(fabric, rank_worker, (matrix.tolist(), cluster, cfg.algorithms, cfg.iters, cfg.warmup,
                                          cfg.transport),
                    env={"COLLSCHED_TIMEOUT_S": str(int(max(30, cfg.timeout_s / 2)))}, timeout_s=cfg.timeout_s,
                    on_progress=on_progress)
    bytes_per_rank = float(matrix.sum()) / spec.ranks
    bound = collsched.lower_bound(matrix, cluster).seconds
    rows = []
    for a in cfg.algorithms:
        per_round = np.max(np.array([r["times"][a] for r in res]), axis=0)  # slowest rank per round
        t = float(np.median(per_round))
        # What the ranks ran (auto: what the runtime chose on this backend; every rank alike, since
        # they choose from the same gathered matrix), simulated as the same plan (planning is
        # deterministic); torch's own call, also when auto chose it, has no prediction.
        chosen = {r["info"][a]["chose"] for r in res}
        if len(chosen) != 1:
            raise TestbedError(f"{a}: the ranks ran different algorithms {sorted(chosen)}")
        chose = chosen.pop()
        planned = chose if a == "auto" else a  # a selector (sabre) is simulated as itself
        pred = None if chose in (TORCH, NATIVE, EAGER) else predict(matrix, cluster, planned, cfg.params)
        rows.append({"algorithm": a, "time_s": t, "predicted_s": pred,
                     "ratio_to_predicted": None if pred is None else t / pred,
                     "algbw_gbps": bytes_per_rank / t / 1e9 if t > 0 else None,
                     "identical": all(r["info"][a]["identical"] for r in res),
                     "planned_by": chose, "steps": res[0]["info"][a]["steps"]})
    return {"cluster": cluster, "fabric": {"servers": spec.servers, "gpus": spec.gpus, "nic_bps": spec.nic_bps,
                                           "queue_bytes": spec.queue_bytes, "scaleup_bps": spec.scaleup_bps},
            "workload": cfg.workload, "mean_bytes": cfg.mean, "bytes_per_rank": bytes_per_rank,
            "transport": cfg.transport, "iters": cfg.iters, "lower_bound_s": bound, "results": rows}


def run(spec: FabricSpec, cfg: RunConfig, on_progress=None, on_built=None) -> dict:
    """Build a fabric for ``spec``, run ``cfg`` on it, tear it down (always).

    Returns:
        ``{"cluster": spec string, "fabric": knobs, "lower_bound_s", "results": [{"algorithm",
        "time_s" (median over rounds of the slowest rank), "predicted_s" (simulated on the
        derived cluster; None for torch), "ratio_to_predicted", "algbw_gbps" (mean bytes per
        rank / time, 1e9), "identical" (byte-equal to torch's output on every rank),
        "planned_by" (what auto chose; the algorithm itself otherwise), "steps"}]}``.

    Raises:
        TestbedError: not root, no namespaces, a knob or size the host cannot emulate, or a
            rank failed (RankError).
    """
    check_algorithms(cfg.algorithms)
    matrix = make_matrix(spec, cfg)
    check_size(spec, matrix, cfg)
    check_available()
    with teardown_on_signals(), Fabric(spec) as fabric:
        if on_built is not None:
            on_built(fabric)
        return run_on_fabric(fabric, matrix, cfg, on_progress)
