"""Rank programs, checked without processes: a loopback interpreter runs every rank's
compiled program in lockstep on numpy byte buffers, with both transports' layouts, and the
outputs must be the all-to-all of the inputs. Hypothesis draws clusters, matrices and
algorithms, so every producer's plans go through the executor's compilation logic."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("torch")
import collsched  # noqa: E402
from collsched.comm.program import OP_COPY, compile_rank_program  # noqa: E402


def _apply(op, dst, doff, src, ln):
    if op == OP_COPY:
        dst[doff:doff + ln] = src[:ln]
    else:
        raise AssertionError("all-to-all plans carry no ReduceSum")


def run_loopback(plan, inputs, transport):
    n = plan.num_ranks
    progs = [compile_rank_program(plan, r) for r in range(n)]
    bufs = [[inputs[r].copy(), np.zeros(plan.output_sizes[r], np.uint8), np.zeros(plan.scratch_bytes[r], np.uint8)]
            for r in range(n)]
    steps = sorted({sp.step for p in progs for sp in p.steps})
    by_step = [{sp.step: sp for sp in p.steps} for p in progs]
    for s in steps:
        sps = [by_step[r].get(s) for r in range(n)]
        dense = {sp.dense for sp in sps if sp is not None and sp.global_comm}
        assert len(dense) <= 1, f"ranks disagree on step {s}'s density"
        if transport == "alltoallv" or (transport == "hybrid" and dense == {True}):
            comm_ranks = [sp is not None and sp.a2a is not None for sp in sps]
            assert len(set(comm_ranks)) == 1, f"ranks disagree on joining step {s}"
            if comm_ranks[0]:
                chunks = {}
                for r, sp in enumerate(sps):
                    a = sp.a2a
                    if a.send_direct is not None:
                        b, start = a.send_direct
                        flat = bufs[r][b][start:start + sum(a.send_splits)]
                    else:
                        flat = np.concatenate([bufs[r][b][o:o + ln] for m in a.send_msgs for b, o, ln, _ in m.segs]
                                              or [np.zeros(0, np.uint8)])
                    at = 0
                    for peer, k in enumerate(a.send_splits):
                        chunks[(r, peer)] = flat[at:at + k].copy()
                        at += k
                for j, sp in enumerate(sps):
                    a = sp.a2a
                    recv = np.concatenate([chunks[(i, j)] for i in range(n)])
                    assert [len(chunks[(i, j)]) for i in range(n)] == a.recv_splits
                    if a.recv_direct is not None:
                        b, start = a.recv_direct
                        bufs[j][b][start:start + len(recv)] = recv
                    else:
                        for m, at in a.recv_msgs:
                            for b, o, ln, mo in m.segs:
                                _apply(m.op, bufs[j][b], o, recv[at + mo:], ln)
            for r, sp in enumerate(sps):
                if sp is None:
                    continue
                skip = sp.a2a.self_local if sp.a2a is not None else -1
                for i, (op, segs) in enumerate(sp.local):
                    if i != skip:
                        for sb, so, db, do, ln in segs:
                            _apply(op, bufs[r][db], do, bufs[r][sb][so:so + ln].copy(), ln)
        else:
            msgs = {}
            for r, sp in enumerate(sps):
                for m in (sp.sends if sp else []):
                    msgs[(r, m.peer, m.tag)] = np.concatenate([bufs[r][b][o:o + ln] for b, o, ln, _ in m.segs]).copy()
            for r, sp in enumerate(sps):
                for m in (sp.recvs if sp else []):
                    data = msgs.pop((m.peer, r, m.tag))
                    assert len(data) == m.nbytes
                    for b, o, ln, mo in m.segs:
                        _apply(m.op, bufs[r][b], o, data[mo:], ln)
            assert not msgs, "messages sent but never received"
            for r, sp in enumerate(sps):
                for op, segs in (sp.local if sp else []):
                    for sb, so, db, do, ln in segs:
                        _apply(op, bufs[r][db], do, bufs[r][sb][so:so + ln].copy(), ln)
    return [b[1] for b in bufs]


def expected_all_to_all(matrix, inputs):
    n = len(matrix)
    outs = []
    for j in range(n):
        parts = []
        for i in range(n):
            start = int(matrix[i, :j].sum())
            parts.append(inputs[i][start:start + int(matrix[i, j])])
        outs.append(np.concatenate(parts))
    return outs


ALGORITHMS = [name for name, _ in collsched.all_to_all_algorithms()]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(servers=st.integers(1, 3), gpus=st.sampled_from([1, 2, 4]), nics=st.sampled_from([0, 1, 2]),
       data=st.data(), algorithm=st.sampled_from(ALGORITHMS), transport=st.sampled_from(["alltoallv", "p2p", "hybrid"]))
def test_loopback_execution_of_compiled_programs_is_the_all_to_all(servers, gpus, nics, data, algorithm, transport):
    n = servers * gpus
    spec = f"h200:{servers},gpus={gpus}" + (f",nics={min(nics, gpus)}" if nics else "")
    matrix = np.array(data.draw(st.lists(st.lists(st.integers(0, 40) | st.just(0), min_size=n, max_size=n),
                                         min_size=n, max_size=n)), dtype=np.uint64).reshape(n, n)
    plan = collsched.plan_all_to_all(matrix, spec, algorithm)
    rng = np.random.default_rng(int(matrix.sum()) + n)
    inputs = [rng.integers(0, 256, int(matrix[r].sum()), dtype=np.uint8) for r in range(n)]
    got = run_loopback(plan, inputs, transport)
    for j, (g, e) in enumerate(zip(got, expected_all_to_all(matrix, inputs))):
        assert np.array_equal(g, e), f"{algorithm}/{transport} rank {j} on {spec}"


def test_fanout_steps_are_zero_copy_on_the_alltoallv_transport():
    m = collsched.traffic.uniform(8, 1000, seed=3)
    plan = collsched.plan_all_to_all(m, "h200:2,gpus=4", "fanout")
    for r in range(8):
        a = compile_rank_program(plan, r).steps[0].a2a
        assert a.send_direct is not None and a.recv_direct is not None
        # The self block rides in the all-to-all when it sits between other peers' blocks.
        assert a.self_local == (0 if 0 < r < 7 else a.self_local)
        assert compile_rank_program(plan, r).a2a_staging_bytes == 0


def _synthetic_plans(n: int):
    import sys
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    import _synthetic_plans as S

    m = collsched.traffic.uniform(n, 1000, seed=1)
    return [S.ring_allgather(n, 64, 4), S.relay_all_to_all(m.tolist(), 4)]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(servers=st.integers(1, 4), gpus=st.sampled_from([1, 2, 4]), skew=st.sampled_from([0.0, 0.8, 1.2]),
       seed=st.integers(0, 10_000), algorithm=st.sampled_from(ALGORITHMS))
def test_programs_from_the_rank_view_equal_those_from_the_whole_plan(servers, gpus, skew, seed, algorithm):
    """The rank's cut in the core (`Plan.rank_plan`, what a whole plan compiles from) against
    decoding the whole plan."""
    from collsched.comm.program import plan_arrays

    n = servers * gpus
    m = collsched.traffic.zipf(n, skew, 4096, seed=seed) if skew else collsched.traffic.uniform(n, 4096, seed=seed)
    m[seed % n, (seed // n) % n] = 0  # some zero blocks
    plans = [collsched.plan_all_to_all(m, f"h200:{servers},gpus={gpus}", algorithm)]
    if n == 8:
        plans += _synthetic_plans(n)
    for plan in plans:
        a = plan_arrays(plan)
        for r in range(n):
            prog, ref = compile_rank_program(plan, r), compile_rank_program(plan, r, a)
            assert prog == ref, f"{plan.algorithm} rank {r}"
            assert [sp.a2a for sp in prog.steps] == [sp.a2a for sp in ref.steps]
            # Compiled for p2p only: the steps this rank acts in, nothing else changed.
            own = compile_rank_program(plan, r, collective_steps=False)
            acting = [sp for sp in prog.steps if sp.sends or sp.recvs or sp.local]
            def p2p_key(sp):
                return (sp.step, sp.sends, sp.recvs, sp.local, sp.staging_bytes, sp.p2p_order)

            assert [p2p_key(sp) for sp in own.steps] == [p2p_key(sp) for sp in acting]
            assert not any(sp.global_comm or sp.dense for sp in own.steps) and not own.collective_steps
            assert (own.staging_bytes, own.bytes_sent, own.bytes_received, own.uses_reduce, own.active_steps) == (
                prog.staging_bytes, prog.bytes_sent, prog.bytes_received, prog.uses_reduce, prog.active_steps)
            # Steps this rank does not act in touch nothing, so Gloo's dependency-driven program is the same.
            assert own.overlap == prog.overlap == ref.overlap
            for sp in prog.steps:
                # Built in one pass over the rows: each list comes out in plan order (per peer,
                # ascending tags), and the posting order holds both lists in that order.
                for msgs in (sp.sends, sp.recvs):
                    for peer in {m.peer for m in msgs}:
                        tags = [m.tag for m in msgs if m.peer == peer]
                        assert tags == sorted(tags) and len(set(tags)) == len(tags)
                assert [m for is_send, m in sp.p2p_order if is_send] == sp.sends
                assert [m for is_send, m in sp.p2p_order if not is_send] == sp.recvs


def _checked_by_definition(rows):
    """Empty segments and transfers dropped, then ops and buffer ids checked, in row order."""
    out = []
    for tid, src, dst, op, step, segs in rows:
        kept = [x for x in segs if x[4] > 0]
        if not kept:
            continue
        if op not in (0, 1):
            raise ValueError(f"transfer {tid} has unknown op {op}")
        if any(x[0] > 2 or x[2] > 2 for x in kept):
            raise ValueError(f"transfer {tid} names an unknown buffer id")
        out.append((tid, src, dst, op, step, kept))
    return out


_seg = st.tuples(st.sampled_from([0, 1, 2, 2, 3]), st.integers(0, 9), st.sampled_from([0, 1, 2, 2, 7]),
                 st.integers(0, 9), st.sampled_from([0, 5, 5, 5]))


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(st.tuples(st.sampled_from([0, 1, 1, 1, 4]), st.lists(_seg, max_size=3)), max_size=8))
def test_row_checks_equal_their_definition(rows):
    """Rows of a decoded plan go through the core (`_rank_plan_from_rows`, then its program):
    the same error, naming the transfer, or the kept transfers with their kept segments."""
    from collsched import _core
    from collsched.comm.program import SEGMENT_DTYPE, TRANSFER_DTYPE

    rows = [(k, 0, 1, op, 0, segs) for k, (op, segs) in enumerate(rows)]
    segs = np.array([x for *_, sg in rows for x in sg], dtype=SEGMENT_DTYPE)
    ends = np.cumsum([len(r[5]) for r in rows], dtype=np.int64)
    t = np.array([(src, dst, op, 0, step, e - len(sg), e, 0, 0) for (_, src, dst, op, step, sg), e in zip(rows, ends)],
                 dtype=TRANSFER_DTYPE)
    ids = np.arange(len(rows), dtype=np.int64) * 3 + 1  # rows carry their ids: errors name those
    rows = [(int(ids[k]), *r[1:]) for k, r in enumerate(rows)]

    def compiled():
        rp = _core._rank_plan_from_rows(0, 2, ids.astype("<u4").tobytes(), t.tobytes(), segs.tobytes(), b"", None,
                                        (100, 0, 0))
        return compile_rank_program(rp, 0, collective_steps=False)

    try:
        want = _checked_by_definition(rows)
    except ValueError as e:
        with pytest.raises(ValueError, match=str(e)):
            compiled()
        return
    sends = [m for sp in compiled().steps for m in sp.sends]
    # Rank 0 sends every kept transfer: its side of a segment is the source; all rows are
    # 0 -> 1, so a row's tag is its index among all rows (empty ones included).
    row_of = {int(i): k for k, i in enumerate(ids)}
    assert [(m.tag, 0, m.peer, m.op, 0, [(b, o, ln) for b, o, ln, _ in m.segs]) for m in sends] == [
        (row_of[tid], src, dst, op, step, [(x[0], x[1], x[4]) for x in kept]) for tid, src, dst, op, step, kept in want]
    # Each message's segments back to back.
    assert all([mo for *_, mo in m.segs] == list(np.cumsum([0] + [ln for _, _, ln, _ in m.segs])[:-1]) for m in sends)


def test_the_rank_cut_rejects_a_rank_outside_the_plan():
    plan = collsched.plan_all_to_all(collsched.traffic.uniform(4, 100, seed=0), "h200:2,gpus=2", "fanout")
    with pytest.raises(ValueError, match="rank 4 is outside the plan's 4 ranks"):
        plan.rank_plan(4)
    with pytest.raises(ValueError, match="rank 4 is outside the plan's 4 ranks"):
        compile_rank_program(plan, 4, collective_steps=False)


def test_a_p2p_only_program_is_refused_by_the_collective_transports():
    from collsched.comm.executor import run_program

    plan = collsched.plan_all_to_all(collsched.traffic.uniform(4, 100, seed=0), "h200:2,gpus=2", "fanout")
    own = compile_rank_program(plan, 1, collective_steps=False)
    for transport in ("alltoallv", "hybrid"):
        with pytest.raises(ValueError, match=f"the {transport} transport needs a program compiled with collective_steps"):
            run_program(own, None, None, None, None, 1.0, None, transport)
