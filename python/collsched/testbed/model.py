"""The Cluster a fabric's ranks really run on, and the simulator's prediction for it.

The testbed's knobs fix the topology and the NIC rate; what they cannot fix (kernel,
TCP, Gloo and Python cost per message, the unshaped scale-up path's speed, TCP goodput
per shaped byte) lives in ``ModelParams``, fitted by ``collsched testbed fit``
(docs/testbed.md summarises the fit and its held-out error; docs/results/2026-11-26-testbed.md has the runs).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import numpy as np

from collsched.testbed.fabric import FabricSpec


@dataclass(frozen=True)
class ModelParams:
    """What the simulator needs beyond the knobs.

    Args:
        goodput: TCP payload bytes per shaped wire byte on the emulated NIC.
        alpha_scaleout_us / alpha_scaleup_us / alpha_local_us: per-transfer start-up cost (µs).
        scaleup_bps: bytes/s per direction of an unshaped scale-up veth (ignored when shaped).
        copy_bps: local copy bandwidth (bytes/s).
        barrier_steps: simulate the executor's step barrier (True while the runtime runs steps in lock-step).
        incast_threshold / incast_goodput: the simulator's incast model (None = off).
        call_us: fixed host cost of one ``all_to_all_single`` call outside data movement (the
            descriptor all_gather and plan-cache lookup: a round of tiny messages through the
            fabric), added to the simulated time.
        core_share: the aggregate rate of shaped (scale-out) traffic the host pushes through its
            TCP stacks, shapers and bridge at once, as a share of the fabric's summed NIC goodput
            (every NIC × ``nic_bw``): the simulator's shared core link (``core_bw``), crossed by
            every scale-out transfer. The 2-core host cannot drive all 8 emulated NICs at their
            rate together (docs/testbed.md). A share, not bytes/s, so that other fabric shapes
            are not throttled to the 2×4 fit's absolute rate; calibrated at 2×4, 200 Mbit/s only
            (the CPU-bound sweep shows the share falling from 400 Mbit/s per NIC). None = unlimited.
    """

    goodput: float = 0.95
    alpha_scaleout_us: float = 2000.0
    alpha_scaleup_us: float = 1000.0
    alpha_local_us: float = 50.0
    scaleup_bps: int = 1_000_000_000
    copy_bps: int = 2_000_000_000
    barrier_steps: bool = True
    incast_threshold: int | None = None
    incast_goodput: float = 0.5
    call_us: float = 0.0
    core_share: float | None = None

    def with_(self, **kw) -> "ModelParams":
        return replace(self, **kw)

    def to_dict(self) -> dict:
        return asdict(self)


# Fitted by benchmarks/testbed_calibration.py on 2×4 at 200 Mbit/s, full-duplex dependency-driven
# p2p transport, on the fit half of a quiet run (load average 2.8) at ≥ 2 MiB per rank
# (docs/results/2026-11-26-testbed.md has the error tables and the runs it was checked on).
DEFAULT_PARAMS = ModelParams(goodput=0.9, alpha_scaleout_us=100.0, alpha_scaleup_us=4000.0, alpha_local_us=50.0,
                             scaleup_bps=400_000_000, barrier_steps=False, incast_threshold=None,
                             call_us=4703.0, core_share=0.89)


def cluster_spec(spec: FabricSpec, params: ModelParams = DEFAULT_PARAMS) -> str:
    """The ``custom:`` Cluster spec of the fabric: S servers × G GPUs, one NIC per GPU at the
    shaped rate × goodput, the scale-up rate (shaped, or the measured unshaped veth rate), and
    the measured per-transfer costs."""
    nic = int(spec.nic_bps * params.goodput)
    up = int(spec.scaleup_bps * params.goodput) if spec.scaleup_bps is not None else int(params.scaleup_bps)
    return (f"custom:{spec.servers},gpus={spec.gpus},nics={spec.nics_per_server},fabric=switch,nic={nic}B/s,scaleup={up}B/s,"
            f"alpha_scaleout={params.alpha_scaleout_us:g}us,alpha_scaleup={params.alpha_scaleup_us:g}us,"
            f"alpha_local={params.alpha_local_us:g}us,copy={int(params.copy_bps)}B/s")


def predict(matrix: np.ndarray, cluster, algorithm: str, params: ModelParams = DEFAULT_PARAMS,
            plan=None) -> float:
    """Simulated seconds of ``algorithm``'s plan for ``matrix`` (P×P bytes) on ``cluster``."""
    import collsched

    if plan is None:
        plan = collsched.plan_all_to_all(matrix, cluster, algorithm)
    core = None
    if params.core_share is not None:
        c = cluster if isinstance(cluster, collsched.Cluster) else collsched.Cluster.parse(cluster)
        core = params.core_share * c.nic_bw * c.servers * c.nics_per_server
    r = collsched.simulate(plan, cluster, barrier_steps=params.barrier_steps,
                           incast_threshold=params.incast_threshold, incast_goodput=params.incast_goodput,
                           core_bw=core)
    return float(r.time_s) + params.call_us * 1e-6
