"""collsched.fidelity and benchmarks/hardware_fidelity.py: the published measurements parse and
are self-consistent, the fit and validation sets share no source file, predict reproduces one row
of each operation, and the benchmark's --json has the documented schema."""
from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collsched import Cluster, fidelity

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "hardware_fidelity.py"
ROWS = fidelity.load_rows()


def _first(operation: str, set_: str | None = None) -> fidelity.Row:
    return next(r for r in ROWS if r.operation == operation and (set_ is None or r.set == set_) and not r.excluded)


def test_every_row_is_self_consistent():
    assert len(ROWS) > 100
    for r in ROWS:
        where = f"{r.file}:{r.line}"
        assert r.size_bytes > 0 and math.isfinite(r.measured_s) and r.measured_s > 0, where
        assert r.set in fidelity.SETS, where
        assert r.algorithm in fidelity.ALGORITHMS[r.operation], where
        assert Cluster.parse(r.cluster).num_gpus >= 4, where
        assert r.source and r.platform and r.workload, where
        assert r.excluded is None or len(r.excluded) > 20, f"{where}: an exclusion says why"


def test_medians_lie_within_their_samples():
    # FAST rows are medians over samples: the median time lies in [min, max], and algbw = size / time
    # up to the difference between the median of times and the median of bandwidths.
    fast = [r for r in ROWS if r.file.startswith("fast_amd")]
    assert fast
    for r in fast:
        d = {k: v for k, v in r.params}
        assert d["diagonal"] == "0"
        assert r.samples >= 1
    with open(fidelity.DATA_DIR / "fast_amd_fixed.csv", encoding="utf-8") as f:
        import csv

        for line in csv.DictReader(f):
            lo, mid, hi = float(line["min_s"]), float(line["measured_s"]), float(line["max_s"])
            assert lo <= mid <= hi
            if line["algorithm"] == "fast":  # steady: median of bandwidths ≈ size / median of times
                assert abs(int(line["size_bytes"]) / mid / 1e9 / float(line["measured_value"]) - 1) < 0.05


def test_single_sample_rows_convert_bandwidth_with_the_source_definition():
    # Rows quoted as GB/s: measured_s = bytes / bandwidth in the source's own convention.
    checked = 0
    for r in ROWS:
        if r.samples == 1 and r.measured_unit.startswith("GB/s"):
            assert r.size_bytes / r.measured_s / 1e9 == pytest.approx(float(r.measured_value), rel=1e-4), r
            checked += 1
    assert checked >= 10  # FLASH, FAST paper, DeepEP


def test_fit_and_validation_share_no_source_file():
    sets_of: dict = {}
    for r in ROWS:
        sets_of.setdefault(r.file, set()).add(r.set)
    assert all(len(s) == 1 for s in sets_of.values()), sets_of
    fit_sources = {r.source for r in ROWS if r.set == "fit"}
    val_sources = {r.source for r in ROWS if r.set == "validation"}
    assert fit_sources and val_sources and not (fit_sources & val_sources)
    # Issue 46's fitting set, each present: FAST fixed-size files, FLASH, DeepEP, SABRE, nccl-tests 4 × 8.
    fit_files = {r.file for r in ROWS if r.set == "fit"}
    assert {"fast_amd_fixed.csv", "flash_paper.csv", "deepep_normal.csv", "sabre_table1.csv",
            "vpbench_nccl_multinode.csv"} <= fit_files
    assert not any("random" in r.source or "skew" in r.source for r in ROWS if r.set == "fit")


