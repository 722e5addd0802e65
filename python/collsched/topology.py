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


def with_overrides(spec: str, overrides: str) -> str:
    """``spec`` with the ``key=value`` items of ``overrides`` (comma-separated, a leading comma
    allowed) in place of its own items of the same keys, appended otherwise: a spec names each
    key at most once (a repeated key is refused as a likely typo), so code that layers a user's
    overrides on a stored or generated spec replaces keys rather than repeating them.

    Args:
        spec: a cluster spec, ``"NAME:SERVERS[,key=value...]"``.
        overrides: ``"key=value,..."`` (may be empty).

    Returns:
        str: the combined spec.
    """
    head, *items = [p.strip() for p in spec.split(",")]
    extra = [p.strip() for p in overrides.split(",") if p.strip()]
    keys = {p.split("=", 1)[0].strip() for p in extra}
    kept = [p for p in items if p and p.split("=", 1)[0].strip() not in keys]
    return ",".join([head, *kept, *extra])

