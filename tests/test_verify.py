"""Plan.verify() from Python: baseline plans verify, survive serialisation, and
tampered plans raise collsched.VerificationError naming the transfer."""
import json
import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import collsched

BASELINES = ["fanout", "spreadout", "hierarchical"]


@st.composite
def cluster_and_matrix(draw):
    servers = draw(st.integers(1, 3))
    gpus = draw(st.integers(1, 4))
    nics = draw(st.integers(1, gpus))
    n = servers * gpus
    entries = draw(st.lists(st.integers(0, 4096), min_size=n * n, max_size=n * n))
    return f"custom:{servers},gpus={gpus},nics={nics}", np.array(entries, dtype=np.uint64).reshape(n, n)


@settings(max_examples=40, deadline=None)
@given(cluster_and_matrix(), st.sampled_from(BASELINES))
def test_baselines_verify(cm, algorithm):
    cluster, m = cm
    plan = collsched.plan_all_to_all(m, cluster, algorithm)
    report = plan.verify()
    assert report["transfers"] == plan.num_transfers
    assert report["segments"] == plan.num_segments
    assert report["bytes_moved"] == sum(plan.bytes_per_tier().values())
    # Every block leaves its sender exactly once at least (more for hierarchical forwarding).
    assert report["bytes_moved"] >= int(m.sum())


def _plan(algorithm="hierarchical", n_servers=2, gpus=3):
    n = n_servers * gpus
    m = (np.arange(n * n, dtype=np.uint64).reshape(n, n) % 5 + 1) * 32
    return collsched.plan_all_to_all(m, f"h200:{n_servers},gpus={gpus}", algorithm)


@pytest.mark.parametrize("algorithm", BASELINES)
def test_round_trips_verify_and_keep_hash(algorithm):
    plan = _plan(algorithm)
    plan.verify()
    for back in (collsched.Plan.from_json(plan.to_json()), collsched.Plan.from_binary(plan.to_binary())):
        assert back.hash == plan.hash
        assert back.verify() == plan.verify()


def _first_scale_out_with_deps(d):
    for k, t in enumerate(d["transfers"]):
        if t["tier"] == "scale_out" and t["dep_end"] > t["dep_begin"]:
            return k
    raise AssertionError("no scale-out transfer with deps")


def _tamper(mutate):
    d = json.loads(_plan().to_json())
    k = mutate(d)
    return collsched.Plan.from_json(json.dumps(d)), k


def _same_step(d):
    k = _first_scale_out_with_deps(d)
    d["transfers"][k]["step"] = 0
    return k


def _no_deps(d):
    k = _first_scale_out_with_deps(d)
    d["transfers"][k]["dep_end"] = d["transfers"][k]["dep_begin"]
    return k


def _shifted_destination(d):
    # The last transfer writes into a block another transfer already filled.
    k = len(d["transfers"]) - 1
    t = d["transfers"][k]
    d["segments"][t["seg_begin"]]["dst_off"] = 0 if d["segments"][t["seg_begin"]]["dst_off"] else 32
    return k


def _write_input(d):
    d["segments"][d["transfers"][1]["seg_begin"]]["dst_buf"] = "input"
    return 1


def _wrong_tier(d):
    k = _first_scale_out_with_deps(d)
    d["transfers"][k]["tier"] = "scale_up"
    return k


@pytest.mark.parametrize("mutate,what", [
    (_same_step, "not before step 0"),
    (_no_deps, "not an ancestor through deps"),
    (_shifted_destination, "already written by transfer"),
    (_write_input, "inputs are read-only"),
    (_wrong_tier, "tier is scale_up"),
])
def test_tampered_json_is_rejected_naming_the_transfer(mutate, what):
    plan, k = _tamper(mutate)
    with pytest.raises(collsched.VerificationError) as err:
        plan.verify()
    msg = str(err.value)
    assert re.match(rf"transfer {k} \(rank \d+→\d+, \w+, step \d+\)", msg), msg
    assert what in msg


def test_dropped_transfer_names_the_missing_block():
    d = json.loads(_plan("fanout").to_json())
    t = d["transfers"][3]
    t["seg_end"] = t["seg_begin"]  # transfer 3 now carries nothing
    with pytest.raises(collsched.VerificationError, match=rf"output of rank {t['dst']} .*block {t['src']}→{t['dst']}.* never written"):
        collsched.Plan.from_json(json.dumps(d)).verify()