def _extract_module():
    spec = importlib.util.spec_from_file_location(
        "hardware_extract", BENCH.parent / "data" / "hardware" / "extract.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_oci_rows_use_their_platforms_presets_and_nccl_tests_conventions():
    """Oracle's logs: each platform's own preset states the hardware; the rank count is the one
    nccl-tests' busbw factor names, and a log that disagrees with its setup is excluded."""
    ext = _extract_module()
    own = {"B300": "b300", "GB200": "gb200", "GB300": "gb300", "MI355X": "mi355x"}
    oci = [r for r in ROWS if r.file == "oci_quickstart_nccl_tests.csv"]
    assert {r.platform for r in oci} == set(own)
    for r in oci:
        assert r.cluster.split(":")[0] == own[r.platform], f"{r.file}:{r.line}"
        assert int(r.param("ranks")) == r.ranks == ext.cluster_ranks(r.cluster), f"{r.file}:{r.line}"
    # Logged (algbw, busbw) pairs: GB300's two racks (128 ranks, alltoall), B300's two nodes
    # (16 ranks, allreduce), and GB200's "2 Nodes on a Single Rack" allreduce, run with --np 8.
    assert ext.busbw_agrees("all_to_all", 128, 47.67, 47.30)
    assert ext.busbw_agrees("allreduce", 16, 408.82, 766.54)
    assert not ext.busbw_agrees("allreduce", 8, 452.90, 891.64)
    assert ext.ranks_from_busbw("allreduce", 452.90, 891.64) == 64
    gb200_2 = [r for r in oci if r.platform == "GB200" and r.operation == "allreduce" and r.ranks == 8]
    assert gb200_2 and all("64 ranks" in r.excluded for r in gb200_2)


def test_fanout_collapse_is_excluded_with_its_reason():
    big = [r for r in ROWS if r.file.startswith("fast_amd") and r.algorithm == "fanout" and r.size_bytes > 100e6]
    assert big and all(r.excluded and "collapse" in r.excluded for r in big)
    small = [r for r in ROWS if r.file.startswith("fast_amd") and r.algorithm == "fanout" and r.size_bytes < 100e6]
    assert small and not any(r.excluded for r in small)


def test_load_rows_filters_and_rejects(tmp_path):
    assert {r.set for r in fidelity.load_rows("fit")} == {"fit"}
    assert len(fidelity.load_rows("fit")) + len(fidelity.load_rows("validation")) == len(ROWS)
    with pytest.raises(ValueError, match="set must be one of"):
        fidelity.load_rows("train")
    with pytest.raises(ValueError, match="no measurement files"):
        fidelity.load_rows(data_dir=tmp_path)
    good = (fidelity.DATA_DIR / "sabre_table1.csv").read_text(encoding="utf-8").splitlines()
    for bad, match in ((("fanout", "warp"), "algorithm 'warp'"), (("perlmutter:1", "nope:1"), "cluster 'nope:1'"),
                       ((",fit,", ",train,"), "set must be one of"), ((",67108864,", ",-5,"), "positive")):
        (tmp_path / "x.csv").write_text("\n".join([good[0], good[1].replace(*bad)]) + "\n", encoding="utf-8")
        with pytest.raises(ValueError, match=match) as e:
            fidelity.load_rows(data_dir=tmp_path)
        assert "x.csv:2" in str(e.value)


@pytest.mark.parametrize("operation", fidelity.OPERATIONS)
def test_predict_each_operation(operation):
    r = _first(operation)
    t = fidelity.predict(r)
    assert math.isfinite(t) and t > 0
    assert fidelity.predict(r, model="fluid") > 0
    assert fidelity.predict(r) == t  # deterministic (and cached)


def test_extra_spec_reaches_the_cluster():
    # A bandwidth-bound MI300X row: a NIC at half the rate makes the prediction slower.
    r = next(r for r in ROWS if r.file == "flash_paper.csv")
    base = fidelity.predict(r)
    slow = fidelity.predict(r, extra_spec=",nic=50Gbps")
    assert slow > 1.8 * base
    # MoE plans are reused across rates (their shape depends on GPU counts only): the same rate
    # gives the same time, a slower NIC a slower RDMA-bound dispatch (EP32).
    moe = next(r for r in ROWS if r.operation == "moe_dispatch" and r.param("ep") == "32")
    assert fidelity.predict(moe, extra_spec=",nic=400Gbps") == fidelity.predict(moe)
    assert fidelity.predict(moe, extra_spec=",nic=200Gbps") > 1.3 * fidelity.predict(moe)
    # EP16 is bound by its NVLink forwarding, not by RDMA (half the count stays on the node).
    ep16 = next(r for r in ROWS if r.operation == "moe_dispatch" and r.param("ep") == "16")
    assert fidelity.predict(ep16, extra_spec=",nic=200Gbps") < 1.1 * fidelity.predict(ep16)
    assert fidelity.predict(ep16, extra_spec=",scaleup=100GB/s") > 1.6 * fidelity.predict(ep16)
    with pytest.raises(ValueError, match="start with ','"):
        fidelity.predict(r, extra_spec="nic=50Gbps")
    with pytest.raises(ValueError, match="warp"):
        fidelity.predict(r, extra_spec=",warp=1")
    with pytest.raises(ValueError, match="model must be one of"):
        fidelity.predict(r, model="quantum")


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1),
       workload=st.sampled_from(["balanced", "uniform", "zipf:0.8", "zipf:0.1", "zipf:0.99"]),
       power=st.integers(12, 22))
def test_fast_traffic_matrices_mirror_the_test(seed, workload, power):
    base = next(r for r in ROWS if r.file == "fast_amd_fixed.csv" and r.cluster == "mi300x:3")
    n = 24
    per_gpu = 2**power * 4 * (n - 1)
    r = dataclasses.replace(base, workload=workload, size_bytes=per_gpu)
    m = fidelity.traffic_matrix(r, seed=seed)
    assert m.shape == (n, n) and m.dtype == np.uint64
    assert not np.diag(m).any()
    assert (m % (512 * 4) == 0).all()  # whole 512-element blocks
    mean_pair = m.sum() / (n * (n - 1))
    # One integer scale factor: the mean pair lands within one factor's rounding plus the 512 alignment.
    assert 2**power * 4 * 0.9 - 1 <= mean_pair <= 2**power * 4 * 1.02 + 512 * 4
    if workload == "balanced":
        assert (m[~np.eye(n, dtype=bool)] == m[0, 1]).all()


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 1000), nodes=st.sampled_from([1, 2, 4]))
def test_deepep_counts_follow_the_routing(seed, nodes):
    tokens, experts, topk, g = 64, 256, 8, 8
    pairs, node_units, rank_units = fidelity.deepep_counts(nodes * g, g, tokens, experts, topk, seed)
    assert (pairs.sum(1) == tokens * topk).all()
    assert (rank_units <= pairs).all() and (rank_units <= tokens).all()
    assert (node_units.sum(1) >= tokens).all() and (node_units.sum(1) <= tokens * min(nodes, 4)).all()
    assert (node_units <= tokens).all()


