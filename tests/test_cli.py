"""The core CLI, in process through typer's CliRunner."""
import inspect
import json

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

import collsched
import collsched.planning
import collsched.workloads
from collsched import cli, sim


@pytest.fixture(scope="module")
def app():
    a = typer.Typer(pretty_exceptions_enable=False)
    from collsched.cli import core as cli_core

    cli_core.register(a)
    return a


def run(app, *args):
    kw = {"mix_stderr": False} if "mix_stderr" in inspect.signature(CliRunner).parameters else {}
    return CliRunner(**kw).invoke(app, [str(a) for a in args], catch_exceptions=False)


def names_known() -> set[str]:
    return {n for n, _ in collsched.all_to_all_algorithms()}


def test_entry_point_registers_core_commands():
    cli._register_all()
    names = {c.name for c in cli.app.registered_commands}
    assert {"clusters", "traffic", "plan", "verify", "simulate", "draw"} <= names


def test_clusters_table_lists_every_preset(app):
    r = run(app, "clusters")
    assert r.exit_code == 0
    for name, _ in collsched.Cluster.presets():
        assert name in r.stdout
    assert "450 GB/s" in r.stdout and "400 Gb/s" in r.stdout
    doc = json.loads(run(app, "clusters", "--json").stdout)
    h200 = next(p for p in doc["presets"] if p["name"] == "h200")
    assert h200["nic_bw"] == 50 * 10**9 and h200["gpus_per_server"] == 8


