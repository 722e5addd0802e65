"""A user's first hour (issue 35): no input eats the machine, no number is made up, one CLI
vocabulary, errors that name the field and the limit."""
from __future__ import annotations

import json
import time

import numpy as np
import pytest
from typer.testing import CliRunner

import collsched
from collsched import guard
from collsched.cli import _register_all, app

_register_all()


def _cli(*args):
    return CliRunner().invoke(app, list(args))


# ------------------------------------------------------------------ 1. resource guard

def test_oversized_simulate_is_refused_within_seconds_with_a_clear_message():
    t0 = time.perf_counter()
    r = _cli("simulate", "-c", "h200:1000", "-m", "1KiB")
    took = time.perf_counter() - t0
    assert r.exit_code == 2, r.output
    assert took < 10, took
    err = r.stderr
    assert "8000 GPUs" in err and "GiB of memory" in err and "--max-memory" in err, err
    assert "Traceback" not in r.output


def test_oversized_forest_is_refused_quickly():
    t0 = time.perf_counter()
    r = _cli("forest", "--topology", "h200:100000")
    assert r.exit_code == 2 and time.perf_counter() - t0 < 10
    assert "ForestColl generation for 800000 GPUs" in r.stderr and "--max-" in r.stderr, r.stderr


def test_max_memory_and_max_time_move_the_limit():
    est = guard.estimate_all_to_all(256, ["fanout"], simulate=True)
    guard.check(est, max_memory="64GiB", max_time=1e6)  # well above: passes
    with pytest.raises(guard.ResourceLimitError, match="--max-memory"):
        guard.check(est, max_memory="1MiB", max_time=1e6)
    with pytest.raises(guard.ResourceLimitError, match="--max-time"):
        guard.check(est, max_memory="64GiB", max_time=1e-6)
    with pytest.raises(ValueError, match="--max-memory"):
        guard.check(est, max_memory="lots")
    r = _cli("plan", "-c", "h200:2", "-a", "fanout", "--max-memory", "1KiB")
    assert r.exit_code == 2 and "above the limit of 1.0 KiB (--max-memory 1KiB)" in r.stderr, r.stderr


@pytest.mark.parametrize("gpus", [8, 64, 512, 4096])
def test_estimates_grow_with_the_cluster_and_cover_auto(gpus):
    small = guard.estimate_all_to_all(gpus, ["fanout"], simulate=False)
    big = guard.estimate_all_to_all(2 * gpus, ["fanout"], simulate=False)
    assert big.memory_bytes > 3 * small.memory_bytes and big.seconds > 3 * small.seconds
    assert guard.estimate_all_to_all(gpus, ["auto"], simulate=False).memory_bytes > small.memory_bytes
    sim = guard.estimate_all_to_all(gpus, ["fanout", "fast"], simulate=True)
    assert sim.seconds > small.seconds and "2 algorithms" in sim.what


def test_draw_is_guarded_too(tmp_path):
    c = collsched.Cluster.parse("h200:2")
    path = tmp_path / "p.json"
    collsched.planning.save_plan(collsched.plan_all_to_all(collsched.traffic.uniform(16, 1 << 20, 0), c, "fanout"), path)
    r = _cli("draw", str(path), "-c", "h200:2", "-o", str(tmp_path / "g.png"), "--max-time", "1e-9")
    assert r.exit_code == 2 and "simulating fanout on 16 GPUs would take" in r.stderr, r.stderr


def test_estimate_is_above_what_planning_and_simulating_really_take():
    """The guard must not refuse what fits: its estimate is an upper bound on a measured run."""
    import subprocess
    import sys

    code = ("import resource,collsched as cs;c=cs.Cluster.parse('h200:16');m=cs.traffic.uniform(128,1024,0);"
            "r0=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss;"
            "[cs.simulate(cs.plan_all_to_all(m,c,a),c) for a in ('fanout','fast','auto')];"
            "print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss-r0)*1024)")
    grown = int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    est = guard.estimate_all_to_all(128, ["fanout", "fast", "auto"], simulate=True)
    assert est.memory_bytes >= grown, (est, grown)


