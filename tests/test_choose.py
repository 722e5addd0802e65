"""`collsched.choose` and its calibration table: properties of the decision, bad input,
where the constants come from, and `collsched calibrate`."""
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import collsched
from collsched import _core, traffic
from collsched.calibration import ENV, default_path, load, path_in_use, save
from collsched.choose import Choice, choose

DEFAULTS = _core.Calibration.defaults()


@st.composite
def problems(draw):
    preset = draw(st.sampled_from(["h200", "mi300x", "perlmutter", "mi250"]))
    servers = draw(st.integers(1, 4))
    gpus = draw(st.sampled_from([1, 2, 4, 8]))
    nics = max(gpus // draw(st.sampled_from([1, 2])), 1)
    c = collsched.Cluster.parse(f"{preset}:{servers},gpus={gpus},nics={nics}")
    n = c.num_gpus
    seed = draw(st.integers(0, 10_000))
    rng = np.random.default_rng(seed)
    scale = draw(st.sampled_from([0, 1, 1 << 10, 1 << 20, 64 << 20]))
    m = (rng.random((n, n)) * scale).astype(np.uint64)
    m[rng.random((n, n)) < draw(st.floats(0, 0.9))] = 0
    return c, m, draw(st.sampled_from(["gloo", "nccl"]))


@settings(max_examples=60, deadline=None)
@given(problems())
def test_choice_is_the_first_minimum_and_deterministic(p):
    c, m, backend = p
    a = choose(m, c, backend, calibration=DEFAULTS)
    assert a == choose(m.copy(), c.spec(), backend, calibration=DEFAULTS)
    assert list(a.candidates) == _core.auto_candidates() and "native" in a.candidates
    best = min(a.candidates.values())
    assert a.predicted_s == best
    assert a.algorithm == next(k for k, v in a.candidates.items() if v == best)
    for k, v in a.candidates.items():
        assert np.isfinite(v) and a.transfer_s[k] >= 0 and a.overhead_s[k] >= 0
        assert v == pytest.approx(a.transfer_s[k] + a.overhead_s[k], rel=1e-12)
    # Any integer dtype gives the same decision.
    assert choose(m.astype(np.int64), c, backend, calibration=DEFAULTS) == a


@settings(max_examples=25, deadline=None)
@given(problems(), st.integers(0, 63))
def test_one_call_chooses_and_expands_what_choose_and_plan_for_rank_give(p, pick):
    """The runtime's path (`_core.plan_auto_for_rank`: one handover, read in place) chooses
    exactly what `choose` does and expands exactly `plan_for_rank(.., "auto")`'s rank plan;
    nothing when native wins."""
    c, m, backend = p
    rank = pick % c.num_gpus
    want = choose(m, c, backend, calibration=DEFAULTS)
    (alg, pred, cands), rp, choose_ns, decide_ns, expand_ns = _core.plan_auto_for_rank(
        np.ascontiguousarray(m), c, rank, backend, DEFAULTS)
    assert (alg, pred) == (want.algorithm, want.predicted_s)
    assert [x[0] for x in cands] == list(want.candidates)
    assert 0 < choose_ns <= decide_ns and expand_ns >= 0
    if alg == "native":
        assert rp is None
    else:
        assert rp == collsched.plan_for_rank(m, c, rank, "auto", backend=backend)
        assert rp.algorithm == alg


def test_matrix_is_read_in_place_and_views_are_made_contiguous():
    c = collsched.Cluster.parse("h200:2,gpus=4")
    m = traffic.zipf(8, 1.1, 1 << 20, seed=3)
    a = choose(m, c, "nccl", calibration=DEFAULTS)
    # A transposed (Fortran-order) view and a strided slice go through one contiguous copy.
    big = np.zeros((16, 16), dtype=np.uint64)
    big[::2, ::2] = m
    assert choose(big[::2, ::2], c, "nccl", calibration=DEFAULTS) == a
    assert choose(np.asfortranarray(m), c, "nccl", calibration=DEFAULTS) == a
    assert choose(m.T, c, "nccl", calibration=DEFAULTS) == choose(np.ascontiguousarray(m.T), c, "nccl",
                                                                  calibration=DEFAULTS)
    # The binding itself refuses what it cannot read in place, naming the problem.
    with pytest.raises(ValueError, match="C-contiguous"):
        _core.choose(np.asfortranarray(m), c, "nccl", DEFAULTS)
    with pytest.raises(ValueError, match="square"):
        _core.choose(np.zeros((4, 8), dtype=np.uint64), c, "nccl", DEFAULTS)
    with pytest.raises(ValueError, match=r"matrix: .*uint64, got dtype int64"):
        _core.choose(m.astype(np.int64), c, "nccl", DEFAULTS)
    with pytest.raises(ValueError, match="rank 8 is outside"):
        _core.plan_auto_for_rank(np.ascontiguousarray(m), c, 8, "nccl", DEFAULTS)
    # The cache key: the matrix's size and entries, read in place.
    assert _core.matrix_hash(m) == _core.matrix_hash(m.copy()) != _core.matrix_hash(m + np.uint64(1))
    # ... and a hit is confirmed by comparing the matrices in place.
    other = m.copy()
    assert _core.matrices_equal(m, other)
    other[7, 0] += np.uint64(1)
    assert not _core.matrices_equal(m, other)
    assert not _core.matrices_equal(m, np.zeros((4, 4), dtype=np.uint64))


def test_backend_and_size_move_the_choice():
    c = collsched.Cluster.parse("h200:4")
    tiny = traffic.uniform(32, 64, seed=1)
    assert choose(tiny, c, "nccl", calibration=DEFAULTS).algorithm == "native"
    big = traffic.zipf(32, 1.2, 8 << 20, seed=2)
    assert choose(big, c, "nccl", calibration=DEFAULTS).algorithm in ("balanced_direct", "fast", "sabre_skewed")
    # Gloo's half duplex makes torch's own call slower than fanout's data movement.
    bal = traffic.balanced(32, 4 << 20)
    g = choose(bal, c, "gloo", calibration=DEFAULTS)
    assert g.transfer_s["native"] > g.transfer_s["fanout"]
    n = choose(bal, c, "nccl", calibration=DEFAULTS)
    assert n.transfer_s["native"] == n.transfer_s["fanout"]
    sub = choose(big, c, "nccl", candidates=["fanout", "native"], calibration=DEFAULTS)
    assert set(sub.candidates) == {"native", "fanout"}


def test_bad_input_names_the_problem():
    m = traffic.uniform(8, 100, seed=1)
    with pytest.raises(ValueError, match=r"unknown backend 'mpi' \(expected one of: gloo, nccl\)"):
        choose(m, "h200:1", "mpi")
    with pytest.raises(ValueError, match="backend must be a string"):
        choose(m, "h200:1", None)
    with pytest.raises(ValueError, match="square"):
        choose(m[:4], "h200:1")
    with pytest.raises(ValueError, match="8×8 but cluster"):
        choose(m, "h200:2")
    with pytest.raises(ValueError, match="non-negative integer"):
        choose(-np.ones((8, 8), dtype=np.int64), "h200:1")
    with pytest.raises(ValueError, match="non-negative integer"):
        choose(np.ones((8, 8)), "h200:1")
    with pytest.raises(ValueError, match="unknown candidate 'nccl'"):
        choose(m, "h200:1", candidates=["nccl"])
    huge = np.zeros((8, 8), dtype=np.uint64)
    huge[0, 1], huge[0, 2] = np.iinfo(np.uint64).max, 1
    with pytest.raises(ValueError, match="row 0 sums past 2\\^64"):
        choose(huge, "h200:1")


def test_calibration_file_env_and_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(ENV, raising=False)
    assert path_in_use() is None and load().digest == DEFAULTS.digest
    table = json.loads(DEFAULTS.to_json())
    table["backends"]["gloo"]["step_us"] = 60000.0
    written = save(table)
    assert written == default_path() and path_in_use() == written
    assert load().digest != DEFAULTS.digest
    big = traffic.zipf(32, 1.2, 8 << 20, seed=2)
    # With 60 ms per step only torch's one call makes sense on Gloo.
    assert choose(big, "h200:4", "gloo").algorithm == "native"
    other = tmp_path / "other.json"
    other.write_text(DEFAULTS.to_json())
    monkeypatch.setenv(ENV, str(other))
    assert load().digest == DEFAULTS.digest
    monkeypatch.setenv(ENV, str(tmp_path / "missing.json"))
    with pytest.raises(ValueError, match="COLLSCHED_CALIBRATION=.*missing.json: no such calibration file"):
        choose(big, "h200:4", "gloo")
    bad = tmp_path / "bad.json"
    bad.write_text(DEFAULTS.to_json().replace('"half_duplex": 1.0', '"half_duplex": 2.0'))
    monkeypatch.setenv(ENV, str(bad))
    with pytest.raises(ValueError, match="bad.json: calibration: backends.gloo.half_duplex must be in"):
        load()
    with pytest.raises(ValueError, match="planning_ns_per_transfer has no entry for 'fast'"):
        t = json.loads(DEFAULTS.to_json())
        del t["planning_ns_per_transfer"]["fast"]
        save(t, tmp_path / "x.json")


def test_cli_calibrate_show_and_measure(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from collsched.cli import _register_all, app

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(ENV, raising=False)
    _register_all()
    runner = CliRunner()
    r = runner.invoke(app, ["calibrate", "--show"])
    assert r.exit_code == 0 and "built-in defaults" in r.output and '"gloo"' in r.output
    r = runner.invoke(app, ["calibrate", "--iters", "0"])
    assert r.exit_code == 2 and "--iters must be between 1 and 1000" in r.output
    out = tmp_path / "cal.json"
    r = runner.invoke(app, ["calibrate", "--nprocs", "2", "--iters", "3", "--mib", "1", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert f"wrote {out}" in r.output
    got = _core.Calibration.from_json(out.read_text())
    t = json.loads(got.to_json())
    assert t["backends"]["nccl"] == json.loads(DEFAULTS.to_json())["backends"]["nccl"]
    assert "measured by `collsched calibrate`" in t["source"] and "2 local Gloo ranks" in t["source"]
    assert all(v >= 0 for v in t["backends"]["gloo"].values())


def test_cli_calibrate_backend_errors(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from collsched.cli import _register_all, app

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    _register_all()
    runner = CliRunner()
    r = runner.invoke(app, ["calibrate", "--backend", "mpi"])
    assert r.exit_code == 2 and "--backend must be gloo, nccl or auto" in r.output
    import torch

    if not torch.cuda.is_available():
        r = runner.invoke(app, ["calibrate", "--backend", "nccl", "--nprocs", "2"])
        assert r.exit_code == 2 and "needs a CUDA GPU" in r.output
    assert not (tmp_path / "cache").exists()  # nothing written on a refusal


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.mark.skipif(not _cuda(), reason="needs a CUDA GPU and NCCL")
def test_cli_calibrate_measures_nccl_and_keeps_gloo(tmp_path, monkeypatch):
    import torch
    from typer.testing import CliRunner

    from collsched.cli import _register_all, app

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(ENV, raising=False)
    _register_all()
    runner = CliRunner()
    out = tmp_path / "nccl.json"
    n = torch.cuda.device_count() + 1  # more ranks than GPUs: refused unless asked for
    r = runner.invoke(app, ["calibrate", "--backend", "nccl", "--nprocs", str(n), "--iters", "3", "--mib", "1",
                            "-o", str(out)])
    assert r.exit_code == 2 and "--shared-gpus" in r.output and not out.exists()
    r = runner.invoke(app, ["calibrate", "--backend", "nccl", "--nprocs", str(n), "--shared-gpus", "--iters", "3",
                            "--mib", "1", "-o", str(out)])
    assert r.exit_code == 0, f"{r.output}\n{r.exception!r}"
    t = json.loads(_core.Calibration.from_json(out.read_text()).to_json())
    defaults = json.loads(DEFAULTS.to_json())
    assert t["backends"]["gloo"] == defaults["backends"]["gloo"]
    assert t["backends"]["nccl"] != defaults["backends"]["nccl"]
    assert all(v >= 0 for v in t["backends"]["nccl"].values())
    assert f"nccl measured by `collsched calibrate` on {n} local NCCL ranks sharing GPUs" in t["source"]
    assert "gloo kept from the previous table" in t["source"]


def test_the_plan_cache_chooses_a_matrix_once_per_calibration(monkeypatch):
    """auto in the runtime's cache: a miss makes one core call (choice + expansion), a repeated
    matrix is a hit with no call, and other constants are another key."""
    from collsched.comm.cache import PlanCache

    calls = []
    real = _core.plan_auto_for_rank
    monkeypatch.setattr(_core, "plan_auto_for_rank", lambda *a, **k: calls.append(1) or real(*a, **k))
    c = collsched.Cluster.parse("h200:2,gpus=4")
    cache = PlanCache()
    big = traffic.zipf(8, 1.2, 8 << 20, seed=2)
    e, hit = cache.get(big, c, "auto", {"backend": "nccl"}, rank=3, calibration=DEFAULTS)
    assert not hit and e.choice == e.algorithm == e.plan.algorithm != "native" and len(calls) == 1
    assert e.plan == collsched.plan_for_rank(big, c, 3, "auto", backend="nccl")
    assert 0 < e.choose_s <= e.decide_s
    again, hit = cache.get(big.copy(), c, "auto", {"backend": "nccl"}, rank=3, calibration=DEFAULTS)
    assert hit and again is e and len(calls) == 1
    other = json.loads(DEFAULTS.to_json())
    other["backends"]["nccl"]["call_us"] += 1
    e2, hit = cache.get(big, c, "auto", {"backend": "nccl"}, rank=3,
                        calibration=_core.Calibration.from_json(json.dumps(other)))
    assert not hit and len(calls) == 2
    # native: an entry without a plan, which the runtime runs as torch's own call.
    tiny = traffic.uniform(8, 64, seed=1)
    n, hit = cache.get(tiny, c, "auto", {"backend": "nccl"}, rank=0, calibration=DEFAULTS)
    assert not hit and n.choice == "native" and n.plan is None and n.plan_hash == ""
    with pytest.raises(ValueError, match="takes the options 'backend' and 'candidates'"):
        cache.get(tiny, c, "auto", {"backend": "nccl", "refine": "x"}, rank=0, calibration=DEFAULTS)


def test_prefetching_the_transposed_demand_chooses_it_in_the_background():
    """`prefetch_transpose` with auto: the background thread chooses (and, unless native wins,
    expands and compiles) the transposed matrix, which the next call then finds."""
    import time

    from collsched.comm.cache import PlanCache

    c = collsched.Cluster.parse("h200:2,gpus=4")
    for m, native in ((traffic.zipf(8, 1.2, 8 << 20, seed=2), False), (traffic.uniform(8, 64, seed=1), True)):
        m = m.copy()
        m[0, 1] += 5  # not symmetric: its transpose is another demand
        cache = PlanCache()
        assert cache.prefetch(m, c, "auto", {"backend": "nccl"}, rank=1, per_rank=True, transpose=True,
                              calibration=DEFAULTS)
        deadline = time.monotonic() + 30
        while cache.prefetched == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        e, hit = cache.get(np.ascontiguousarray(m.T), c, "auto", {"backend": "nccl"}, rank=1, calibration=DEFAULTS)
        assert hit and e.prefetched and (e.choice == "native") == native
        assert (e.plan is None) == native and len(e.programs) == (0 if native else 1)
