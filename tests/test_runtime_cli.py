"""The runtime's commands: bench (nccl-tests-style) and demo, on small local groups."""
from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from typer.testing import CliRunner  # noqa: E402

from collsched.cli.bench import BenchConfig, format_table, run_bench, sizes, workload_rows  # noqa: E402


def test_size_sweep_is_geometric_and_validated():
    assert sizes(1024, 16384, 4) == [1024, 4096, 16384]
    assert sizes(1000, 1000, 2) == [1000]
    with pytest.raises(ValueError):
        sizes(0, 10, 2)
    with pytest.raises(ValueError):
        sizes(10, 5, 2)
    with pytest.raises(ValueError):
        sizes(1, 5, 1)


@pytest.mark.parametrize("workload", ["balanced", "uniform", "zipf:1.5", "hot:1.2"])
def test_workload_rows_hit_the_requested_mean(workload):
    rows = workload_rows(workload, 8, 1 << 20, 4, seed=1)
    assert rows.shape == (8, 8) and (rows >= 0).all()
    mean_bytes = rows.sum() * 4 / 8
    assert 0.99 * (1 << 20) - 8 * 8 * 4 <= mean_bytes <= (1 << 20)


def test_workload_from_matrix_file(tmp_path):
    m = np.arange(16, dtype=np.int64).reshape(4, 4)
    path = tmp_path / "m.npy"
    np.save(path, m)
    rows = workload_rows(str(path), 4, 4096, 4)
    assert rows[0, 0] == 0 and rows[3, 3] >= rows[0, 1]
    with pytest.raises(ValueError, match="expected 8×8"):
        workload_rows(str(path), 8, 4096, 4)
    with pytest.raises(ValueError, match="unknown workload"):
        workload_rows("nonsense", 4, 4096, 4)


def test_bench_sweep_on_four_ranks_has_no_wrong_elements():
    cfg = BenchConfig(min_bytes=4096, max_bytes=65536, factor=16, workload="zipf:1.2", warmup=1, iters=2,
                      dtype="bfloat16", cluster="h200:2,gpus=2")
    res = run_bench(cfg, nprocs=4, gpus_per_server=2, timeout_s=120)
    rows = res["rows"]
    assert {r["algorithm"] for r in rows} >= {"torch", "fanout"}
    assert {r["size"] for r in rows} == {4096, 65536}
    for r in rows:
        assert "error" not in r, r
        assert r["wrong"] == 0 and r["time_us"] > 0 and r["busbw_gbs"] == pytest.approx(r["algbw_gbs"] * 3 / 4)
    table = format_table(res)
    assert "algbw" in table and "#wrong" in table and "vs torch" in table


def test_cli_bench_writes_json(tmp_path):
    from collsched.cli import _register_all, app

    _register_all()
    out = tmp_path / "b.json"
    r = CliRunner().invoke(app, ["bench", "-b", "2KiB", "-e", "2KiB", "-n", "1", "--warmup", "1", "--nprocs", "4",
                                 "--gpus-per-server", "2", "--algorithms", "torch,fanout", "--json", str(out)])
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    assert [row["algorithm"] for row in data["rows"]] == ["torch", "fanout"]
    bad = CliRunner().invoke(app, ["bench", "-b", "4KiB", "-e", "1KiB"])
    assert bad.exit_code != 0
    bad = CliRunner().invoke(app, ["bench", "--backend", "mpi"])
    assert bad.exit_code != 0 and "unknown backend 'mpi'" in bad.output


def test_table_says_when_ranks_share_a_gpu():
    res = {"rows": [], "ranks": 8, "backend": "nccl", "device": "cuda:0", "cluster": "h200:2,gpus=4"}
    assert "share each GPU" not in format_table(dict(res, ranks_per_gpu=1))
    assert "8 ranks share each GPU" in format_table(dict(res, ranks_per_gpu=8))


def test_nccl_ranks_without_a_gpu_say_so():
    import os

    from collsched.comm.launch import run_local

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    res = run_local("_runtime_scenarios:noop", 2, gpus_per_server=2, timeout_s=60, backend="nccl",
                    extra_pythonpath=[os.path.dirname(os.path.abspath(__file__))], raise_on_failure=False)
    assert all(x.kind == "raised" and "needs a CUDA GPU" in x.message for x in res), [str(x) for x in res]


