"""Fit the simulator's free parameters to executed times on the testbed, and report held-out error.

Measured: fanout, SpreadOut and FAST (plus torch, for reference) over balanced, uniform,
Zipf and hot-expert matrices at several sizes per rank, on one fabric (one rank launch for
every case). Fitted: the ``ModelParams`` the knobs do not fix (TCP goodput per shaped
byte, per-transfer start-up cost per tier, the unshaped scale-up rate, the step barrier,
the host's aggregate rate for shaped traffic (the simulator's core link) and, where offered,
its incast model), by coordinate descent from the clean model over small grids minimising the
mean absolute log error on the fit half's cases of at least ``MIN_BYTES`` per rank; for each
candidate the per-call host cost is solved for (median of executed − simulated), since it
trades off against every rate. Cases alternate between the halves by matrix, so an algorithm
is never fitted and tested on the same matrix.
"""
from __future__ import annotations

import itertools
import math
import time

import numpy as np

from collsched.testbed.fabric import Fabric, FabricSpec, check_available
from collsched.testbed.launch import report_progress, run_ranks, teardown_on_signals
from collsched.testbed.model import DEFAULT_PARAMS, ModelParams, cluster_spec, predict

ALGORITHMS = ("fanout", "spreadout", "fast")
WORKLOADS = ("balanced", "uniform", "zipf:0.5", "zipf:0.9", "zipf:0.99", "hot:1.2")
SIZES = (256 * 1024, 2 * 2**20, 8 * 2**20)  # bytes per rank (sent), mean over ranks
# Cases that are fitted and scored: from 2 MiB per rank; below, host time that varies from call to
# call dominates (up to 4.9x between two runs of one case, docs/testbed.md).
MIN_BYTES = 2 * 2**20

# Grids of the coordinate descent (one parameter at a time, a few passes).
GRID = {
    "goodput": [0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95],
    "alpha_scaleout_us": [100, 300, 1000, 2000, 4000, 8000],
    "alpha_scaleup_us": [50, 200, 500, 1000, 2000, 3000, 4000, 6000, 8000],
    "scaleup_bps": [25e6, 50e6, 100e6, 200e6, 400e6, 1e9],
    "barrier_steps": [True, False],
    # The incast model stays off on this fabric: hot:1.2 fanout (4 remote senders into one shaped
    # downlink, the rest of the fabric idle) runs at the NIC rate in every run (docs/testbed.md);
    # what slowed balanced fanout is the host's aggregate rate, the core link below.
    "incast": [None],
    "core_share": [None, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.89, 0.95],
}


