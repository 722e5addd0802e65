"""Dependency-driven (overlapped) execution.

Without processes: every rank's `RankProgram.overlap` runs under random schedules (any
order the deps allow, messages delivered whenever both sides posted them, the sender's
bytes read at delivery), and the outputs must be the all-to-all; the actions' deps order every
conflicting access on a rank and nothing the plan does not order.
With Gloo ranks: overlapped + full-duplex execution of every algorithm is byte-identical to
torch's all_to_all_single, and a dependency that never completes ends in a timeout error
on every rank waiting for it.
"""
from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("torch")
import collsched  # noqa: E402
from collsched.comm.program import (LOCAL, OP_COPY, RECV, SEND, compile_rank_program, plan_arrays,  # noqa: E402
                                    rank_deps)

from _overlap_scenarios import run as run_ranks  # noqa: E402
from _multiproc import failures as _bad  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
import _synthetic_plans as S  # noqa: E402

ALGORITHMS = [name for name, _ in collsched.all_to_all_algorithms()]


def _apply(op, dst, doff, src, ln):
    if op == OP_COPY:
        dst[doff:doff + ln] = src[:ln]
    else:
        dst[doff:doff + ln] = (dst[doff:doff + ln].view(np.int64) + src[:ln].view(np.int64)).view(np.uint8)


def _message(r: int, a) -> tuple:
    """The message an action of rank r sends or receives: (src, dst, tag), alike on both sides."""
    return (r, a.msg.peer, a.msg.tag) if a.kind == SEND else (a.msg.peer, r, a.msg.tag)


def run_random_schedule(plan, inputs, seed: int):
    """Every rank's overlap program, interleaved at random as the executor allows."""
    n = plan.num_ranks
    rnd = random.Random(seed)
    progs = [compile_rank_program(plan, r, collective_steps=False).overlap for r in range(n)]
    bufs = [[inputs[r].copy(), np.zeros(plan.output_sizes[r], np.uint8), np.zeros(plan.scratch_bytes[r], np.uint8)]
            for r in range(n)]
    staging = [np.zeros(p.staging_bytes, np.uint8) for p in progs]
    left = [[len(a.deps) for a in p.actions] for p in progs]
    ready = [{i for i, k in enumerate(lf) if not k} for lf in left]  # deps done, not started
    posted_send, posted_recv = {}, {}  # (src, dst, tag) -> (rank, action index)
    delivered = [set() for _ in range(n)]  # works complete on the transport, not yet processed
    waiting = [set() for _ in range(n)]  # started (deps done), work outstanding
    done = [0] * n
    post_left = [[len(a.post_after) for a in p.actions] for p in progs]
    postable = [set(p.early_recvs) for p in progs]  # receives the executor may post now

    def finish(r, i):
        done[r] += 1
        for j in progs[r].post_waiters[i]:
            post_left[r][j] -= 1
            if not post_left[r][j] and _message(r, progs[r].actions[j]) not in posted_ever:
                postable[r].add(j)
        for j in progs[r].dependents[i]:
            left[r][j] -= 1
            if not left[r][j]:
                ready[r].add(j)

    def target(r, i):
        a = progs[r].actions[i]
        if a.stage_off >= 0:
            return staging[r], a.stage_off
        b, off, _, _ = a.msg.segs[0]
        return bufs[r][b], off

    posted_ever = set()
    while True:
        events = [("start", r, i) for r in range(n) for i in ready[r]]
        events += [("post", r, i) for r in range(n) for i in postable[r]]
        events += [("deliver", key) for key in posted_send if key in posted_recv]
        events += [("complete", r, i) for r in range(n) for i in delivered[r] & waiting[r]]
        if not events:
            break
        ev = rnd.choice(sorted(events))
        if ev[0] == "post":  # a receive posted before its deps are done (its post_after are)
            _, r, i = ev
            postable[r].discard(i)
            key = _message(r, progs[r].actions[i])
            if key not in posted_ever:
                posted_ever.add(key)
                posted_recv[key] = (r, i)
        elif ev[0] == "start":
            _, r, i = ev
            ready[r].discard(i)
            a = progs[r].actions[i]
            if a.kind == LOCAL:
                op, segs = a.local
                for sb, so, db, do, ln in segs:
                    _apply(op, bufs[r][db], do, bufs[r][sb][so:so + ln].copy(), ln)
                finish(r, i)
                continue
            if a.kind == SEND:
                if a.stage_off >= 0:  # gathered when posted
                    staging[r][a.stage_off:a.stage_off + a.msg.nbytes] = np.concatenate(
                        [bufs[r][b][o:o + ln] for b, o, ln, _ in a.msg.segs])
                posted_send[_message(r, a)] = (r, i)
            elif _message(r, a) not in posted_ever:
                postable[r].discard(i)
                posted_ever.add(_message(r, a))
                posted_recv[_message(r, a)] = (r, i)
            waiting[r].add(i)
        elif ev[0] == "deliver":
            key = ev[1]
            (rs, i_s), (rr, i_r) = posted_send.pop(key), posted_recv.pop(key)
            src, soff = target(rs, i_s)  # read now: as late as the transport may
            dst, doff = target(rr, i_r)
            nb = progs[rs].actions[i_s].msg.nbytes
            assert nb == progs[rr].actions[i_r].msg.nbytes
            dst[doff:doff + nb] = src[soff:soff + nb]
            delivered[rs].add(i_s)
            delivered[rr].add(i_r)
        else:
            _, r, i = ev
            delivered[r].discard(i)
            waiting[r].discard(i)
            a = progs[r].actions[i]
            if a.kind == RECV and a.stage_off >= 0:
                for b, o, ln, mo in a.msg.segs:
                    _apply(a.msg.op, bufs[r][b], o, staging[r][a.stage_off + mo:], ln)
            finish(r, i)
    stuck = [r for r in range(n) if done[r] != len(progs[r].actions)]
    assert not stuck, f"ranks {stuck} never finished (deadlock under the dependency-driven order)"
    return [b[1] for b in bufs]


