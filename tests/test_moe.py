"""collsched.moe on 8 Gloo ranks (2 emulated nodes × 4): dispatch rows, combine outputs and
autograd gradients equal a torch permute + all_to_all_single + permute reference bit for bit,
for every dedup mode, random routings and the edge cases of issue 34; bad input raises the
same error on every rank. One process group runs every case (spawning ranks is the slow part)."""
from __future__ import annotations

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from collsched.comm.launch import RankFailure, run_local  # noqa: E402

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
WORLD, GPN = 8, 4


# ---------------------------------------------------------------- reference (runs inside the ranks)
def _ref_dispatch(x, idx, w, owner, group=None):
    """Megatron's all-to-all dispatcher: permute by (rank, expert), all_to_all_single, permute expert-major."""
    import torch.distributed as dist
    import torch.distributed.nn.functional as dnn

    world = dist.get_world_size(group)
    tk = (idx >= 0).nonzero()
    e = idx[tk[:, 0], tk[:, 1]]
    own = owner[e]
    order = torch.sort(own * 100000 + e, stable=True).indices
    tok, kk = tk[order, 0], tk[order, 1]
    rows = x.index_select(0, tok)
    ws = w[tok, kk] if w is not None else None
    send = torch.bincount(own, minlength=world)
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)
    send_l, recv_l = send.tolist(), recv.tolist()
    got = dnn.all_to_all_single(x.new_empty((sum(recv_l), x.shape[1])), rows, recv_l, send_l, group=group)
    ids = torch.empty(sum(recv_l), dtype=torch.int64)
    dist.all_to_all_single(ids, e[order].contiguous(), recv_l, send_l, group=group)
    gw = None
    if ws is not None:
        gw = dnn.all_to_all_single(ws.new_empty(sum(recv_l)), ws.contiguous(), recv_l, send_l, group=group)
    order2 = torch.sort(ids, stable=True).indices
    state = (tok, kk, ws, send_l, recv_l, order2, x.shape[0])
    return got.index_select(0, order2), (gw.index_select(0, order2) if gw is not None else None), state


def _ref_combine(y, state, weighted, group=None):
    import torch.distributed.nn.functional as dnn

    tok, kk, ws, send_l, recv_l, order2, t = state
    inv = torch.empty_like(order2)
    inv[order2] = torch.arange(order2.numel())
    back = dnn.all_to_all_single(y.new_empty((sum(send_l), y.shape[1])), y.index_select(0, inv).contiguous(),
                                 send_l, recv_l, group=group)
    rows = back.float()
    if weighted:
        rows = rows * ws[:, None]
    out = torch.zeros((t, y.shape[1]), dtype=torch.float32).index_add(0, tok, rows)
    return out.to(y.dtype)


def _routing(rng, t, k, e, mode, owner=None):
    if mode == "single-node":  # every token's experts on one node (owner blocks of E / 2)
        half = e // 2
        node = rng.integers(0, 2, size=t)
        idx = np.stack([rng.permutation(half)[:k] + node[i] * half for i in range(t)]) if t else np.zeros((0, k))
    elif mode == "hot-rank":  # every expert used sits on rank 5
        mine = np.nonzero(owner == 5)[0]
        idx = np.stack([rng.permutation(mine)[:k] for _ in range(t)]) if t else np.zeros((0, k))
    else:
        idx = np.stack([rng.permutation(e)[:k] for _ in range(t)]) if t else np.zeros((0, k))
    idx = idx.astype(np.int64)
    if mode == "masked" and t:
        idx[rng.random(idx.shape) < 0.3] = -1
        idx[0] = -1  # a token with every expert masked
    return idx


CASES = [
    # name, E, K, tokens per rank (None: random 0..12), placement kind, routing kind
    ("random-top1", 16, 1, None, "default", "random"),
    ("random-top4", 16, 4, None, "default", "random"),
    ("random-top8", 32, 8, None, "default", "random"),
    ("masked", 16, 3, None, "default", "masked"),
    ("no-tokens-anywhere", 16, 2, 0, "default", "random"),
    ("custom-placement", 16, 3, None, "custom", "random"),
    ("experts-on-one-node", 16, 4, None, "one-node", "random"),
    ("single-node-routing", 16, 4, None, "default", "single-node"),
    ("hot-rank", 32, 4, None, "default", "hot-rank"),
]


