"""collsched.moe without ranks: the balancer (Fusco Algorithm 1), whole dispatch Plans for small
cases (every one verified: core verifier + row-level final state), inter-node bytes equal the
distinct (token, destination node) pairs, and the simulate variants' aggregated plans."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("torch")

import collsched  # noqa: E402
from collsched.moe.plans import (combine_plan, dispatch_plan, expected_contributions, expected_rows,  # noqa: E402
                                 verify_combine_plan, verify_dispatch_plan)
from collsched.moe.routing import Layout, balance_forwarders  # noqa: E402


@given(st.integers(1, 5), st.integers(1, 6), st.lists(st.integers(0, 1000), min_size=30, max_size=30),
       st.booleans())
@settings(max_examples=60, deadline=None)
def test_balancer_groups_hold_one_gpu_per_node_and_spread_the_heaviest(nodes, gpn, loads, balance):
    r = nodes * gpn
    load = np.array((loads * 2)[:r])
    f = balance_forwarders(load, gpn, balance)
    node = np.arange(r) // gpn
    assert f.shape == (r, nodes)
    assert (f[np.arange(r), node] == np.arange(r)).all()  # a GPU forwards for its own node
    assert (f // gpn == np.arange(nodes)[None, :]).all()  # forwarder on node s is on node s
    # Groups: i's forwarders are a group, and every member of it has the same forwarders.
    for i in range(r):
        for s in range(nodes):
            assert (f[f[i, s]] == f[i]).all()
    assert np.array_equal(f, balance_forwarders(load.copy(), gpn, balance))  # deterministic
    if balance and nodes <= gpn:
        heaviest = [s * gpn + int(np.argsort(-load[s * gpn:(s + 1) * gpn], kind="stable")[0]) for s in range(nodes)]
        groups = {tuple(f[h]) for h in heaviest}
        assert len(groups) == nodes  # each node's heaviest GPU in a different group
    if not balance:
        assert (f % gpn == (np.arange(r) % gpn)[:, None]).all()


def test_balancer_lowers_the_heaviest_group_on_fig6_like_loads():
    load = np.array([9, 1, 1, 1, 9, 1, 1, 1])  # the same index is hot on both nodes
    static = balance_forwarders(load, 4, False)
    bal = balance_forwarders(load, 4, True)
    group_load = lambda f: max(load[list(set(f[i]))].sum() for i in range(8))  # noqa: E731
    assert group_load(static) == 18 and group_load(bal) == 10


def _routing(rng, t, k, e, masked):
    idx = np.stack([rng.permutation(e)[:k] for _ in range(t)]) if t else np.zeros((0, k), np.int64)
    if masked and t:
        idx[rng.random(idx.shape) < 0.3] = -1
    return idx.astype(np.int64)


def _small_case(shape, experts_per_rank, k, masked, seed, custom):
    """(layout, per-rank routings) of a random small case: up to 6 tokens per rank, a custom
    placement when `custom`, some expert slots masked when `masked`."""
    nodes, gpn = shape
    r = nodes * gpn
    e = r * experts_per_rank
    k = min(k, e)
    rng = np.random.default_rng(seed)
    layout = Layout.build(r, gpn, e, rng.integers(0, r, size=e) if custom else None)
    return layout, [_routing(rng, int(rng.integers(0, 7)), k, e, masked) for _ in range(r)]


def SMALL_CASES(test):
    """40 random small cases: (shape, experts per rank, top-k, dedup, balance, masked, seed, custom placement)."""
    return settings(max_examples=40, deadline=None)(given(
        st.sampled_from([(2, 2), (2, 4), (4, 2), (3, 2)]), st.integers(1, 4), st.integers(1, 4),
        st.sampled_from(["node", "rank", "none"]), st.booleans(), st.booleans(), st.integers(0, 2**31 - 1),
        st.booleans())(test))


@SMALL_CASES
def test_every_small_dispatch_plan_verifies_and_counts_distinct_token_node_pairs(
        shape, experts_per_rank, k, dedup, balance, masked, seed, custom):
    layout, routings = _small_case(shape, experts_per_rank, k, masked, seed, custom)
    row = 12
    plan, info = dispatch_plan(routings, layout, row, dedup, balance)
    rep = verify_dispatch_plan(plan, routings, layout, row)
    assert rep["rows_checked"] == sum(int((ix >= 0).sum()) for ix in routings)
    assert plan.bytes_per_tier()["scale_out"] == info["internode_bytes"] == _crossing_rows(routings, layout, dedup) * row


def _crossing_rows(routings, layout, dedup):
    """Rows that cross nodes, from the routing alone: distinct (token, remote node) pairs with
    dedup="node", distinct (token, remote GPU) with "rank", remote (token, expert) pairs with "none"."""
    r, gpn = layout.ranks, layout.gpus_per_node
    node_of_rank = np.arange(r) // gpn
    if dedup == "node":
        pairs = sum(len({(t, int(node_of_rank[layout.owner[x]])) for t in range(len(ix)) for x in ix[t]
                         if x >= 0 and node_of_rank[layout.owner[x]] != i // gpn}) for i, ix in enumerate(routings))
    elif dedup == "rank":
        pairs = sum(len({(t, int(layout.owner[x])) for t in range(len(ix)) for x in ix[t]
                         if x >= 0 and node_of_rank[layout.owner[x]] != i // gpn}) for i, ix in enumerate(routings))
    else:
        pairs = sum(int(((ix >= 0) & (node_of_rank[layout.owner[np.maximum(ix, 0)]] != i // gpn)).sum())
                    for i, ix in enumerate(routings))
    return pairs


@SMALL_CASES
def test_every_small_combine_plan_verifies_and_returns_one_row_per_token_and_node(
        shape, experts_per_rank, k, dedup, balance, masked, seed, custom):
    layout, routings = _small_case(shape, experts_per_rank, k, masked, seed, custom)
    row = 8
    plan, info = combine_plan(routings, layout, row, dedup, balance, elem_bytes=4)
    rep = verify_combine_plan(plan, routings, layout, row, elem_bytes=4)
    assert rep["contributions"] == sum(int((ix >= 0).sum()) for ix in routings)  # every (token, expert) once
    assert rep["rows_checked"] == sum(len(ix) for ix in routings)
    # Partial reduction: the combine crosses nodes with exactly the rows the dispatch sent.
    assert plan.bytes_per_tier()["scale_out"] == info["internode_bytes"] == _crossing_rows(routings, layout, dedup) * row


def test_a_wrong_row_is_caught_by_the_final_state_check():
    import json

    layout = Layout.build(4, 2, 8)
    routings = [np.array([[0, 5], [2, 7]]), np.array([[1, 6]]), np.zeros((0, 2), np.int64), np.array([[3, 4]])]
    plan, _ = dispatch_plan(routings, layout, 4, "node")
    verify_dispatch_plan(plan, routings, layout, 4)
    doc = json.loads(plan.to_json())
    for s in doc["segments"]:
        if s["src_buf"] == "input" and s["src_off"] == 0 and s["len"] == 4:
            s["src_off"] = 4  # read token 1 instead of token 0
            break
    bad = collsched.Plan.from_json(json.dumps(doc))
    with pytest.raises(collsched.VerificationError, match="final state"):
        verify_dispatch_plan(bad, routings, layout, 4)
    assert expected_rows(routings, layout)[0].tolist() == [[0, 0], [1, 0]]


def _edited(plan, edit):
    import json

    doc = json.loads(plan.to_json())
    edit(doc)
    return collsched.Plan.from_json(json.dumps(doc))


def _drop_segment(doc, tid, k):
    """Remove segment k of transfer tid, shifting the later transfers' segment ranges."""
    t = doc["transfers"][tid]
    del doc["segments"][t["seg_begin"] + k]
    t["seg_end"] -= 1
    for u in doc["transfers"][tid + 1:]:
        u["seg_begin"] -= 1
        u["seg_end"] -= 1


