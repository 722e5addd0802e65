"""collsched's collectives under torch.compile: the torch.library operators (comm/ops.py,
moe/ops.py), zero graph breaks, compiled results bitwise equal to eager, and opcheck.

Gloo CPU ranks; backend "aot_eager" (AOTAutograd's graphs, run eagerly: the graph-break and
equality checks without Inductor's compile time on a 2-core CI machine).
"""
from __future__ import annotations

import pytest

from _multiproc import TESTS_DIR


def _run(fn: str, world: int = 4, timeout_s: float = 300.0, **kwargs) -> list:
    from collsched.comm.launch import run_local

    res = run_local(f"_compile_scenarios:{fn}", world, (), kwargs, gpus_per_server=2, timeout_s=timeout_s,
                    extra_pythonpath=[TESTS_DIR], raise_on_failure=False)
    bad = [str(r) + "\n" + getattr(r, "traceback", "")[-3000:] for r in res if not isinstance(r, dict)]
    assert not bad, "\n".join(bad)
    return res


@pytest.fixture(scope="module")
def results():
    return _run("everything")


def test_all_to_all_compiles_without_graph_breaks_and_matches_eager(results):
    for rank, r in enumerate(x["a2a"] for x in results):
        assert r["breaks"] == 0, (rank, r)
        for seed in (1, 2):
            assert r[seed]["out"] and r[seed]["grads"], (rank, seed, r[seed])


def test_moe_block_compiles_without_graph_breaks_and_matches_eager(results):
    for rank, r in enumerate(x["moe"] for x in results):
        assert r["breaks"] == 0, (rank, r)
        for seed in (1, 2):
            assert r[seed]["out"] and r[seed]["grads"], (rank, seed, r[seed])
            assert r[seed]["live_after_forward"] == 1 and r[seed]["live_after_backward"] == 0, r[seed]
        assert r["live_no_grad"] == 0, r


def test_operators_pass_opcheck(results):
    for r in results:
        assert r["opcheck"] == {"all_to_all_single": True, "exchange_i64": True, "moe_dispatch": True,
                                "moe_dispatch_rows": True, "moe_combine": True}, r["opcheck"]


def test_traced_call_arguments_must_be_literals():
    import ast

    from collsched.comm.ops import call_config

    text = call_config(algorithm="fast", cluster="h200:2,gpus=2", timeout=5.0)
    assert ast.literal_eval(text)["cluster"] == "h200:2,gpus=2"
    with pytest.raises(TypeError, match="cluster= must be a spec string"):
        call_config(cluster=object())
    with pytest.raises(TypeError, match="must be literals"):
        call_config(options={"candidates": object()})
