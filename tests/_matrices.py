"""Small traffic matrices of named kinds for the per-rank property tests."""
from __future__ import annotations

import numpy as np

from collsched import traffic


def matrix_of_kind(p: int, kind: str, seed: int, unit: int = 1 << 14) -> np.ndarray:
    """A p × p matrix: "zipf" (0.9, mean 4·unit), "empty", "hot" (one pair of 192·unit bytes)
    or otherwise uniform (mean unit)."""
    if kind == "zipf":
        return traffic.zipf(p, 0.9, 4 * unit, seed=seed)
    if kind == "empty":
        return np.zeros((p, p), dtype=np.uint64)
    if kind == "hot":
        m = np.zeros((p, p), dtype=np.uint64)
        m[seed % p, (seed // 7) % p] = 192 * unit
        return m
    return traffic.uniform(p, unit, seed=seed)
