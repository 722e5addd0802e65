"""The runtime's `algorithm="auto"`: it calls `collsched.choose` with the group's backend;
when that picks `native` it calls torch's own all_to_all_single (no plan), otherwise it
plans the winner. Outputs are byte-identical to torch's on Gloo either way."""
import os

import pytest

from collsched.comm.launch import run_local

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
WORLD = 4


def worker() -> dict:
    import numpy as np
    import torch
    import torch.distributed as dist

    from collsched.comm.api import all_to_all_single, last_call_stats

    rank, world = dist.get_rank(), dist.get_world_size()
    res = {}
    cases = {
        "tiny_native": (lambda: np.full((world, world), 1), {}, torch.float32, ()),
        "forced_native_f16": (lambda: np.random.default_rng(1).integers(0, 50, (world, world)), {"candidates": "native"},
                              torch.float16, (3,)),
        "planned_fast": (lambda: np.random.default_rng(2).integers(0, 4000, (world, world)),
                         {"candidates": "fast,balanced_direct"}, torch.int64, (16,)),
        "skewed_auto": (lambda: np.random.default_rng(3).zipf(1.5, (world, world)).clip(0, 20000) * 64, {},
                        torch.float32, (8,)),
    }
    for name, (make, options, dtype, trail) in cases.items():
        for how in ("checked", "traffic", "unchecked"):
            rows = make().astype(np.int64)
            send = rows[rank].tolist()
            recv = rows[:, rank].tolist()
            inp = (torch.arange(sum(send) * int(np.prod(trail or (1,))), dtype=torch.float64) + 1000 * rank) \
                .to(dtype).reshape(sum(send), *trail)
            want = torch.empty((sum(recv), *trail), dtype=dtype)
            dist.all_to_all_single(want, inp, recv, send)
            out = torch.full_like(want, -1)
            kw = {"traffic": rows} if how != "checked" else {}
            all_to_all_single(out, inp, recv, send, algorithm="auto", options=options, cluster=f"h200:2,gpus={world // 2}",
                              checks=how != "unchecked", **kw)
            s = last_call_stats()
            res[f"{name}/{how}"] = {"ok": bool(torch.equal(out.view(torch.uint8) if out.numel() else out,
                                                            want.view(torch.uint8) if want.numel() else want)),
                                    "choice": s.choice, "planned_by": s.planned_by, "choose_s": s.choose_s,
                                    "algorithm": s.algorithm}
    return res


@pytest.fixture(scope="module")
def results():
    return run_local("test_choose_runtime:worker", WORLD, gpus_per_server=2, timeout_s=120,
                     extra_pythonpath=[TESTS_DIR], raise_on_failure=False)


def test_auto_is_byte_identical_to_torch_whatever_it_chooses(results):
    for r, res in enumerate(results):
        assert isinstance(res, dict), f"rank {r}: {res}"
        bad = {k: v for k, v in res.items() if not v["ok"]}
        assert not bad, f"rank {r}: {bad}"


def test_stats_say_what_ran_and_how_long_choosing_took(results):
    res = results[0]
    for how in ("checked", "traffic", "unchecked"):
        assert res[f"tiny_native/{how}"]["choice"] == "native"
        assert res[f"tiny_native/{how}"]["planned_by"] == "native"
        assert res[f"forced_native_f16/{how}"]["choice"] == "native"
        assert res[f"planned_fast/{how}"]["choice"] in ("fast", "balanced_direct")
        assert res[f"planned_fast/{how}"]["planned_by"] == res[f"planned_fast/{how}"]["choice"]
    for k, v in res.items():
        assert v["algorithm"] == "auto" and v["choice"] and 0 < v["choose_s"] < 1, (k, v)
    # Every rank decided the same.
    for other in results[1:]:
        assert {k: v["choice"] for k, v in other.items()} == {k: v["choice"] for k, v in res.items()}