def test_a_broken_combine_plan_is_rejected():
    # 2 nodes × 2 GPUs, 2 experts per GPU. Rank 0's token 0 goes to experts 4 and 6 (ranks 2
    # and 3, node 1: a partial sum on the forwarder) and 1 (its own node): a sum at the origin.
    layout = Layout.build(4, 2, 8)
    routings = [np.array([[4, 6, 1], [0, -1, 7]]), np.array([[5, 2, 3]]), np.zeros((0, 3), np.int64),
                np.array([[-1, -1, -1]])]
    plan, _ = combine_plan(routings, layout, 8, "node")
    rep = verify_combine_plan(plan, routings, layout, 8)
    assert rep["contributions"] == 8 and expected_contributions(routings, layout)[3] == [[]]
    # The collective's own final-state rules cannot state a combine: the option is what admits it.
    with pytest.raises(collsched.VerificationError, match="reduce_sum in a all_to_all plan"):
        plan.verify()
    assert plan.verify(final_state="caller", elem_bytes=4)["final_state"] == "left to the caller"
    with pytest.raises(ValueError, match="final_state must be"):
        plan.verify(final_state="mine")
    import json

    doc = json.loads(plan.to_json())
    reduces = [i for i, t in enumerate(doc["transfers"]) if t["op"] == "reduce_sum"]
    partial = next(i for i in reduces if doc["segments"][doc["transfers"][i]["seg_begin"]]["dst_buf"] == "scratch")
    final = max(i for i in reduces if doc["segments"][doc["transfers"][i]["seg_begin"]]["dst_buf"] == "output")
    # One contribution dropped: the forwarder's partial sum misses an expert's row.
    dropped = _edited(plan, lambda d: _drop_segment(d, partial, 0))
    with pytest.raises(collsched.VerificationError, match=r"final state: output row \d+ of rank \d+: expected the sum"):
        verify_combine_plan(dropped, routings, layout, 8)

    # One contribution doubled: a last step adds a partial into the output once more.
    def double(d):
        t = dict(d["transfers"][final])
        seg = dict(d["segments"][t["seg_begin"]])
        d["segments"].append(seg)
        d["deps"].append(final)
        t.update(step=t["step"] + 1, seg_begin=len(d["segments"]) - 1, seg_end=len(d["segments"]),
                 dep_begin=len(d["deps"]) - 1, dep_end=len(d["deps"]))
        d["transfers"].append(t)
    with pytest.raises(collsched.VerificationError, match="final state: output row"):
        verify_combine_plan(_edited(plan, double), routings, layout, 8)

    # An unordered hazard: the origin's last sum runs in the same step as the one before it.
    def same_step(d):
        d["transfers"][final]["step"] -= 1
    with pytest.raises(collsched.VerificationError, match=f"transfer {final} .*not before step"):
        verify_combine_plan(_edited(plan, same_step), routings, layout, 8)


