"""`collsched calibrate --network` without a fabric: the shape and rates recovered from synthetic
measurement matrices (property tests), the stored file and the `calibrated` spec, the CLI's
errors, and one short run on local ranks (the testbed run is in test_testbed_network.py)."""
from __future__ import annotations

import json
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collsched import _core
from collsched import network
from collsched.netshape import (MIN_TIER_RATIO, Shape, ShapeError, best_split, fit, infer_nics, infer_shape,
                                slope_rate, tcp_wire_efficiency, tier_pairs)


def synthetic(servers: int, gpus: int, nic: float, up: float, lat_out: float, lat_up: float, noise: float,
              seed: int, hosts=None) -> dict:
    """A probe result for S×G ranks whose pairs measure ``nic``/``up`` bytes/s and ``lat_*`` seconds,
    each times a factor within ±``noise`` (upper triangle filled, as the probe fills it)."""
    rng = random.Random(seed)
    P = servers * gpus

    def jitter(v):
        return v * (1 + rng.uniform(-noise, noise))

    lat = [[None] * P for _ in range(P)]
    bw = [[None] * P for _ in range(P)]
    for i in range(P):
        for j in range(i + 1, P):
            same = i // gpus == j // gpus
            lat[i][j] = jitter(lat_up if same else lat_out)
            bw[i][j] = jitter(up if same else nic)
    return {"world": P, "backend": "gloo", "mtu": 1500, "hosts": hosts or ["h"] * P, "latency_s": lat, "probe_bps": bw}


def with_tiers(raw: dict, shape: Shape, nic: float, up: float, noise: float, seed: int) -> dict:
    """``raw`` plus the careful per-tier measurements the probe takes after the shape (each pair's
    slope rate within ±noise of the truth)."""
    rng = random.Random(seed + 1)
    tiers = {}
    for tier, pairs in tier_pairs(shape).items():
        rate = nic if tier == "scaleout" else up
        tiers[tier] = [{"pair": list(p), "rate_bps": rate * (1 + rng.uniform(-noise, noise))} for p in pairs]
    return dict(raw, shape=shape.to_dict(), tiers=tiers, incast=None, copy_bps=1e9)


shapes = st.tuples(st.integers(2, 6), st.integers(2, 8))


@settings(max_examples=60, deadline=None)
@given(shape=shapes, nic=st.floats(1e6, 1e11), ratio=st.floats(2.0, 50.0), lat_out=st.floats(1e-6, 1e-2),
       noise=st.floats(0.0, 0.15), seed=st.integers(0, 10**6))
def test_shape_and_nic_rate_are_recovered_from_noisy_matrices(shape, nic, ratio, lat_out, noise, seed):
    S, G = shape
    raw = synthetic(S, G, nic, nic * ratio, lat_out, lat_out / 2, noise, seed)
    got = infer_shape(raw["probe_bps"], raw["latency_s"], raw["hosts"])
    assert (got.servers, got.gpus_per_server) == (S, G)
    assert got.groups == [list(range(k * G, (k + 1) * G)) for k in range(S)]
    assert got.separated_by == "bandwidth"
    assert got.hosts_agree is False  # one hostname for every rank, as on the testbed: the measurement decides
    f = fit(with_tiers(raw, got, nic, nic * ratio, min(noise, 0.04), seed), {"nic": nic / 0.9})
    assert abs(f["nic_goodput_bps"] / nic - 1) < 0.05
    assert abs(f["nic_bps"] / (nic / tcp_wire_efficiency(1500)) - 1) < 0.05
    assert abs(f["fraction_of_peak"]["nic"] / 0.9 - 1) < 0.05
    assert abs(f["latency_s"]["scaleout"] / lat_out - 1) <= noise + 1e-9
    c = _core.Cluster.parse(f["spec"])
    assert (c.servers, c.gpus_per_server) == (S, G)
    assert abs(c.nic_bw / nic - 1) < 0.05


@settings(max_examples=30, deadline=None)
@given(shape=shapes, nic=st.floats(1e6, 1e10), lat_ratio=st.floats(3.0, 100.0), seed=st.integers(0, 10**6))
def test_latency_tells_the_tiers_apart_when_bandwidth_cannot(shape, nic, lat_ratio, seed):
    S, G = shape
    raw = synthetic(S, G, nic, nic, 1e-5 * lat_ratio, 1e-5, 0.05, seed)
    got = infer_shape(raw["probe_bps"], raw["latency_s"])
    assert (got.servers, got.gpus_per_server, got.separated_by) == (S, G, "latency")


