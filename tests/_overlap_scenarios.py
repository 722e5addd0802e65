"""What each rank runs for tests/test_runtime_overlap.py and tests/test_duplex.py (started by
tests/_multiproc.py). Each returns a dict the pytest side asserts on; nothing here asserts."""
from __future__ import annotations

import time
import traceback

import numpy as np
import torch
import torch.distributed as dist

import collsched
from collsched import comm
from collsched.comm import duplex
from collsched.comm.program import BUF_OUTPUT, LOCAL, OP_COPY, SEND

CLUSTER = "h200:2,gpus=4"


def matrices(n: int, seed: int) -> dict:
    """Byte matrices, identical on every rank: random skewed, all empty, one hot pair."""
    rng = np.random.default_rng(seed)
    hot = np.zeros((n, n), dtype=np.uint64)
    hot[1, n - 2] = 4096 + 3
    return {
        "zipf": collsched.traffic.zipf(n, 1.1, 3000, seed=seed).astype(np.uint64),
        "random": (rng.integers(0, 5000, size=(n, n)) * rng.integers(0, 2, size=(n, n))).astype(np.uint64),
        "empty": np.zeros((n, n), dtype=np.uint64),
        "single_hot_pair": hot,
    }


def _torch_reference(matrix: np.ndarray, x: torch.Tensor) -> torch.Tensor:
    rank = dist.get_rank()
    ins = [int(v) for v in matrix[rank]]
    outs = [int(v) for v in matrix[:, rank]]
    ref = torch.empty(sum(outs), dtype=torch.uint8)
    dist.all_to_all_single(ref, x, outs, ins)
    return ref


def _case(res: dict, name: str, fn) -> None:
    try:
        res[name] = {"ok": bool(fn())}
    except Exception as e:  # recorded, asserted by the parent
        res[name] = {"ok": False, "error": f"{type(e).__name__}: {e}", "tb": traceback.format_exc()[-1500:]}


def identical_to_torch(algorithms: list, seed: int) -> dict:
    """Every algorithm's plan executed dependency-driven and full duplex (and, for fanout
    and fast, also step by step and half duplex) against torch's all_to_all_single, bytes."""
    rank, n = dist.get_rank(), dist.get_world_size()
    res: dict = {}
    for mname, matrix in matrices(n, seed).items():
        g = torch.Generator().manual_seed(seed * 1000 + rank)
        x = torch.randint(0, 256, (int(matrix[rank].sum()),), dtype=torch.uint8, generator=g)
        ref = _torch_reference(matrix, x)
        for alg in algorithms:
            plan = collsched.plan_all_to_all(matrix, CLUSTER, alg)
            modes = [(True, True)]
            if alg in ("fanout", "fast"):
                modes += [(False, True), (True, False), (False, False)]
            for overlap, dup in modes:
                def run(plan=plan, overlap=overlap, dup=dup):
                    out = torch.full((int(matrix[:, rank].sum()),), 7, dtype=torch.uint8)
                    comm.execute(plan, x, out, timeout=20, transport="p2p", overlap=overlap, duplex=dup)
                    return torch.equal(out, ref)

                _case(res, f"{alg}/{mname}/overlap={overlap}/duplex={dup}", run)
    res["_duplex_groups_cached"] = {"ok": duplex.cached_groups() == 1, "value": duplex.cached_groups()}
    return res


def api_default_transport() -> dict:
    """collsched.all_to_all_single on Gloo (transport "auto") runs the dependency-driven p2p path."""
    rank, n = dist.get_rank(), dist.get_world_size()
    res: dict = {}
    rows = collsched.traffic.zipf(n, 1.0, 9, seed=4).astype(np.int64)
    ins, outs = [int(v) for v in rows[rank]], [int(v) for v in rows[:, rank]]
    x = torch.randn(sum(ins), 3)
    ref = torch.empty(sum(outs), 3)
    dist.all_to_all_single(ref, x, outs, ins)
    import collsched.comm.executor as ex

    calls = []
    real = ex.run_overlapped
    ex.run_overlapped = lambda *a, **k: calls.append(1) or real(*a, **k)
    try:
        for alg in ("fast", "spreadout"):
            def run(alg=alg):
                out = torch.zeros_like(ref)
                before = len(calls)
                collsched.all_to_all_single(out, x, outs, ins, algorithm=alg, cluster=f"h200:{n // 2},gpus=2",
                                            timeout=20, eager_bytes=0)  # small pairs would ride in the exchange
                return torch.equal(out, ref) and len(calls) == before + 1

            _case(res, f"api/{alg}", run)
    finally:
        ex.run_overlapped = real
    return res


def missing_send(timeout_s: float, faulty: int, slack_s: float) -> dict:
    """Rank `faulty` runs a ring allgather without its first send: the dependency chain of
    every other rank never completes, so each of them must raise within the timeout."""
    import _synthetic_plans as S

    rank, n = dist.get_rank(), dist.get_world_size()
    plan = S.ring_allgather(n, 64, 2)
    prog = comm.compile_rank_program(plan, rank, collective_steps=False)
    if rank == faulty:  # its first send becomes a local copy of nothing: it completes, sending nothing
        acts = prog.overlap.actions
        i = next(i for i, a in enumerate(acts) if a.kind == SEND)
        acts[i] = acts[i]._replace(kind=LOCAL, msg=None, local=(OP_COPY, [(BUF_OUTPUT, 0, BUF_OUTPUT, 0, 0)]))
    x = torch.arange(64, dtype=torch.uint8) + rank
    out = torch.zeros(64 * n, dtype=torch.uint8)
    t0 = time.monotonic()
    try:
        comm.execute(plan, x, out, timeout=timeout_s, program=prog, transport="p2p")
        got = {"raised": None}
    except Exception as e:
        got = {"raised": type(e).__name__, "is_timeout": isinstance(e, comm.CommTimeoutError), "message": str(e)[:500]}
    got["elapsed"] = time.monotonic() - t0
    # Stay up until the others reach their deadlines: leaving would show them a closed
    # connection instead of the timeout under test. Each rank's clock starts when it got
    # here, which on a loaded host can be seconds apart: wait twice the slack.
    time.sleep(max(0.0, timeout_s + 2 * slack_s - got["elapsed"]))
    return got


