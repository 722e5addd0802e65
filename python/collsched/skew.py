"""Skew statistics: SABRE's max-to-mean ratios (ICS'26 §4) and the Gini coefficient.

API contract: ``mtm(traffic, cluster) -> MTM(send, recv, overall)``; ``gini(traffic) -> float``.

For each rank i, s_i is the inter-node volume it sends (blocks to ranks on other
servers) and r_i the inter-node volume it receives. Send-MTM = P·max s / Σ s,
Recv-MTM = P·max r / Σ r, MTM = max(Send-MTM, Recv-MTM). With no inter-node
traffic at all a ratio is 1 (nothing is skewed). The core computes the ratios
exactly; ``overall_milli`` is the exact overall ratio in thousandths, rounded down.
"""
from __future__ import annotations

from typing import NamedTuple

from collsched import _core
from collsched.topology import as_cluster as _cluster
from collsched.matrix import as_matrix


class MTM(NamedTuple):
    send: float
    recv: float
    overall: float
    overall_milli: int = 0


def mtm(traffic, cluster) -> MTM:
    """Send-, Recv- and overall MTM of ``traffic`` (P×P bytes, row = sender) on ``cluster``
    (a :class:`collsched.Cluster` or a spec string such as ``"perlmutter:4"``)."""
    m = as_matrix(traffic)
    c = _cluster(cluster)
    send, recv, overall, milli = _core.skew_mtm(m.shape[0], m.tobytes(), c)
    return MTM(send, recv, overall, milli)


def gini(traffic) -> float:
    """Gini coefficient of all P×P pair sizes: 0 when every pair is equal, near 1 when one pair carries all."""
    m = as_matrix(traffic)
    return _core.skew_gini(m.shape[0], m.tobytes())
