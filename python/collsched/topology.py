"""A :class:`collsched.Cluster` from what users pass: a Cluster or a spec string.

A module of its own (the core only) so that ``planning``, ``skew``, ``sim`` and ``fast``
share it without importing one another.
"""
from __future__ import annotations

from collsched import _core


def as_cluster(cluster) -> _core.Cluster:
    """A Cluster from a Cluster or a spec string (``"h200:4,nic=200Gbps"``).

    Args:
        cluster: a :class:`collsched.Cluster` or a spec string such as ``"h200:4"``.

    Returns:
        Cluster: ``cluster`` itself, or the parsed spec.

    Raises:
        TypeError: ``cluster`` is neither.
        ValueError: a bad spec string (the message names the field).
    """
    if isinstance(cluster, _core.Cluster):
        return cluster
    if isinstance(cluster, str):
        return _core.Cluster.parse(cluster)
    raise TypeError(f"cluster must be a collsched.Cluster or a spec string like 'h200:4', got {type(cluster).__name__}")
