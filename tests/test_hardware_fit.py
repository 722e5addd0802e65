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
    name = min(TABLE["platforms"], key=lambda p: len(mod.rows_of(mod.PLATFORMS[p], "fit")))
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
    assert presets["h200"]["hardware"] == {} and presets["h200"]["hardware_source"] is None
