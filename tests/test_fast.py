"""FAST and balanced_direct from Python: correctness, determinism across processes,
options, meta, and the worst-case bound."""
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import collsched
from collsched import fast, traffic


def verified(plan):
    plan.verify()
    return plan


def cross_bytes(m, gpus):
    srv = np.arange(m.shape[0]) // gpus
    return int(m[srv[:, None] != srv[None, :]].sum())


@settings(max_examples=40, deadline=None)
@given(
    servers=st.integers(1, 5),
    gpus=st.integers(1, 8),
    nics=st.integers(1, 8),
    fabric=st.sampled_from(["switch", "mesh", "ring"]),
    seed=st.integers(0, 2**32 - 1),
    density=st.floats(0.0, 1.0),
)
def test_fast_and_balanced_direct_plans_verify(servers, gpus, nics, fabric, seed, density):
    c = collsched.Cluster.parse(f"h200:{servers},gpus={gpus},nics={min(nics, gpus)},fabric={fabric}")
    p = servers * gpus
    rng = np.random.default_rng(seed)
    m = rng.integers(0, 1000, size=(p, p)) * (rng.random((p, p)) < density)
    for algo in ["fast", "balanced_direct"]:
        plan = verified(collsched.plan_all_to_all(m, c, algo))
        assert plan.algorithm == algo
        assert plan.bytes_per_tier()["scale_out"] == cross_bytes(m, gpus)
        assert int(plan.meta["predicted_time_ns"]) >= 0
    plan = collsched.plan_all_to_all(m, c, "fast")
    stages = int(plan.meta["stages"])
    assert stages <= max(servers * servers - 2 * servers + 2, 1) or stages == 0


_CHILD = """
import sys, collsched
from collsched import traffic
m = traffic.zipf(64, 0.9, 1 << 20, seed=42)
p = collsched.plan_all_to_all(m, "h200:8", "fast", min_stage_bytes="256KiB")
print(p.hash, p.meta["stages"])
"""


def test_plan_hash_is_identical_across_processes():
    outs = [subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=120, check=True).stdout.strip() for _ in range(2)]
    m = traffic.zipf(64, 0.9, 1 << 20, seed=42)
    here = collsched.plan_all_to_all(m, "h200:8", "fast", min_stage_bytes="256KiB")
    assert outs[0] == outs[1] == f"{here.hash} {here.meta['stages']}"


# Plans pinned on one machine (the 2-core container): `Plan.hash`, and a digest of the plan's
# binary form. Any machine must reproduce both. The binary forms were first pinned through the
# hash's earlier definition (FNV over the binary form) and printed identically by another
# machine (a 16-core H100 host, Python 3.12, torch 2.11); when the hash was redefined over
# field words (2026-11-22), those bytes still gave the earlier pins, and the digests below were
# taken from them. A change that is meant to alter these plans updates this table, and says so.
# Re-pinned 2026-11-28 (issue 43): input_hash composed of the matrix's hash and meta's
# setting_hash, which verify checks; every transfer, segment and dep is unchanged.
# Re-pinned 2026-11-28 (issue 46, second round): `h200` now carries `h100`'s collective-kernel
# constants, so its cluster hash (hashed into every plan) changed; every transfer, segment, dep
# and scratch size is identical to the same plan on `custom:` (checked). mi300x:3 auto: the
# closed form gained the rendezvous and FAST's per-server fills, so its predictions in meta
# changed (its pick here: balanced_direct).
PINNED_HASHES = [
    ("h200:8", "zipf0.8", "fast", "69c3eaf8291983e5", "87b3cc3b319b6fa7"),
    ("h200:8", "zipf0.8", "auto", "3c57a628f81e6d55", "061bd40322651ad7"),  # auto re-pinned 2026-11-26 three times (issue 33's model fixes, sabre_light's forwarding, planning costs of the per-rank path): same choices, predictions in meta changed
    ("h200:8", "zipf0.8", "fanout", "4fa9a09c68aea609", "df705c5ac3661283"),
    ("h200:5,nics=4", "zipf0.99", "fast", "43d948c30206380b", "ae8031b9f477c8cc"),
    ("h200:16,nics=2", "zipf0.8", "balanced_direct", "f663b3d7ec930be1", "38ac6d9c3a47120e"),
    ("h200:40", "zipf0.8", "fast", "fc3f22242daf766f", "49c88ea28b114bf4"),  # 320 GPUs: planned on two threads
    ("h200:40", "zipf0.99", "auto", "359b3a927fc7dad4", "9396714c091f949a"),
    # mi300x and perlmutter: re-pinned 2026-11-28: the cluster (hashed into the plan) now carries
    # the presets' fitted hardware-model constants, and auto's recorded predictions use them.
    ("mi300x:3", "uniform", "auto", "2e5df2eae5543c98", "a130eb129cb83d74"),
    ("h200:4,nics=2", "uniform", "hierarchical", "5cdb6acf77e7fe3e", "8529cb78d1d18fd1"),
    ("h200:4,nics=2", "uniform", "sabre_light", "014f54ee468c4cbe", "29d705dd06bba9a0"),
    ("perlmutter:4", "zipf0.99", "sabre_skewed", "10c2ec14ea54a3c9", "1d887f66452178e4"),
]


