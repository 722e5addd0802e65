"""Validation of traffic matrices: any P×P array of byte counts to the core's wire form
(C-contiguous little-endian uint64, row = sender, column = receiver).

A module of its own (numpy and the core only) so that ``traffic``, ``planning``, ``skew``
and ``sim`` all import it without importing one another.
"""
from __future__ import annotations

import numpy as np

from collsched import _core


def as_matrix(traffic) -> np.ndarray:
    """Validate and convert to a C-contiguous little-endian uint64 P×P array.

    Raises ValueError naming the problem: non-square, empty, negative, non-integer,
    NaN/inf entries, or sums that overflow u64.
    """
    m = wire_matrix(traffic)
    _core.traffic_hash(m.shape[0], m.tobytes())  # checks that sums fit u64
    return m


_U8LE = np.dtype("<u8")


def wire_matrix(traffic) -> np.ndarray:
    """:func:`as_matrix` without the u64 overflow check of row/column sums, for callers
    that hand the matrix to the core, whose ``Traffic::new`` checks them with the same errors."""
    if isinstance(traffic, np.ndarray) and traffic.dtype == _U8LE and traffic.ndim == 2 \
            and traffic.flags.c_contiguous and traffic.shape[0] == traffic.shape[1] and traffic.shape[0] > 0:
        return traffic  # already in the wire form: unsigned, so no float/negative checks apply
    try:
        a = np.asarray(traffic)
    except (ValueError, TypeError) as e:
        raise ValueError(f"traffic matrix is not a rectangular array of numbers ({e})") from None
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"traffic matrix must be square P×P, got shape {a.shape}")
    if a.shape[0] == 0:
        raise ValueError("traffic matrix must have at least one rank")
    if a.dtype == np.bool_ or a.dtype.kind not in "iuf":
        if a.dtype.kind == "O":
            raise ValueError("traffic matrix has dtype object (Python objects or integers past 2^64); "
                             "pass integer byte counts as a numeric array")
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
    return np.ascontiguousarray(a.astype("<u8", copy=False))