def test_long_work_shows_estimate_progress_and_summary_as_plain_lines_when_not_on_a_terminal(monkeypatch, capsys):
    # Before: off a terminal nothing appeared until the work was over (one summary line), so a
    # log of a long `forest` showed no estimate and no progress while it ran.
    monkeypatch.setattr(guard, "PROGRESS_AFTER_S", 0.0)
    est = guard.Estimate("planning 2 algorithms on 16 GPUs", 1 << 20, 0.5, "test")
    with guard.progress(est, total=2) as advance:
        assert capsys.readouterr().err == "planning 2 algorithms on 16 GPUs: started, estimated 0.5 s and 1.0 MiB\n"
        advance("one")
        assert capsys.readouterr().err.startswith("planning 2 algorithms on 16 GPUs: 1/2 done (one), ")
        advance("two")
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and lines[0].startswith("planning 2 algorithms on 16 GPUs: 2/2 done (two)")
    assert lines[1].startswith("planning 2 algorithms on 16 GPUs: ") and "(estimated 0.5 s, 1.0 MiB)" in lines[1]


def test_forest_off_a_terminal_prints_its_estimate_before_it_works(monkeypatch):
    monkeypatch.setattr(guard, "FOREST_SECONDS_1024", 1e9)  # every estimate long enough to report
    r = _cli("forest", "--topology", "h200:1", "--max-time", "1e12")
    assert r.exit_code == 0, r.output
    assert r.stderr.startswith("ForestColl generation for 8 GPUs: started, estimated "), r.stderr


# ------------------------------------------------------------------ 2. bench never invents a number

@pytest.mark.parametrize("args, flag", [
    (["-n", "0"], "-n/--iters"), (["-n", "-1"], "-n/--iters"), (["--warmup", "0"], "--warmup"),
    (["-r", "0"], "-r/--rounds"),
])
def test_bench_refuses_counts_below_one(args, flag):
    pytest.importorskip("torch")
    r = _cli("bench", *args)
    assert r.exit_code == 2, r.output
    assert flag in r.stderr and "at least 1" in r.stderr, r.stderr


def test_bench_minus_w_is_the_workload_as_everywhere_else(tmp_path):
    pytest.importorskip("torch")
    r = _cli("bench", "-w", "nonsense")
    assert r.exit_code == 2 and "unknown workload 'nonsense'" in r.stderr and ".csv" in r.stderr, r.stderr


def test_bench_default_set_streams_rows_with_auto_torch_and_the_nccl_tests_footer(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "rows.json"
    r = _cli("bench", "-b", "1KiB", "-e", "4KiB", "-f", "4", "-n", "2", "--warmup", "1", "--nprocs", "4",
             "--gpus-per-server", "2", "-w", "zipf:1.2", "-o", str(out))
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0].startswith("# collsched bench: 4 ranks") and "cluster h200:2,gpus=2" in lines[0]
    assert "custom:" not in r.stdout  # the preset as written, not Cluster.spec()
    assert lines[-1].startswith("# Avg bus bandwidth") and any(x.startswith("# Out of bounds values : 0 OK") for x in lines)
    data = json.loads(out.read_text())
    algs = [row["algorithm"] for row in data["rows"]]
    assert algs[0] == "torch" and "auto" in algs and "fanout" in algs
    for row in data["rows"]:
        assert "error" not in row, row
        assert row["wrong"] == 0 and row["time_us"] > 0
        if row["algorithm"] != "torch":
            assert 0 < row["exec_us"] <= row["time_us"], row  # by construction
    # every row printed exactly once (streamed, not again at the end)
    assert sum(1 for x in lines if x.split()[:1] == ["1024"]) == len(set(algs))