@settings(max_examples=30, deadline=None)
@given(shape=shapes, seed=st.integers(0, 10**6), factor=st.floats(10.0, 1e6))
def test_one_wild_pair_does_not_break_the_shape(shape, seed, factor):
    # Seen on the loaded testbed: one scale-up pair measured absurdly fast (a ping subtracted from a
    # transfer it outlasted). A plain two-means split isolates such a pair; the equal-servers split does not.
    S, G = shape
    raw = synthetic(S, G, 2.5e7, 5e8, 2e-4, 1e-4, 0.3, seed)
    rng = random.Random(seed)
    i = rng.randrange(S) * G
    j = i + 1 + rng.randrange(G - 1)
    raw["probe_bps"][i][j] *= factor
    got = infer_shape(raw["probe_bps"], raw["latency_s"])
    assert (got.servers, got.gpus_per_server) == (S, G)


@pytest.mark.parametrize("servers, gpus, hosts", [(1, 4, ["a"] * 4), (4, 1, ["a", "b", "c", "d"]),
                                                  (2, 2, ["a", "a", "b", "b"])])
def test_one_tier_falls_back_to_hostnames(servers, gpus, hosts):
    # Tiers of equal speed (or only one tier): the measurements cannot say, the hostnames do.
    raw = synthetic(servers, gpus, 1e9, 1e9, 1e-5, 1e-5, 0.05, 0, hosts)
    got = infer_shape(raw["probe_bps"], raw["latency_s"], hosts)
    assert (got.servers, got.gpus_per_server, got.separated_by) == (servers, gpus, "hostnames")


def test_mismatched_groups_are_named():
    P = 6
    bw = [[None] * P for _ in range(P)]
    lat = [[1e-5] * P for _ in range(P)]
    for i in range(P):
        for j in range(i + 1, P):
            bw[i][j] = 1e10 if (i < 4) == (j < 4) else 1e9  # servers {0..3} and {4, 5}
    with pytest.raises(ShapeError, match=r"mismatched groups: .*unequal size \(\{0, 1, 2, 3\}; \{4, 5\}\)"):
        infer_shape(bw, lat)
    for i in range(P):
        for j in range(i + 1, P):
            bw[i][j] = 1e10 if i % 2 == j % 2 else 1e9  # servers {0, 2, 4} and {1, 3, 5}: not consecutive
    with pytest.raises(ShapeError, match=r"mismatched groups: .*ranks \[0, 2, 4\] on one server.*consecutive"):
        infer_shape(bw, lat)
    bw = [[None, 1e10, 1e10], [None, None, 1e9], [None, None, None]]  # 0~1, 0~2, but 1 and 2 far
    with pytest.raises(ShapeError, match="ranks 1 and 2 are both fast to rank 0 but slow to each other"):
        infer_shape(bw, [[1e-5] * 3] * 3)
    with pytest.raises(ShapeError, match="at least 2 ranks"):
        infer_shape([[None]], [[None]])
    with pytest.raises(ShapeError, match="no measurement for ranks 0 and 1"):
        infer_shape([[None, None], [None, None]], [[None, 1e-5], [None, None]])


@given(gpus=st.sampled_from([2, 4, 6, 8]), data=st.data(), noise=st.floats(-0.15, 0.15))
def test_nics_per_server_from_the_egress_ratio(gpus, data, noise):
    nics = data.draw(st.sampled_from([d for d in range(1, gpus + 1) if gpus % d == 0]))
    assert infer_nics(gpus, nics * (1 + noise)) == nics
    assert infer_nics(gpus, None) == gpus and infer_nics(gpus, 10 * gpus) == gpus


def test_shared_nics_reach_the_spec():
    raw = synthetic(2, 4, 2.5e7, 5e8, 2e-4, 1e-4, 0.0, 0)
    raw = with_tiers(raw, infer_shape(raw["probe_bps"], raw["latency_s"]), 2.5e7, 5e8, 0.0, 0)
    raw["egress"] = {"flows": 4, "bytes_per_flow": 2.5e7, "seconds": 2.0 * 0.98}  # 4 flows at 2 NICs' rate
    f = fit(raw)
    assert f["nics_per_server"] == 2 and abs(f["egress_ratio"] - 2.04) < 0.01
    assert _core.Cluster.parse(f["spec"]).nics_per_server == 2


