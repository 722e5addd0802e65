"""Traffic matrices: P×P numpy uint64 bytes, row = sender, column = receiver.

Generators are seeded and reproducible (they run in the Rust core, so the CLI,
the runtime and the tests see the same matrices).
"""
from __future__ import annotations

import numpy as np

from collsched import _core


def as_matrix(traffic) -> np.ndarray:
    """Validate and convert to a C-contiguous little-endian uint64 P×P array.

    Raises ValueError naming the problem: non-square, empty, negative, non-integer,
    NaN/inf entries, or sums that overflow u64.
    """
    a = np.asarray(traffic)
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"traffic matrix must be square P×P, got shape {a.shape}")
    if a.shape[0] == 0:
        raise ValueError("traffic matrix must have at least one rank")
    if a.dtype == np.bool_ or a.dtype.kind not in "iuf":
        raise ValueError(f"traffic matrix must hold integer byte counts, got dtype {a.dtype}")
    if a.dtype.kind == "f":
        if not np.all(np.isfinite(a)):
            raise ValueError("traffic matrix has NaN or infinite entries")
        if np.any(a != np.floor(a)):
            raise ValueError("traffic matrix has non-integer entries (byte counts must be whole)")
        if np.any(a >= 2.0**64):
            raise ValueError("traffic matrix has entries of 2^64 bytes or more")
    if a.dtype.kind in "if" and np.any(a < 0):
        i, j = np.argwhere(a < 0)[0]
        raise ValueError(f"traffic matrix has a negative entry at [{i}, {j}]")
    m = np.ascontiguousarray(a.astype("<u8"))
    _core.traffic_hash(m.shape[0], m.tobytes())  # checks that sums fit u64
    return m


def _wrap(n: int, raw: bytes) -> np.ndarray:
    return np.frombuffer(raw, dtype="<u8").reshape(n, n).copy()


def balanced(n: int, bytes_per_pair: int) -> np.ndarray:
    """Every pair (including self) exchanges ``bytes_per_pair``."""
    return _wrap(n, _core.gen_balanced(n, int(bytes_per_pair)))


def uniform(n: int, mean: int, seed: int = 0) -> np.ndarray:
    """FAST/FLASH "random": i.i.d. uniform pair sizes scaled to ``mean`` bytes."""
    return _wrap(n, _core.gen_uniform(n, int(mean), int(seed)))


def zipf(n: int, s: float, mean: int, seed: int = 0) -> np.ndarray:
    """FAST/FLASH "skewed": i.i.d. Zipf(s) pair sizes over [1, 1000], scaled to ``mean`` bytes."""
    return _wrap(n, _core.gen_zipf(n, float(s), int(mean), int(seed)))


def hot_experts(n: int, skew: float = 1.0, tokens_per_rank: int = 4096, top_k: int = 2, experts: int = 0,
                hidden: int = 4096, dtype_bytes: int = 2, seed: int = 0) -> np.ndarray:
    """MoE dispatch: tokens × top-k with Zipf(skew) expert popularity; experts in contiguous blocks per GPU
    (``experts=0`` means 8 per GPU); each routed token carries ``hidden × dtype_bytes`` bytes."""
    return _wrap(n, _core.gen_hot_experts(n, int(tokens_per_rank), int(top_k), int(experts), float(skew),
                                          int(hidden), int(dtype_bytes), int(seed)))


def matrix_hash(traffic) -> str:
    """Content hash of a matrix as 16 hex digits (equal matrices, equal hashes, on any machine)."""
    m = as_matrix(traffic)
    return f"{_core.traffic_hash(m.shape[0], m.tobytes()):016x}"
