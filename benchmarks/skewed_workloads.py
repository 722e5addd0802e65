"""Traffic matrices with a prescribed SABRE MTM, for the SABRE and selection benchmarks.

A noisy base matrix (i.i.d. uniform pair sizes in [0.5, 1.5]·mean) gets `hot` receiver
columns whose remote entries are multiplied by a factor k; k is found by bisection so the
matrix's MTM (SABRE §4, computed by collsched.skew) hits the target. Then the matrix is
scaled so each GPU sends `bytes_per_gpu` on average. Seeded and reproducible.
"""
from __future__ import annotations

import numpy as np

from collsched.skew import mtm


def with_mtm(cluster, target: float, bytes_per_gpu: int, seed: int = 0, hot: int = 1) -> np.ndarray:
    p = cluster.num_gpus
    g = cluster.gpus_per_server
    rng = np.random.default_rng(seed)
    base = rng.uniform(0.5, 1.5, size=(p, p))
    cols = rng.choice(p, size=min(hot, p), replace=False)
    node = np.arange(p) // g

    def build(k: float) -> np.ndarray:
        w = base.copy()
        for c in cols:
            remote = node != node[c]
            w[remote, c] *= k
        scale = bytes_per_gpu * p / w.sum()
        return np.rint(w * scale).astype(np.uint64)

    lo, hi = 1.0, 1.0
    if mtm(build(1.0), cluster).overall >= target:
        return build(1.0)
    while mtm(build(hi), cluster).overall < target and hi < 1e6:
        hi *= 2
    for _ in range(40):
        mid = (lo + hi) / 2
        if mtm(build(mid), cluster).overall < target:
            lo = mid
        else:
            hi = mid
    return build(hi)
