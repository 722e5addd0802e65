"""Collectives: planning entry points (checked on concrete data with the
reference interpreter) and the torch.distributed wrappers against torch on
Gloo (one spawn of 4 ranks running many cases, with a hard timeout)."""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import socket

import pytest
from hypothesis import given, settings, strategies as st

import collsched
from collsched import collectives as C
from collective_reference import assert_computes, verify_if_available


@pytest.mark.parametrize("kind", C.KINDS)
@pytest.mark.parametrize("algorithm", ["ring", "tree"])
def test_baseline_plans_compute(kind, algorithm):
    for ranks in (1, 2, 4, 7):
        p = C.plan_collective(kind, ranks, 24 * ranks, algorithm, elem_bytes=4, topology=None, chunks=2)
        assert p.collective == kind and p.num_ranks == ranks
        assert_computes(p)
        verify_if_available(p)


def test_topology_sets_tiers():
    p = C.plan_collective("allreduce", 16, 4096, "ring", elem_bytes=2, topology="mi250:2")
    tiers = p.bytes_per_tier()
    assert tiers["scale_out"] > 0 and tiers["scale_up"] > tiers["scale_out"]
    assert p.gpus_per_server == 8
    assert_computes(p)


def test_bad_requests_are_value_errors():
    with pytest.raises(ValueError, match="unknown collective"):
        C.plan_collective("alltoall", 4, 8, "ring")
    with pytest.raises(ValueError, match="unknown algorithm"):
        C.plan_collective("allgather", 4, 8, "bogus")
    with pytest.raises(ValueError, match="multiple of the element size"):
        C.plan_collective("allreduce", 4, 10, "ring", elem_bytes=4)
    with pytest.raises(ValueError, match="16 GPUs"):
        C.plan_collective("allgather", 4, 8, "ring", topology="mi250:2")
    with pytest.raises(ValueError, match="only applies"):
        C.plan_collective("allgather", 4, 8, "ring", k=2)
    with pytest.raises(ValueError, match="merge=False only applies"):
        C.plan_collective("allgather", 4, 8, "ring", merge=False)
    merged, unmerged = (C.plan_collective("allgather", 16, 1 << 12, topology="a100:2", chunks=2, merge=m) for m in (True, False))
    assert unmerged.num_transfers > merged.num_transfers  # one message per tree instead of per rank pair


@settings(max_examples=20, deadline=None)
@given(kind=st.sampled_from(C.KINDS), servers=st.integers(1, 3), gpus=st.integers(1, 4), nics=st.integers(1, 4),
       channels=st.one_of(st.none(), st.integers(1, 6)), elems=st.integers(0, 40), elem=st.sampled_from([1, 2, 4]))
def test_multi_channel_rings_compute(kind, servers, gpus, nics, channels, elems, elem):
    topology = f"h100:{servers},gpus={gpus},nics={min(nics, gpus)}"
    p = C.plan_collective(kind, servers * gpus, elems * elem, "ring", elem_bytes=elem, topology=topology, channels=channels)
    assert_computes(p, seed=elems)
    verify_if_available(p)


def test_channels_option():
    one = C.plan_collective("allgather", 32, 1 << 20, "ring", topology="h100:4", channels=1)
    default = C.plan_collective("allgather", 32, 1 << 20, "ring", topology="h100:4")
    assert "channels" not in one.meta and default.meta["channels"] == "8"  # one ring per NIC
    assert default.num_transfers == 32 + 8 * (one.num_transfers - 32)  # same local copies, 8 rings of hops
    assert C.plan_collective("allreduce", 8, 1 << 12, "ring", elem_bytes=4, topology="mi300x:1").meta["channels"] == "7"
    assert C.plan_collective("allreduce", 8, 1 << 12, "ring", elem_bytes=4, options={"channels": 3}).meta["channels"] == "3"
    with pytest.raises(ValueError, match="channels.*between 1 and 64"):
        C.plan_collective("allgather", 4, 8, "ring", channels=0)
    with pytest.raises(ValueError, match="channels only applies"):
        C.plan_collective("allgather", 4, 8, "tree", channels=2)
    with pytest.raises(TypeError, match="channels must be an int"):
        C.plan_collective("allgather", 4, 8, "ring", channels="2")


