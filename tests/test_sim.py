"""Simulator and lower bound from Python: analytic cases, errors, and the bound property."""
import json

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import collsched
from collsched import sim, traffic


def test_single_transfer_time_is_alpha_plus_bytes_over_bandwidth():
    n = 16
    m = np.zeros((n, n), dtype=np.uint64)
    m[0, 8] = 50_000_000  # one scale-out pair on h200:2 (50 GB/s NICs, 6 us alpha)
    p = collsched.plan_all_to_all(m, "h200:2", "fanout")
    p.verify()
    r = sim.simulate(p, "h200:2", tolerance=0.0)
    assert r.time_s == pytest.approx(6e-6 + 1e-3, rel=1e-12)
    assert r.transfer_start_s.shape == (1,) and r.transfer_end_s[0] == pytest.approx(r.time_s)
    assert r.transfer_start_s[0] == pytest.approx(6e-6)
    # FAST's bound lets a plan spread one pair over all 8 NICs of the server.
    assert r.lower_bound_s == pytest.approx(6e-6 + 50e6 / 400e9)
    assert r.ratio_to_bound == pytest.approx(r.time_s / r.lower_bound_s)
    assert r.bound_term == "scale-out send of server 0"
    assert r.scaleout_bytes == 50_000_000
    assert r.link_utilisation["nic_up"]["busiest_link"] == "NIC uplink of server 0 NIC 0"


def test_balanced_fanout_report():
    c = collsched.Cluster.parse("h200:2")
    m = traffic.balanced(16, 1 << 20)
    p = collsched.plan_all_to_all(m, c, "fanout")
    p.verify()
    r = sim.simulate(p, c)
    assert r.transfers == 256 and r.steps == 1 and r.step_transfers == [256]
    assert r.algbw == pytest.approx(m.sum() / 16 / r.time_s)
    assert r.busbw == pytest.approx(r.algbw * 15 / 16)
    assert r.algbw_gbps == pytest.approx(r.algbw / 1e9)
    assert 1.0 <= r.ratio_to_bound < 1.01
    assert r.lower_bound_s == pytest.approx(r.time_s / r.ratio_to_bound)
    assert set(r.link_utilisation) == {"nic_up", "nic_down", "scaleup", "local"}
    assert 0.9 < r.link_utilisation["nic_up"]["utilisation"] <= 1.0 + 1e-9
    s, e = r.step_times[0]
    assert s == pytest.approx(r.transfer_start_s.min()) and e == pytest.approx(r.time_s)
    # Deterministic: identical results on a second run.
    r2 = sim.simulate(p, c)
    assert np.array_equal(r.transfer_end_s, r2.transfer_end_s) and r.time_s == r2.time_s


def test_lower_bound_terms():
    b = sim.lower_bound(traffic.balanced(16, 1_000_000), "h200:2")
    assert b.seconds == pytest.approx(6e-6 + 64e6 / 400e9)
    assert b.term.startswith("scale-out") and b.terms[b.term] == b.seconds
    assert all(v <= b.seconds for v in b.terms.values())
    assert "scale-up send of GPU 0" in b.terms


def test_incast_option_only_slows():
    m = traffic.zipf(16, 1.5, 1 << 20, seed=3)
    p = collsched.plan_all_to_all(m, "h200:2,gpus=8", "fanout")
    clean = sim.simulate(p, "h200:2")
    lossy = sim.simulate(p, "h200:2", incast_threshold=4, incast_goodput=0.6)
    assert lossy.time_s > clean.time_s


def test_core_link_caps_the_aggregate_scale_out_rate():
    # Balanced 1 MB per pair on h200:2: every rank sends 8 MB across at 50 GB/s per NIC, 128 MB in
    # all; a 64 GB/s shared core (half the 16 NICs' 800 GB/s) makes the scale-out phase 2 ms.
    p = collsched.plan_all_to_all(traffic.balanced(16, 1_000_000), "h200:2", "fanout")
    clean = sim.simulate(p, "h200:2", tolerance=0.0)
    capped = sim.simulate(p, "h200:2", tolerance=0.0, core_bw=64e9)
    assert capped.time_s == pytest.approx(6e-6 + 128e6 / 64e9, rel=1e-9)
    assert clean.time_s < capped.time_s
    assert sim.simulate(p, "h200:2", tolerance=0.0, core_bw=1e15).time_s == pytest.approx(clean.time_s, rel=1e-12)
    for bad in (0, -1.0, float("nan"), float("inf"), True, "1e9"):
        with pytest.raises(ValueError, match="core_bw"):
            sim.simulate(p, "h200:2", core_bw=bad)


