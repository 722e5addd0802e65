"""Turning demands into Plans (the producers' Python entry points)."""
from __future__ import annotations

from collsched import _core
from collsched.traffic import as_matrix


def _cluster(cluster) -> _core.Cluster:
    if isinstance(cluster, _core.Cluster):
        return cluster
    if isinstance(cluster, str):
        return _core.Cluster.parse(cluster)
    raise TypeError(f"cluster must be a collsched.Cluster or a spec string like 'h200:4', got {type(cluster).__name__}")


def plan_all_to_all(traffic, cluster, algorithm: str = "fanout", **options) -> _core.Plan:
    """Plan an all-to-all(v) of ``traffic`` (P×P bytes, row = sender) on ``cluster``.

    ``options`` are algorithm knobs passed as strings to the producer (for example
    ``min_stage_bytes="4MiB"`` for FAST).
    """
    m = as_matrix(traffic)
    c = _cluster(cluster)
    opts = {str(k): str(v) for k, v in options.items()}
    return _core.plan_all_to_all(m.shape[0], m.tobytes(), c, algorithm, opts)


def all_to_all_algorithms() -> list[tuple[str, str]]:
    """``[(name, description)]`` of every all-to-all algorithm."""
    return _core.all_to_all_algorithms()