def test_verification_error_is_a_value_error():
    assert issubclass(collsched.VerificationError, ValueError)


@pytest.mark.parametrize("algorithm", ["spreadout", "hierarchical"])
def test_unknown_option_is_rejected(algorithm):
    with pytest.raises(ValueError, match="takes no options, got 'chunk'"):
        collsched.plan_all_to_all(np.ones((4, 4), dtype=np.uint64), "h200:2,gpus=2", algorithm, chunk="1MiB")


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 9), seed=st.integers(0, 1000), algorithm=st.sampled_from(["fanout", "fast", "spreadout"]))
def test_plan_buffer_sizes_are_the_matrix_row_and_column_sums(n, seed, algorithm):
    """The plan's per-rank sizes (columns summed in one row-major pass) and one rank's, as its
    RankPlan reports them, against numpy."""
    m = collsched.traffic.zipf(n, 0.9, 1000, seed=seed)
    plan = collsched.plan_all_to_all(m, f"h200:1,gpus={n}", algorithm)
    assert list(plan.input_sizes) == m.sum(axis=1).tolist() and list(plan.output_sizes) == m.sum(axis=0).tolist()
    for r in range(n):
        rp = plan.rank_plan(r)
        assert (rp.input_bytes, rp.output_bytes, rp.scratch_bytes) == (plan.input_sizes[r], plan.output_sizes[r],
                                                                       plan.scratch_bytes[r])


def test_plan_hash_is_kept_and_safe_to_ask_from_many_threads():
    """The hash is computed without the GIL on first use and then kept: threads asking at once
    all get the value a fresh copy of the plan computes, and none waits forever."""
    import threading

    m = collsched.traffic.zipf(256, 0.8, 50 << 20, seed=2)
    plan = collsched.plan_all_to_all(m, "h200:32", "fast")  # large enough to hash on two threads
    got, threads = [], [threading.Thread(target=lambda: got.append(plan.hash)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    want = collsched.Plan.from_binary(plan.to_binary()).hash
    assert got == [want] * 8 and plan.hash == want and want in repr(plan)


@pytest.mark.parametrize("algorithm", ["fanout", "fast", "auto"])
def test_input_hash_that_does_not_match_the_traffic_is_rejected_naming_both_hashes(algorithm):
    # Before, verify checked the transfers only: an input_hash from another matrix (or edited)
    # passed, and only the plan's own hash changed.
    plan = _plan(algorithm)
    plan.verify()
    d = json.loads(plan.to_json())
    other = json.loads(_plan(algorithm, gpus=2).to_json())  # a plan of another matrix and cluster
    assert other["input_hash"] != d["input_hash"]
    d["input_hash"] = other["input_hash"]
    with pytest.raises(collsched.VerificationError) as err:
        collsched.Plan.from_json(json.dumps(d)).verify()
    msg = str(err.value)
    traffic_hash = collsched.traffic.matrix_hash(np.array(d["collective"]["traffic"]["data"], dtype=np.uint64)
                                                 .reshape(6, 6))
    assert f"input_hash {other['input_hash']:016x} does not match the plan's traffic" in msg, msg
    assert f"traffic hash {traffic_hash}" in msg and f"gives input_hash {plan.input_hash}" in msg, msg
    d["meta"]["setting_hash"] = "xyz"
    with pytest.raises(collsched.VerificationError, match="setting_hash must be 16 hex digits"):
        collsched.Plan.from_json(json.dumps(d)).verify()


def test_cli_verify_rejects_a_mismatched_input_hash(tmp_path):
    from typer.testing import CliRunner

    from collsched.cli import _register_all, app

    d = json.loads(_plan("fanout").to_json())
    d["input_hash"] ^= 1
    path = tmp_path / "p.json"
    path.write_text(json.dumps(d))
    _register_all()
    r = CliRunner().invoke(app, ["verify", str(path)])
    assert r.exit_code == 1, r.output
    assert r.output.startswith(f"violation: input_hash {d['input_hash']:016x} does not match the plan's traffic")
