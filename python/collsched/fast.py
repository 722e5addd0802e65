"""FAST (NSDI'26) extras: the worst-case bound and the server-level stage decomposition.

Plan with ``collsched.plan_all_to_all(traffic, cluster, "fast", min_stage_bytes=..., order=...)``;
the plan's ``meta`` carries ``stages`` (Birkhoff stages, decimal string) and
``predicted_time_ns`` (integer closed form). See docs/fast.md.
"""
from __future__ import annotations

import numpy as np

from collsched import _core
from collsched.topology import as_cluster as _cluster


def worst_case_ratio(cluster) -> float:
    """FAST's guaranteed completion-time ratio to the optimum on ``cluster``.

    Appendix A's Theorem 3, generalised to this planner's stage order and to the
    cluster's fabric (bandwidth terms only; per-transfer latencies excluded). It assumes,
    as the paper does, that each server's intra-server bytes are at most the average of
    its inter-server rows.
    """
    return _core.fast_worst_case_ratio(_cluster(cluster))


def theorem3_ratio(cluster) -> float:
    """The paper's Theorem 3 ratio ``1 + (B2/B1)(m + m/n)`` (ascending stages, B1 > (m-1)·B2)."""
    return _core.fast_theorem3_ratio(_cluster(cluster))


def server_stages(server_matrix, min_stage_bytes: int = 0, exact: bool = False):
    """Decompose an N×N server matrix (zero diagonal) into one-to-one stages, in plan order.

    Returns ``[(perm, real_bytes, exact)]``: in each stage server ``s`` sends
    ``real_bytes[s]`` bytes to ``perm[s]`` (``perm[s] == s`` or 0 bytes means idle).
    """
    m = np.asarray(server_matrix)
    if m.ndim != 2 or m.shape[0] != m.shape[1] or m.shape[0] == 0:
        raise ValueError(f"server matrix must be square N×N, got shape {m.shape}")
    if m.dtype.kind not in "iu" or np.any(m < 0):
        raise ValueError("server matrix must hold non-negative integer byte counts")
    m = np.ascontiguousarray(m.astype("<u8"))
    return _core.fast_server_stages(m.shape[0], m.tobytes(), int(min_stage_bytes), bool(exact))


__all__ = ["worst_case_ratio", "theorem3_ratio", "server_stages"]