@given(st.lists(st.floats(-1, 1), min_size=2, max_size=40), st.floats(1.0, 5.0))
def test_best_split_separates_two_clusters(xs, gap):
    low = [x - 10 for x in xs]  # two clusters of width ≤ 2, at least 8 + gap apart in log space
    high = [x + gap for x in xs]
    threshold, ratio = best_split(low + high)
    assert max(low) < threshold < min(high)
    assert ratio >= math.exp(8) > MIN_TIER_RATIO
    assert best_split([1.0])[1] == 1.0 and best_split([2.0, 2.0])[1] == 1.0


@given(st.floats(1e3, 1e11), st.floats(0, 1), st.integers(1 << 12, 1 << 30))
def test_slope_cancels_fixed_costs(rate, fixed_s, small):
    large = 4 * small
    got = slope_rate(small, fixed_s + small / rate, large, fixed_s + large / rate)
    assert abs(got / rate - 1) < 1e-6
    with pytest.raises(ValueError, match="large_bytes"):
        slope_rate(large, 1.0, small, 2.0)


def test_wire_efficiency_is_tcp_over_ethernet():
    assert tcp_wire_efficiency(1500) == pytest.approx(1448 / 1514)
    assert tcp_wire_efficiency(None) is None and tcp_wire_efficiency(40) is None


# ------------------------------------------------------------------ the stored file and `calibrated`


def _store(tmp_path, monkeypatch, S=2, G=4) -> dict:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(network.ENV, raising=False)
    raw = synthetic(S, G, 22.5e6, 4e8, 2e-4, 1e-4, 0.02, 1)
    raw = with_tiers(raw, infer_shape(raw["probe_bps"], raw["latency_s"]), 22.5e6, 4e8, 0.01, 1)
    doc = network.document(raw, {}, "a test")
    network.save(doc)
    return doc