def test_simulated_variants_move_the_bytes_their_design_says():
    from collsched.moe import sim

    c = collsched.Cluster.parse("h100:2,gpus=4,scaleup=480GB/s,nic=50GB/s")
    counts = sim.route_counts("realistic", 256, 8, 4, 32, 4, seed=3)
    pairs, node_units, rank_units = counts
    node = np.arange(8) // 4
    cross = node[:, None] != node[None, :]
    row = 64 * 2
    res = {v: sim.simulate_variant(v, counts, c, 64) for v in sim.VARIANTS}
    assert res["nccl"]["internode_bytes"] == res["fusco_no_dedup"]["internode_bytes"] == int((pairs * cross).sum()) * row
    remote_units = int(sum(node_units[i, 1 - node[i]] for i in range(8)))
    for v in ("deepep", "fusco", "fusco_fast", "fusco_no_fusion", "fusco_no_balancer"):
        assert res[v]["internode_bytes"] == remote_units * row, v
    assert res["fusco_fast"]["time_s"] <= res["fusco"]["time_s"]
    assert res["fusco_no_fusion"]["time_s"] > res["fusco"]["time_s"]  # two permutes more
    assert res["nccl"]["time_s"] > res["fusco_no_dedup"]["time_s"]  # the permutes nccl pays
    assert (rank_units <= pairs).all() and (node_units.sum(1) <= rank_units.sum(1)).all()


def test_pipelined_forwarding_moves_the_same_bytes_sooner():
    from collsched.moe import sim

    c = collsched.Cluster.parse("h100:2,gpus=4,scaleup=480GB/s,nic=50GB/s")
    counts = sim.route_counts("realistic", 1024, 8, 4, 32, 4, seed=2)
    for v in ("fusco", "deepep"):
        one = sim.simulate_variant(v, counts, c, 7168, chunks=1)
        four = sim.simulate_variant(v, counts, c, 7168, chunks=4)
        assert one["internode_bytes"] == four["internode_bytes"]
        assert four["time_s"] < one["time_s"], v  # hop 2 starts on the first pieces
    nccl = [sim.simulate_variant("nccl", counts, c, 7168, chunks=k)["time_s"] for k in (1, 4)]
    assert abs(nccl[0] - nccl[1]) < 0.02 * nccl[0]  # one hop: nothing to overlap
    with pytest.raises(ValueError, match="chunks"):
        sim.simulate_variant("fusco", counts, c, 64, chunks=0)


@pytest.mark.parametrize("routing", ["single-node", "imbalanced"])
def test_routing_generators_follow_their_definition(routing):
    from collsched.moe import sim

    pairs, node_units, _ = sim.route_counts(routing, 200, 8, 4, 32, 4, seed=1)
    assert (pairs.sum(1) == 200 * 4).all()
    if routing == "single-node":
        assert (node_units.sum(1) == 200).all()  # one node per token
    else:
        remote = np.array([node_units[i, 1 - i // 4] for i in range(8)]) / 200
        assert remote.min() < 0.35 and remote.max() > 0.65  # bimodal per-GPU cross-node load


def _cli(*args):
    import inspect

    import typer
    from typer.testing import CliRunner

    from collsched.cli import moe as cli_moe

    app = typer.Typer()
    cli_moe.register(app)
    kw = {"mix_stderr": False} if "mix_stderr" in inspect.signature(CliRunner).parameters else {}
    return CliRunner(**kw).invoke(app, [str(a) for a in args], catch_exceptions=False)


def test_cli_moe_simulate_json_and_errors():
    import json

    cmd = ["moe", "simulate", "-c", "h100:2,gpus=4", "--tokens", "128,256", "--experts", "32", "--topk", "4",
           "--hidden", "64"]
    out = _cli(*cmd, "--variants", "nccl,deepep,fusco", "--json")
    assert out.exit_code == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["simulated"] is True and len(doc["rows"]) == 6
    assert {r["variant"] for r in doc["rows"]} == {"nccl", "deepep", "fusco"}
    assert all(r["time_s"] > 0 and r["internode_bytes"] > 0 for r in doc["rows"])
    bad = _cli(*cmd, "--variants", "nope")
    assert bad.exit_code == 2 and "unknown variant 'nope'" in bad.stderr
    bad = _cli(*cmd, "--tokens", "0..4")
    assert bad.exit_code == 2 and "--tokens" in bad.stderr