def test_bench_footer_averages_bus_bandwidth_per_method():
    from collsched.cli.bench import format_footer

    rows = [{"algorithm": "torch", "busbw_gbs": 1.0, "wrong": 0}, {"algorithm": "torch", "busbw_gbs": 3.0, "wrong": 0},
            {"algorithm": "fast", "busbw_gbs": 5.0, "wrong": 2}]
    text = format_footer({"rows": rows})
    assert "# Out of bounds values : 2 FAILED" in text
    assert "# Avg bus bandwidth    :    2.000  torch" in text and "5.000  fast" in text


# ------------------------------------------------------------------ 3. one CLI vocabulary

def _short_flags() -> dict[str, dict[str, str]]:
    """command -> {short flag: its first long name}, from the registered typer commands."""
    import typer.main

    group = typer.main.get_command(app)
    out = {}
    for name, cmd in group.commands.items():
        flags = {}
        for p in cmd.params:
            opts = list(getattr(p, "opts", [])) + list(getattr(p, "secondary_opts", []))
            longs = [o for o in opts if o.startswith("--")]
            for o in opts:
                if len(o) == 2 and o.startswith("-") and longs:
                    flags[o] = longs
        out[name] = flags
    return out


def test_short_flags_mean_the_same_in_every_command():
    seen: dict[str, tuple[str, list[str]]] = {}
    meaning = {"-c": "--cluster", "-w": "--workload", "-m": "--mean", "-a": ("--algorithm", "--algorithms"),
               "-o": "--out", "-O": "--option"}
    for cmd, flags in _short_flags().items():
        for short, longs in flags.items():
            want = meaning.get(short)
            if want is not None:
                want = want if isinstance(want, tuple) else (want,)
                assert any(w in longs for w in want), f"{cmd}: {short} is {longs}, elsewhere {want}"
            seen.setdefault(short, (cmd, longs))
    assert "-w" in _short_flags()["bench"] and "--workload" in _short_flags()["bench"]["-w"]


def test_workload_formats_are_one_list():
    from collsched import traffic, workloads
    from collsched.cli import bench

    assert workloads.FILE_SUFFIXES == traffic.FILE_SUFFIXES
    for s in traffic.FILE_SUFFIXES:
        assert f"<path>{s}" in workloads.ACCEPTED and s in workloads.HELP
    with pytest.raises(ValueError) as e:
        bench.workload_rows("m.txt", 4, 4096, 4)
    assert all(s in str(e.value) for s in traffic.FILE_SUFFIXES)


def test_bench_reads_a_csv_matrix(tmp_path):
    from collsched import traffic
    from collsched.cli import bench

    path = tmp_path / "m.csv"
    traffic.save(path, np.arange(16, dtype=np.uint64).reshape(4, 4))
    rows = bench.workload_rows(str(path), 4, 4096, 4)
    assert rows.shape == (4, 4) and rows[0, 0] == 0 and rows[3, 3] > rows[0, 1]


def test_forest_topology_reads_a_json_file(tmp_path):
    from collsched import forest

    path = tmp_path / "topo.json"
    path.write_text(forest.as_graph("a100:2").to_json())
    r = _cli("forest", "--topology", str(path), "--json")
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    assert s["gpus"] == 16 and s["algbw_gbps"] > 0 and s["topology"] == str(path)
    r = _cli("forest", "-c", str(tmp_path / "nope.json"))
    assert r.exit_code == 2 and "does not exist" in r.stderr
    r = _cli("forest", "-t", "topo")
    assert r.exit_code == 2 and "graph JSON file (topo.json)" in r.stderr, r.stderr


