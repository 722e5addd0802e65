"""Named workloads for the command line: ``--workload SPEC --mean SIZE``.

A spec is one of ``balanced``, ``uniform``, ``zipf:<s>``, ``hot:<s>`` or a path to a
``.npy``/``.csv`` matrix. Generated matrices have mean pair size ≈ ``mean_bytes``
and are reproducible from the seed (the generators run in the Rust core).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from collsched import traffic

FILE_SUFFIXES = traffic.FILE_SUFFIXES
ACCEPTED = ("balanced", "uniform", "zipf:<s>", "hot:<s>") + tuple(f"<path>{s}" for s in FILE_SUFFIXES)
HELP = "balanced | uniform | zipf:<s> | hot:<s> | " + "/".join(f"file{s}" for s in FILE_SUFFIXES)

# MoE shape behind `hot:<s>`: top-2 routing of 4096-wide bf16 tokens, 8 experts per GPU.
HOT_TOP_K = 2
HOT_HIDDEN = 4096
HOT_DTYPE_BYTES = 2
# Routing is sampled token by token; beyond this many tokens per rank (or 2^24 draws in all) the
# token width grows instead, so generation stays fast on big clusters (the popularity shape is the same).
HOT_MAX_TOKENS = 16384
HOT_MAX_DRAWS = 1 << 24


def _exponent(spec: str, text: str) -> float:
    try:
        s = float(text)
    except ValueError:
        raise ValueError(f"workload {spec!r}: exponent {text!r} is not a number (accepted: {', '.join(ACCEPTED)})") from None
    if not math.isfinite(s) or s < 0:
        raise ValueError(f"workload {spec!r}: exponent must be a finite non-negative number, got {text!r} "
                         f"(accepted: {', '.join(ACCEPTED)})")
    return s


def hot_shape(n: int, mean_bytes: int) -> tuple[int, int]:
    """(tokens_per_rank, hidden) so that the mean pair size ≈ ``mean_bytes``.

    Each rank sends tokens·top_k·hidden·dtype bytes over n receivers, so the mean pair is
    tokens·top_k·hidden·dtype / n: tokens = mean·n / (top_k·hidden·dtype), at least 1.
    """
    hidden = HOT_HIDDEN
    tokens = max(1, round(mean_bytes * n / (HOT_TOP_K * hidden * HOT_DTYPE_BYTES)))
    cap = max(1, min(HOT_MAX_TOKENS, HOT_MAX_DRAWS // (n * HOT_TOP_K)))
    if tokens > cap:
        tokens = cap
        hidden = max(1, round(mean_bytes * n / (HOT_TOP_K * tokens * HOT_DTYPE_BYTES)))
    return tokens, hidden


def make_workload(spec: str, n: int, mean_bytes: int, seed: int = 0, *, max_memory: str | int | None = None) -> np.ndarray:
    """An n×n uint64 traffic matrix for ``spec`` (see the module docstring); a file's size and
    declared shape are checked against ``max_memory`` (None: half the free memory) first."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"workload spec must be a non-empty string, one of: {', '.join(ACCEPTED)}")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n <= 0:
        raise ValueError(f"workload needs a positive rank count, got {n!r}")
    if isinstance(mean_bytes, bool) or not isinstance(mean_bytes, (int, np.integer)) or mean_bytes < 0:
        raise ValueError(f"mean pair size must be a non-negative integer number of bytes, got {mean_bytes!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**64:
        raise ValueError(f"seed must be an integer in [0, 2^64), got {seed!r}")
    n, mean_bytes, seed = int(n), int(mean_bytes), int(seed)
    spec = spec.strip()
    kind, _, arg = spec.partition(":")
    kind = kind.lower()
    if kind == "balanced" and not arg:
        return traffic.balanced(n, mean_bytes)
    if kind == "uniform" and not arg:
        return traffic.uniform(n, mean_bytes, seed)
    if kind == "zipf" and arg:
        return traffic.zipf(n, _exponent(spec, arg), mean_bytes, seed)
    if kind in ("hot", "hot_experts") and arg:
        tokens, hidden = hot_shape(n, mean_bytes)
        return traffic.hot_experts(n, skew=_exponent(spec, arg), tokens_per_rank=tokens, top_k=min(HOT_TOP_K, 8 * n),
                                   hidden=hidden, dtype_bytes=HOT_DTYPE_BYTES, seed=seed)
    if Path(spec).suffix.lower() in FILE_SUFFIXES:
        return traffic.load(spec, ranks=n, max_memory=max_memory)  # its size checked before it is read
    raise ValueError(f"unknown workload {spec!r}; accepted: {', '.join(ACCEPTED)}")