def test_channels_speed_up_multi_nic_allgather_in_simulation():
    # h100:4: 8 NICs per server. One ring crosses each server through one NIC, so at
    # 1 GiB the NICs' bandwidth is what the channels buy: close to 8x.
    shard = (1 << 30) // 32
    time_s = {ch: collsched.simulate(C.plan_collective("allgather", 32, shard, "ring", topology="h100:4", channels=ch),
                                     "h100:4").time_s for ch in (1, None)}
    assert 6.0 < time_s[1] / time_s[None] <= 8.5, time_s


@settings(max_examples=25, deadline=None)
@given(kind=st.sampled_from(C.KINDS), algorithm=st.sampled_from(["ring", "tree"]), ranks=st.integers(1, 16),
       elems=st.integers(0, 50), elem=st.sampled_from([1, 2, 4, 8]), chunks=st.integers(1, 4))
def test_random_baseline_plans(kind, algorithm, ranks, elems, elem, chunks):
    p = C.plan_collective(kind, ranks, elems * elem, algorithm, elem_bytes=elem, chunks=chunks)
    assert_computes(p, seed=elems)


def test_forest_plans_compute():
    forest = pytest.importorskip("collsched.forest")
    if not hasattr(forest, "plan_allreduce"):
        pytest.skip("ForestColl planning not available yet")
    from collsched import _core

    # A Cluster is lowered with Graph.from_cluster (16 GPUs); a string names ForestColl's
    # testbed graphs first (a100:2: 2 DGX A100 boxes).
    for topology in (_core.Cluster.parse("mi250:2"), "a100:2"):
        n = forest.as_graph(topology).num_compute
        for kind in C.KINDS:
            p = C.plan_collective(kind, n, 64 * n, "forest", elem_bytes=4, topology=topology, chunks=2)
            assert p.num_ranks == n
            assert_computes(p)
            verify_if_available(p)
    with pytest.raises(ValueError, match="GPUs but the group has"):
        C.plan_collective("allgather", 4, 64, "forest", topology="a100:2")


# ---------------------------------------------------------------------------
# torch.distributed on Gloo

WORLD = 4


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, port: int, cases: list, queue, stand_in: bool) -> None:
    import datetime

    import torch
    import torch.distributed as dist

    if stand_in:
        import collective_reference
        from collsched import comm

        comm.execute = collective_reference.torch_execute
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD, timeout=datetime.timedelta(seconds=60))
    out = []
    try:
        for case in cases:
            kind, algorithm, dtype_name, numel, chunks, channels, topology = (*case, None, None)[:7]
            kw = {"algorithm": algorithm, "chunks": chunks, "timeout": 30}
            if channels is not None or topology is not None:
                kw.update(channels=channels, topology=topology)
            dtype = getattr(torch, dtype_name)
            g = torch.Generator().manual_seed(1000 * rank + numel)
            n_in = numel * (WORLD if kind == "reduce_scatter" else 1)
            if dtype.is_floating_point:
                x = torch.randn(n_in, generator=g).to(dtype)
            else:
                x = torch.randint(-1000, 1000, (n_in,), generator=g).to(dtype)
            try:
                if kind == "allgather":
                    got = torch.empty(numel * WORLD, dtype=dtype)
                    collsched.all_gather_into_tensor(got, x, **kw)
                    parts = [torch.empty_like(x) for _ in range(WORLD)]
                    dist.all_gather(parts, x)
                    want = torch.cat(parts)
                elif kind == "reduce_scatter":
                    got = torch.empty(numel, dtype=dtype)
                    collsched.reduce_scatter_tensor(got, x, **kw)
                    total = x.clone()
                    dist.all_reduce(total)
                    want = total[rank * numel : (rank + 1) * numel]
                else:
                    got = x.clone()
                    collsched.all_reduce(got, **kw)
                    want = x.clone()
                    dist.all_reduce(want)
                if dtype.is_floating_point:
                    ok = torch.allclose(got, want, rtol=1e-5, atol=1e-5)
                else:
                    ok = bool(torch.equal(got.view(torch.uint8), want.view(torch.uint8)))
                out.append((case, ok, "" if ok else f"max diff {(got.double() - want.double()).abs().max().item()}"))
            except Exception as e:  # report, keep the other ranks in step
                out.append((case, False, f"{type(e).__name__}: {e}"))
    finally:
        queue.put((rank, out))
        dist.destroy_process_group()


