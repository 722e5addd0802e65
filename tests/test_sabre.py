"""SABRE's algorithms from Python: every plan verifies; the selector follows MTM."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import collsched
from collsched import plan_all_to_all, traffic
from collsched.skew import mtm

ALGS = ["sabre_skewed", "sabre_light", "sabre"]


def verified(plan):
    plan.verify()
    return plan


@st.composite
def case(draw):
    servers = draw(st.integers(1, 4))
    gpus = draw(st.integers(1, 6))
    nics = draw(st.sampled_from(sorted({gpus, max(1, gpus // 2), 1})))
    p = servers * gpus
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    m = rng.integers(0, draw(st.sampled_from([1, 64, 4096])) + 1, size=(p, p), dtype=np.uint64)
    m[rng.random((p, p)) < draw(st.floats(0, 0.8))] = 0
    if draw(st.booleans()):  # a hot receiver
        m[:, rng.integers(p)] *= np.uint64(draw(st.integers(1, 20)))
    return collsched.Cluster.parse(f"h200:{servers},gpus={gpus},nics={nics}"), m


@settings(max_examples=60, deadline=None)
@given(case())
def test_every_sabre_plan_verifies_and_is_deterministic(c):
    cluster, m = c
    for alg in ALGS:
        p = verified(plan_all_to_all(m, cluster, alg))
        assert p.hash == plan_all_to_all(m, cluster, alg).hash
        assert p.scratch_bytes == plan_all_to_all(m, cluster, alg).scratch_bytes
    p = verified(plan_all_to_all(m, cluster, "sabre_skewed", alpha_permille=1000))


@settings(max_examples=40, deadline=None)
@given(case(), st.integers(1000, 6000))
def test_selector_compares_mtm_exactly(c, threshold):
    cluster, m = c
    p = plan_all_to_all(m, cluster, "sabre", mtm_threshold_milli=threshold)
    milli = mtm(m, cluster).overall_milli
    expected = "sabre_skewed" if milli >= threshold and mtm(m, cluster).overall * 1000 > threshold else "sabre_light"
    if abs(mtm(m, cluster).overall * 1000 - threshold) > 1e-6:  # away from float ties
        assert p.meta["choice"] == expected
    assert p.meta["mtm"] == f"{milli // 1000}.{milli % 1000:03d}"
    assert str(threshold // 1000) in p.meta["reason"]


def test_skewed_balances_scale_out_on_a_hot_rank():
    cluster = collsched.Cluster.parse("perlmutter:4")
    m = traffic.balanced(16, 1 << 20)
    m[:, 0] = 16 << 20
    light = verified(plan_all_to_all(m, cluster, "sabre_light"))
    skewed = verified(plan_all_to_all(m, cluster, "sabre_skewed"))
    assert mtm(m, cluster).overall > 2.2
    auto_choice = plan_all_to_all(m, cluster, "sabre")
    assert auto_choice.meta["choice"] == "sabre_skewed"
    assert auto_choice.hash != light.hash
    # Same scale-out volume, fewer scale-out messages than fanout.
    fan = plan_all_to_all(m, cluster, "fanout")
    assert skewed.bytes_per_tier()["scale_out"] >= fan.bytes_per_tier()["scale_out"]
    assert skewed.num_steps == 3 and light.num_steps == 2


def test_options_are_checked():
    m = traffic.uniform(8, 100, seed=1)
    with pytest.raises(ValueError, match="alpha_permille"):
        plan_all_to_all(m, "h200:1", "sabre_skewed", alpha_permille=900)
    with pytest.raises(ValueError, match="unknown option"):
        plan_all_to_all(m, "h200:1", "sabre_light", alpha_permille=1050)
    with pytest.raises(ValueError, match="mtm_threshold_milli"):
        plan_all_to_all(m, "h200:1", "sabre", mtm_threshold_milli="high")
