"""collsched.skew: MTM (SABRE ICS'26 §4) against a direct numpy computation, and Gini."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import collsched
from collsched.skew import MTM, gini, mtm


def numpy_mtm(m: np.ndarray, gpus_per_server: int):
    """The paper's formula: s_i / r_i = inter-node bytes sent / received by rank i;
    Send-MTM = P·max s / Σ s, Recv-MTM = P·max r / Σ r, MTM = max of the two (1 if Σ = 0)."""
    p = m.shape[0]
    node = np.arange(p) // gpus_per_server
    remote = node[:, None] != node[None, :]
    x = np.where(remote, m.astype(object), 0)  # exact integers
    s = x.sum(axis=1)
    r = x.sum(axis=0)

    def ratio(v):
        tot = sum(v)
        return 1.0 if tot == 0 else float(p * max(v)) / float(tot)

    send, recv = ratio(list(s)), ratio(list(r))
    return send, recv, max(send, recv)


def numpy_gini(m: np.ndarray) -> float:
    x = np.sort(m.astype(np.float64).ravel())
    if x.sum() == 0:
        return 0.0
    n = x.size
    return float(np.abs(x[:, None] - x[None, :]).sum() / (2 * n * n * x.mean()))


@st.composite
def case(draw):
    servers = draw(st.integers(1, 4))
    gpus = draw(st.integers(1, 5))
    nics = draw(st.integers(1, gpus))
    p = servers * gpus
    hi = draw(st.sampled_from([1, 10, 1000, 2**40]))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    m = rng.integers(0, hi + 1, size=(p, p), dtype=np.uint64)
    m[rng.random((p, p)) < draw(st.floats(0, 0.9))] = 0
    return collsched.Cluster.parse(f"h200:{servers},gpus={gpus},nics={nics}"), m


@settings(max_examples=150, deadline=None)
@given(case())
def test_mtm_matches_the_paper_formula(c):
    cluster, m = c
    got = mtm(m, cluster)
    send, recv, overall = numpy_mtm(m, cluster.gpus_per_server)
    assert isinstance(got, MTM) and isinstance(got, tuple)
    assert got.send == pytest.approx(send, rel=1e-12)
    assert got.recv == pytest.approx(recv, rel=1e-12)
    assert got.overall == pytest.approx(overall, rel=1e-12)
    assert got.overall == max(got.send, got.recv)
    assert got.overall >= 1.0 - 1e-12
    assert got.overall <= m.shape[0] + 1e-9
    # The exact thousandths agree with the float within rounding.
    assert got.overall_milli == int(np.floor(overall * 1000 + 1e-6)) or abs(got.overall_milli - overall * 1000) < 1.0


@settings(max_examples=80, deadline=None)
@given(case())
def test_gini_matches_numpy(c):
    _, m = c
    assert gini(m) == pytest.approx(numpy_gini(m), rel=1e-9, abs=1e-12)
    assert 0.0 <= gini(m) < 1.0


def test_known_values():
    c = collsched.Cluster.parse("perlmutter:4")
    assert mtm(np.full((16, 16), 1000), c) == (1.0, 1.0, 1.0, 1000)
    m = np.full((16, 16), 100)
    m[4:, 0] = 800  # rank 0 receives 8x from remote nodes
    got = mtm(m, c)
    assert got.recv > got.send and got.overall == got.recv
    assert got.recv == pytest.approx(16 * 12 * 800 / (12 * 800 + 15 * 12 * 100))
    assert mtm(m, "perlmutter:4") == got  # spec strings work
    one = np.zeros((16, 16), dtype=np.uint64)
    one[0, 5] = 7
    assert gini(one) == pytest.approx(1 - 1 / 256)


def test_bad_input():
    c = collsched.Cluster.parse("perlmutter:2")
    with pytest.raises(ValueError, match="8"):
        mtm(np.ones((4, 4)), c)
    with pytest.raises(ValueError, match="negative"):
        gini(-np.ones((2, 2)))
    with pytest.raises(ValueError, match="square"):
        gini(np.ones((2, 3)))
