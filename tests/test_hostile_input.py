"""Hostile files and a new user's mistakes (issue 48, items 4 and 5): every file the CLI or the
API reads is bounded before it is read, every output path fails on one line, and names that do
not exist are refused where they are given."""
from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest
from typer.testing import CliRunner

import collsched
from collsched import traffic
from collsched.cli import _register_all, app
from collsched.guard import ResourceLimitError
from collsched.planning import load_plan

_register_all()
TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
HUGE = 100 * 2**20  # a 100 MB file: sparse, so creating it costs nothing


def _cli(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def _one_line_exit_2(r, *words):
    assert r.exit_code == 2, (r.exit_code, r.output)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def _sparse(path, size: int = HUGE, head: bytes = b""):
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(size)
    return path


def _small_plan():
    return collsched.plan_all_to_all(traffic.uniform(8, 4096, 1), "h200:1", "fanout")


# ------------------------------------------------------------------ files bounded before they are read

@pytest.mark.parametrize("name, head", [("p.json", b"{"), ("p.bin", b"CSPLAN01"), ("m.csv", b"1,2\n"),
                                        ("m.npy", b"\x93NUMPY")])
def test_a_100mb_file_is_refused_before_it_is_read(tmp_path, name, head):
    path = _sparse(tmp_path / name, head=head)
    plan = name.startswith("p.")
    t0 = time.perf_counter()
    with pytest.raises(ResourceLimitError, match="100.0 MiB file"):
        load_plan(path, max_memory="64MiB") if plan else traffic.load(path, max_memory="64MiB")
    took = time.perf_counter() - t0
    assert took < 2.0, took  # (a read would not be slow here, but its memory would show in CI's limits)
    r = _cli("verify", path, "--max-memory", "64MiB") if plan else \
        _cli("traffic", "-c", "h200:1", "-w", path, "--max-memory", "64MiB")
    _one_line_exit_2(r, "100.0 MiB file", "--max-memory")


def test_a_huge_declared_npy_shape_is_refused_from_the_header(tmp_path):
    path = tmp_path / "m.npy"
    header = {"descr": "<u8", "fortran_order": False, "shape": (1 << 20, 1 << 20)}
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, header)  # the header alone: the data is 8 TiB
        f.write(b"\0" * 64)
    t0 = time.perf_counter()
    with pytest.raises(ResourceLimitError, match="1048576 GPUs"):
        traffic.load(path)
    assert time.perf_counter() - t0 < 2.0
    with pytest.raises(ValueError, match="is 1048576×1048576 but the cluster has 8 GPUs"):
        traffic.load(path, ranks=8)


@pytest.mark.parametrize("header, words", [
    ({"descr": "<u8", "fortran_order": False, "shape": (4, 4)}, "truncated or damaged"),
    ({"descr": "|O", "fortran_order": False, "shape": (2, 2)}, "integer byte counts"),
    ({"descr": "<u8", "fortran_order": False, "shape": (4, 2)}, "declares shape (4, 2)"),
    ({"descr": "<c16", "fortran_order": False, "shape": (2, 2)}, "integer byte counts"),
])
def test_npy_headers_are_checked_before_numpy_reads_the_data(tmp_path, header, words):
    path = tmp_path / "m.npy"
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, header)
        f.write(b"\0" * 8)
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        traffic.load(path)