@pytest.mark.parametrize("spec,workload,algo,want,binary", PINNED_HASHES)
def test_plan_hash_is_the_same_on_every_machine(spec, workload, algo, want, binary):
    import hashlib

    n = collsched.Cluster.parse(spec).num_gpus
    m = {"zipf0.8": lambda: traffic.zipf(n, 0.8, 50 << 20, seed=1), "zipf0.99": lambda: traffic.zipf(n, 0.99, 1 << 20, seed=3),
         "uniform": lambda: traffic.uniform(n, 1 << 20, seed=2)}[workload]()
    plan = collsched.plan_all_to_all(m, spec, algo)
    assert plan.hash == want
    assert hashlib.blake2b(plan.to_binary(), digest_size=8).hexdigest() == binary


def test_meta_and_options():
    m = traffic.zipf(32, 0.8, 4 << 20, seed=1)
    plan = verified(collsched.plan_all_to_all(m, "h200:4", "fast"))
    assert 1 <= int(plan.meta["stages"]) <= 8 * 4
    assert int(plan.meta["predicted_time_ns"]) > 0
    asc = collsched.plan_all_to_all(m, "h200:4", "fast", order="asc")
    assert asc.hash != plan.hash and asc.meta["stages"] == plan.meta["stages"]
    coarse = collsched.plan_all_to_all(m, "h200:4", "fast", min_stage_bytes="64MiB")
    assert int(coarse.meta["stages"]) <= int(plan.meta["stages"])
    with pytest.raises(ValueError, match="unknown option 'bogus'"):
        collsched.plan_all_to_all(m, "h200:4", "fast", bogus=1)
    with pytest.raises(ValueError, match="order"):
        collsched.plan_all_to_all(m, "h200:4", "fast", order="random")
    with pytest.raises(ValueError, match="min_stage_bytes"):
        collsched.plan_all_to_all(m, "h200:4", "fast", min_stage_bytes="-3")
    with pytest.raises(ValueError, match="takes none"):
        collsched.plan_all_to_all(m, "h200:4", "balanced_direct", order="asc")


def test_worst_case_ratio():
    r = fast.worst_case_ratio("h200:4")
    # §4.4: 450 GB/s vs 400 Gb/s on 4 nodes → the paper quotes 2.12× for Theorem 3.
    assert fast.theorem3_ratio("h200:4") == pytest.approx(2.11, abs=0.01)
    assert r >= fast.theorem3_ratio("h200:4")
    # A faster scale-up fabric tightens the guarantee.
    assert fast.worst_case_ratio("h200:4,scaleup=900GB/s") < r
    assert fast.worst_case_ratio("h200:1") == 1.0
    with pytest.raises(ValueError):
        fast.worst_case_ratio("nope:4")


def test_server_stages_reconstruct_the_matrix():
    rng = np.random.default_rng(3)
    s = rng.integers(0, 10_000, size=(6, 6))
    np.fill_diagonal(s, 0)
    stages = fast.server_stages(s, exact=True)
    acc = np.zeros_like(s)
    for perm, real, exact in stages:
        assert exact and sorted(perm) == list(range(6))
        for i, (d, r) in enumerate(zip(perm, real)):
            acc[i, d] += r
    assert (acc == s).all()
    assert len(stages) <= 36 - 12 + 2
    with pytest.raises(ValueError, match="diagonal"):
        fast.server_stages(np.ones((3, 3), dtype=np.int64))
    with pytest.raises(ValueError):
        fast.server_stages(np.ones((2, 3), dtype=np.int64))