def test_deepep_sizes_match_the_routing_expectation():
    # The CSV's byte counts came from a Monte Carlo of the same routing; the counts here agree.
    for r in (x for x in ROWS if x.operation == "moe_dispatch"):
        ep = int(r.param("ep"))
        pairs, node_units, rank_units = fidelity.deepep_counts(ep, 8, 512, 256, 8, seed=1)
        units = (rank_units.sum() if ep == 8 else node_units.sum()) / (ep * 512)
        assert units == pytest.approx(float(r.param("units_per_token")), rel=0.02), r.param("ep")


def _deepep_row(ep: int, operation: str = "moe_dispatch") -> fidelity.Row:
    return next(r for r in ROWS if r.operation == operation and r.param("ep") == str(ep))


@pytest.mark.parametrize("operation", ["moe_dispatch", "moe_combine"])
def test_deepep_plans_move_only_the_rows_that_cross_each_link(operation):
    # The benchmark counts a rank's own rows (EP8) and its own node's (EP16+); they cross no
    # NVLink / NIC. The plan's links carry only the others, and no permute copy is timed.
    from collsched.moe import sim as moe_sim

    for ep in (8, 16):
        r = _deepep_row(ep, operation)
        rb = int(r.param("row_bytes"))
        pairs, node_units, rank_units = fidelity._deepep_counts_cached(ep, 8, 4096, 256, 8, 0)
        tiers = fidelity._moe_plan(r, ep, 8, 0).bytes_per_tier()
        node = np.arange(ep) // 8
        if ep == 8:
            self_rows = int(np.trace(rank_units))
            assert tiers["scale_up"] == (int(rank_units.sum()) - self_rows) * rb
            assert tiers["local"] == self_rows * rb  # the self rows, and no permute of the pairs
            assert tiers["scale_up"] / ep == pytest.approx(7 / 8 * r.size_bytes, rel=0.02)
        else:
            remote = int(sum(node_units[i, s] for i in range(ep) for s in range(ep // 8) if s != node[i]))
            assert tiers["scale_out"] == remote * rb
            # two nodes: a token reaches both almost always, so half the count crosses the NIC
            assert tiers["scale_out"] / ep == pytest.approx(0.5 * r.size_bytes, rel=0.02)
    full = moe_sim._phases("deepep", pairs, node_units, rank_units, 8, rb)
    kept = fidelity.deepep_kernel_phases(full)
    assert [k for k, _ in full if k != "copy"] == [k for k, _ in kept] and len(kept) == len(full) - 1


def test_deepep_rows_run_on_the_h800_preset():
    rows = [r for r in ROWS if r.file == "deepep_normal.csv"]
    assert len(rows) == 8 and {r.cluster for r in rows} == {"h800:1", "h800:2", "h800:4", "h800:8"}
    for r in rows:
        assert Cluster.parse(r.cluster).num_gpus == int(r.param("ep"))
    peak = Cluster.parse("h800:2").to_dict()
    assert peak["nics_per_server"] == 8 and peak["nic_bw"] == 50 * 10**9


def _bench():
    spec = importlib.util.spec_from_file_location("hardware_fidelity", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_benchmark_json_schema():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert _bench().main(["--set", "all", "--source", "fast_paper", "--json"]) == 0
    doc = json.loads(out.getvalue())
    keys = {"source", "platform", "operation", "algorithm", "size_bytes", "measured_s", "predicted_s", "error",
            "excluded"}
    assert doc["rows"] and all(set(r) == keys for r in doc["rows"])
    for r in doc["rows"]:
        assert r["error"] == pytest.approx(r["predicted_s"] / r["measured_s"] - 1)
        assert r["excluded"] is None or isinstance(r["excluded"], str)
    assert {s["set"] for s in doc["summary"]} == {"validation"}
    assert all(s["rows"] >= 1 and s["max_abs_error"] >= s["mean_abs_error"] >= 0 for s in doc["summary"])


def test_benchmark_plot_and_markdown(tmp_path):
    pytest.importorskip("matplotlib")
    out = io.StringIO()
    png = tmp_path / "fid.png"
    with contextlib.redirect_stdout(out):
        _bench().main(["--source", "sabre", "--markdown", "--plot", str(png)])
    text = out.getvalue()
    assert "| fit | A100 (Perlmutter) | all_to_all | 4 |" in text and "sabre_table1" in text
    assert png.stat().st_size > 10_000
