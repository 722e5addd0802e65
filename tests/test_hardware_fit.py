"""The hardware model's fitted constants (crates/collsched-core/src/topology/hardware.json):
the presets load them, they reproduce the residuals the fit recorded, and the fit script
regenerates them from the cited measurements."""
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from collsched import Cluster, fidelity

ROOT = Path(__file__).resolve().parents[1]
TABLE = json.loads((ROOT / "crates/collsched-core/src/topology/hardware.json").read_text())


def _fit_module():
    spec = importlib.util.spec_from_file_location("fit_hardware_model", ROOT / "benchmarks" / "fit_hardware_model.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_every_fitted_platform_is_a_preset_and_loads_its_constants():
    assert TABLE["platforms"], "no fitted platform"
    for name, entry in TABLE["platforms"].items():
        keys = ",".join(f"{k}={v}" for k, v in entry["constants"].items())
        loaded = Cluster.parse(f"{name}:2")
        assert loaded.spec() == Cluster.parse(f"{name}:2,{keys}").spec(), name
        d = loaded.to_dict()
        assert d["hardware"], f"{name}: the preset shows no hardware terms"
        assert entry["date"] in d["hardware_source"] and entry["source"] in d["hardware_source"]
        assert entry["residuals"]["fit"]["rows"] > 0


def test_custom_clusters_stay_neutral():
    # The testbed's model builds custom: specs; its calibration must not move.
    d = Cluster.parse("custom:2,gpus=4").to_dict()
    assert d["hardware"] == {} and d["hardware_source"] is None


@pytest.mark.parametrize("name", sorted(TABLE["platforms"]))
def test_committed_constants_reproduce_the_recorded_residuals(name):
    recorded = TABLE["platforms"][name]["residuals"]["fit"]["per_row"]
    rows = {f"{r.file}:{r.line}": r for r in fidelity.load_rows("fit")}
    assert recorded
    for where, algorithm, size, err, excluded in recorded:
        row = rows[where]
        assert (row.algorithm, row.size_bytes, row.excluded is not None) == (algorithm, size, excluded), where
        if excluded:
            continue
        now = fidelity.error(fidelity.predict(row, "hardware"), row.measured_s)
        assert now == pytest.approx(err, abs=6e-4), f"{name} {where}: {now} vs recorded {err}"


def test_the_fit_regenerates_the_committed_constants():
    """Rerun the deterministic fit of the smallest platform and compare with the JSON."""
    mod = _fit_module()
    fitted = [p for p in TABLE["platforms"] if p in mod.PLATFORMS]  # carried-over presets are not fitted
    name = min(fitted, key=lambda p: len(mod.rows_of(mod.PLATFORMS[p], "fit")))
    values, _ = mod.fit(mod.PLATFORMS[name])
    entry = mod.fitted_entry(mod.PLATFORMS[name], values)
    assert entry["constants"] == TABLE["platforms"][name]["constants"]
    assert entry["residuals"]["fit"]["per_row"] == TABLE["platforms"][name]["residuals"]["fit"]["per_row"]


def test_simulate_selects_the_model():
    from collsched import plan_all_to_all, simulate, traffic

    m = traffic.uniform(16, 4 << 20, seed=1)
    for spec in ("mi300x:2", "perlmutter:4"):
        plan = plan_all_to_all(m, spec, "fanout")
        hw, fluid = simulate(plan, spec).time_s, simulate(plan, spec, model="fluid").time_s
        assert hw > fluid, spec  # fitted efficiencies < 1
        assert simulate(plan, spec, model="hardware").time_s == hw
        assert simulate(plan, spec, model="fluid").lower_bound_s == simulate(plan, spec).lower_bound_s  # fluid bound
    plan = plan_all_to_all(m, "custom:2", "fanout")
    assert simulate(plan, "custom:2").time_s == simulate(plan, "custom:2", model="fluid").time_s
    with pytest.raises(ValueError, match="model must be one of"):
        simulate(plan, "custom:2", model="quantum")


def test_cli_simulate_and_clusters_show_the_model():
    import inspect

    import typer
    from typer.testing import CliRunner

    from collsched.cli import core as cli_core

    app = typer.Typer(pretty_exceptions_enable=False)
    cli_core.register(app)
    kw = {"mix_stderr": False} if "mix_stderr" in inspect.signature(CliRunner).parameters else {}
    out = {}
    for model in ("hardware", "fluid"):
        r = CliRunner(**kw).invoke(app, ["simulate", "-c", "mi300x:2", "-a", "fanout", "-m", "4MiB", "--model", model, "--json"])
        assert r.exit_code == 0, r.output
        out[model] = json.loads(r.stdout)
    assert out["hardware"]["model"] == "hardware" and out["hardware"]["hardware_terms"]["eff_scaleout"]
    assert out["fluid"]["hardware_terms"] == {}
    assert out["hardware"]["results"][0]["time_s"] > out["fluid"]["results"][0]["time_s"]
    assert out["hardware"]["lower_bound_s"] == out["fluid"]["lower_bound_s"]
    r = CliRunner(**kw).invoke(app, ["simulate", "-c", "mi300x:2", "-a", "fanout", "--model", "quantum"])
    assert r.exit_code != 0
    r = CliRunner(**kw).invoke(app, ["clusters", "--json"])
    presets = {d["name"]: d for d in json.loads(r.stdout)["presets"]}
    assert presets["mi300x"]["hardware"]["rendezvous"] == "1" and "FAST" in presets["mi300x"]["hardware_source"]
    assert presets["h200"]["hardware"] == presets["h100"]["hardware"] != {}
    assert "carried over from h100" in presets["h200"]["hardware_source"]


def test_carried_over_presets_name_their_origin_and_take_its_constants():
    mod = _fit_module()
    for name, platform in mod.PLATFORMS.items():
        for preset, _prefix, why in platform.carried_to:
            entry = TABLE["platforms"][preset]
            assert entry["constants"] == TABLE["platforms"][name]["constants"], preset
            assert entry["source"].startswith(f"carried over from {name}: {why}"), preset
            assert entry["residuals"]["fit"] == TABLE["platforms"][name]["residuals"]["fit"], preset


@pytest.mark.parametrize("spec", ["h100:4", "h200:2"])
def test_nccl_collective_constants_leave_point_to_point_plans_alone(spec):
    """h100's constants are the collective kernels' (coll_eff_*, coll_step_cost, LL): an
    all-to-all on h100/h200 is still the fluid model bit for bit; a small ring allgather is not,
    and its protocol choice makes it faster than the default protocol alone."""
    from collsched import plan_all_to_all, simulate, traffic
    from collsched.collectives import plan_collective

    c = Cluster.parse(spec)
    assert all(k.startswith(("coll_", "ll_")) for k in c.to_dict()["hardware"]), c.to_dict()["hardware"]
    plan = plan_all_to_all(traffic.uniform(c.num_gpus, 1 << 20, seed=2), spec, "fanout")
    assert simulate(plan, spec).time_s == simulate(plan, spec, model="fluid").time_s
    ring = plan_collective("allgather", c.num_gpus, 64, "ring", topology=c)
    hw = simulate(ring, spec).time_s
    no_ll = simulate(ring, f"{spec},ll_alpha_scaleup=0ns,ll_alpha_scaleout=0ns").time_s
    assert hw != simulate(ring, spec, model="fluid").time_s
    assert hw < no_ll
