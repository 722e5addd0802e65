"""Full-duplex point-to-point on Gloo: one process group per direction of a rank pair."""
from __future__ import annotations

import pytest

pytest.importorskip("torch")
from collsched.comm.duplex import Router  # noqa: E402

from _overlap_scenarios import run as run_ranks  # noqa: E402


def test_each_direction_of_a_pair_has_its_own_group():
    up, down, g = object(), object(), object()
    for rank in range(4):
        r = Router(rank, [10, 11, 12, 13], g, up, down)
        assert r.duplex
        for peer in range(4):
            if peer == rank:
                continue
            # What this rank sends to `peer` travels where `peer` receives it from this rank.
            other = Router(peer, r.peers, g, up, down)
            assert r.send_group(peer) is other.recv_group(rank)
            assert r.send_group(peer) is (up if rank < peer else down)
            assert r.send_group(peer) is not r.recv_group(peer)


def test_without_direction_groups_both_directions_use_the_group():
    g = object()
    r = Router(1, [0, 1, 2], g)
    assert not r.duplex and r.send_group(0) is g and r.recv_group(2) is g


def test_direction_groups_are_created_once_route_bytes_and_serve_subgroups():
    results = run_ranks("duplex_routes", 4, 1 << 16, gpus_per_server=2, timeout_s=90)
    for r, res in enumerate(results):
        assert isinstance(res, dict), str(res)
        assert res == {"cached_once": True, "routes": True, "bytes": True, "subgroup": True}, f"rank {r}: {res}"


def test_creating_the_direction_groups_is_bounded_by_the_timeout():
    timeout_s = 1.5
    results = run_ranks("duplex_creation_straggler", 4, timeout_s, gpus_per_server=2, timeout_s=60)
    for r in range(3):
        res = results[r]
        assert isinstance(res, dict) and res["is_timeout"], str(res)
        assert "per-direction Gloo groups over ranks [0, 1, 2, 3]" in res["message"]
        assert res["elapsed"] < timeout_s + 3.0, res


def test_a_group_that_cannot_move_cpu_tensors_exchanges_on_a_gloo_group_of_its_own():
    results = run_ranks("host_group_exchange", 4, gpus_per_server=2, timeout_s=90)
    for r, res in enumerate(results):
        assert isinstance(res, dict), str(res)
        assert res == {"created_once": True, "own_group": True, "values": True, "gloo_is_its_own": True}, f"rank {r}: {res}"