def test_calibrated_spec_names_the_stored_cluster(tmp_path, monkeypatch):
    from collsched.topology import as_cluster

    with pytest.raises(ValueError, match="no network calibration stored .* run `collsched calibrate --network`"):
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty"))
        monkeypatch.delenv(network.ENV, raising=False)
        as_cluster("calibrated")
    doc = _store(tmp_path, monkeypatch)
    assert network.path_in_use() == tmp_path / "cache" / "collsched" / "network.json"
    c = as_cluster("calibrated")
    assert (c.servers, c.gpus_per_server) == (2, 4) and c.nic_bw == _core.Cluster.parse(doc["spec"]).nic_bw
    big = as_cluster("calibrated:16,nic=100Gbps")
    assert (big.servers, big.gpus_per_server, big.nic_bw) == (16, 4, 100 * 10**9 // 8)
    assert as_cluster("h200:2").servers == 2 and network.resolve("h200:2") == "h200:2"
    with pytest.raises(ValueError, match="server count 'x' must be a positive integer"):
        network.resolve("calibrated:x")
    # The runtime's resolution takes it too (COLLSCHED_CLUSTER=calibrated, cluster="calibrated").
    from collsched.comm.api import resolve_cluster

    assert resolve_cluster("calibrated", 8).nic_bw == c.nic_bw
    monkeypatch.setenv("COLLSCHED_CLUSTER", "calibrated")
    assert resolve_cluster(None, 8).spec() == c.spec()
    with pytest.raises(ValueError, match="has 8 GPUs but the group has 6 ranks"):
        resolve_cluster(None, 6)


def test_bad_files_are_named_and_a_bad_spec_writes_nothing(tmp_path, monkeypatch):
    bad = tmp_path / "net.json"
    monkeypatch.setenv(network.ENV, str(bad))
    with pytest.raises(ValueError, match=f"{network.ENV}={bad}: no such network calibration file"):
        network.load()
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not readable JSON"):
        network.load()
    bad.write_text(json.dumps({"version": 99, "spec": "h200:1"}))
    with pytest.raises(ValueError, match='"version": 1'):
        network.load()
    out = tmp_path / "never.json"
    with pytest.raises(ValueError, match="cluster field 'nic'"):
        network.save({"spec": "custom:2,nic=-1B/s"}, out)
    assert not out.exists()


def test_cli_simulate_and_show_use_the_calibration(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from collsched.cli import _register_all, app

    _register_all()
    runner = CliRunner()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "none"))
    monkeypatch.delenv(network.ENV, raising=False)
    r = runner.invoke(app, ["clusters", "--show-calibration"])
    assert r.exit_code == 2 and "no network calibration stored" in r.output and "Traceback" not in r.output
    doc = _store(tmp_path, monkeypatch)
    r = runner.invoke(app, ["clusters", "--show-calibration"])
    assert r.exit_code == 0, r.output
    assert doc["spec"] in r.output and "2 servers × 4 GPUs" in r.output
    r = runner.invoke(app, ["clusters", "--show-calibration", "--json"])
    assert json.loads(r.output)["spec"] == doc["spec"]
    r = runner.invoke(app, ["simulate", "-c", "calibrated", "-w", "uniform", "-m", "64KiB", "-a", "fanout,fast", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["cluster"] == _core.Cluster.parse(doc["spec"]).spec()
    r = runner.invoke(app, ["plan", "-c", "calibrated:3", "-w", "balanced", "-m", "4KiB", "-a", "fanout"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["moe", "simulate", "-c", "calibrated", "-t", "256", "--experts", "16", "--topk", "2",
                            "--hidden", "64", "--variants", "nccl", "--json"])
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("args, match", [
    (["--nprocs", "1"], "--nprocs must be between 2 and 64"),
    (["--max-time", "0"], "--max-time must be between"),
    (["--nic-peak", "fast"], "--nic-peak: cannot parse bandwidth 'fast'"),
    (["--max-bytes", "1KiB"], "--max-bytes must be between 1 MiB and 2 GiB"),
    (["--backend", "mpi"], "--backend must be gloo, nccl or auto"),
    (["--backend", "nccl"], "runs under torchrun"),
])
def test_cli_network_errors_are_one_line_and_write_nothing(tmp_path, monkeypatch, args, match):
    from typer.testing import CliRunner

    from collsched.cli import _register_all, app

    _register_all()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(network.ENV, raising=False)
    r = CliRunner().invoke(app, ["calibrate", "--network", *args])
    assert r.exit_code == 2 and match in r.output and len(r.output.strip().splitlines()) == 1, r.output
    assert not (tmp_path / "cache").exists()


# ------------------------------------------------------------------ real ranks (local Gloo over loopback)


def test_cli_network_on_local_ranks_measures_and_stores(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from typer.testing import CliRunner

    from collsched.cli import _register_all, app

    _register_all()
    monkeypatch.delenv(network.ENV, raising=False)
    out = tmp_path / "net.json"
    r = CliRunner().invoke(app, ["calibrate", "--network", "--nprocs", "2", "--max-bytes", "1MiB", "--max-time", "60",
                                 "-o", str(out)])
    assert r.exit_code == 0, r.output
    doc = network.load(out)
    m = doc["measured"]
    # One machine: one server of two ranks (loopback: one tier, so the hostname decides).
    assert (m["servers"], m["gpus_per_server"], m["separated_by"]) == (1, 2, "hostnames")
    assert m["scaleup_goodput_bps"] > 0 and m["latency_s"]["scaleup"] > 0 and m["nic_goodput_bps"] is None
    assert _core.Cluster.parse(doc["spec"]).num_gpus == 2


def test_past_max_time_every_rank_stops_with_the_same_error(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from typer.testing import CliRunner

    from collsched.cli import _register_all, app

    _register_all()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(network.ENV, raising=False)
    r = CliRunner().invoke(app, ["calibrate", "--network", "--nprocs", "2", "--max-time", "0.01"])
    assert r.exit_code == 2, r.output
    assert "exceeded --max-time 0.01 s" in r.output and "nothing was written" in r.output
    assert not (tmp_path / "cache" / "collsched" / "network.json").exists()


def mismatched_worker():
    """Rank worker: every rank asks for a different number of repetitions."""
    import torch.distributed as dist

    from collsched.comm.netprobe import probe_rank

    return probe_rank({"reps": 1 + dist.get_rank(), "max_bytes": 2**20})


def test_ranks_started_with_different_settings_all_stop_naming_them():
    pytest.importorskip("torch")
    import os

    from collsched.comm.launch import RankFailure, run_local

    res = run_local("test_network_calibration:mismatched_worker", 2, timeout_s=120,
                    extra_pythonpath=[os.path.dirname(os.path.abspath(__file__))], raise_on_failure=False)
    assert all(isinstance(r, RankFailure) and r.exc_type == "ValueError" for r in res), res
    assert "mismatched settings: rank 1 was started with reps=2 but rank 0 with reps=1" in res[0].message