def test_matches_torch_on_gloo():
    pytest.importorskip("torch")
    from collsched import comm

    # Until the runtime's executor lands, a minimal stand-in (tests/collective_reference.py)
    # runs the plans, so the wrappers and plans are still checked against torch.
    stand_in = not hasattr(comm, "execute")
    algorithms = ["ring", "tree"]
    try:
        from collsched import forest

        if hasattr(forest, "plan_allreduce"):
            algorithms.append("forest")
    except ImportError:
        pass
    cases = []
    for kind in C.KINDS:
        for algorithm in algorithms:
            cases.append((kind, algorithm, "int32", 37, 2))
        cases.append((kind, "ring" if kind != "allgather" else "tree", "float32", 1000, None))
        if "forest" in algorithms:
            cases.append((kind, "forest", "float32", 1000, None))
    cases += [("allreduce", "ring", "int64", 1, None), ("reduce_scatter", "tree", "int8", 5, 3), ("allgather", "ring", "uint8", 3, None)]
    # Multi-channel rings: two servers of two GPUs with two NICs give two rings in different
    # orders (the default there); 3 channels over 37 elements leave uneven parts.
    two_by_two = "h100:2,gpus=2,nics=2"
    for kind in C.KINDS:
        cases += [(kind, "ring", "int32", 37, None, 3, None), (kind, "ring", "int32", 37, 2, None, two_by_two),
                  (kind, "ring", "int64", 1000, None, 5, two_by_two)]
    # Forked ranks (Gloo, CUDA untouched: run_local's choice) share the torch this process has
    # imported; spawned ones would import it again, seconds each on a 2-core machine.
    from collsched.comm.launch import default_start_method

    ctx = mp.get_context(default_start_method("gloo"))
    queue = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_worker, args=(r, port, cases, queue, stand_in), daemon=True) for r in range(WORLD)]
    for p in procs:
        p.start()
    results = {}
    try:
        for _ in range(WORLD):
            rank, out = queue.get(timeout=150)
            results[rank] = out
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    failures = [(r, case, msg) for r, out in sorted(results.items()) for case, ok, msg in out if not ok]
    assert len(results) == WORLD
    assert all(len(out) == len(cases) for out in results.values())
    assert not failures, failures[:10]


def test_wrappers_reject_bad_arguments():
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    if not dist.is_available():
        pytest.skip("torch.distributed unavailable")
    port = _free_port()
    store = dist.TCPStore("127.0.0.1", port, 1, True)
    dist.init_process_group("gloo", rank=0, world_size=1, store=store)
    try:
        with pytest.raises(ValueError, match="SUM only"):
            collsched.all_reduce(torch.zeros(4), op=dist.ReduceOp.MAX, algorithm="ring")
        with pytest.raises(ValueError, match="ratio"):
            collsched.all_gather_into_tensor(torch.zeros(3), torch.zeros(2), algorithm="ring")
        with pytest.raises(ValueError, match="dtype"):
            collsched.reduce_scatter_tensor(torch.zeros(2), torch.zeros(2, dtype=torch.int32), algorithm="ring")
        with pytest.raises(ValueError, match="async_op"):
            collsched.all_reduce(torch.zeros(2), async_op=True, algorithm="ring")
    finally:
        dist.destroy_process_group()
