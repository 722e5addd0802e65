"""The runtime's `algorithm="auto"`: its plan cache chooses with the group's backend and
expands the winner in one core call (`_core.plan_auto_for_rank`); when that picks `native`
it calls torch's own all_to_all_single (no plan). A repeated matrix is a cache hit: nothing
is chosen again. Outputs are byte-identical to torch's on Gloo either way."""
import os

import pytest

from collsched.comm.launch import run_local

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
WORLD = 4


def worker() -> dict:
    import numpy as np
    import torch
    import torch.distributed as dist

    from collsched.comm import callsite
    from collsched.comm.api import all_to_all_single, last_call_stats

    from collsched import _core
    from collsched.comm.cache import PlanCache

    rank, world = dist.get_rank(), dist.get_world_size()
    res = {}
    # Count what the runtime asks the core for: choices (with their expansion) and bare chooses.
    calls = {"plan_auto_for_rank": 0, "choose": 0}
    for name in calls:
        def counted(*a, _f=getattr(_core, name), _n=name, **k):
            calls[_n] += 1
            return _f(*a, **k)
        setattr(_core, name, counted)
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
            # Every call here chooses or finds its choice in the cache: no pair rides in the
            # exchange, and no call site remembers an earlier native choice (test_call_sites.py).
            callsite.SITES.clear()
            all_to_all_single(out, inp, recv, send, algorithm="auto", options=options, cluster=f"h200:2,gpus={world // 2}",
                              checks=how != "unchecked", eager_bytes=0, **kw)
            s = last_call_stats()
            res[f"{name}/{how}"] = {"ok": bool(torch.equal(out.view(torch.uint8) if out.numel() else out,
                                                            want.view(torch.uint8) if want.numel() else want)),
                                    "choice": s.choice, "planned_by": s.planned_by, "choose_s": s.choose_s,
                                    "algorithm": s.algorithm, "hit": s.cache_hit}
    # One matrix three times, in a cache of its own: chosen (and expanded) once.
    cache = PlanCache()
    rows = np.random.default_rng(4).integers(0, 3000, (world, world)).astype(np.int64)
    before = dict(calls)
    repeated = []
    for _ in range(3):
        inp = torch.arange(int(rows[rank].sum()) * 4, dtype=torch.float32).reshape(-1, 4) + rank
        out = torch.empty((int(rows[:, rank].sum()), 4))
        want = torch.empty_like(out)
        dist.all_to_all_single(want, inp, rows[:, rank].tolist(), rows[rank].tolist())
        all_to_all_single(out, inp, rows[:, rank].tolist(), rows[rank].tolist(), algorithm="auto", cache=cache,
                          options={"candidates": "fast,balanced_direct,fanout"}, cluster=f"h200:2,gpus={world // 2}",
                          eager_bytes=0)
        s = last_call_stats()
        repeated.append({"ok": bool(torch.equal(out, want)), "hit": s.cache_hit, "choice": s.choice,
                         "choose_s": s.choose_s, "decide_s": s.decide_s, "expand_s": s.expand_s,
                         "plan_hash": s.plan_hash})
    res["_repeated"] = repeated
    res["_calls"] = {k: calls[k] - before[k] for k in calls}
    res["_all_calls"] = dict(calls)
    return res


@pytest.fixture(scope="module")
def results():
    return run_local("test_choose_runtime:worker", WORLD, gpus_per_server=2, timeout_s=120,
                     extra_pythonpath=[TESTS_DIR], raise_on_failure=False)


def _cases(res: dict) -> dict:
    return {k: v for k, v in res.items() if not k.startswith("_")}


def test_auto_is_byte_identical_to_torch_whatever_it_chooses(results):
    for r, res in enumerate(results):
        assert isinstance(res, dict), f"rank {r}: {res}"
        bad = {k: v for k, v in _cases(res).items() if not v["ok"]}
        assert not bad, f"rank {r}: {bad}"
        assert all(x["ok"] for x in res["_repeated"]), f"rank {r}: {res['_repeated']}"


def test_stats_say_what_ran_and_how_long_choosing_took(results):
    res = results[0]
    for how in ("checked", "traffic", "unchecked"):
        assert res[f"tiny_native/{how}"]["choice"] == "native"
        assert res[f"tiny_native/{how}"]["planned_by"] == "native"
        assert res[f"forced_native_f16/{how}"]["choice"] == "native"
        assert res[f"planned_fast/{how}"]["choice"] in ("fast", "balanced_direct")
        assert res[f"planned_fast/{how}"]["planned_by"] == res[f"planned_fast/{how}"]["choice"]
    for k, v in _cases(res).items():
        assert v["algorithm"] == "auto" and v["choice"], (k, v)
        # The first call of a matrix chooses; the two after it (same matrix, same cache) hit.
        if k.endswith("/checked"):
            assert not v["hit"] and 0 < v["choose_s"] < 1, (k, v)
        else:
            assert v["hit"] and v["choose_s"] == 0, (k, v)
    # Every rank decided the same.
    for other in results[1:]:
        assert {k: v["choice"] for k, v in _cases(other).items()} == {k: v["choice"] for k, v in _cases(res).items()}


def test_a_repeated_matrix_is_chosen_once_and_never_through_a_second_path(results):
    for r, res in enumerate(results):
        first, *again = res["_repeated"]
        assert res["_calls"] == {"plan_auto_for_rank": 1, "choose": 0}, (r, res["_calls"])
        # One core call per new matrix over the whole worker (4 cases + the repeated one).
        assert res["_all_calls"] == {"plan_auto_for_rank": 5, "choose": 0}, (r, res["_all_calls"])
        assert not first["hit"] and first["choice"] in ("fast", "balanced_direct", "fanout")
        assert 0 < first["choose_s"] <= first["decide_s"] and first["expand_s"] > 0, first
        for x in again:
            assert x["hit"] and x["choose_s"] == 0 and x["choice"] == first["choice"], x
            assert x["plan_hash"] == first["plan_hash"]
    # The same choice and the same decisions' digest on every rank.
    assert len({res["_repeated"][0]["choice"] for res in results}) == 1
    assert len({res["_repeated"][0]["plan_hash"] for res in results}) == 1
