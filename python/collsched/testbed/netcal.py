"""`collsched testbed calibrate`: run the network calibration on a fabric whose truth is known.

The fabric's knobs are the truth (servers, GPUs per server, the shaped NIC and scale-up
rates); ``collsched.comm.netprobe`` measures the ranks as it would a real cluster (it is not
told the shape), ``collsched.netshape.fit`` turns that into constants, and the two are put
side by side. The NIC rate compared is the line rate (the shaped rate htb enforces, Ethernet
frames counted): the measured payload rate over TCP's wire efficiency at the fabric's MTU;
the payload rate (what the cluster spec's ``nic`` gets) is reported beside it. This kernel has
no netem, so no latency is set and the truth has none (the measured latency is reported).
"""
from __future__ import annotations

import os
import time

from collsched.testbed.fabric import FabricSpec, TestbedError

# The bound for a whole calibration on the testbed, fabric included.
DEFAULT_MAX_TIME_S = 110.0


def truth_of(spec: FabricSpec) -> dict:
    """What the fabric was built with (``scaleup_bps`` None: unshaped; ``latency_s`` None: not set)."""
    return {"servers": spec.servers, "gpus_per_server": spec.gpus, "nics_per_server": spec.nics_per_server,
            "nic_bps": spec.nic_bps, "scaleup_bps": spec.scaleup_bps, "latency_s": None}


def _rank_message(err) -> str:
    """The first rank's own error without the ``rank r raised Type:`` prefix, when it raised one of
    the probe's bad-input errors (every rank raises the same); else the whole summary."""
    for _, text in getattr(err, "failures", []):
        for kind in ("ShapeError", "MeasurementTimeout", "ValueError"):
            marker = f" raised {kind}: "
            if marker in text:
                return text.split(marker, 1)[1]
    return str(err)


def calibrate_network(spec: FabricSpec, max_time_s: float = DEFAULT_MAX_TIME_S, on_progress=None,
                      settings: dict | None = None) -> dict:
    """Build ``spec``'s fabric, measure its network from the ranks, fit, tear down (always).

    Args:
        spec: the fabric (the truth).
        max_time_s: the measurement's deadline (the ranks stop together past it).
        settings: other ``collsched.comm.netprobe`` settings (tests shorten the run).

    Returns:
        ``{"truth", "measured": {"nic_bps", "nic_goodput_bps", "scaleup_bps", "scaleup_goodput_bps",
        "latency_s", "servers", "gpus_per_server", "incast", "fraction_of_peak", "separated_by"},
        "spec" (the calibrated cluster), "document" (what ``calibrate --network`` stores),
        "seconds" (fabric to teardown), "load" (1-minute load average before and after)}``.

    Raises:
        TestbedError: no testbed here, or the measurement failed (the probe's message: a
            mismatched shape, or past ``max_time_s``).
    """
    from collsched.comm.netprobe import check_settings, probe_rank
    from collsched.network import document
    from collsched.testbed.launch import RankError, run_on_new_fabric

    try:
        cfg = check_settings(dict(settings or {}, max_time_s=float(max_time_s)))
    except ValueError as e:
        raise TestbedError(str(e)) from None
    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    try:
        res = run_on_new_fabric(spec, probe_rank, (cfg,), timeout_s=max_time_s + 30.0, on_progress=on_progress)
    except RankError as e:
        raise TestbedError(_rank_message(e)) from None
    seconds = time.perf_counter() - t0
    raw = res[0]
    doc = document(raw, {"nic": spec.nic_bps, "scaleup": spec.scaleup_bps},
                           f"the testbed ({spec.servers}×{spec.gpus}, NIC {spec.nic_bps * 8 / 1e6:g} Mbit/s)")
    m = doc["measured"]
    keys = ("servers", "gpus_per_server", "nics_per_server", "egress_ratio", "nic_bps", "nic_goodput_bps", "scaleup_bps", "scaleup_goodput_bps",
            "latency_s", "latency_median_s", "incast", "fraction_of_peak", "separated_by", "wire_efficiency")
    return {"truth": truth_of(spec), "measured": {k: m[k] for k in keys}, "spec": doc["spec"], "document": doc,
            "seconds": seconds, "load": [load_before, os.getloadavg()[0]]}