def _placement(kind, e, rng_seed):
    rng = np.random.default_rng(rng_seed)
    if kind == "custom":
        p = rng.integers(0, WORLD, size=e)
        p[: WORLD - 2] = np.arange(WORLD - 2)  # ranks 6, 7 may own nothing
        return rng.permutation(p)
    if kind == "one-node":
        return rng.integers(0, GPN, size=e)
    return None


def exactness_worker(cases, combos):
    import torch.distributed as dist

    import collsched.moe as moe

    rank = dist.get_rank()
    problems, checked = [], 0
    for ci, (name, e, k, tcount, pkind, rkind) in enumerate(cases):
        placement = _placement(pkind, e, 1000 + ci)
        owner_np = placement if placement is not None else np.arange(e) // (e // WORLD)
        owner = torch.as_tensor(owner_np, dtype=torch.int64)
        for ki, (dedup, balance, schedule, dtype_name) in enumerate(combos):
            dtype = getattr(torch, dtype_name)
            buf = moe.MoEBuffer(None, e, cluster=f"h100:2,gpus={GPN}", dedup=dedup, balance=balance,
                                schedule=schedule, placement=placement)
            if True:
                rng = np.random.default_rng([ci, rank, ki])
                t = int(rng.integers(0, 13)) if tcount is None else tcount
                if tcount is None and rank == 2:
                    t = 0  # a rank with no tokens
                idx = torch.from_numpy(_routing(rng, t, k, e, rkind, owner_np))
                x = torch.from_numpy(rng.integers(-3, 4, size=(t, 8))).to(dtype)
                w = torch.from_numpy(rng.integers(0, 3, size=(t, k))).float()
                tag = f"{name}/{dedup}/balance={balance}/{schedule}/{dtype}"
                d = buf.dispatch(x, idx, w)
                rx, rw, st = _ref_dispatch(x, idx, w, owner)
                mine = [int(v) for v in np.nonzero(owner_np == rank)[0]]
                cnt = torch.bincount(idx[idx >= 0], minlength=e)
                dist.all_reduce(cnt)
                tpe = cnt[mine].tolist() if mine else []
                checks = {
                    "rows": torch.equal(d.x, rx),
                    "weights": torch.equal(d.weights, rw),
                    "tokens_per_expert": d.tokens_per_expert == tpe,
                }
                # Expert outputs: integer-valued, depending on the expert, so a misplaced row shows.
                scale = torch.repeat_interleave(torch.tensor([v % 3 + 1 for v in mine], dtype=torch.int64),
                                                torch.tensor(tpe, dtype=torch.int64)).float()
                y = (d.x.float() * scale[:, None]).to(dtype)
                for weighted in (True, False):
                    out = buf.combine(y, d.handle, weighted=weighted)
                    checks[f"combine weighted={weighted}"] = torch.equal(out, _ref_combine(y, st, weighted))
                # Autograd: router-weight gradients through d.weights, and a weighted combine.
                xg = x.clone().requires_grad_(True)
                wg = w.clone().requires_grad_(True)
                g = torch.from_numpy(rng.integers(-2, 3, size=(t, 8))).to(dtype)
                dd = moe.dispatch(xg, idx, wg, buf)
                sc = scale[:, None].to(dtype)
                out = moe.combine((dd.x * sc * dd.weights[:, None]).to(dtype), dd.handle, weighted=False)
                (out.float() * g.float()).sum().backward()
                xr = x.clone().requires_grad_(True)
                wr = w.clone().requires_grad_(True)
                rx2, rw2, st2 = _ref_dispatch(xr, idx, wr, owner)
                outr = _ref_combine((rx2 * sc * rw2[:, None]).to(dtype), st2, False)
                (outr.float() * g.float()).sum().backward()
                checks["grad x"] = torch.equal(xg.grad, xr.grad)
                checks["grad weights"] = torch.equal(wg.grad, wr.grad)
                xg2 = x.clone().requires_grad_(True)
                d3 = moe.dispatch(xg2, idx, w, buf)
                (moe.combine(d3.x * sc, d3.handle, weighted=True).float() * g.float()).sum().backward()
                xr2 = x.clone().requires_grad_(True)
                rx3, _, st3 = _ref_dispatch(xr2, idx, w, owner)
                (_ref_combine(rx3 * sc, st3, True).float() * g.float()).sum().backward()
                checks["grad x (weighted combine)"] = torch.equal(xg2.grad, xr2.grad)
                # Inter-node rows: distinct (token, remote node) pairs with dedup="node".
                if dedup == "node":
                    own_node = owner[idx.clamp(min=0)] // GPN
                    pairs = {(ti, int(own_node[ti, kk])) for ti in range(t) for kk in range(k)
                             if idx[ti, kk] >= 0 and int(own_node[ti, kk]) != rank // GPN}
                    checks["internode rows"] = buf.last_stats["internode_rows"] == len(pairs)
                for what, good in checks.items():
                    checked += 1
                    if not good:
                        problems.append(f"rank {rank} {tag}: {what} differs")
    return checked, problems


def _run(fn, *args, timeout_s=150.0):
    return run_local(f"test_moe:{fn}", WORLD, args, gpus_per_server=GPN, timeout_s=timeout_s,
                     extra_pythonpath=[TESTS_DIR], raise_on_failure=False)


# (dedup, balance, schedule, dtype): every mode in float32 or bf16, Fusco's in both.
COMBOS = [("node", True, "direct", "float32"), ("node", True, "direct", "bfloat16"), ("node", False, "direct", "float32"),
          ("rank", True, "direct", "bfloat16"), ("none", True, "direct", "float32"), ("node", True, "fast", "bfloat16")]


def test_dispatch_combine_and_gradients_equal_the_reference_bit_for_bit():
    res = _run("exactness_worker", CASES, COMBOS)
    failures = [r for r in res if isinstance(r, RankFailure)]
    assert not failures, "\n".join(str(f) + "\n" + f.traceback for f in failures[:2])
    problems = [p for _, ps in res for p in ps]
    assert not problems, "\n".join(problems[:20])
    assert all(c == len(CASES) * (len(COMBOS) * 8 + 4) for c, _ in res)


def error_worker():
    import torch.distributed as dist

    import collsched.moe as moe
    from collsched.comm.errors import CollectiveInputError

    rank = dist.get_rank()
    seen = []

    def expect(name, fn):
        try:
            fn()
        except CollectiveInputError as exc:
            seen.append((name, str(exc)))
            return
        except Exception as exc:  # noqa: BLE001 - reported to the test
            seen.append((name, f"WRONG {type(exc).__name__}: {exc}"))
            return
        seen.append((name, "NO ERROR"))

    expect("num_experts disagree", lambda: moe.MoEBuffer(None, 24 if rank == 3 else 16, cluster=f"h100:2,gpus={GPN}"))
    expect("num_experts not a multiple", lambda: moe.MoEBuffer(None, 20 if rank == 3 else 16,
                                                               cluster=f"h100:2,gpus={GPN}"))
    expect("bad dedup on one rank", lambda: moe.MoEBuffer(None, 16, cluster=f"h100:2,gpus={GPN}",
                                                          dedup="nodes" if rank == 5 else "node"))
    expect("bad combine_precision on one rank", lambda: moe.MoEBuffer(
        None, 16, cluster=f"h100:2,gpus={GPN}", combine_precision="bf16" if rank == 6 else "float32"))
    expect("combine_precision disagree", lambda: moe.MoEBuffer(
        None, 16, cluster=f"h100:2,gpus={GPN}", combine_precision="native" if rank == 6 else "float32"))
    buf = moe.MoEBuffer(None, 16, cluster=f"h100:2,gpus={GPN}")
    other = moe.MoEBuffer(None, 16, cluster=f"h100:2,gpus={GPN}")
    x = torch.ones((4, 8))
    idx = torch.tensor([[0, 5], [3, 15], [-1, -1], [8, 2]])
    w = torch.ones((4, 2))
    bad = rank == 3
    expect("expert id out of range", lambda: buf.dispatch(x, idx + 16 * bad, w))
    expect("expert id below -1", lambda: buf.dispatch(x, idx - 3 * bad, w))
    expect("topk_idx dtype", lambda: buf.dispatch(x, idx.int() if bad else idx, w))
    expect("x shape", lambda: buf.dispatch(x[0] if bad else x, idx, w))
    expect("x rows vs topk_idx", lambda: buf.dispatch(x[:3] if bad else x, idx, w))
    expect("weights shape", lambda: buf.dispatch(x, idx, w[:, :1] if bad else w))
    expect("duplicate expert", lambda: buf.dispatch(x, torch.tensor([[0, 0], [1, 2], [3, 4], [5, 6]]) if bad else idx, w))
    expect("hidden differs", lambda: buf.dispatch(torch.ones((4, 9)) if bad else x, idx, w))
    expect("dtype differs", lambda: buf.dispatch(x.bfloat16() if bad else x, idx, w))
    expect("weights on some ranks", lambda: buf.dispatch(x, idx, None if bad else w))
    d_now = buf.dispatch(x, idx, None)
    expect("weighted combine without weights", lambda: buf.combine(torch.ones_like(d_now.x), d_now.handle))
    d1 = buf.dispatch(x, idx, w)
    d2 = buf.dispatch(x, idx, w)
    do = other.dispatch(x, idx, w)
    expect("handle of another buffer", lambda: buf.combine(d1.x, do.handle if bad else d1.handle))
    expect("handles of different calls", lambda: buf.combine(d1.x, d2.handle if bad else d1.handle))
    expect("y shape", lambda: buf.combine(d1.x[:, :4] if bad else d1.x, d1.handle))
    ok = torch.equal(buf.combine(d1.x, d1.handle, weighted=False), torch.stack(
        [x[i] * int((idx[i] >= 0).sum()) for i in range(4)]))  # the group still works after the errors
    return seen, ok


def test_bad_input_raises_the_same_error_on_every_rank():
    res = _run("error_worker", timeout_s=90.0)
    failures = [r for r in res if isinstance(r, RankFailure)]
    assert not failures, "\n".join(str(f) + "\n" + f.traceback for f in failures[:2])
    first = res[0][0]
    for name, msg in first:
        assert not msg.startswith(("WRONG", "NO ERROR")), (name, msg)
    for seen, ok in res:
        assert ok
        assert seen == first  # the same error text on every rank
    text = dict(first)
    assert "expert id 31" in text["expert id out of range"] and "rank 3" in text["expert id out of range"]
    assert "num_experts" in text["num_experts disagree"]
    assert "rank 3" in text["num_experts not a multiple"] and "20" in text["num_experts not a multiple"]
    assert "rank 5" in text["bad dedup on one rank"] and "dedup" in text["bad dedup on one rank"]
    assert text["bad combine_precision on one rank"] == \
        "rank 6: combine_precision must be one of ('float32', 'native')"
    assert text["combine_precision disagree"] == \
        "ranks disagree on combine_precision: rank 0 has float32, rank 6 has native"
    assert "int64" in text["topk_idx dtype"]
    # Names, not the descriptor's codes ("rank 0 has 1, rank 3 has 4" before).
    assert text["dtype differs"].endswith("ranks disagree on dtype: rank 0 has float32, rank 3 has bfloat16")
    assert "twice" in text["duplicate expert"]
    assert "topk_weights" in text["weighted combine without weights"]
    assert "another MoEBuffer" in text["handle of another buffer"]
    assert "different dispatch calls" in text["handles of different calls"]


def plan_worker(seed):
    """Every rank builds the same whole dispatch Plan from the shared routing, verifies it and
    executes it with collsched's runtime; its output must equal MoEBuffer.dispatch's rows."""
    import torch.distributed as dist

    import collsched.moe as moe
    from collsched.comm.executor import execute
    from collsched.moe.plans import combine_plan, dispatch_plan, verify_combine_plan, verify_dispatch_plan

    rank = dist.get_rank()
    rng = np.random.default_rng(seed)
    e, k, h = 16, 3, 4
    routings = [_routing(rng, int(rng.integers(0, 7)) if r != 2 else 0, k, e, "masked") for r in range(WORLD)]
    xs = [rng.integers(-3, 4, size=(len(ix), h)).astype(np.float32) for ix in routings]
    results = {}
    for dedup in ("node", "rank", "none"):
        buf = moe.MoEBuffer(None, e, cluster=f"h100:2,gpus={GPN}", dedup=dedup)
        x = torch.from_numpy(xs[rank])
        d = buf.dispatch(x, torch.from_numpy(routings[rank]))
        plan, info = dispatch_plan(routings, buf.layout, h * 4, dedup)
        rep = verify_dispatch_plan(plan, routings, buf.layout, h * 4)
        inp = torch.zeros(int(plan.input_sizes[rank]) // 4, dtype=torch.float32)
        inp[:x.numel()] = x.reshape(-1)
        out = torch.full((int(plan.output_sizes[rank]) // 4,), float("nan"))
        stats = execute(plan, inp, out, None, timeout=30)
        got = out[:d.x.numel()].reshape(d.x.shape)
        results[dedup] = (torch.equal(got, d.x), rep["core"], info["internode_bytes"],
                          buf.last_stats["internode_bytes"], stats.bytes_sent)
        # The combine Plan (reduce_sum transfers) run by the same runtime: MoEBuffer's unweighted
        # combine of the same expert outputs (integer-valued, so every sum is exact).
        y = d.x * 2 - 1
        cplan, cinfo = combine_plan(routings, buf.layout, h * 4, dedup)
        crep = verify_combine_plan(cplan, routings, buf.layout, h * 4)
        cin = torch.zeros(int(cplan.input_sizes[rank]) // 4, dtype=torch.float32)
        cin[:y.numel()] = y.reshape(-1)
        cout = torch.zeros(int(cplan.output_sizes[rank]) // 4, dtype=torch.float32)
        execute(cplan, cin, cout, None, timeout=30)
        want = buf.combine(y, d.handle, weighted=False)
        results["combine " + dedup] = (torch.equal(cout[:want.numel()].reshape(want.shape), want),
                                       crep["contributions"], cinfo["internode_bytes"] == info["internode_bytes"])
    # Rows that are not whole 4-byte words (float16 × 3) take the byte-packing path.
    buf = moe.MoEBuffer(None, e, cluster=f"h100:2,gpus={GPN}")
    x = torch.from_numpy(rng.integers(-3, 4, size=(len(routings[rank]), 3))).to(torch.float16)
    idx = torch.from_numpy(routings[rank])
    w = torch.ones(idx.shape)
    d = buf.dispatch(x, idx, w)
    rx, _, st = _ref_dispatch(x, idx, w, torch.arange(e) // (e // WORLD))
    results["odd rows"] = torch.equal(d.x, rx) and torch.equal(buf.combine(d.x, d.handle), _ref_combine(rx, st, True))
    return results


def test_whole_dispatch_and_combine_plans_verify_and_execute_to_the_same_rows():
    res = _run("plan_worker", 7, timeout_s=90.0)
    failures = [r for r in res if isinstance(r, RankFailure)]
    assert not failures, "\n".join(str(f) + "\n" + f.traceback for f in failures[:2])
    for dedup in ("node", "rank", "none"):
        assert all(r[dedup][0] for r in res), dedup
        assert res[0][dedup][1] in ("passed", "passed up to the final state")
        # The plan's scale-out bytes are the rows MoEBuffer sent across nodes, summed over ranks.
        assert res[0][dedup][2] == sum(r[dedup][3] for r in res)
    assert res[0]["node"][2] <= res[0]["rank"][2] <= res[0]["none"][2]
    assert all(r["odd rows"] for r in res)
    for dedup in ("node", "rank", "none"):
        assert all(r["combine " + dedup][0] for r in res), dedup  # executed combine Plan == MoEBuffer.combine
        assert res[0]["combine " + dedup][1] > 0 and res[0]["combine " + dedup][2]
