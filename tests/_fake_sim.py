"""A stand-in for ``collsched.sim`` (same contract) used only until the real simulator lands.

Transfers of step s start when step s-1 ends and take alpha + bytes / tier bandwidth;
enough to exercise the CLI and the drawings, not a model of anything.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Bound:
    seconds: float
    term: str
    terms: dict


@dataclass
class SimResult:
    time_s: float
    algbw_gbps: float
    lower_bound_s: float
    bound_term: str
    ratio_to_bound: float
    steps: int
    scaleout_bytes: int
    transfer_start_s: np.ndarray
    transfer_end_s: np.ndarray
    step_times: list
    link_utilisation: dict = field(default_factory=dict)


def lower_bound(traffic, cluster) -> Bound:
    from collsched.traffic import as_matrix

    m = as_matrix(traffic).astype(float)
    t = float(max(m.sum(axis=1).max(), m.sum(axis=0).max())) / cluster.nic_bw
    return Bound(max(t, 1e-9), "nic", {"nic": t})


def simulate(plan, cluster, *, barrier_steps=False) -> SimResult:
    raw = plan._raw_arrays()
    t = np.frombuffer(raw["transfers"], dtype="<u4").reshape(-1, 9)
    s = np.frombuffer(raw["segments"], dtype="<u8").reshape(-1, 5)
    seg_len = np.concatenate([[0], np.cumsum(s[:, 4].astype(float))])
    nbytes = seg_len[t[:, 6]] - seg_len[t[:, 5]]
    bw = np.array([cluster.to_dict()["local_copy_bw"], cluster.gpu_scaleup_bw, cluster.nic_bw], dtype=float)
    dur = 5e-6 + nbytes / bw[t[:, 3]]
    steps = int(t[:, 4].max()) + 1 if len(t) else 0
    start, end, step_times, clock = np.zeros(len(t)), np.zeros(len(t)), [], 0.0
    for k in range(steps):
        sel = t[:, 4] == k
        start[sel] = clock
        end[sel] = clock + dur[sel]
        finish = float(end[sel].max()) if sel.any() else clock
        step_times.append((clock, finish))
        clock = finish
    total = float(sum(plan.input_sizes))
    lb = total / plan.num_ranks / cluster.nic_bw
    util = {f"nic_up[{i}]": 0.5 + 0.01 * i for i in range(4)}
    util.update({f"scaleup[{i}]": 0.2 for i in range(4)})
    return SimResult(clock, total / plan.num_ranks / max(clock, 1e-12) / 1e9, lb, "nic", clock / max(lb, 1e-12), steps,
                     int(nbytes[t[:, 3] == 2].sum()), start, end, step_times, util)
