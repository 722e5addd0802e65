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
# Entries carried over from another platform's fit (not fitted; judged on validation rows only).
CARRIED = sorted(n for n, e in TABLE["platforms"].items() if "carried_from" in e)
# Carried point-to-point terms (the collective-kernel ones, h200's, have their own test below).
P2P_CARRIED = [n for n in CARRIED if not all(k.startswith(("coll_", "ll_")) for k in TABLE["platforms"][n]["constants"])]


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
        if name in CARRIED:
            # A carry-over takes its source's constants as they are and says so.
            source = TABLE["platforms"][entry["carried_from"]]
            assert "carried_from" not in source, f"{name}: carried from a carried entry"
            assert entry["constants"].items() <= source["constants"].items(), name
            assert entry["source"].startswith(f"carried over from {entry['carried_from']}'s fit, not fitted")
            assert entry["residuals"]["fit"]["rows"] == 0 and entry["residuals"]["validation"]["rows"] > 0
        else:
            assert entry["residuals"]["fit"]["rows"] > 0


def test_custom_clusters_stay_neutral():
    # The testbed's model builds custom: specs; its calibration must not move.
    d = Cluster.parse("custom:2,gpus=4").to_dict()
    assert d["hardware"] == {} and d["hardware_source"] is None


@pytest.mark.parametrize("name", sorted(TABLE["platforms"]))
def test_committed_constants_reproduce_the_recorded_residuals(name):
    which = "validation" if name in CARRIED else "fit"  # a carry-over has no fit rows
    recorded = TABLE["platforms"][name]["residuals"][which]["per_row"]
    rows = {f"{r.file}:{r.line}": r for r in fidelity.load_rows(which)}
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


def test_h800_reproduces_deepeps_normal_kernel_table_within_15_percent():
    # Issue 46's target for the DeepEP rows of the fitting set: every row within +-15 %.
    entry = TABLE["platforms"]["h800"]
    assert set(entry["constants"]) == {"eff_scaleup", "eff_scaleout"}
    recorded = entry["residuals"]["fit"]["per_row"]
    assert len(recorded) == 8 and all(where.startswith("deepep_normal.csv:") for where, *_ in recorded)
    assert max(abs(err) for *_, err, _ in recorded) <= 0.15
    assert Cluster.parse("h800:2").to_dict()["hardware"] == entry["constants"]


def test_write_replaces_only_the_fitted_platforms_entry(tmp_path, monkeypatch):
    mod = _fit_module()
    path = tmp_path / "hardware.json"
    path.write_text(json.dumps(TABLE, indent=2) + "\n")
    stub = {"constants": {"eff_scaleup": "0.5"}, "source": "stub", "date": "2026-11-28",
            "residuals": {"fit": {"rows": 0, "mean_abs_error": None, "max_abs_error": None, "per_row": []},
                          "validation": {"rows": 0, "mean_abs_error": None, "max_abs_error": None, "per_row": []}}}
    monkeypatch.setattr(mod, "JSON_PATH", path)
    monkeypatch.setattr(mod, "ROOT", tmp_path)  # the help text names the path relative to it
    monkeypatch.setattr(mod, "fit", lambda platform, verbose=False: ((), 0.0))
    monkeypatch.setattr(mod, "fitted_entry", lambda platform, values: stub)
    monkeypatch.setattr(sys, "argv", ["fit_hardware_model.py", "--platform", "h800", "--write"])
    mod.main()
    written = json.loads(path.read_text())
    assert written["platforms"]["h800"] == stub
    assert list(written["platforms"]) == sorted(written["platforms"])
    for name, entry in TABLE["platforms"].items():
        if name != "h800":
            assert written["platforms"][name] == entry, name


def test_carried_entries_regenerate_and_judge_only_validation_rows():
    """The script rebuilds a carried entry from its source's committed constants: same constants,
    same residuals; it never reads a fit row of the carried preset (it has none)."""
    mod = _fit_module()
    assert sorted(mod.CARRIED) == CARRIED
    name = min(CARRIED, key=lambda n: len(TABLE["platforms"][n]["residuals"]["validation"]["per_row"]))
    entry = mod.carried_preset_entry(mod.CARRIED[name], TABLE)
    assert entry["constants"] == TABLE["platforms"][name]["constants"]
    assert entry["residuals"] == TABLE["platforms"][name]["residuals"]
    assert not mod.rows_of(mod.CARRIED[name], "fit")
    with pytest.raises(ValueError, match="no entry"):
        mod.carried_preset_entry(mod.Carried("b300", "nowhere", ("eff_scaleup",), ("b300:",), ("all_to_all",), ""), TABLE)


def test_writing_one_carried_entry_keeps_every_other_entry(tmp_path, monkeypatch):
    mod = _fit_module()
    before = json.loads(json.dumps(TABLE))
    before["platforms"]["gb200"]["date"] = "untouched"  # another carried entry: must survive as it is
    path = tmp_path / "hardware.json"
    path.write_text(json.dumps(before, indent=2) + "\n")
    monkeypatch.setattr(mod, "JSON_PATH", path)
    monkeypatch.setattr(mod, "ROOT", tmp_path)
    monkeypatch.setattr(sys, "argv", ["fit_hardware_model.py", "--platform", "b300", "--write"])
    mod.main()
    written = json.loads(path.read_text())["platforms"]
    assert written == before["platforms"]  # b300 rebuilt identically, the others copied
    assert list(written) == sorted(written)


@pytest.mark.parametrize("name", P2P_CARRIED)
def test_carried_constants_leave_the_fluid_model_and_its_bound_alone(name):
    """Carried constants act in the hardware model only: the fluid model and the lower bound of
    the preset are those of its peaks (the same preset with every carried term set neutral)."""
    from collsched import plan_all_to_all, simulate, traffic

    neutral = {"eff_scaleup": "1", "eff_scaleout": "1", "chunk_scaleup": "0B", "chunk_scaleout": "0B",
               "step_cost": "0ns", "rendezvous": "0"}
    # Where the carried terms bind: one NVLink domain for the p2p NVLink terms, two servers for RCCL's.
    spec = {"gb200": "gb200:1,gpus=8", "gb300": "gb300:1,gpus=8", "mi355x": "mi355x:2"}.get(name, f"{name}:1")
    peak = spec + "".join(f",{k}={neutral[k]}" for k in TABLE["platforms"][name]["constants"])
    assert Cluster.parse(peak).to_dict()["hardware"] == {}
    m = traffic.uniform(Cluster.parse(spec).num_gpus, 8 << 20, seed=3)
    plan = plan_all_to_all(m, spec, "fanout")
    fluid, at_peak = simulate(plan, spec, model="fluid"), simulate(plan, peak, model="hardware")
    assert fluid.time_s == at_peak.time_s and fluid.lower_bound_s == at_peak.lower_bound_s
    hw = simulate(plan, spec, model="hardware")
    assert hw.time_s > fluid.time_s and hw.lower_bound_s == fluid.lower_bound_s


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
    for name in CARRIED:  # carried constants are shown as carried, with their source
        assert presets[name]["hardware"] and presets[name]["hardware_source"].startswith("carried over from")


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
