"""``collsched.choose``: which algorithm to run for a traffic matrix, decided in closed form.

Every candidate — each all-to-all algorithm and ``native`` (torch's own
``all_to_all_single``: no plan, one call) — gets a predicted time: its transfer time from
the matrix's per-link loads plus its host overhead on the backend (per call, step, message
and staged byte, and its planning), with the constants of ``collsched.calibration.load()``.
The smallest wins; nothing is planned. The Rust core does the arithmetic.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from collsched import _core
from collsched.calibration import load
from collsched.planning import as_cluster

BACKENDS = ("gloo", "nccl")


@dataclass(slots=True)
class Choice:
    """What ``choose`` decided.

    Attributes:
        algorithm: the winner (``"native"`` = torch's own ``all_to_all_single``).
        predicted_s: its predicted time in seconds (transfer + overheads).
        backend: the backend the overheads are for.
        candidates: name → predicted seconds (transfer + overheads), every candidate considered.
        transfer_s: name → predicted transfer time alone.
        overhead_s: name → predicted host overhead alone.
    """

    algorithm: str
    predicted_s: float
    backend: str
    candidates: dict[str, float] = field(default_factory=dict)
    transfer_s: dict[str, float] = field(default_factory=dict)
    overhead_s: dict[str, float] = field(default_factory=dict)


def _matrix(traffic) -> np.ndarray:
    """``traffic`` as the C-contiguous uint64 matrix the core reads in place (no copy when it
    already is one)."""
    m = traffic if isinstance(traffic, np.ndarray) else np.asarray(traffic)
    if m.ndim != 2 or m.shape[0] != m.shape[1]:
        raise ValueError(f"traffic must be a square P×P matrix of bytes, got shape {m.shape}")
    if m.dtype != np.uint64:
        if m.dtype.kind not in "iu" or (m.size and m.min() < 0):
            raise ValueError(f"traffic must hold non-negative integer byte counts, got dtype {m.dtype}")
        m = m.astype(np.uint64)
    return np.ascontiguousarray(m)


def _choice(backend: str, algorithm: str, predicted: float, cands) -> Choice:
    """A ``Choice`` from the core's ``(algorithm, predicted_s, [(name, total, transfer, overhead)])``."""
    name, total, transfer, overhead = zip(*cands)
    return Choice(algorithm, predicted, backend, dict(zip(name, total)), dict(zip(name, transfer)),
                  dict(zip(name, overhead)))


def candidate_list(candidates) -> str | None:
    """``candidates`` (a name, a list of names, or a comma-separated string) as the core takes it."""
    if candidates is None:
        return None
    if isinstance(candidates, str):
        candidates = [candidates]
    return ",".join(str(c) for c in candidates)


def choose(traffic, cluster, backend: str = "nccl", *, candidates=None, calibration=None) -> Choice:
    """Pick the algorithm with the smallest predicted time for ``traffic`` on ``cluster``.

    Args:
        traffic (np.ndarray): P×P bytes, row = sender, non-negative integers (uint64 is
            used as is; other integer dtypes are converted).
        cluster (Cluster | str): the cluster, or its spec (``"h200:8"``).
        backend (str): ``"gloo"`` or ``"nccl"`` (or any backend of the calibration).
        candidates (list[str] | None): a subset of ``collsched._core.auto_candidates()``;
            default all, ``native`` included. Ties go to the earlier one in that order.
        calibration (collsched._core.Calibration | None): constants; default
            ``collsched.calibration.load()`` (the user's ``collsched calibrate`` result, else
            the built-in defaults).

    Returns:
        Choice: the winner, its prediction and every candidate's.

    Raises:
        ValueError: unknown backend (the message names it and the known ones), unknown
            candidate, a matrix that is not P×P for the cluster's P GPUs, negative or
            non-integer entries, sums past 2^64, or a bad calibration file.

    A C-contiguous uint64 matrix is read in place (no copy).
    """
    if not isinstance(backend, str):
        raise ValueError(f"backend must be a string such as 'gloo' or 'nccl', got {backend!r}")
    m = _matrix(traffic)
    cal = calibration if calibration is not None else load()
    algorithm, predicted, cands = _core.choose(m, as_cluster(cluster), backend, cal, candidate_list(candidates))
    return _choice(backend, algorithm, predicted, cands)
