"""Traffic matrices: generators, workloads, alignment, load/save, validation."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collsched import traffic
from collsched.workloads import HOT_DTYPE_BYTES, HOT_TOP_K, hot_shape, make_workload

FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

sizes = st.integers(min_value=1, max_value=24)
seeds = st.integers(min_value=0, max_value=2**64 - 1)
means = st.integers(min_value=1000, max_value=2**40)


@FAST
@given(n=sizes, mean=means, seed=seeds, spec=st.sampled_from(["balanced", "uniform", "zipf:0.8", "zipf:1.5", "hot:1.0", "hot:0"]))
def test_generators_reproducible_with_requested_shape(n, mean, seed, spec):
    a = make_workload(spec, n, mean, seed)
    b = make_workload(spec, n, mean, seed)
    assert a.shape == (n, n) and a.dtype == np.uint64
    np.testing.assert_array_equal(a, b)


@FAST
@given(n=st.integers(min_value=8, max_value=32), mean=means, seed=seeds,
       spec=st.sampled_from(["uniform", "zipf:0.5", "zipf:0.8", "zipf:2"]))
def test_uniform_and_zipf_hit_the_requested_mean(n, mean, seed, spec):
    m = make_workload(spec, n, mean, seed)
    assert abs(m.sum(dtype=np.float64) / (n * n) / mean - 1) < 0.01


@FAST
@given(n=st.integers(min_value=2, max_value=16), mean=means, seed=seeds)
def test_seed_changes_random_workloads(n, mean, seed):
    a = make_workload("zipf:0.8", n, mean, seed)
    b = make_workload("zipf:0.8", n, mean, (seed + 1) % 2**64)
    assert not np.array_equal(a, b)


def test_balanced_is_exact():
    np.testing.assert_array_equal(make_workload("balanced", 4, 123, 0), np.full((4, 4), 123, dtype=np.uint64))


@pytest.mark.parametrize("n, mean", [(4, 1 << 20), (32, 64 << 20), (16, 1000), (1024, 64 << 20)])
def test_hot_shape_targets_the_mean(n, mean):
    tokens, hidden = hot_shape(n, mean)
    assert tokens >= 1
    got = tokens * HOT_TOP_K * hidden * HOT_DTYPE_BYTES / n
    assert abs(got / mean - 1) < 0.05 or tokens == 1


def test_hot_experts_mean_and_hot_columns():
    n, mean = 16, 1 << 20
    m = make_workload("hot:1.2", n, mean, 3)
    assert abs(m.sum() / (n * n) / mean - 1) < 0.05
    # Every sender routes the same number of tokens; popularity makes some receivers hot.
    assert len(set(m.sum(axis=1).tolist())) == 1
    cols = m.sum(axis=0)
    assert cols.max() > 1.5 * cols.mean()


def test_zipf_skew_grows_with_exponent():
    flat = make_workload("zipf:0", 32, 1 << 20, 1)
    steep = make_workload("zipf:2", 32, 1 << 20, 1)
    assert steep.max() / steep.mean() > 3 * (flat.max() / flat.mean())


@pytest.mark.parametrize("spec", ["", "zipf", "zipf:", "zipf:abc", "zipf:-1", "zipf:nan", "zipf:inf", "hot:", "hot:x",
                                  "gaussian", "balanced:3", "uniform:2", "matrix.txt", 7, None])
def test_unknown_workload_lists_accepted_forms(spec):
    with pytest.raises(ValueError) as e:
        make_workload(spec, 4, 1000, 0)
    msg = str(e.value)
    assert "zipf" in msg and ("accepted" in msg or "one of" in msg or "exponent" in msg), msg


@pytest.mark.parametrize("n, mean, seed", [(0, 10, 0), (-1, 10, 0), (2, -5, 0), (2, 10, -1), (2, 1.5, 0), (True, 1, 0)])
def test_workload_rejects_bad_numbers(n, mean, seed):
    with pytest.raises(ValueError):
        make_workload("uniform", n, mean, seed)


def test_workload_from_file_checks_cluster_size(tmp_path):
    p = tmp_path / "m.npy"
    traffic.save(p, np.arange(9).reshape(3, 3))
    np.testing.assert_array_equal(make_workload(str(p), 3, 0, 0), np.arange(9).reshape(3, 3))
    with pytest.raises(ValueError, match="3×3 but the cluster has 4 GPUs"):
        make_workload(str(p), 4, 0, 0)
    with pytest.raises(ValueError, match="does not exist"):
        make_workload(str(tmp_path / "missing.csv"), 4, 0, 0)


# ------------------------------------------------------------------ load / save

matrices = st.integers(min_value=1, max_value=12).flatmap(
    lambda n: st.lists(st.integers(min_value=0, max_value=2**62 // n), min_size=n * n, max_size=n * n).map(
        lambda v: np.array(v, dtype=np.uint64).reshape(n, n)))


@FAST
@given(m=matrices, suffix=st.sampled_from([".npy", ".csv"]))
def test_save_load_round_trip(tmp_path_factory, m, suffix):
    p = tmp_path_factory.mktemp("t") / f"m{suffix}"
    traffic.save(p, m)
    back = traffic.load(p)
    assert back.dtype == np.uint64
    np.testing.assert_array_equal(back, m)


def test_csv_is_one_row_per_sender(tmp_path):
    p = tmp_path / "m.csv"
    traffic.save(p, [[1, 2], [3, 4]])
    assert p.read_text() == "1,2\n3,4\n"
    p.write_text("# comment\n 5, 6\n\n7,8\n")
    np.testing.assert_array_equal(traffic.load(p), [[5, 6], [7, 8]])


@pytest.mark.parametrize("text, words", [
    ("1,2\n3\n", "has 1 entries"), ("1,x\n3,4\n", "not an integer"), ("1.5,2\n3,4\n", "not an integer"),
    ("1,-2\n3,4\n", "negative"), ("", "empty"), ("1,2,3\n4,5,6\n", "square"),
    (f"{2**64},0\n0,0\n", "64 bits"), (f"{2**63},{2**63}\n0,0\n", "2^64"),
])
def test_bad_csv(tmp_path, text, words):
    p = tmp_path / "m.csv"
    p.write_text(text)
    with pytest.raises(ValueError) as e:
        traffic.load(p)
    assert words in str(e.value), str(e.value)


def test_bad_files(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        traffic.load(tmp_path / "nope.npy")
    with pytest.raises(ValueError, match=".npy or .csv"):
        traffic.load(tmp_path / "m.txt")
    with pytest.raises(ValueError, match=".npy or .csv"):
        traffic.save(tmp_path / "m.json", [[1]])
    garbage = tmp_path / "g.npy"
    garbage.write_bytes(b"\x00garbage")
    with pytest.raises(ValueError):
        traffic.load(garbage)
    objs = tmp_path / "o.npy"
    np.save(objs, np.array([[1, None], [2, 3]], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError):
        traffic.load(objs)
    floats = tmp_path / "f.npy"
    np.save(floats, np.array([[1.5, 2], [3, 4]]))
    with pytest.raises(ValueError, match="non-integer"):
        traffic.load(floats)
    binary = tmp_path / "b.csv"
    binary.write_bytes(b"\xff\xfe\x00\x01")
    with pytest.raises(ValueError):
        traffic.load(binary)


# ------------------------------------------------------------------ validation and alignment

@pytest.mark.parametrize("bad, words", [
    (np.zeros((2, 3)), "square"), (np.zeros(4), "square"), (np.zeros((0, 0)), "at least one"),
    ([[1, -1], [0, 0]], "negative"), ([[1.5, 0], [0, 0]], "non-integer"), ([[np.nan, 0], [0, 0]], "NaN"),
    ([[np.inf, 0], [0, 0]], "NaN or infinite"), ([[True, False], [False, True]], "dtype bool"),
    (np.array([[1, "a"], [2, 3]], dtype=object), "object"), ([["1", "2"], ["3", "4"]], "dtype"),
    (np.array([[2**63, 2**63], [0, 0]], dtype=np.uint64), "row 0 sums past 2^64"),
    (np.array([[2**63, 0], [2**63, 0]], dtype=np.uint64), "column 0 sums past 2^64"),
    ([[1, 2], [3]], "rectangular"), ([[2**64, 0], [0, 0]], "object"), (np.array([[1e20, 0], [0, 0]]), "2^64"),
    ([[1 + 2j, 0], [0, 0]], "dtype complex"),
])
def test_as_matrix_rejects_bad_input(bad, words):
    with pytest.raises(ValueError) as e:
        traffic.as_matrix(bad)
    assert words in str(e.value), str(e.value)


@FAST
@given(m=matrices, a=st.integers(min_value=1, max_value=4096))
def test_align_rounds_up_to_multiple(m, a):
    out = traffic.align(m, a)
    assert out.shape == m.shape
    assert np.all(out % a == 0)
    assert np.all(out >= m) and np.all(out - m < a)


def test_align_units_and_errors():
    np.testing.assert_array_equal(traffic.align([[1, 64], [65, 0]], "64B"), [[64, 64], [128, 0]])
    with pytest.raises(ValueError, match="positive"):
        traffic.align([[1]], 0)
    with pytest.raises(ValueError, match="negative"):
        traffic.align([[1]], -8)
    with pytest.raises(ValueError, match="overflows"):
        traffic.align(np.array([[2**64 - 1]], dtype=np.uint64), 2)


def test_summary_and_hash():
    s = traffic.summary([[1, 2], [3, 10]])
    assert s == {"ranks": 2, "total_bytes": 16, "max_pair_bytes": 10, "mean_pair_bytes": 4.0, "max_send_bytes": 13,
                 "max_recv_bytes": 12, "hash": traffic.matrix_hash([[1, 2], [3, 10]])}
    assert traffic.matrix_hash([[1, 2], [3, 10]]) != traffic.matrix_hash([[1, 2], [3, 11]])


@FAST
@given(m=matrices, data=st.data())
def test_one_planted_bad_entry_is_named(m, data):
    n = m.shape[0]
    i, j = data.draw(st.integers(0, n - 1)), data.draw(st.integers(0, n - 1))
    kind, value, words = data.draw(st.sampled_from([
        ("neg", -data.draw(st.integers(1, 2**40)), f"negative entry at [{i}, {j}]"),
        ("nan", np.nan, "NaN"), ("inf", np.inf, "infinite"), ("-inf", -np.inf, "infinite"),
        ("frac", 0.5 + data.draw(st.integers(0, 2**20)), "non-integer"),
    ]))
    bad = m.astype(np.float64) if kind != "neg" else m.astype(np.int64)
    bad[i, j] = value
    with pytest.raises(ValueError) as e:
        traffic.as_matrix(bad)
    assert words in str(e.value), str(e.value)


@FAST
@given(n=st.integers(1, 16), cluster_servers=st.integers(1, 4))
def test_wrong_size_for_the_cluster_is_named(n, cluster_servers):
    import collsched

    c = collsched.Cluster.parse(f"h200:{cluster_servers},gpus=2")
    m = np.ones((n, n), dtype=np.uint64)
    if n == c.num_gpus:
        collsched.plan_all_to_all(m, c, "fanout")
        return
    with pytest.raises(ValueError, match=f"{n}×{n} but cluster"):
        collsched.plan_all_to_all(m, c, "fanout")