def test_forest_inline_json_title_is_short():
    from collsched import forest

    r = _cli("forest", "--topology", forest.as_graph("a100:1").to_json(), "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["topology"].endswith("(JSON, 8 GPUs)")


def test_default_algorithm_is_auto_in_cli_python_and_runtime():
    import inspect

    c = collsched.Cluster.parse("h200:2")
    m = collsched.traffic.uniform(16, 4096, 1)
    assert collsched.plan_all_to_all(m, c).algorithm == "auto"
    r = _cli("plan", "-c", "h200:2", "-m", "4KiB")
    assert r.exit_code == 0 and r.stdout.startswith("auto on h200"), r.output
    pytest.importorskip("torch")
    from collsched.comm import api

    assert inspect.signature(api.all_to_all_single).parameters["algorithm"].default == "auto"


def test_options_dict_is_accepted_by_every_planning_entry_point():
    c = collsched.Cluster.parse("h200:2")
    m = collsched.traffic.zipf(16, 1.1, 1 << 20, 2)
    a = collsched.plan_all_to_all(m, c, "fast", options={"min_stage_bytes": "4MiB"})
    b = collsched.plan_all_to_all(m, c, "fast", min_stage_bytes="4MiB")
    assert a.hash == b.hash and a.meta["min_stage_bytes"] == b.meta["min_stage_bytes"]
    a.verify()
    with pytest.raises(ValueError, match="given twice"):
        collsched.plan_all_to_all(m, c, "fast", options={"min_stage_bytes": "4MiB"}, min_stage_bytes="8MiB")
    p = collsched.plan_collective("allgather", 16, 1 << 12, "ring", topology=c, options={"chunks": 2})
    assert p.hash == collsched.plan_collective("allgather", 16, 1 << 12, "ring", topology=c, chunks=2).hash
    p.verify()
    with pytest.raises(ValueError, match="unknown collective option 'warp'"):
        collsched.plan_collective("allgather", 16, 1 << 12, "ring", topology=c, options={"warp": 1})
    from collsched import forest

    s = forest.schedule("a100:1")
    f = forest.plan_allreduce(s, 1 << 14, options={"chunks": 2, "elem_bytes": 2})
    assert f.hash == forest.plan_allreduce(s, 1 << 14, elem_bytes=2, chunks=2).hash
    f.verify()
    with pytest.raises(ValueError, match="unknown ForestColl option 'warp'"):
        forest.plan_allgather(s, 1 << 12, options={"warp": 1})


def test_version():
    r = _cli("--version")
    assert r.exit_code == 0 and r.stdout.strip() == f"collsched {collsched.__version__}"


# ------------------------------------------------------------------ 4. errors a person can act on

@pytest.mark.parametrize("args, words", [
    (["traffic", "-c", "h200:1", "-m", "abc"], ["-m/--mean", "expected a number with an optional unit"]),
    (["traffic", "-c", "h200:1", "-m", "5XB"], ["-m/--mean", "unknown unit 'XB'", "KiB, MiB"]),
    # Before: 1.5 was read as 1 byte ("mean pair 0 B" after the workload's rounding), and 64Mb as
    # 64 megabytes though a lowercase b means bits.
    (["traffic", "-c", "h200:1", "-m", "1.5"], ["-m/--mean", "'1.5' is not a whole number of bytes"]),
    (["traffic", "-c", "h200:1", "-m", "64Mb"], ["-m/--mean", "lowercase b means bits", "write 64MB", "or 64MiB"]),
    (["traffic", "-c", "h200:1", "-m", "99999999999999999999999TB"], ["-m/--mean", "at most 2^64-1"]),
    (["traffic", "-c", "h200:1", "--seed", "-1"], ["--seed", "[0, 2^64)"]),
    (["simulate", "-c", "h200:10000000000000000000000"], ["server count", "too large", "at most 4294967295"]),
    (["simulate", "-c", "h200:2,nic=abc"], ["cluster field 'nic'", "bandwidth such as 400Gbps"]),
    (["simulate", "-c", "h200:2,alpha_scaleout=fast"], ["cluster field 'alpha_scaleout'", "duration"]),
    (["simulate", "-c", "h200:2,gpus=99999999999"], ["cluster field 'gpus'", "too large"]),
])
def test_cluster_errors_name_the_field_and_the_limit(args, words):
    r = _cli(*args)
    assert r.exit_code == 2, r.output
    for w in words:
        assert w in r.stderr, r.stderr


def test_negative_bandwidth_in_a_topology_file_names_the_link_not_serde(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"nodes": [{"name": "a", "kind": "compute"}, {"name": "b", "kind": "compute"}],
                                "links": [{"src": "a", "dst": "b", "bw": -5}, {"src": "b", "dst": "a", "bw": 5}]}))
    r = _cli("forest", "--topology", str(path))
    assert r.exit_code == 2
    assert "link a -> b: field 'bw' is -5" in r.stderr and "untagged" not in r.stderr, r.stderr
    for bad, words in (([1], "expected bytes/s"), ("fast", "does not start with a number"), (1.5, "whole bytes/s")):
        from collsched import forest

        doc = json.loads(path.read_text())
        doc["links"][0]["bw"] = bad
        with pytest.raises(ValueError) as e:
            forest.as_graph(doc)
        assert "field 'bw'" in str(e.value) and words in str(e.value) and "variant" not in str(e.value)