def expected_all_to_all(matrix, inputs):
    n = len(matrix)
    return [np.concatenate([inputs[i][int(matrix[i, :j].sum()):int(matrix[i, :j].sum()) + int(matrix[i, j])]
                            for i in range(n)]) for j in range(n)]


_matrix_kind = st.sampled_from(["random", "random", "empty", "single_hot_pair"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(servers=st.integers(1, 3), gpus=st.sampled_from([1, 2, 4]), nics=st.sampled_from([0, 1, 2]),
       kind=_matrix_kind, data=st.data(), algorithm=st.sampled_from(ALGORITHMS), seed=st.integers(0, 2**31))
def test_any_schedule_the_deps_allow_gives_the_all_to_all(servers, gpus, nics, kind, data, algorithm, seed):
    n = servers * gpus
    spec = f"h200:{servers},gpus={gpus}" + (f",nics={min(nics, gpus)}" if nics else "")
    matrix = np.zeros((n, n), dtype=np.uint64)
    if kind == "random":
        matrix = np.array(data.draw(st.lists(st.lists(st.integers(0, 40) | st.just(0), min_size=n, max_size=n),
                                             min_size=n, max_size=n)), dtype=np.uint64).reshape(n, n)
    elif kind == "single_hot_pair":
        matrix[data.draw(st.integers(0, n - 1)), data.draw(st.integers(0, n - 1))] = data.draw(st.integers(1, 5000))
    plan = collsched.plan_all_to_all(matrix, spec, algorithm)
    plan.verify()  # raises VerificationError
    rng = np.random.default_rng(seed)
    inputs = [rng.integers(0, 256, int(matrix[r].sum()), dtype=np.uint8) for r in range(n)]
    got = run_random_schedule(plan, inputs, seed)
    for j, (g, e) in enumerate(zip(got, expected_all_to_all(matrix, inputs))):
        assert np.array_equal(g, e), f"{algorithm} rank {j} on {spec} ({kind})"


@pytest.mark.parametrize("seed", range(12))
def test_relays_rings_and_reductions_under_random_schedules(seed):
    """Hand-built plans with scratch relays, chains through every rank and ReduceSum."""
    n = 8
    m = collsched.traffic.uniform(n, 64, seed=seed) * 8
    relay = S.relay_all_to_all(m.tolist(), 4)
    rng = np.random.default_rng(seed)
    inputs = [rng.integers(0, 256, int(m[r].sum()), dtype=np.uint8) for r in range(n)]
    for g, e in zip(run_random_schedule(relay, inputs, seed), expected_all_to_all(m, inputs)):
        assert np.array_equal(g, e)
    ring = S.ring_allgather(n, 24, 4)
    shards = [rng.integers(0, 256, 24, dtype=np.uint8) for _ in range(n)]
    for g in run_random_schedule(ring, shards, seed):
        assert np.array_equal(g, np.concatenate(shards))
    rs = S.direct_reduce_scatter(n, 5 * 8, 8, 4)
    xs = [rng.integers(-1000, 1000, 5 * n, dtype=np.int64) for _ in range(n)]
    got = run_random_schedule(rs, [x.view(np.uint8) for x in xs], seed)
    for r, g in enumerate(got):
        assert np.array_equal(g.view(np.int64), sum(x[5 * r:5 * r + 5] for x in xs))


def _ancestors(a):
    t = a.transfers
    anc = []
    for tid in range(len(t)):
        s = set()
        for d in a.deps[t["dep_begin"][tid]:t["dep_end"][tid]].tolist():
            s.add(d)
            s |= anc[d]
        anc.append(s)
    return anc


def _part(a, rank) -> list:
    """The global ids of the transfers `rank` takes part in, in order: row k of its plan is
    transfer _part(a, rank)[k]."""
    t = a.transfers
    return np.nonzero((t["src"] == rank) | (t["dst"] == rank))[0].tolist()


def _touches(a, tid, rank):
    """(buf, lo, hi, writes) of transfer tid on rank's buffers, by definition."""
    t = a.transfers[tid]
    out = []
    for seg in a.segments[t["seg_begin"]:t["seg_end"]].tolist():
        sb, so, db, do, ln = seg
        if ln and t["src"] == rank:
            out.append((sb, so, so + ln, False))
        if ln and t["dst"] == rank:
            out.append((db, do, do + ln, True))
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(servers=st.integers(1, 3), gpus=st.sampled_from([1, 2, 4]), seed=st.integers(0, 10_000),
       algorithm=st.sampled_from(ALGORITHMS))
def test_overlap_deps_order_every_conflict_and_only_what_the_plan_orders(servers, gpus, seed, algorithm):
    """On every rank: `rank_deps` is the plan's deps cut to the rank's byte-moving transfers; the
    actions' deps order (transitively) every two conflicting accesses to the rank's buffers,
    and every action dep is an ancestor in the plan (so nothing can wait in a cycle)."""
    n = servers * gpus
    m = collsched.traffic.zipf(n, 0.9, 4096, seed=seed)
    m[seed % n, (seed // n) % n] = 0
    plans = [collsched.plan_all_to_all(m, f"h200:{servers},gpus={gpus}", algorithm)]
    if n == 8:
        plans += [S.ring_allgather(n, 64, 4), S.relay_all_to_all(m.tolist(), 4)]
    for plan in plans:
        a = plan_arrays(plan)
        anc = _ancestors(a)
        t, tb = a.transfers, a.transfer_bytes()
        for r in range(n):
            mine = {k for k in range(len(t)) if (t["src"][k] == r or t["dst"][k] == r) and tb[k] > 0}
            want = {k: tuple(sorted(d for d in a.deps[t["dep_begin"][k]:t["dep_end"][k]].tolist() if d in mine))
                    for k in mine}
            part = _part(a, r)
            row_deps = {part[k]: tuple(part[d] for d in ds) for k, ds in rank_deps(plan, r).items()}
            assert row_deps == {k: v for k, v in want.items() if v} and rank_deps(plan, r) == rank_deps(plan, r, a)
            ov = compile_rank_program(plan, r).overlap
            tids = [part[x.row] for x in ov.actions]
            assert set(tids) == mine and tids == sorted(tids)
            before = []  # per action, the actions it waits for transitively
            for i, act in enumerate(ov.actions):
                s = set(act.deps)
                for d in act.deps:
                    assert tids[d] in anc[tids[i]], f"{plan.algorithm} rank {r}: {tids[i]} waits for a non-ancestor"
                    s |= before[d]
                before.append(s)
            acc = [_touches(a, k, r) for k in tids]
            for i in range(len(tids)):
                for j in range(i):
                    if any(b1 == b2 and lo1 < hi2 and lo2 < hi1 and (w1 or w2)
                           for b1, lo1, hi1, w1 in acc[i] for b2, lo2, hi2, w2 in acc[j]):
                        assert j in before[i], f"{plan.algorithm} rank {r}: {tids[i]} may run before {tids[j]}"


def test_an_ordering_through_other_ranks_is_kept_by_the_conflict_it_protects():
    """Rank 0 sends its scratch (t1) and later receives into it (t3): that write-after-read is
    ordered only through 0->1, 1->2, 2->0, and t3's one direct dep (t2) is not rank 0's. The
    deps cut to rank 0 lose it; the conflict on rank 0's scratch restores it."""
    b = S._B(3)
    t0 = b.add(0, 0, 0, [("input", 0, "scratch", 0, 4)])
    t1 = b.add(0, 1, 1, [("scratch", 0, "scratch", 0, 4)], deps=[t0])
    t2 = b.add(1, 2, 2, [("scratch", 0, "scratch", 0, 4)], deps=[t1])
    b.access[t1] = b.access[t0] = []  # so the builder derives no direct t3 -> t1 dep below
    t3 = b.add(2, 0, 3, [("scratch", 0, "scratch", 0, 4)], deps=[t2])
    t4 = b.add(0, 0, 4, [("scratch", 0, "output", 0, 4)], deps=[t3])
    assert b.d[b.t[t3]["dep_begin"]:b.t[t3]["dep_end"]] == [t2]
    plan = S._plan("chain", {"kind": "all_gather", "ranks": 3, "shard_bytes": 4}, 3, 3, [4, 4, 4], b.t, b.s, b.d)
    row = {g: k for k, g in enumerate(_part(plan_arrays(plan), 0))}
    assert rank_deps(plan, 0) == {row[t1]: (row[t0],), row[t4]: (row[t3],)}
    ov = compile_rank_program(plan, 0).overlap
    at = {_part(plan_arrays(plan), 0)[x.row]: i for i, x in enumerate(ov.actions)}
    assert at[t1] in ov.actions[at[t3]].deps
    for seed in range(20):
        x = [np.arange(4, dtype=np.uint8) + 10 * r for r in range(3)]
        assert np.array_equal(run_random_schedule(plan, x, seed)[0][:4], x[0])


def test_a_receive_is_posted_only_after_the_accesses_it_would_overwrite():
    """t0 writes rank 0's output locally; t2 (2 -> 0) overwrites it, ordered after t0 only
    through t1 (1 -> 2), which shares no rank with t0, so nobody holds t1 back. Rank 0 must not
    post t2 before t0 is done, or t2's bytes could land first and be overwritten."""
    b = S._B(3)
    t0 = b.add(0, 0, 0, [("input", 0, "output", 0, 4)])
    t1 = b.add(1, 2, 1, [("input", 0, "scratch", 0, 4)], deps=[t0])
    b.access[t0] = []  # so the builder derives no direct t2 -> t0 dep below
    t2 = b.add(2, 0, 2, [("scratch", 0, "output", 0, 4)], deps=[t1])
    plan = S._plan("waw", {"kind": "all_gather", "ranks": 3, "shard_bytes": 4}, 3, 3, [0, 0, 4], b.t, b.s, b.d)
    assert rank_deps(plan, 0) == {}
    ov = compile_rank_program(plan, 0).overlap
    at = {_part(plan_arrays(plan), 0)[x.row]: i for i, x in enumerate(ov.actions)}
    assert ov.actions[at[t2]].post_after == (at[t0],) and at[t2] not in ov.early_recvs
    x = [np.arange(4, dtype=np.uint8) + 10 * r for r in range(3)]
    for seed in range(30):
        assert np.array_equal(run_random_schedule(plan, x, seed)[0][:4], x[1]), seed


# --- Gloo ranks --------------------------------------------------------------------------------

WORLD = 8


def test_overlapped_full_duplex_execution_is_byte_identical_to_torch():
    """Every algorithm on random, empty and single-hot-pair matrices; fanout and FAST also step by
    step and half duplex. One process group per direction, created once."""
    results = run_ranks("identical_to_torch", WORLD, ALGORITHMS, 3, timeout_s=150)
    assert isinstance(results[0], dict), str(results[0])
    assert len([k for k in results[0] if not k.startswith("_")]) == 4 * (len(ALGORITHMS) + 6)
    assert not _bad(results), _bad(results)


def test_the_drop_in_runs_dependency_driven_p2p_on_gloo():
    from collsched.comm.executor import choose_transport
    import torch

    assert choose_transport("auto", None, torch.device("cpu")) == "p2p"
    results = run_ranks("api_default_transport", 4, gpus_per_server=2, timeout_s=90)
    assert not _bad(results), _bad(results)


def test_a_send_never_posted_times_out_on_every_rank_waiting_for_it():
    timeout_s, slack_s = 2.0, 2.5
    results = run_ranks("missing_send", 4, timeout_s, 0, slack_s, gpus_per_server=2, timeout_s=60)
    assert results[0]["raised"] is None  # the faulty rank itself needs nothing of what it skipped
    for r in (1, 2, 3):
        res = results[r]
        assert isinstance(res, dict), str(res)
        assert res["is_timeout"], res
        assert res["elapsed"] < timeout_s + slack_s, res
        assert f"on rank {r} (receive from rank {r - 1}" in res["message"], res["message"]
        assert "timed out" in res["message"]