def cases(n: int, workloads=WORKLOADS, sizes=SIZES, seed: int = 0) -> list[dict]:
    """One dict per matrix: workload, bytes per rank, the n×n matrix (lists), half ('fit' | 'held-out')."""
    from collsched.workloads import make_workload

    out = []
    for i, (w, size) in enumerate(itertools.product(workloads, sizes)):
        m = make_workload(w, n, max(1, size // n), seed).astype(np.int64)
        out.append({"workload": w, "bytes_per_rank": size, "matrix": m.tolist(), "half": "fit" if i % 2 == 0 else "held-out"})
    return out


def sweep_worker(case_list: list, cluster: str, algorithms: list, iters: int, transport: str) -> dict:
    """Rank worker: for each matrix, torch as reference, then each algorithm; median call time per rank."""
    import time as _t

    import torch
    import torch.distributed as dist

    import collsched

    rank = dist.get_rank()
    results = []
    for ci, c in enumerate(case_list):
        if rank == 0:
            report_progress(f"case {ci + 1}/{len(case_list)}: {c['workload']}, {c['bytes_per_rank'] >> 10} KiB per rank")
        m = np.asarray(c["matrix"], dtype=np.int64)
        in_s, out_s = [int(v) for v in m[rank]], [int(v) for v in m[:, rank]]
        x = torch.randint(0, 256, (sum(in_s),), dtype=torch.uint8, generator=torch.Generator().manual_seed(rank + ci))
        ref = torch.empty(sum(out_s), dtype=torch.uint8)
        out = torch.empty_like(ref)
        rec = {}
        for a in ["torch", *algorithms]:
            def call(a=a):
                if a == "torch":
                    dist.all_to_all_single(out, x, out_s, in_s)
                else:
                    collsched.all_to_all_single(out, x, out_s, in_s, algorithm=a, cluster=cluster, transport=transport)
            dist.barrier()
            call()  # warm-up: plans and checks
            if a == "torch":
                ref.copy_(out)
            same = bool(torch.equal(out, ref))
            ts = []
            for _ in range(iters):
                dist.barrier()
                t0 = _t.perf_counter()
                call()
                ts.append(_t.perf_counter() - t0)
            rec[a] = {"times": ts, "identical": same}
        results.append({"rec": rec})
    return {"cases": results}


def measure(spec: FabricSpec, case_list: list, iters: int = 3, transport: str = "auto",
            timeout_s: float = 900.0, on_progress=None) -> list[dict]:
    """Execute every case on a fresh fabric; one row per (case, method): executed seconds (median of
    rounds of the slowest rank) and whether the output equalled torch's."""
    check_available()
    cluster = cluster_spec(spec)
    with teardown_on_signals(), Fabric(spec) as fabric:
        res = run_ranks(fabric, sweep_worker, (case_list, cluster, list(ALGORITHMS), iters, transport),
                        env={"COLLSCHED_TIMEOUT_S": "120"}, timeout_s=timeout_s, on_progress=on_progress)
    rows = []
    for ci, c in enumerate(case_list):
        for a in ["torch", *ALGORITHMS]:
            per_round = np.max(np.array([r["cases"][ci]["rec"][a]["times"] for r in res]), axis=0)
            rows.append({"workload": c["workload"], "bytes_per_rank": c["bytes_per_rank"], "half": c["half"],
                         "algorithm": a, "cluster": cluster, "time_s": float(np.median(per_round)),
                         "identical": all(r["cases"][ci]["rec"][a]["identical"] for r in res), "case": ci})
    return rows


def _params_from(base: ModelParams, name: str, value) -> ModelParams:
    if name == "incast":
        return base.with_(incast_threshold=None if value is None else value[0],
                          incast_goodput=0.5 if value is None else value[1])
    if name == "scaleup_bps":
        value = int(value)
    return base.with_(**{name: value})


def _value_of(p: ModelParams, name: str):
    if name == "incast":
        return None if p.incast_threshold is None else (p.incast_threshold, p.incast_goodput)
    return getattr(p, name)


class _Predictor:
    """Simulates, under each parameter set, the plan that was executed: planned once per (case,
    algorithm) on the cluster the ranks planned for (``planned_on``), since FAST's stages depend
    on the cluster it plans for, and the run executed the plan of the parameters in use then."""

    def __init__(self, spec: FabricSpec, case_list: list, planned_on: str | None = None):
        self.spec, self.cases = spec, case_list
        self.planned_on = planned_on or cluster_spec(spec)
        self._plans: dict = {}

    def __call__(self, row: dict, params: ModelParams) -> float:
        import collsched

        key = (row["case"], row["algorithm"])
        m = np.asarray(self.cases[row["case"]]["matrix"], dtype=np.int64)
        if key not in self._plans:
            self._plans[key] = collsched.plan_all_to_all(m, self.planned_on, row["algorithm"])
        return predict(m, cluster_spec(self.spec, params), row["algorithm"], params, plan=self._plans[key])


def _with_call(rows, params, pred) -> tuple[ModelParams, float]:
    """``params`` with the per-call host cost that best fits ``rows`` (the median of executed −
    simulated, so it is solved for, not searched, and never trades off against the NIC rate),
    and the mean absolute log error under them."""
    base = [pred(r, params.with_(call_us=0.0)) for r in rows]
    call = max(0.0, float(np.median([r["time_s"] - b for r, b in zip(rows, base)])))
    loss = float(np.mean([abs(math.log(r["time_s"] / (b + call))) for r, b in zip(rows, base)]))
    return params.with_(call_us=round(call * 1e6, 0)), loss


def fit(spec: FabricSpec, case_list: list, rows: list[dict], start: ModelParams = ModelParams(),
        passes: int = 3, planned_on: str | None = None, min_bytes: int = 0) -> tuple[ModelParams, list[dict]]:
    """Fit on the rows of the 'fit' half; returns the parameters and every row with its prediction
    under them (``predicted_s``, ``error`` = predicted/executed − 1). ``planned_on``: the cluster
    spec the ranks planned for when the rows were measured (default: the fabric's current one).
    ``start``: where the coordinate descent starts (default: the clean model, not the shipped fit,
    so a refit does not depend on what was shipped before). ``min_bytes``: fit only on cases of at
    least this many bytes per rank (smaller ones are host noise on the 2-core testbed,
    docs/testbed.md); every row is still predicted."""
    pred = _Predictor(spec, case_list, planned_on)
    train = [r for r in rows if r["half"] == "fit" and r["algorithm"] != "torch" and r["bytes_per_rank"] >= min_bytes]
    if not train:
        raise ValueError(f"no fit-half rows of at least min_bytes={min_bytes} bytes per rank to fit on")
    best, best_loss = _with_call(train, start, pred)
    for _ in range(passes):
        moved = False
        for name, values in GRID.items():
            for v in values:
                p, loss = _with_call(train, _params_from(best, name, v), pred)
                if loss < best_loss - 1e-9:
                    best, best_loss, moved = p, loss, True
        if not moved:
            break
    return best, evaluate(rows, best, pred)


def evaluate(rows: list[dict], params: ModelParams, pred: "_Predictor") -> list[dict]:
    """Every row with its prediction under ``params`` (``predicted_s``; ``error`` = predicted/executed − 1)."""
    out = []
    for r in rows:
        if r["algorithm"] == "torch":
            out.append(dict(r, predicted_s=None, error=None))
            continue
        p = pred(r, params)
        out.append(dict(r, predicted_s=p, error=p / r["time_s"] - 1))
    return out


def error_table(rows: list[dict], min_bytes: int = 0) -> list[dict]:
    """Per (half, algorithm): cases, mean |error|, max |error| (error = predicted/executed − 1), over
    the cases of at least ``min_bytes`` per rank."""
    table = []
    for half in ("fit", "held-out"):
        for a in ALGORITHMS:
            errs = [abs(r["error"]) for r in rows
                    if r["half"] == half and r["algorithm"] == a and r["bytes_per_rank"] >= min_bytes]
            if errs:
                table.append({"half": half, "algorithm": a, "cases": len(errs), "mean_abs_error": float(np.mean(errs)),
                              "max_abs_error": float(np.max(errs))})
    return table


def calibrate(spec: FabricSpec, iters: int = 3, transport: str = "auto", on_progress=None,
              workloads=WORKLOADS, sizes=SIZES, min_bytes: int = MIN_BYTES) -> dict:
    """Measure, fit, and report: ``{"fabric", "transport", "params", "rows", "min_bytes", "errors",
    "errors_all", "seconds"}``; fitted and ``errors`` on the cases of at least ``min_bytes`` per rank
    (``errors_all``: every case)."""
    t0 = time.perf_counter()
    case_list = cases(spec.ranks, workloads, sizes)
    rows = measure(spec, case_list, iters, transport, on_progress=on_progress)
    params, rows = fit(spec, case_list, rows, planned_on=rows[0]["cluster"], min_bytes=min_bytes)
    return {"fabric": {"servers": spec.servers, "gpus": spec.gpus, "nic_bps": spec.nic_bps,
                       "queue_bytes": spec.queue_bytes},
            "transport": transport, "params": params.to_dict(), "rows": rows, "min_bytes": min_bytes,
            "errors": error_table(rows, min_bytes), "errors_all": error_table(rows), "seconds": time.perf_counter() - t0}
