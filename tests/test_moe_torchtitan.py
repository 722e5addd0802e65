"""collsched's torchtitan token dispatcher (collsched.moe.torchtitan) inside torchtitan 0.3.0's own MoE model.

4 CPU ranks (Gloo, 2 nodes x 2), a tiny Qwen3-MoE (2 layers, dim 64, 16 experts, top-4), FSDP
over the 4 ranks and EP 4, built as torchtitan's Trainer builds it; the CPU settings are in
tests/_torchtitan_model.py (`cpu_shims`), each with its reason.

- ``exchange="all_to_all"``: the loss of every step and every gradient bitwise equal to
  torchtitan's ``AllToAllTokenDispatcher`` (the same rows summed in the same order);
- ``exchange="dedup"``: bitwise at one layer with fixed routing (each token's experts on the
  lowest node but at most one, so both sum the same numbers in the same order); over training
  steps within LOSS_TOL / GRAD_REL_TOL (the forwarders' partial sums change the order of
  the float32 additions).

Skipped (with the reason) where torchtitan 0.3.0 is not installed: pip install 'collsched[torchtitan]'.
"""
from __future__ import annotations

import importlib
import importlib.metadata
import sys

import pytest

from _multiproc import TESTS_DIR

# dedup over two training steps: float32 additions in another order (docs/torchtitan.md).
LOSS_TOL = 1e-5
GRAD_REL_TOL = 1e-4
# dedup in bfloat16: a bfloat16 rounding of each node's partial sum (observed up to 1.7e-3).
BF16_LOSS_TOL = 1e-2


def _torchtitan_ok() -> str:
    try:
        v = importlib.metadata.version("torchtitan")
    except importlib.metadata.PackageNotFoundError:
        return "torchtitan is not installed (pip install 'collsched[torchtitan]')"
    return "" if v == "0.3.0" else f"torchtitan {v} installed, the tests need 0.3.0"


_SKIP = _torchtitan_ok()
needs_torchtitan = pytest.mark.skipif(bool(_SKIP), reason=_SKIP)


def _run(fn, *args, timeout_s: float = 400, **kwargs):
    from collsched.comm.launch import run_local

    res = run_local(f"_torchtitan_scenarios:{fn}", 4, args, kwargs, gpus_per_server=2, timeout_s=timeout_s,
                    extra_pythonpath=[TESTS_DIR], raise_on_failure=False)
    bad = [str(r) + "\n" + getattr(r, "traceback", "")[-2000:] for r in res if not isinstance(r, dict)]
    assert not bad, "\n".join(bad)
    return res


@needs_torchtitan
def test_training_matches_torchtitan_dispatcher():
    res = _run("compare_training", ("all_to_all", "dedup"), ep=4, steps=2)
    for r in res:
        assert r["kinds"] == ["AllToAllTokenDispatcher:-"]
        assert len(r["names"]) > 10  # every parameter of the model has a gradient to compare
        a2a = r["all_to_all"]
        assert a2a["kinds"] == ["CollschedTokenDispatcher:all_to_all"]
        assert a2a["same_names"]
        assert a2a["bitwise"], a2a
        dd = r["dedup"]
        assert dd["kinds"][0] == "CollschedTokenDispatcher:dedup"
        assert int(dd["kinds"][1].split("=")[1]) > 0  # tokens did cross nodes through the forwarders
        assert dd["same_names"]
        assert dd["loss_diff"] <= LOSS_TOL, dd
        assert dd["grad_rel"] <= GRAD_REL_TOL, dd
        assert r["losses"][0] > 0 and all(x == x for x in r["losses"])  # a finite, non-trivial loss


@needs_torchtitan
def test_compiled_training_matches_torchtitan_compiled():
    # torchtitan's compile.enable (every transformer block compiled with fullgraph=True, so a
    # graph break fails the run) with the aot_eager backend, both dispatchers compiled alike;
    # one layer (each layer is a compile of its own), two steps (the second runs the compiled code).
    res = _run("compare_training", ("all_to_all", "dedup"), ep=4, steps=2, compile_backend="aot_eager", n_layers=1,
               timeout_s=900)
    for r in res:
        assert r["kinds"] == ["AllToAllTokenDispatcher:-"]
        assert r["all_to_all"]["bitwise"], r["all_to_all"]
        dd = r["dedup"]
        assert dd["loss_diff"] <= LOSS_TOL and dd["grad_rel"] <= GRAD_REL_TOL, dd
        assert r["losses"][0] > 0 and all(x == x for x in r["losses"])


@needs_torchtitan
def test_ep_sub_mesh_bfloat16():
    # EP 2 inside FSDP 4 (the EP group is a sub-mesh), bfloat16 training, two steps.
    res = _run("compare_training", ("all_to_all", "dedup"), ep=2, steps=2, dtype="bfloat16")
    for r in res:
        assert r["all_to_all"]["bitwise"], r["all_to_all"]
        # dedup rounds each node's partial sum to bfloat16 before the final sum (docs/torchtitan.md).
        assert r["dedup"]["loss_diff"] <= BF16_LOSS_TOL, r["dedup"]


@needs_torchtitan
def test_layer_fixed_routing_bitwise():
    res = _run("compare_layer", ep=4, gpus_per_node=2)
    for r in res:
        for mode in ("all_to_all", "dedup"):
            assert all(r[mode][k] for k in ("rows", "per_expert", "out", "grad_x", "grad_scores")), (mode, r[mode])
        # Checked in the ranks: this process never imports torchtitan (the forked ranks would
        # inherit its import-time choice of device before the CPU setting).
        assert r["bad_exchange_error"].startswith("exchange must be one of"), r["bad_exchange_error"]


def test_missing_torchtitan_names_the_extra(monkeypatch):
    def absent(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", absent)
    monkeypatch.delitem(sys.modules, "collsched.moe.torchtitan", raising=False)
    with pytest.raises(ImportError, match=r"needs torchtitan 0\.3\.0: pip install 'collsched\[torchtitan\]'"):
        importlib.import_module("collsched.moe.torchtitan")


def test_unsupported_torchtitan_version(monkeypatch):
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.2.9")
    monkeypatch.delitem(sys.modules, "collsched.moe.torchtitan", raising=False)
    with pytest.raises(ImportError, match=r"supports torchtitan 0\.3\.0 only, found 0\.2\.9"):
        importlib.import_module("collsched.moe.torchtitan")


@needs_torchtitan
def test_spmd_types_backend():
    # torchtitan's default backend: its own dispatcher needs the SPMD mesh its Trainer sets up
    # (and a list all-to-all Gloo rejects), so the reference runs under partial_dtensor.
    res = _run("spmd_types_backend", "all_to_all", ep=4)
    for r in res:
        assert r["kinds"] == ["CollschedTokenDispatcher:all_to_all"]
        assert r["names_equal"]
        assert r["loss_diff"] == 0.0 and r["grad_diff"] == 0.0, r
