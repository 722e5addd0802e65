"""NCCL without host round-trips: the header exchange on the NCCL group itself
(``COLLSCHED_NCCL_EXCHANGE=device``) and a fixed-traffic call site captured in a CUDA graph.

The device exchange's code runs on Gloo with the CPU here (the same function, any backend);
the NCCL and CUDA-graph cases skip without a GPU (benchmarks/gpu_check.sh runs them on one).
"""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from _multiproc import TESTS_DIR

NO_GPU = "needs a CUDA GPU and NCCL (none here; benchmarks/gpu_check.sh runs it on a lent GPU)"
needs_gpu = pytest.mark.skipif(not (torch.cuda.is_available() and dist.is_nccl_available()), reason=NO_GPU)


def _run(fn: str, world: int = 4, backend: str = "gloo", **kwargs) -> list:
    from collsched.comm.launch import run_local

    res = run_local(f"_nccl_scenarios:{fn}", world, (), kwargs, gpus_per_server=2, timeout_s=180,
                    extra_pythonpath=[TESTS_DIR], raise_on_failure=False, backend=backend)
    bad = [str(r) + "\n" + getattr(r, "traceback", "")[-3000:] for r in res if not isinstance(r, dict)]
    assert not bad, "\n".join(bad)
    return res


def test_exchange_on_the_group_itself_equals_the_host_exchange():
    for r in _run("exchange_on_group"):
        assert r == {"equal": True, "shape": [4, 5], "rows_are_ranks": True}, r


def test_exchange_mode_variable_is_checked(monkeypatch):
    from collsched.comm.groups import EXCHANGE_ENV, exchange_on_device

    monkeypatch.setenv(EXCHANGE_ENV, "nccl")
    with pytest.raises(ValueError, match="COLLSCHED_NCCL_EXCHANGE must be one of"):
        exchange_on_device(None)


@needs_gpu
def test_nccl_device_exchange():
    for r in _run("exchange_on_group", world=8, backend="nccl", device="cuda"):
        assert r["equal"] and r["rows_are_ranks"], r
    for r in _run("device_exchange_call", world=8, backend="nccl"):
        assert r == {"fast": True, "auto": True}, r


@needs_gpu
@pytest.mark.parametrize("algorithm", ["fast", "fanout"])
def test_nccl_captured_call_site_replays_like_eager(algorithm):
    for r in _run("captured_call", world=8, backend="nccl", algorithm=algorithm):
        assert r["replays"] == [True, True, True], r