def duplex_routes(nbytes: int) -> dict:
    """Each rank exchanges with its partner (rank xor 1) both ways at once over the direction
    groups; checks the bytes, the routing rule, and that the groups are created once."""
    rank, n = dist.get_rank(), dist.get_world_size()
    res: dict = {}
    before = duplex.cached_groups()
    r1 = duplex.router(None, 20.0)
    r2 = duplex.router(None, 20.0)
    res["cached_once"] = r1.up is r2.up and r1.down is r2.down and duplex.cached_groups() == before + 1
    peer = rank ^ 1
    res["routes"] = (r1.send_group(peer) is (r1.up if rank < peer else r1.down)
                     and r1.recv_group(peer) is (r1.up if peer < rank else r1.down)
                     and r1.up is not r1.down and r1.up is not None)
    x = (torch.arange(nbytes, dtype=torch.int64) % 251 + rank).to(torch.uint8)
    y = torch.empty(nbytes, dtype=torch.uint8)
    ws = [dist.isend(x, peer, group=r1.send_group(peer), tag=7), dist.irecv(y, peer, group=r1.recv_group(peer), tag=7)]
    for w in ws:
        w.wait()
    res["bytes"] = bool(torch.equal(y, (torch.arange(nbytes, dtype=torch.int64) % 251 + peer).to(torch.uint8)))
    # A subgroup: only its members create its direction groups (the others never call).
    sub_ranks = [0, 1, 2]
    sub = dist.new_group(sub_ranks, use_local_synchronization=True)
    if rank in sub_ranks:
        m = np.arange(9, dtype=np.uint64).reshape(3, 3) * 5
        plan = collsched.plan_all_to_all(m, "h200:1,gpus=3", "fanout")
        me = sub_ranks.index(rank)
        xs = torch.randint(0, 256, (int(m[me].sum()),), dtype=torch.uint8)
        out = torch.empty(int(m[:, me].sum()), dtype=torch.uint8)
        ref = torch.empty_like(out)
        dist.all_to_all_single(ref, xs, [int(v) for v in m[:, me]], [int(v) for v in m[me]], group=sub)
        comm.execute(plan, xs, out, group=sub, timeout=20, transport="p2p")
        res["subgroup"] = bool(torch.equal(out, ref)) and duplex.cached_groups() == before + 2
    else:
        res["subgroup"] = duplex.cached_groups() == before + 1
    dist.barrier()
    return res


def host_group_exchange() -> dict:
    """The host-exchange path of a group whose backend cannot move CPU tensors (NCCL), run on
    Gloo by making the group report another backend: the exchange then travels on a Gloo group
    of its own over the same ranks, created once, and gathers every rank's values in rank order."""
    from collsched.comm import groups

    rank, n = dist.get_rank(), dist.get_world_size()
    real = dist.get_backend
    dist.get_backend = lambda group=None: "nccl"
    try:
        before = groups.cached_gloo_groups("host-exchange")
        g1 = groups.host_group(None, 20.0)
        got = groups.exchange_i64([rank, 10 * rank, -rank], None, 20.0, "test exchange")
        g2 = groups.host_group(None, 20.0)
        created_once = g1 is g2 and groups.cached_gloo_groups("host-exchange") == before + 1
    finally:
        dist.get_backend = real
    want = np.array([[r, 10 * r, -r] for r in range(n)], dtype=np.int64)
    on_gloo = groups.host_group(None, 20.0) is None  # a Gloo group is its own host group
    dist.barrier()
    return {"created_once": created_once, "own_group": g1 is not None, "values": bool(np.array_equal(got, want)),
            "gloo_is_its_own": on_gloo}


def run(fn: str, world: int, *args, gpus_per_server: int = 4, timeout_s: float = 120.0) -> list:
    """From pytest: run `fn` of this module on `world` local Gloo ranks (RankFailure where one failed)."""
    from collsched.comm.launch import run_local

    here = __file__.rsplit("/", 1)[0]
    return run_local(f"_overlap_scenarios:{fn}", world, args, gpus_per_server=gpus_per_server, timeout_s=timeout_s,
                     extra_pythonpath=[here], raise_on_failure=False)


def duplex_creation_straggler(timeout_s: float) -> dict:
    """The last rank never creates the direction groups: the others raise within the timeout."""
    rank, n = dist.get_rank(), dist.get_world_size()
    t0 = time.monotonic()
    if rank == n - 1:
        time.sleep(timeout_s + 2.0)
        return {"raised": "skipped (straggler)"}
    try:
        duplex.duplex_groups(None, timeout_s)
        return {"raised": None, "elapsed": time.monotonic() - t0}
    except Exception as e:
        return {"raised": type(e).__name__, "is_timeout": isinstance(e, comm.CommTimeoutError), "message": str(e)[:300],
                "elapsed": time.monotonic() - t0}
