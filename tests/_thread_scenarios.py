"""What spawned ranks run for the thread and call-sequence tests (tests/test_thread_groups.py,
tests/test_call_sequence.py, benchmarks/thread_groups.py). Each returns a dict the parent
asserts on; nothing here asserts."""
from __future__ import annotations

import random
import threading
import time
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist

import collsched
from collsched import comm

# Per mode: the call's keywords and the rows of each pair (× 4 float32, 16 bytes per row).
MODES = {
    "eager": (dict(algorithm="fanout"), 3),  # 48-byte pairs ride in the exchange
    "native": (dict(algorithm="auto", options={"candidates": ["native"]}, eager_bytes=0), 40),
    "planned": (dict(algorithm="fanout", eager_bytes=0), 40),
}


def _members(layout: str, world: int) -> list[list[int]]:
    """The two groups' global ranks: the same members, or two overlapping sets of different ones."""
    if layout == "same":
        return [list(range(world)), list(range(world))]
    return [list(range(world - 1)), list(range(1, world))]


def _one_call(group, mode: str, seed: int, timeout_s: float) -> bool:
    """One call on `group` in `mode` against torch's on the same group, byte for byte."""
    kw, base = MODES[mode]
    n, r = dist.get_world_size(group), dist.get_rank(group)
    rng = np.random.default_rng(seed)
    rows = rng.integers(base // 2, base + 1, (n, n))
    in_s, out_s = [int(v) for v in rows[r]], [int(v) for v in rows[:, r]]
    g = torch.Generator().manual_seed(seed * 31 + r)
    x = torch.randn((sum(in_s), 4), generator=g)
    ref = torch.empty((sum(out_s), 4))
    dist.all_to_all_single(ref, x, out_s, in_s, group=group)
    out = torch.full_like(ref, 7.0)
    collsched.all_to_all_single(out, x, out_s, in_s, group=group, cluster=f"h200:1,gpus={n}", timeout=timeout_s,
                                **kw)
    return bool(torch.equal(out.view(torch.uint8), ref.view(torch.uint8)))


def two_threads(layout: str, modes: list, calls: int, timeout_s: float, seed: int) -> dict:
    """Two process groups (`layout`: "same" members or "different" ones), one thread each,
    both calling collsched at once: thread k makes `calls` calls in ``modes[k]`` ("eager",
    "native", "planned", or "all": the three interleaved in a seeded order). First each thread
    gets its group's "host-exchange" Gloo group (what NCCL groups exchange headers on) and sums
    the members' ranks on it: a group wired to other partners gives another sum, or none.

    Each thread starts after a seeded random delay of its own on each rank, so the ranks create
    collsched's groups in different orders. Returns per thread: calls whose output was not
    torch's, the error if one was raised, and the seconds the thread took.
    """
    rank, world = dist.get_rank(), dist.get_world_size()
    members = _members(layout, world)
    groups = [dist.new_group(m, backend="gloo") for m in members]  # every rank, in one order
    rng = random.Random(seed * 1009 + rank)
    delays = [rng.random() * 0.2 for _ in groups]
    res: dict = {}

    def worker(k: int) -> None:
        time.sleep(delays[k])
        t0 = time.monotonic()
        order = [modes[k]] * calls if modes[k] != "all" else \
            random.Random(seed * 7 + k).choices(list(MODES), k=calls)
        wrong, error = 0, None
        try:
            host = comm.groups.gloo_groups(groups[k], "host-exchange", 1, timeout_s)[0]
            total = torch.tensor([float(rank)])
            comm.groups.wait_all([dist.all_reduce(total, group=host, async_op=True)], timeout_s, True, "host sum")
            wrong += float(total) != float(sum(members[k]))
            for c, mode in enumerate(order):
                wrong += not _one_call(groups[k], mode, seed * 100 + 10 * k + c, timeout_s)
        except Exception as e:  # recorded; the parent asserts
            error = f"{type(e).__name__}: {e}"
        res[f"thread{k}"] = {"wrong": wrong, "error": error, "elapsed": time.monotonic() - t0, "calls": calls}

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(2) if rank in members[k]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return res


def user_group_after_subgroup_call(timeout_s: float, serial: bool = False) -> dict:
    """collsched on a subgroup (ranks 0, 1 create its per-direction groups, 2 and 3 do not), then
    a group every rank creates with ``new_group``: it must get the same name everywhere and work.
    `serial`: create as on a torch without ``Store.clone`` (one creation at a time)."""
    comm.groups._STORE_CLONES = not serial
    rank = dist.get_rank()
    sub = dist.new_group([0, 1], backend="gloo")
    if rank in (0, 1):
        _one_call(sub, "planned", 5, timeout_s)
    res = {}
    t0 = time.monotonic()
    try:
        later = dist.new_group([0, 1, 2, 3], backend="gloo", timeout=timedelta(seconds=timeout_s))
        x = torch.tensor([float(rank + 1)])
        dist.all_reduce(x, group=later)
        res["sum"] = float(x)
    except Exception as e:
        res["error"] = f"{type(e).__name__}: {e}"
    res["elapsed"] = time.monotonic() - t0
    return res


def same_group_two_threads(timeout_s: float) -> dict:
    """Two threads on one group at once: the second is refused at once with ConcurrentCallError.
    The first thread's call is held inside (a slowed exchange) while the second one calls."""
    from collsched.comm import api

    inside, release = threading.Event(), threading.Event()
    real = api.exchange

    def held(*a, **k):
        inside.set()
        release.wait(timeout_s)
        return real(*a, **k)

    api.exchange = held
    res: dict = {}
    n = dist.get_world_size()
    x = torch.ones(n * 2, 4)

    def first():
        out = torch.empty_like(x)
        collsched.all_to_all_single(out, x, algorithm="fanout", cluster=f"h200:1,gpus={n}", timeout=timeout_s)
        res["first_ok"] = bool(torch.equal(out, x))

    t = threading.Thread(target=first)
    t.start()
    inside.wait(timeout_s)
    t0 = time.monotonic()
    try:
        collsched.all_to_all_single(torch.empty_like(x), x, algorithm="fanout", cluster=f"h200:1,gpus={n}",
                                    timeout=timeout_s)
        res["second"] = "ran"
    except comm.ConcurrentCallError as e:
        res["second"] = str(e)
    res["second_s"] = time.monotonic() - t0
    release.set()
    t.join()
    api.exchange = real
    return res


def _native_kw(n: int, timeout_s: float, **extra) -> dict:
    return dict(algorithm="auto", options={"candidates": ["native"]}, eager_bytes=0, cluster=f"h200:1,gpus={n}",
                timeout=timeout_s, **extra)


def _marked(rank: int, call: int, rows: int, n: int) -> torch.Tensor:
    """Rows that say who sent them in which call: value rank * 1000 + call."""
    return torch.full((rows * n, 2), float(rank * 1000 + call))


def rank_ahead_in_native(timeout_s: float, bad_rank: int, bad_call: int) -> dict:
    """A call site running torch's call (native): rank `bad_rank` passes bad split sizes at call
    `bad_call`, raises alone, and carries on; its next call meets its peers' pending one, so
    every later call pairs calls of different numbers (the outputs shift by one call). The next
    check must raise on every rank, naming `bad_rank` as one call ahead. Every rank stops there."""
    rank, n = dist.get_rank(), dist.get_world_size()
    kw = _native_kw(n, timeout_s)
    res: dict = {"raised_at": None, "shifted": 0, "bad_call_raised": False}
    for step in range(callsite_recheck() + 3):
        x = _marked(rank, step, 3, n)
        out = torch.empty_like(x)
        splits = [3] * n
        if rank == bad_rank and step == bad_call:
            try:
                collsched.all_to_all_single(out, x, splits, [3] * (n - 1) + [4], **kw)
            except comm.CollectiveInputError:
                res["bad_call_raised"] = True
            continue
        try:
            collsched.all_to_all_single(out, x, splits, splits, **kw)
        except comm.PlanMismatchError as e:
            res["raised_at"], res["message"] = step, str(e)
            break
        want = torch.cat([torch.full((3, 2), float(i * 1000 + step)) for i in range(n)])
        res["shifted"] += not torch.equal(out, want)
    return res


def callsite_recheck() -> int:
    from collsched.comm.callsite import NATIVE_RECHECK_EVERY

    return NATIVE_RECHECK_EVERY


def native_contradiction(timeout_s: float, always: bool) -> dict:
    """In a native call site, rank 0 sends rank 1 one row fewer than rank 1 expects (torch's call
    then leaves a row of rank 1's output as it was: silently wrong). With checks=True the next
    check raises on every rank naming the calls since the last one; with checks="always" the
    call itself raises on every rank, naming the pair."""
    rank, n = dist.get_rank(), dist.get_world_size()
    kw = _native_kw(n, timeout_s, checks="always" if always else True)
    res: dict = {"raised_at": None}
    bad = 2
    for step in range(callsite_recheck() + 1):
        ins, outs = [3] * n, [3] * n
        if step == bad:
            if rank == 0:
                ins[1] = 2
            if rank == 1:
                outs[0] = 3  # expects 3 from rank 0: the contradiction
        x = torch.full((sum(ins), 2), float(rank * 1000 + step))
        out = torch.full((sum(outs), 2), -1.0)
        try:
            collsched.all_to_all_single(out, x, outs, ins, **kw)
        except (comm.CollectiveInputError, comm.PlanMismatchError) as e:
            res["raised_at"], res["error"], res["message"] = step, type(e).__name__, str(e)
            break
        if step == bad and rank == 1:  # torch's call left the row it never got as it was
            res["bad_call_output_right"] = bool((out[:3] == 0.0).all())
    return res


def seq_tampered(timeout_s: float) -> dict:
    """A planned call site where rank 1's count is moved one ahead (as a call that raised there
    alone would): the next call raises PlanMismatchError on every rank naming rank 1, and so
    does the call after it (the ranks are still at different calls)."""
    from collsched.comm import callsite

    rank, n = dist.get_rank(), dist.get_world_size()
    x = _marked(rank, 1, 5, n)
    out = torch.empty_like(x)
    kw = dict(algorithm="fanout", cluster=f"h200:1,gpus={n}", eager_bytes=0, timeout=timeout_s)
    collsched.all_to_all_single(out, x, **kw)
    if rank == 1:
        callsite.GROUPS.get(dist.GroupMember.WORLD).calls += 1
    res = {}
    try:
        collsched.all_to_all_single(out, x, **kw)
        res["message"] = None
    except comm.PlanMismatchError as e:
        res["message"] = str(e)
    try:
        collsched.all_to_all_single(out, x, **kw)
        res["again"] = None
    except comm.PlanMismatchError as e:
        res["again"] = str(e)
    return res


def failed_creation_is_kept(timeout_s: float) -> dict:
    """Rank 1 never joins the creation of rank 0's per-direction groups: rank 0 times out, and
    its next attempt raises the same error at once (the store keys cannot be reused)."""
    res: dict = {}
    if dist.get_rank() == 0:
        for attempt in ("first", "again"):
            t0 = time.monotonic()
            try:
                comm.groups.gloo_groups(None, "per-direction", 2, timeout_s)
                res[attempt] = None
            except comm.CommTimeoutError as e:
                res[attempt] = str(e)
            res[attempt + "_s"] = time.monotonic() - t0
    else:
        time.sleep(timeout_s + 1.0)
    return res
