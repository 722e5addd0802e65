"""Simulator and lower bound.

API contract (other modules rely on it):
    lower_bound(traffic, cluster) -> Bound          # .seconds (float), .term (str), .terms (dict str->float)
    simulate(plan, cluster, **opts) -> SimResult    # .time_s, .algbw_gbps, .lower_bound_s, .bound_term,
                                                    # .ratio_to_bound, .steps, .scaleout_bytes,
                                                    # .transfer_start_s / .transfer_end_s (numpy, per transfer),
                                                    # .step_times (list of (start, end)), .link_utilisation (dict)

The simulator is event-driven over the plan's dependency DAG: a transfer pays
its tier's alpha once its dependencies completed, then its bytes share every
link of its route max-min fairly with the other flowing transfers (see
docs/simulator.md). It predicts; it does not execute anything.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from collsched import _core
from collsched.topology import as_cluster as _cluster
from collsched.matrix import as_matrix

DEFAULT_TOLERANCE = 1e-3
MODELS = ("hardware", "fluid")  # simulate(model=...): the first is the default


@dataclass(frozen=True)
class Bound:
    """Lower bound on all-to-all(v) completion time, valid for any plan on the cluster model."""

    seconds: float
    term: str
    terms: dict[str, float] = field(default_factory=dict, repr=False)  # every term; P-sized, so not in repr


@dataclass(frozen=True)
class SimResult:
    """What one simulation measured. Times in seconds, bandwidths in bytes/s unless named ``_gbps`` (GB/s, 1e9)."""

    time_s: float
    transfers: int
    bytes_moved: int
    bytes_per_rank: float
    algbw: float
    busbw: float
    lower_bound: Bound | None
    ratio_to_bound: float | None
    transfer_start_s: np.ndarray = field(repr=False)
    transfer_end_s: np.ndarray = field(repr=False)
    step_times: list[tuple[float, float]] = field(repr=False)
    step_transfers: list[int] = field(repr=False)
    link_utilisation: dict[str, dict] = field(repr=False)
    scaleout_bytes: int
    windows: int
    recomputations: int

    @property
    def algbw_gbps(self) -> float:
        return self.algbw / 1e9

    @property
    def busbw_gbps(self) -> float:
        return self.busbw / 1e9

    @property
    def lower_bound_s(self) -> float | None:
        return None if self.lower_bound is None else self.lower_bound.seconds

    @property
    def bound_term(self) -> str | None:
        return None if self.lower_bound is None else self.lower_bound.term

    @property
    def steps(self) -> int:
        return len(self.step_times)


def _bound(d: dict) -> Bound:
    return Bound(seconds=float(d["seconds"]), term=str(d["term"]), terms=dict(d["terms"]))


def lower_bound(traffic, cluster) -> Bound:
    """Lower bound on the completion time of an all-to-all(v) of ``traffic`` on ``cluster``.

    The maximum of per-server NIC, per-GPU scale-up, per-server byte-hop and per-GPU
    port terms (FAST's Theorem 1 generalised), each plus its tier's alpha.
    """
    m = as_matrix(traffic)
    return _bound(_core.lower_bound(m.shape[0], m.tobytes(), _cluster(cluster)))


def simulate(plan, cluster, *, barrier_steps: bool = False, tolerance: float = DEFAULT_TOLERANCE,
             incast_threshold: int | None = None, incast_goodput: float = 0.5,
             warm_connections: bool = False, core_bw: float | None = None,
             model: str = "hardware") -> SimResult:
    """Simulate ``plan`` on ``cluster`` (a Cluster or a spec string like ``"h200:4"``).

    ``model``: ``"hardware"`` (default) adds the cluster's hardware terms to the fluid model:
    the fraction of each tier's peak the backend reaches, the pipeline chunk's fill, the
    per-stage and per-peer start-up costs and incast (a preset's fitted constants, or the
    ``eff_*``, ``chunk_*``, ``step_cost``, ``peer_cost``, ``incast_*`` spec keys; all neutral
    on a ``custom:`` cluster, where it equals the fluid model). ``"fluid"``: the ideal model,
    links at their peaks (the papers' comparisons; the lower bound is always the fluid one).
    See docs/simulator.md.

    ``barrier_steps``: also hold every step until all earlier steps completed (the
    runtime's synchronous executor). ``tolerance``: event coalescing window (relative;
    0 = exact; events are only ever delayed). ``incast_threshold``: enable the incast
    model: a NIC downlink with more concurrent flows delivers ``incast_goodput`` of its bandwidth.
    ``warm_connections``: a transfer that depends on an earlier transfer between the same
    two ranks (the previous piece of its stream) pays its alpha overlapped with that
    piece, as on a running NCCL connection (the closer model for MSCCL XML imports,
    ``export.msccl.from_xml``; see docs/simulator.md). Off by default.
    ``core_bw``: bytes/s of one shared core link that every scale-out transfer crosses
    besides its NICs (an oversubscribed core, or the namespace testbed host's aggregate
    rate for shaped traffic, docs/testbed.md). None (default): no such link.
    """
    if not isinstance(plan, _core.Plan):
        raise TypeError(f"plan must be a collsched.Plan, got {type(plan).__name__}")
    if model not in MODELS:
        raise ValueError(f"model must be one of {', '.join(MODELS)}, got {model!r}")
    if core_bw is not None and not (isinstance(core_bw, (int, float)) and not isinstance(core_bw, bool)
                                    and math.isfinite(core_bw) and core_bw > 0):
        raise ValueError(f"core_bw must be a positive number of bytes/s, got {core_bw!r}")
    if incast_threshold is not None and (isinstance(incast_threshold, bool) or int(incast_threshold) < 0):
        raise ValueError(f"incast_threshold must be a non-negative integer, got {incast_threshold!r}")
    d = _core.simulate(plan, _cluster(cluster), bool(barrier_steps), float(tolerance),
                       None if incast_threshold is None else int(incast_threshold), float(incast_goodput),
                       bool(warm_connections), core_bw=None if core_bw is None else float(core_bw),
                       model=model)
    lb = d["lower_bound"]
    return SimResult(
        time_s=d["time_s"],
        transfers=d["transfers"],
        bytes_moved=d["bytes_moved"],
        bytes_per_rank=d["bytes_per_rank"],
        algbw=d["algbw"],
        busbw=d["busbw"],
        lower_bound=None if lb is None else _bound(lb),
        ratio_to_bound=d["ratio_to_bound"],
        transfer_start_s=np.frombuffer(d["transfer_start"], dtype="<f8").copy(),
        transfer_end_s=np.frombuffer(d["transfer_end"], dtype="<f8").copy(),
        step_times=[(s, e) for s, e, _ in d["steps"]],
        step_transfers=[n for _, _, n in d["steps"]],
        link_utilisation=d["link_utilisation"],
        scaleout_bytes=d["scaleout_bytes"],
        windows=d["windows"],
        recomputations=d["recomputations"],
    )
