"""Every public entry point given bad input raises ValueError naming the problem (or the CLI exits 2 with one line):
never a panic (RuntimeError "internal error in collsched core"), never a hang."""
import inspect
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import collsched
from collsched import Cluster, Plan, traffic
from collsched.workloads import make_workload

FUZZ = settings(max_examples=150, deadline=2000, suppress_health_check=[HealthCheck.too_slow])


def rejects(fn, *args, **kwargs) -> str:
    """Call fn expecting a clean ValueError; a core panic (RuntimeError) fails the test."""
    try:
        fn(*args, **kwargs)
    except ValueError as e:
        assert str(e).strip(), "empty error message"
        return str(e)
    except RuntimeError as e:  # pragma: no cover - a panic is a bug
        pytest.fail(f"panic instead of ValueError: {e}")
    pytest.fail(f"{fn.__name__}{args} accepted bad input")


def maybe(fn, *args, **kwargs):
    """Call fn on arbitrary input: success or ValueError are fine, a panic is not."""
    try:
        return fn(*args, **kwargs)
    except ValueError as e:
        assert str(e).strip()
    except RuntimeError as e:  # pragma: no cover
        pytest.fail(f"panic: {e}")


# ------------------------------------------------------------------ cluster specs

spec_alphabet = st.sampled_from(list("h200:,=.-_ abcxyzGBps/0123456789") + ["nic", "gpus", "nics", "fabric", "mesh",
                                                                              "ring", "cubemesh", "scaleup", "copy",
                                                                              "alpha_local", "MiB", "Gbps", "GB/s"])


@FUZZ
@given(st.lists(spec_alphabet, max_size=20).map("".join))
def test_cluster_spec_fuzz_grammar_like(spec):
    c = maybe(Cluster.parse, spec)
    if c is not None:
        assert c.num_gpus >= 1 and c.nic_bw > 0 and c.nics_per_server <= c.gpus_per_server


@FUZZ
@given(st.text(max_size=40))
def test_cluster_spec_fuzz_any_text(spec):
    maybe(Cluster.parse, spec)


@pytest.mark.parametrize("spec", ["h200:4294967296", "h200:2,gpus=4294967295", "h200:1048576,gpus=8",
                                  "h200:2,alpha_local=99999999999999s", "h200:2,nic=1.0000000000000000001Gbps",
                                  "h200:2,nic=.", "h200:2,nic=1..2Gbps", "h200:2,nic=_", "h200:2,=", ":", "h200:2,,"])
def test_cluster_spec_edge_cases(spec):
    maybe(Cluster.parse, spec)


# ------------------------------------------------------------------ planning

@pytest.mark.parametrize("bad, words", [
    (np.ones((4, 4)), "4×4 but cluster"),
    (np.ones((16, 15)), "square"),
    (-np.ones((16, 16)), "negative"),
    (np.full((16, 16), np.nan), "NaN"),
    (np.full((16, 16), 0.5), "non-integer"),
    (np.ones((16, 16), dtype=bool), "bool"),
    (np.zeros((0, 0)), "at least one"),
])
def test_plan_all_to_all_bad_matrix(bad, words):
    assert words in rejects(collsched.plan_all_to_all, bad, "h200:2", "fanout")


def test_plan_all_to_all_bad_algorithm_cluster_option():
    m = np.ones((8, 8), dtype=np.uint64)
    assert "unknown all-to-all algorithm" in rejects(collsched.plan_all_to_all, m, "h200:1", "warp")
    assert "unknown cluster preset" in rejects(collsched.plan_all_to_all, m, "zz:1", "fanout")
    with pytest.raises(TypeError):
        collsched.plan_all_to_all(m, 3.5, "fanout")


@settings(max_examples=40, deadline=10_000)
@given(n=st.sampled_from([4, 8]), algorithm=st.sampled_from([a for a, _ in collsched.all_to_all_algorithms()]),
       seed=st.integers(0, 2**32), big=st.booleans())