def test_a_wide_csv_row_is_refused_before_it_is_split(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("0," * 999_999 + "0\n")  # declares a 10^6 × 10^6 matrix
    t0 = time.perf_counter()
    with pytest.raises(ResourceLimitError, match="1000000 GPUs"):
        traffic.load(path, max_memory="1GiB")
    assert time.perf_counter() - t0 < 2.0


def test_csv_rows_beyond_the_square_are_refused(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("1,2\n3,4\n5,6\n")
    with pytest.raises(ValueError, match="must be square"):
        traffic.load(path)


@pytest.mark.parametrize("name", ["p.json", "m.npy", "topo.json"])
def test_a_device_is_not_read_as_a_file(tmp_path, name):
    path = tmp_path / name
    path.symlink_to("/dev/zero")  # endless: reading it whole would never finish
    r = {"p.json": lambda: _cli("verify", path), "m.npy": lambda: _cli("traffic", "-c", "h200:1", "-w", path),
         "topo.json": lambda: _cli("forest", "-t", path)}[name]()
    _one_line_exit_2(r, "is not a regular file")


def test_load_plan_refuses_a_device_and_takes_max_memory(tmp_path):
    with pytest.raises(ValueError, match="not a regular file"):
        load_plan("/dev/zero")
    p = tmp_path / "p.json"
    p.write_text(_small_plan().to_json())
    assert load_plan(p).num_ranks == 8
    with pytest.raises(ResourceLimitError, match="reading plan file"):
        load_plan(p, max_memory=100)


# ------------------------------------------------------------------ verify: impossible and unknown fields

def test_verify_refuses_an_unknown_top_level_field(tmp_path):
    doc = json.loads(_small_plan().to_json())
    doc["schedule_note"] = "hand-edited"
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    _one_line_exit_2(_cli("verify", path), "unknown field `schedule_note`")


def test_verify_refuses_an_impossible_scratch_size(tmp_path):
    doc = json.loads(_small_plan().to_json())
    doc["scratch_bytes"][3] = 2**48
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    r = _cli("verify", path)
    assert r.exit_code == 1 and "rank 3's scratch_bytes is 281474976710656" in r.stdout, r.output
    doc["scratch_bytes"][3] = 2**48 - 1  # large, but a size a device could in principle hold
    path.write_text(json.dumps(doc))
    assert _cli("verify", path).exit_code == 0


def test_a_damaged_binary_plan_is_reported_as_corrupted(tmp_path):
    plan = _small_plan()
    raw = bytearray(plan.to_binary())
    at = 8 + 8 + len(plan.algorithm) + 4 + 8 + 1  # the matrix's rank count
    raw[at + 7] = 0x55
    path = tmp_path / "p.bin"
    path.write_bytes(bytes(raw))
    line = _one_line_exit_2(_cli("verify", path), "binary plan is corrupted")
    assert "matrix of" not in line


# ------------------------------------------------------------------ output paths: one line, exit 2

@pytest.mark.parametrize("args", [
    ["traffic", "-c", "h200:1", "-o", "{missing}/m.npy"],
    ["plan", "-c", "h200:1", "-a", "fanout", "-o", "{missing}/p.json"],
    ["plan", "-c", "h200:1", "-a", "fanout", "-o", "{dir}"],
    ["draw", "{plan}", "-c", "h200:1", "-o", "{missing}/g.png"],
    ["draw", "{plan}", "-c", "h200:1", "-o", "{dir}/g.png", "--links", "{missing}/l.png"],
    ["forest", "-t", "h100:1", "--xml", "{missing}/ag.xml"],
    ["forest", "-t", "h100:1", "--draw", "{dir}"],
    ["bench", "-o", "{missing}/rows.json"],
    ["calibrate", "-o", "{missing}/cal.json"],
    ["testbed", "fit", "--json", "{missing}/cal.json"],
    ["testbed", "calibrate", "--out", "{missing}/network.json"],
])
def test_an_unwritable_output_path_is_one_line_and_exit_2(tmp_path, args):
    plan = tmp_path / "p.json"
    plan.write_text(_small_plan().to_json())
    subs = {"missing": str(tmp_path / "no" / "such"), "dir": str(tmp_path), "plan": str(plan)}
    r = _cli(*[a.format(**subs) for a in args])
    _one_line_exit_2(r, "cannot write" if "{missing}" in " ".join(args) else "is a directory")


# ------------------------------------------------------------------ a new user's defects

def test_duplicate_cluster_keys_are_refused():
    with pytest.raises(ValueError, match="key 'nic' is given twice"):
        collsched.Cluster.parse("h200:2,nic=100Gbps,nic=400Gbps")
    _one_line_exit_2(_cli("traffic", "-c", "h200:1,gpus=4,gpus=8"), "given twice")


def test_testbed_run_takes_the_short_flags():
    # --iters 0 is refused before anything is built, after the flags were parsed.
    r = _cli("testbed", "run", "-w", "balanced", "-m", "1KiB", "-a", "fanout", "--iters", "0")
    _one_line_exit_2(r, "--iters must be ≥ 1")


def test_check_algorithm_lists_only_real_names():
    from collsched.planning import check_algorithm

    names = [n for n, _ in collsched.all_to_all_algorithms()]
    assert "auto" in names and "direct" not in names
    for n in names:
        assert check_algorithm(n) == n
    with pytest.raises(ValueError, match="unknown all-to-all algorithm 'direct'"):
        check_algorithm("direct")


def _import_torchtitan_dispatcher():
    """collsched.moe.torchtitan, imported in this (pytest's) process as the CPU ranks that
    test_moe_torchtitan forks from it expect: torchtitan binds its device type when first
    imported (``torch._utils._get_available_device_type``, else "cuda"), and forked ranks
    inherit the modules, so a first import here must see "cpu" (tests/_torchtitan_model.py)."""
    import sys

    import torch._utils

    saved = torch._utils._get_available_device_type
    if "torchtitan" not in sys.modules:
        torch._utils._get_available_device_type = lambda: "cpu"
    try:
        return pytest.importorskip("collsched.moe.torchtitan", exc_type=ImportError)
    finally:
        torch._utils._get_available_device_type = saved


def test_torchtitan_config_refuses_an_unknown_algorithm_when_built():
    tt = _import_torchtitan_dispatcher()
    cfg = tt.CollschedTokenDispatcher.Config
    assert cfg(num_experts=8, top_k=2, algorithm="fast").algorithm == "fast"
    for field, value in (("algorithm", "direct"), ("exchange", "a2a"), ("dedup", "host"), ("schedule", "slow")):
        with pytest.raises(ValueError, match=field if field != "algorithm" else "unknown all-to-all algorithm"):
            cfg(num_experts=8, top_k=2, **{field: value})


def test_misspelt_algorithm_fails_on_every_call_and_errors_read_the_same_on_every_rank():
    pytest.importorskip("torch")
    from collsched.comm.launch import run_local

    res = run_local("_hostile_scenarios:misspelt_algorithm_and_one_bad_rank", 4, timeout_s=90,
                    extra_pythonpath=[TESTS_DIR])
    for size in ("small", "large"):
        texts = {r[size] for r in res}
        assert len(texts) == 1, texts  # the same text on every rank
        text = texts.pop()
        assert text.startswith("CollectiveInputError") and "unknown all-to-all algorithm (known: " in text, text
    for r in res:
        assert r["ok"] == r["ok_planned"] == ""
        assert r["stats"] == ("fanout", "eager")  # the path that ran, beside the algorithm asked for
        assert r["stats_planned"] == ("fanout", "planned", "fanout")
    assert len({r["one_bad"] for r in res}) == 1, [r["one_bad"] for r in res]
    assert "rank 1: bad argument" in res[0]["one_bad"]
    assert res[1]["detail"] == "rank 1: input_split_sizes must be a sequence of integers"
    assert all(r["detail"] is None for k, r in enumerate(res) if k != 1)


def test_a_usage_error_is_one_line_from_the_command_line():
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(os.path.dirname(TESTS_DIR), "python"),
                                                       os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-m", "collsched.cli", "testbed", "run", "--servers", "two"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2 and r.stdout == "", (r.returncode, r.stdout)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: Invalid value for '--servers'"), r.stderr
    assert "testbed run --help" in lines[0]
