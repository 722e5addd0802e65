"""A :class:`collsched.Cluster` from what users pass: a Cluster or a spec string.

A module of its own (the core only) so that ``planning``, ``skew``, ``sim`` and ``fast``
share it without importing one another.
"""
from __future__ import annotations

from collsched import _core


def as_cluster(cluster) -> _core.Cluster:
    """A Cluster from a Cluster or a spec string (``"h200:4,nic=200Gbps"``).

    ``calibrated[:SERVERS][,key=value...]`` is the cluster ``collsched calibrate --network``
    measured and stored (``collsched.network``).

    Args:
        cluster: a :class:`collsched.Cluster` or a spec string such as ``"h200:4"``.

    Returns:
        Cluster: ``cluster`` itself, or the parsed spec.

    Raises:
        TypeError: ``cluster`` is neither.
        ValueError: a bad spec string (the message names the field), or ``calibrated`` with no
            calibration stored.
    """
    if isinstance(cluster, _core.Cluster):
        return cluster
    if isinstance(cluster, str):
        from collsched.network import resolve

        return _core.Cluster.parse(resolve(cluster))
    raise TypeError(f"cluster must be a collsched.Cluster or a spec string like 'h200:4', got {type(cluster).__name__}")