def test_simulate_json_shape_and_types(app):
    r = run(app, "simulate", "--cluster", "h200:2", "--workload", "zipf:0.8", "--mean", "1MiB", "--algorithms", "fanout",
            "--json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)  # exactly one JSON object, nothing else
    assert isinstance(doc["lower_bound_s"], float) and doc["lower_bound_s"] > 0
    assert isinstance(doc["bound_term"], str)
    [row] = doc["results"]
    assert row["algorithm"] == "fanout"
    for key, typ in (("time_s", float), ("algbw_gbps", float), ("ratio_to_bound", float), ("steps", int),
                     ("scaleout_bytes", int), ("transfers", int)):
        assert isinstance(row[key], typ), key
    assert row["time_s"] > 0 and row["steps"] >= 1
    assert row["transfers"] == 16 * 16  # fanout: one transfer per non-empty pair
    # The simulator never beats its own lower bound, and the ratio is time / bound.
    assert row["ratio_to_bound"] >= 0.999
    assert abs(row["time_s"] / doc["lower_bound_s"] - row["ratio_to_bound"]) < 1e-6
    assert doc["lower_bound_s"] == pytest.approx(sim.lower_bound(
        collsched.workloads.make_workload("zipf:0.8", 16, 2**20, 0), "h200:2").seconds)


def test_simulate_default_runs_every_planning_algorithm(app):
    r = run(app, "simulate", "-c", "h200:2", "-w", "uniform", "-m", "256KiB", "--json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    got = {row["algorithm"] for row in doc["results"]}
    assert "fanout" in got
    for row in doc["results"]:
        if row["algorithm"] == "fast":
            assert isinstance(row["stages"], int) and row["stages"] >= 1
    for row in doc["results"]:
        if row["algorithm"] in ("auto", "sabre"):  # selectors name their choice, a known algorithm
            assert row["chosen"] in names_known() | {"native"} and row["chosen"] != row["algorithm"]  # native: torch's call
            if row["chosen"] == "fast":
                assert isinstance(row["stages"], int)
    for note in doc["skipped"]:
        assert note.startswith("skipped ")
    names = {n for n, _ in collsched.all_to_all_algorithms()}
    assert got | {n.split(":")[0].removeprefix("skipped ") for n in doc["skipped"]} == names


def test_simulate_table_has_a_row_per_algorithm(app):
    r = run(app, "simulate", "-c", "h200:2", "-w", "zipf:0.8", "-m", "1MiB", "-a", "fanout,fanout")
    assert r.exit_code == 0, r.stderr
    assert "lower bound" in r.stdout and "binding term" in r.stdout
    assert r.stdout.count("fanout") == 2
    assert "algbw" in r.stdout and "× bound" in r.stdout


@pytest.mark.parametrize("args, words", [
    (["--cluster", "nope:2"], "unknown cluster preset"),
    (["--cluster", "h200:2,nic=-5Gbps"], "negative"),
    (["--cluster", "h200:2", "--workload", "gaussian"], "unknown workload"),
    (["--cluster", "h200:2", "--workload", "zipf:x"], "not a number"),
    (["--cluster", "h200:2", "--mean", "lots"], "cannot parse size"),
    (["--cluster", "h200:2", "--mean", "-1MiB"], "negative"),
    (["--cluster", "h200:2", "--algorithms", "warp"], "unknown algorithm 'warp'"),
    (["--cluster", "h200:2", "--algorithms", ","], "empty"),
    (["--cluster", "h200:2", "--workload", "missing.npy"], "does not exist"),
])
def test_simulate_bad_input_is_one_line_exit_2(app, args, words):
    r = run(app, "simulate", *args)
    assert r.exit_code == 2
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def test_traffic_summary_and_save(app, tmp_path):
    out = tmp_path / "m.npy"
    r = run(app, "traffic", "-c", "h200:2", "-w", "zipf:1.2", "-m", "1MiB", "--seed", 3, "--out", out)
    assert r.exit_code == 0, r.stderr
    m = np.load(out)
    assert m.shape == (16, 16)
    np.testing.assert_array_equal(m, collsched.workloads.make_workload("zipf:1.2", 16, 2**20, 3))
    assert "total" in r.stdout and "max pair" in r.stdout and "Gini" in r.stdout
    doc = json.loads(run(app, "traffic", "-c", "h200:2", "-w", str(out), "--json").stdout)
    assert doc["total_bytes"] == int(m.sum()) and doc["ranks"] == 16
    assert doc["hash"] == collsched.traffic.matrix_hash(m)
    bad = run(app, "traffic", "-c", "h200:1", "-w", str(out))
    assert bad.exit_code == 2 and "16×16 but the cluster has 8 GPUs" in bad.stderr


@pytest.mark.parametrize("suffix", [".json", ".bin"])
def test_plan_then_verify_round_trip(app, tmp_path, suffix):
    out = tmp_path / f"plan{suffix}"
    r = run(app, "plan", "-c", "h200:2", "-w", "uniform", "-m", "64KiB", "-a", "fanout", "--out", out)
    assert r.exit_code == 0, r.stderr
    plan = collsched.planning.load_plan(out)
    assert plan.num_transfers == 256 and plan.hash in r.stdout and "256 transfers" in r.stdout
    expected = collsched.plan_all_to_all(collsched.workloads.make_workload("uniform", 16, 65536, 0), "h200:2", "fanout")
    assert plan.hash == expected.hash
    v = run(app, "verify", out)
    assert v.exit_code == 0 and v.stdout.startswith("OK:"), v.stdout + v.stderr
    assert f"{int(expected.input_sizes and sum(expected.input_sizes))} bytes moved" in v.stdout


def test_verify_reports_a_violation_with_exit_1(app, tmp_path):
    plan = collsched.plan_all_to_all(np.ones((8, 8), dtype=np.uint64) * 64, "h200:1", "fanout")
    doc = json.loads(plan.to_json())
    doc["transfers"] = doc["transfers"][1:]  # drop one block: a byte never lands
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    try:
        collsched.Plan.from_json(bad.read_text())
    except ValueError:
        pytest.skip("plan JSON layout differs from this mutation")
    r = run(app, "verify", bad)
    assert r.exit_code == 1 and r.stdout.startswith("violation:")


@pytest.mark.parametrize("content", [b"", b"{not json", b"\x00\x01garbage", b"[]"])
def test_verify_garbage_file_is_exit_2(app, tmp_path, content):
    p = tmp_path / "p.json"
    p.write_bytes(content)
    r = run(app, "verify", p)
    assert r.exit_code == 2 and r.stderr.startswith("error: ") and len(r.stderr.strip().splitlines()) == 1


def test_plan_bad_algorithm_and_option(app):
    r = run(app, "plan", "-c", "h200:1", "-a", "warp")
    assert r.exit_code == 2 and "unknown algorithm 'warp'" in r.stderr
    r = run(app, "plan", "-c", "h200:1", "-a", "fanout", "-O", "novalue")
    assert r.exit_code == 2 and "key=value" in r.stderr


def test_draw_writes_png(app, tmp_path):
    plan_path, png, links = tmp_path / "p.bin", tmp_path / "p.png", tmp_path / "l.png"
    assert run(app, "plan", "-c", "h200:2", "-w", "zipf:1", "-m", "1MiB", "-a", "fanout", "-o", plan_path).exit_code == 0
    r = run(app, "draw", plan_path, "--cluster", "h200:2", "--out", png, "--links", links)
    assert r.exit_code == 0, r.stderr
    for p in (png, links):
        data = p.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    r = run(app, "draw", plan_path, "--cluster", "h200:3", "--out", png)
    assert r.exit_code == 2 and "plan is for 16 ranks" in r.stderr


@pytest.mark.parametrize("spec", ["h200:2", "h200:16"])
def test_gantt_draws_multi_step_plans_by_rank_and_by_server(tmp_path, spec):
    from collsched import draw

    c = collsched.Cluster.parse(spec)
    m = collsched.workloads.make_workload("zipf:1", c.num_gpus, 1 << 20, 0)
    plan = collsched.plan_all_to_all(m, c, "hierarchical")
    r = sim.simulate(plan, c)
    out = draw.gantt(plan, c, tmp_path / "g.png", result=r)
    assert out.read_bytes()[:4] == b"\x89PNG" and out.stat().st_size > 10_000
    cols = draw.transfer_columns(plan)
    assert len(cols["src"]) == plan.num_transfers and int(cols["step"].max()) + 1 == plan.num_steps
    from types import SimpleNamespace

    short = SimpleNamespace(time_s=r.time_s, transfer_start_s=np.asarray(r.transfer_start_s)[:1],
                            transfer_end_s=np.asarray(r.transfer_end_s)[:1], step_times=r.step_times)
    with pytest.raises(ValueError, match="transfer times"):
        draw.gantt(plan, c, tmp_path / "bad.png", result=short)


def test_link_utilisation_groups_links_into_classes(tmp_path):
    from collsched import draw

    util = {"nic_up[0]": 0.5, "nic_up[1]": 0.7, "nic_down[0]": 0.1, "scaleup 3->4": [0.2, 0.4]}
    out = draw.link_utilisation(util, tmp_path / "l.png")
    assert out.stat().st_size > 5_000
    assert draw._link_class("nic_up[12]") == "nic_up" and draw._link_class("scaleup 3->4") == "scaleup"
    with pytest.raises(ValueError, match="no link utilisation"):
        draw.link_utilisation({}, tmp_path / "e.png")


def test_skew_statistics_appear_in_traffic_and_simulate(app, monkeypatch):
    """MTM and Gini come from collsched.skew (SABRE's area); a stand-in is used until it is merged."""
    from collections import namedtuple

    from collsched import skew

    if not hasattr(skew, "mtm"):
        MTM = namedtuple("MTM", "send recv overall")
        monkeypatch.setattr(skew, "mtm", lambda m, c: MTM(1.5, 2.0, 2.0), raising=False)
        monkeypatch.setattr(skew, "gini", lambda m: 0.25, raising=False)
    doc = json.loads(run(app, "traffic", "-c", "h200:2", "-w", "hot:1.2", "-m", "1MiB", "--json").stdout)
    assert set(doc["mtm"]) == {"send", "recv", "overall"} and all(isinstance(v, float) for v in doc["mtm"].values())
    assert doc["mtm"]["overall"] >= 1.0 and 0.0 <= doc["gini"] <= 1.0
    r = run(app, "simulate", "-c", "h200:2", "-w", "hot:1.2", "-m", "1MiB", "-a", "fanout")
    assert r.exit_code == 0 and "MTM send" in r.stdout and "Gini" in r.stdout
    sim_doc = json.loads(run(app, "simulate", "-c", "h200:2", "-w", "hot:1.2", "-m", "1MiB", "-a", "fanout", "--json").stdout)
    assert sim_doc["mtm"] == doc["mtm"]