def test_demo_runs_and_outputs_match():
    from collsched.cli.demo import run_demo

    assert run_demo(tokens_per_rank=128, iters=1, timeout_s=120) == 0


def test_cli_bench_planning_table():
    from collsched.cli import _register_all, app

    _register_all()
    r = CliRunner().invoke(app, ["bench", "--planning"])
    assert r.exit_code == 0, r.output
    assert "fanout" in r.output and "hit(us)" in r.output and "p2p compile(ms)" in r.output


def test_launcher_spawn_mode_and_failures_are_reported():
    import os

    from collsched.comm.launch import RankFailure, run_local

    tests_dir = os.path.dirname(os.path.abspath(__file__))
    res = run_local("_runtime_scenarios:noop", 2, gpus_per_server=2, timeout_s=120, extra_pythonpath=[tests_dir],
                    start_method="spawn")
    assert all(isinstance(x, dict) for x in res)
    res = run_local("_runtime_scenarios:no_such_function", 2, gpus_per_server=2, timeout_s=60,
                    extra_pythonpath=[tests_dir], raise_on_failure=False)
    assert all(isinstance(x, RankFailure) and x.kind == "raised" and x.exc_type == "AttributeError" for x in res)


def _bench_cli(monkeypatch, args):
    """``collsched bench ARGS`` in this process, failing the test if it spawns any rank."""
    from collsched.cli import _register_all, app
    from collsched.comm import launch

    def spawned(*a, **k):
        raise AssertionError("ranks were spawned")

    monkeypatch.setattr(launch, "run_local", spawned)
    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR"):  # not under torchrun
        monkeypatch.delenv(var, raising=False)
    _register_all()
    return CliRunner().invoke(app, ["bench", *args])


def test_cli_bench_nccl_without_a_gpu_exits_2_at_once(monkeypatch):
    # Before: 8 ranks spawned, each failed in NCCL after seconds, and the command exited 3.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    r = _bench_cli(monkeypatch, ["--backend", "nccl", "-b", "1KiB", "-e", "1KiB", "-a", "fanout"])
    assert r.exit_code == 2, r.output
    assert "--backend nccl needs a CUDA GPU" in r.output and "--backend gloo" in r.output


def test_cli_bench_refuses_sizes_that_do_not_fit_before_spawning(monkeypatch):
    # Before: `-b 64GiB -e 64GiB` spawned the ranks, which died with "can't allocate ...", exit 3.
    r = _bench_cli(monkeypatch, ["-b", "64GiB", "-e", "64GiB", "-n", "1", "-a", "fanout"])
    assert r.exit_code == 2, r.output
    assert "collsched bench at -e 64.0 GiB per rank would need about" in r.output
    assert "8 ranks on this machine" in r.output and "--max-memory" in r.output
    # An explicit limit is honoured, and named.
    r = _bench_cli(monkeypatch, ["-b", "1MiB", "-e", "1MiB", "-a", "fanout", "--max-memory", "1MiB"])
    assert r.exit_code == 2 and "(--max-memory 1MiB)" in r.output, r.output


def test_bench_estimate_scales_with_ranks_size_and_dtype():
    from collsched.guard import estimate_bench

    small = estimate_bench(8, 1 << 20, 4)
    assert small.memory_bytes == 8 * (1 << 20) * 11  # 7 copies + 16 B of pattern per 4-byte element
    assert estimate_bench(16, 1 << 20, 4).memory_bytes == 2 * small.memory_bytes
    assert estimate_bench(8, 1 << 20, 1).memory_bytes > small.memory_bytes  # more elements per byte


def test_bench_table_names_what_auto_ran():
    from collsched.cli.bench import format_row

    row = {"size": 4096, "count": 1024, "type": "float32", "algorithm": "auto", "planned_by": "balanced_direct",
           "time_us": 10.0, "algbw_gbs": 1.0, "busbw_gbs": 0.9, "wrong": 0}
    assert "auto (balanced_direct)" in format_row(row, 20.0)  # before: "auto" only (the JSON had planned_by)
    assert " fanout " in format_row(dict(row, algorithm="fanout", planned_by="fanout"), 20.0)
    assert "auto (native)" in format_row(dict(row, planned_by="native", error="x"), None)
