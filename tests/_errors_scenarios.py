"""What each rank of tests/test_errors_readable.py runs: the same bad call on every rank, then
a call one rank never makes. Returns the messages; the pytest side asserts."""
from __future__ import annotations

import time

import torch
import torch.distributed as dist

import collsched
from collsched import comm


def bad_everywhere_then_missing(timeout_s: float, missing: int) -> dict:
    rank, n = dist.get_rank(), dist.get_world_size()
    splits = [2] * n
    out = {}
    try:  # every rank passes a strided (non-contiguous) input
        collsched.all_to_all_single(torch.empty(2 * n, 1), torch.zeros(4 * n, 1)[::2], splits, splits,
                                    algorithm="fanout", timeout=timeout_s)
        out["collapsed"] = "no error"
    except comm.CollectiveInputError as e:
        out["collapsed"] = str(e)
    if rank == missing:
        time.sleep(timeout_s + 2.0)  # never makes the call, and stays up while the others wait
        out["missing"] = "skipped"
        return out
    t0 = time.perf_counter()
    try:
        collsched.all_to_all_single(torch.empty(2 * n, 1), torch.zeros(2 * n, 1), splits, splits,
                                    algorithm="fanout", timeout=timeout_s)
        out["missing"] = "no error"
    except comm.CommTimeoutError as e:
        out["missing"], out["ranks"] = str(e), e.ranks
    out["elapsed"] = time.perf_counter() - t0
    time.sleep(1.0)  # let the other waiting ranks finish their own look-up
    return out
