"""Spawn a local group (Gloo; NCCL on a GPU machine) for the runtime tests, with a hard deadline that kills stragglers."""
from __future__ import annotations

import os

from collsched.comm.launch import run_local

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))


def run_ranks(fn: str, world: int, *args, gpus_per_server: int = 4, timeout_s: float = 150.0, backend: str = "gloo",
              **kwargs) -> list:
    """Run ``_runtime_scenarios.<fn>`` on `world` ranks; returns per-rank results
    (RankFailure objects where a rank raised, died or was killed at the deadline)."""
    return run_local(f"_runtime_scenarios:{fn}", world, args, kwargs, gpus_per_server=gpus_per_server,
                     timeout_s=timeout_s, extra_pythonpath=[TESTS_DIR], raise_on_failure=False, backend=backend)


def failures(results, prefix: str = "") -> dict:
    """The checks (named ``prefix...``) that failed on some rank, each with the first rank's error;
    a rank that raised or died counts as ``rank r``. Empty when everything passed."""
    out = {}
    for r, res in enumerate(results):
        if not isinstance(res, dict):
            out[f"rank {r}"] = str(res)
            continue
        for name, v in res.items():
            if name.startswith(prefix) and not v["ok"]:
                out.setdefault(name, f"rank {r}: {v.get('error', 'output differs from torch')}")
    return out
