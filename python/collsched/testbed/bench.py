"""`collsched bench --testbed SxG,nic=RATE[,nics=N][,queue=SIZE][,scaleup=RATE][,rto_min=MS]`: the nccl-tests table, on the fabric."""
from __future__ import annotations

import re
from dataclasses import asdict, replace

from collsched.testbed.fabric import Fabric, FabricSpec, TestbedError, check_available
from collsched.testbed.launch import run_ranks, teardown_on_signals
from collsched.testbed.model import cluster_spec

_SHAPE = re.compile(r"^\s*(\d+)\s*[x×]\s*(\d+)\s*$")


def parse_testbed(text: str) -> FabricSpec:
    """``"2x4,nic=200Mbps,queue=256KiB,scaleup=unshaped"`` → FabricSpec (nic is required)."""
    head, *rest = [p.strip() for p in text.split(",")]
    m = _SHAPE.match(head)
    if not m:
        raise TestbedError(f"--testbed {text!r}: expected SERVERSxGPUS,nic=RATE[,queue=SIZE][,scaleup=RATE], e.g. "
                           "2x4,nic=200Mbps")
    knobs = {}
    for kv in rest:
        k, _, v = kv.partition("=")
        if k not in ("nic", "nics", "queue", "scaleup", "rto_min") or not v:
            raise TestbedError(f"--testbed {text!r}: unknown or empty key {k!r} (known: nic, nics, queue, scaleup, "
                               "rto_min)")
        if k == "nics":
            if not v.isdigit():
                raise TestbedError(f"--testbed {text!r}: nics must be a positive integer, got {v!r}")
            knobs[k] = int(v)
            continue
        knobs[k] = v
    if "nic" not in knobs:
        raise TestbedError(f"--testbed {text!r}: nic=RATE is required, e.g. 2x4,nic=200Mbps")
    return FabricSpec.from_knobs(int(m.group(1)), int(m.group(2)), **knobs)


def run_bench_on_testbed(cfg, testbed: str, timeout_s: float = 600.0) -> dict:
    """Run ``collsched.cli.bench.bench_worker`` on every rank of a fresh fabric (torn down after).

    Args:
        cfg: a ``collsched.cli.bench.BenchConfig``; its cluster defaults to the fabric's derived spec.
        testbed: the fabric, see ``parse_testbed``.

    Returns:
        rank 0's result (the rows bench prints).

    Raises:
        TestbedError: bad spec, not root, no namespaces, or a rank failed.
    """
    from collsched.cli.bench import bench_worker

    spec = parse_testbed(testbed)
    if not cfg.cluster:
        cfg = replace(cfg, cluster=cluster_spec(spec))
    check_available()
    with teardown_on_signals(), Fabric(spec) as fabric:
        return run_ranks(fabric, bench_worker, (asdict(cfg),), timeout_s=timeout_s)[0]