def test_errors_are_value_errors():
    p = collsched.plan_all_to_all(traffic.balanced(16, 1000), "h200:2", "fanout")
    with pytest.raises(ValueError, match="GPUs"):
        sim.simulate(p, "h200:1")
    with pytest.raises(ValueError, match="tolerance"):
        sim.simulate(p, "h200:2", tolerance=-1)
    with pytest.raises(ValueError, match="goodput"):
        sim.simulate(p, "h200:2", incast_threshold=2, incast_goodput=0)
    with pytest.raises(TypeError):
        sim.simulate("not a plan", "h200:2")
    with pytest.raises(ValueError, match="square"):
        sim.lower_bound(np.zeros((3, 4)), "h200:1")
    with pytest.raises(ValueError, match="GPUs"):
        sim.lower_bound(np.zeros((4, 4)), "h200:1")


CLUSTERS = ["h200:{s}", "mi300x:{s}", "perlmutter:{s}", "mi250:{s}", "v100:{s}", "h100:{s},nics=2", "a100:{s},gpus=3"]


@settings(max_examples=25, deadline=None)
@given(spec=st.sampled_from(CLUSTERS), servers=st.integers(1, 4), seed=st.integers(0, 10_000),
       skew=st.floats(0.5, 2.0), barrier=st.booleans())
def test_fanout_never_beats_the_bound(spec, servers, seed, skew, barrier):
    c = collsched.Cluster.parse(spec.format(s=servers))
    m = traffic.zipf(c.num_gpus, skew, 1 << 18, seed=seed)
    p = collsched.plan_all_to_all(m, c, "fanout")
    p.verify()
    r = sim.simulate(p, c, barrier_steps=barrier)
    b = sim.lower_bound(m, c)
    assert r.time_s >= b.seconds * (1 - 1e-9), (c.spec(), r.time_s, b)
    assert r.lower_bound_s == pytest.approx(b.seconds)
    assert np.all(r.transfer_end_s >= r.transfer_start_s)


def test_warm_connections_pay_alpha_once_per_stream():
    """Three chained pieces of one stream 0->8: cold, each pays the 6 us alpha after the
    previous one; warm, the stream pays it once (the Rust tests check the relay case)."""
    c = collsched.Cluster.parse("h200:2")
    p = collsched.Plan.from_json(json.dumps({
        "algorithm": "test", "collective": {"kind": "all_gather", "ranks": 16, "shard_bytes": 0}, "gpus_per_server": 8,
        "scratch_bytes": [50_000_000] * 16, "input_hash": 0, "meta": {},
        "transfers": [{"src": 0, "dst": 8, "op": "copy", "tier": "scale_out", "step": i, "seg_begin": i, "seg_end": i + 1,
                       "dep_begin": max(i - 1, 0), "dep_end": i} for i in range(3)],
        "segments": [{"src_buf": "scratch", "src_off": 0, "dst_buf": "scratch", "dst_off": 0, "len": 50_000_000}] * 3,
        "deps": [0, 1]}))
    # The fluid model: this all-gather plan is a collective kernel's, which h200's NCCL
    # collective constants (low-latency protocol, efficiency) would otherwise price.
    cold = sim.simulate(p, c, tolerance=0.0, model="fluid")
    warm = sim.simulate(p, c, tolerance=0.0, warm_connections=True, model="fluid")
    assert cold.time_s == pytest.approx(3 * (6e-6 + 1e-3), rel=1e-12)
    assert warm.time_s == pytest.approx(6e-6 + 3e-3, rel=1e-12)
    assert warm.transfer_start_s[1] == pytest.approx(warm.transfer_end_s[0], rel=1e-12)