def test_every_algorithm_errors_cleanly_or_plans(n, algorithm, seed, big):
    """Including matrices whose total sits just under 2^64: no algorithm may panic on them,
    and whatever plan comes out must verify."""
    m = make_workload("zipf:1.5", 2 * n, 1 << 20, seed)
    if big:
        total = int(m.sum(dtype=object))
        m = (m.astype(object) * ((2**64 - 1) // total)).astype(np.uint64)
        assert int(m.sum(dtype=object)) < 2**64 and int(m.max()) > 2**55
    plan = maybe(collsched.plan_all_to_all, m, f"h200:2,gpus={n}", algorithm)
    if plan is not None:
        report = plan.verify()
        # Relays move bytes more than once, past 2^64 here: the counts are exact, not wrapped.
        moved = sum(plan.bytes_per_tier().values())
        assert report["bytes_moved"] == moved >= int(m.sum(dtype=object))


# ------------------------------------------------------------------ generators and files

@pytest.mark.parametrize("call, words", [
    (lambda: traffic.zipf(4, -1.0, 100), "non-negative"),
    (lambda: traffic.zipf(4, float("nan"), 100), "non-negative"),
    (lambda: traffic.uniform(0, 100), "at least one"),
    (lambda: traffic.uniform(4, 2**60), "too large"),
    (lambda: traffic.hot_experts(3, experts=16), "divide"),
    (lambda: traffic.hot_experts(4, top_k=0), "top_k"),
    (lambda: traffic.hot_experts(4, skew=float("inf")), "skew"),
    (lambda: traffic.hot_experts(4, hidden=2**40, dtype_bytes=2**30), "overflows"),
    (lambda: make_workload("zipf:1", 4, 2**60, 0), "too large"),
    (lambda: make_workload("nonsense", 4, 100, 0), "accepted"),
])
def test_generators_reject_bad_parameters(call, words):
    assert words in rejects(call)


def test_generator_negative_args_are_rejected():
    for call in (lambda: traffic.uniform(-1, 100), lambda: traffic.balanced(4, -1), lambda: traffic.uniform(4, 100, -1)):
        with pytest.raises((ValueError, OverflowError)):
            call()


@FUZZ
@given(st.binary(max_size=200))
def test_traffic_load_garbage(tmp_path_factory, data):
    d = tmp_path_factory.mktemp("g")
    for name in ("m.npy", "m.csv"):
        p = d / name
        p.write_bytes(data)
        maybe(traffic.load, p)


# ------------------------------------------------------------------ plan deserialisation

@FUZZ
@given(st.binary(max_size=400))
def test_plan_from_binary_garbage(data):
    maybe(Plan.from_binary, data)


@FUZZ
@given(st.text(max_size=200))
def test_plan_from_json_garbage(text):
    maybe(Plan.from_json, text)


def _small_plan():
    return collsched.plan_all_to_all(make_workload("uniform", 8, 4096, 1), "h200:1", "fanout")


@settings(max_examples=150, deadline=2000)
@given(data=st.data())
def test_plan_from_binary_mutated(data):
    """Flip, truncate and extend a real plan's bytes: each is either a valid plan or a clean error."""
    raw = bytearray(_small_plan().to_binary())
    op = data.draw(st.sampled_from(["flip", "truncate", "extend"]))
    if op == "flip":
        for _ in range(data.draw(st.integers(1, 8))):
            i = data.draw(st.integers(0, len(raw) - 1))
            raw[i] = data.draw(st.integers(0, 255))
    elif op == "truncate":
        raw = raw[: data.draw(st.integers(0, len(raw) - 1))]
    else:
        raw += data.draw(st.binary(min_size=1, max_size=16))
    p = maybe(Plan.from_binary, bytes(raw))
    if p is not None:
        maybe(p.verify)


@settings(max_examples=100, deadline=2000)
@given(data=st.data())
def test_plan_from_json_mutated(data):
    doc = json.loads(_small_plan().to_json())
    keys = [k for k in doc if isinstance(doc[k], list) and doc[k]]
    if not keys:
        return
    key = data.draw(st.sampled_from(keys))
    i = data.draw(st.integers(0, len(doc[key]) - 1))
    doc[key][i] = data.draw(st.one_of(st.integers(-2**70, 2**70), st.text(max_size=5), st.none(), st.just({})))
    p = maybe(Plan.from_json, json.dumps(doc))
    if p is not None:
        maybe(p.verify)


# ------------------------------------------------------------------ the CLI

def _cli(*args):
    import typer

    from collsched.cli import core as cli_core

    app = typer.Typer(pretty_exceptions_enable=False)
    cli_core.register(app)
    kw = {"mix_stderr": False} if "mix_stderr" in inspect.signature(CliRunner).parameters else {}
    return CliRunner(**kw).invoke(app, list(args), catch_exceptions=False)


@settings(max_examples=30, deadline=5000)
@given(cluster=st.text(max_size=20), workload=st.text(max_size=12), mean=st.text(max_size=8))
def test_cli_traffic_garbage_exits_2_on_one_line(cluster, workload, mean):
    r = _cli("traffic", "--cluster", cluster, "--workload", workload, "--mean", mean)
    if r.exit_code != 0:
        assert r.exit_code == 2, r.stderr
        assert "internal error" not in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("args", [
    ["plan", "--cluster", "h200:1", "--algorithm", "fanout", "--mean", "1ZB"],
    ["plan", "--cluster", "h200:1,nics=0", "--algorithm", "fanout"],
    ["plan", "--cluster", "h200:1", "--algorithm", "fanout", "--workload", "hot:-1"],
    ["plan", "--cluster", "h200:1", "--algorithm", "fanout", "--out", "/nonexistent/dir/p.json"],
    ["traffic", "--cluster", "h200:1", "--out", "m.txt"],
    ["verify", "/nonexistent/plan.json"],
    ["draw", "/nonexistent/plan.json", "--cluster", "h200:1"],
    ["simulate", "--cluster", "h200:1", "--algorithms", "fanout", "--seed", "-1"],
])
def test_cli_bad_input_exits_2(args):
    r = _cli(*args)
    assert r.exit_code == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr


# ------------------------------------------------------------------ no hangs on huge or pathological requests

def test_huge_matrix_is_refused_before_allocating():
    assert "at most 8192" in rejects(make_workload, "uniform", 100_000, 1000, 0)
    assert "at most 8192" in rejects(traffic.balanced, 2**20, 1)
    r = _cli("traffic", "--cluster", "h200:131072")  # the resource guard, before anything is generated
    assert r.exit_code == 2 and "32.0 TiB" in r.stderr and "--max-memory" in r.stderr
    r = _cli("traffic", "--cluster", "h200:131072", "--max-memory", "64TiB", "--max-time", "1e9")  # then the generator's limit
    assert r.exit_code == 2 and "at most 8192" in r.stderr


def test_steep_hot_experts_with_every_expert_chosen_terminates():
    m = traffic.hot_experts(2, skew=60.0, tokens_per_rank=100, top_k=16, experts=16, hidden=1, dtype_bytes=1)
    assert m.sum(axis=1).tolist() == [1600, 1600]


def test_hot_experts_refuses_unbounded_sampling():
    assert "routing draws" in rejects(traffic.hot_experts, 4, tokens_per_rank=2**40)