def test_a_text_file_is_not_reported_as_a_truncated_plan(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("hello\n")
    r = _cli("verify", str(path))
    assert r.exit_code == 2 and "not a collsched plan" in r.stderr and "truncated" not in r.stderr, r.stderr


def test_verify_rejects_an_all_to_all_plan_with_no_gpus_per_server(tmp_path):
    c = collsched.Cluster.parse("h200:1")
    doc = json.loads(collsched.plan_all_to_all(collsched.traffic.uniform(8, 100, 0), c, "fanout").to_json())
    doc["gpus_per_server"] = 0
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    r = _cli("verify", str(path))
    assert r.exit_code == 1 and "malformed plan: gpus_per_server is 0" in r.stdout, r.output


def test_a_text_file_named_npy_gets_no_pickle_hint(tmp_path):
    path = tmp_path / "m.npy"
    path.write_text("1 2\n3 4\n")
    r = _cli("traffic", "-c", "h200:1", "-w", str(path))
    assert r.exit_code == 2 and "allow_pickle" not in r.stderr and ".csv" in r.stderr, r.stderr


@pytest.mark.parametrize("call, words", [
    (lambda: collsched.traffic.zipf(8, 1.2, -5), "mean must be non-negative"),
    (lambda: collsched.traffic.zipf(8, 1.2, 1.5), "mean must be a whole number"),
    (lambda: collsched.traffic.uniform(8, 2**70), "mean is too large"),
    (lambda: collsched.traffic.uniform(8, 100, seed=-1), "seed must be non-negative"),
    (lambda: collsched.traffic.hot_experts(8, tokens_per_rank=2.5), "tokens_per_rank must be a whole number"),
    (lambda: collsched.traffic.balanced(8, "64MiB"), "bytes_per_pair must be a whole number"),
])
def test_generator_arguments_are_checked_not_truncated_or_overflowed(call, words):
    with pytest.raises(ValueError) as e:
        call()
    assert words in str(e.value)
    assert collsched.traffic.zipf(8, 1.2, 100.0).sum() == collsched.traffic.zipf(8, 1.2, 100).sum()


@pytest.mark.parametrize("args", [["clusters", "--json"], ["clusters"]])
def test_a_closed_pipe_ends_the_command_quietly(args):
    # `collsched clusters --json | head` ended with "error: [Errno 32] Broken pipe" (exit 2).
    # Here the reader is gone before the first write, so every write fails, the same way.
    import os
    import subprocess
    import sys

    r, w = os.pipe()
    os.close(r)
    try:
        proc = subprocess.run([sys.executable, "-m", "collsched.cli", *args], stdout=w, stderr=subprocess.PIPE,
                              text=True, timeout=120)
    finally:
        os.close(w)
    assert proc.stderr == "", proc.stderr  # no "error: [Errno 32] Broken pipe", no "Exception ignored"
    assert proc.returncode == 1  # click's code for a closed stdout (not 2: the input was fine)
