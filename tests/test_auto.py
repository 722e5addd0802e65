"""`auto` from Python: the choice is the smallest predicted time, or on close calls the
smallest integer fluid-model time (default) or simulated time (refine=always), recorded in
meta; candidates that cannot be close calls are pruned."""
import numpy as np
import pytest

import collsched
from collsched import plan_all_to_all, traffic

CANDIDATES = ["fanout", "spreadout", "hierarchical", "balanced_direct", "fast", "sabre_skewed", "sabre_light"]


@pytest.mark.parametrize("spec", ["h200:2,gpus=4", "perlmutter:3", "mi300x:2,gpus=4,nics=2"])
@pytest.mark.parametrize("kind", ["uniform", "zipf", "hot"])
def test_choice_is_the_argmin_of_predictions(spec, kind):
    c = collsched.Cluster.parse(spec)
    n = c.num_gpus
    m = {"uniform": lambda: traffic.uniform(n, 1 << 18, seed=3),
         "zipf": lambda: traffic.zipf(n, 0.99, 1 << 18, seed=3),
         "hot": lambda: traffic.hot_experts(n, skew=1.5, tokens_per_rank=256, hidden=512, seed=3)}[kind]()
    p = plan_all_to_all(m, c, "auto", cache=0, refine="never")
    p.verify()
    pred = {a: int(p.meta[f"predicted_{a}_ns"]) for a in CANDIDATES if f"predicted_{a}_ns" in p.meta}
    pruned = {a: int(p.meta[f"pruned_{a}_bound_ns"]) for a in CANDIDATES if f"pruned_{a}_bound_ns" in p.meta}
    assert not set(pred) & set(pruned)
    assert {"fanout", "sabre_skewed", "sabre_light"} <= set(pred) | set(pruned)
    best = min(pred.values())
    # A pruned candidate's lower bound is above the winner's prediction.
    assert all(b > best for b in pruned.values())
    first = next(a for a in CANDIDATES if pred.get(a) == best)
    assert p.meta["choice"] == first
    assert p.algorithm == "auto"
    assert p.meta["reason"]
    # Planning the chosen algorithm directly gives the same transfers.
    direct = plan_all_to_all(m, c, first)
    assert (p.num_transfers, p.num_segments, p.scratch_bytes) == (direct.num_transfers, direct.num_segments, direct.scratch_bytes)


def test_cached_and_uncached_plans_match():
    m = traffic.zipf(8, 0.7, 1 << 16, seed=5)
    a = plan_all_to_all(m, "h200:2,gpus=4", "auto")
    b = plan_all_to_all(m, "h200:2,gpus=4", "auto")
    assert a.hash == b.hash
    assert a.meta == plan_all_to_all(m, "h200:2,gpus=4", "auto", cache=0).meta


def test_bad_options():
    m = traffic.uniform(8, 100, seed=1)
    with pytest.raises(ValueError, match="unknown candidate"):
        plan_all_to_all(m, "h200:1", "auto", candidates="nccl")
    with pytest.raises(ValueError, match="unknown option"):
        plan_all_to_all(m, "h200:1", "auto", speed="max")


def test_refine_always_simulates_close_calls():
    c = collsched.Cluster.parse("h200:3,gpus=2")
    m = traffic.zipf(6, 0.99, 8 << 20, seed=4)
    p = plan_all_to_all(m, c, "auto", cache=0, refine="always")
    p.verify()
    sims = {a: int(p.meta[f"simulated_{a}_ns"]) for a in CANDIDATES if f"simulated_{a}_ns" in p.meta}
    if len(sims) >= 2:
        assert p.meta["refined"] == "true"
        best = min(sims.values())
        assert p.meta["choice"] == next(a for a in CANDIDATES if sims.get(a) == best)
    else:
        assert p.meta["refined"] == "false"
    with pytest.raises(ValueError, match="refine"):
        plan_all_to_all(m, c, "auto", refine="maybe")


@pytest.mark.parametrize("seed", [4, 5, 6])
def test_default_refines_close_calls_with_the_fluid_model(seed):
    # 3 servers of 2 GPUs, skewed 8 MiB per GPU: balanced_direct and fast are close calls.
    c = collsched.Cluster.parse("h200:3,gpus=2")
    m = traffic.zipf(6, 0.99, 8 << 20, seed=seed)
    p = plan_all_to_all(m, c, "auto", cache=0)
    p.verify()
    explicit = plan_all_to_all(m, c, "auto", cache=0, refine="fluid")  # the default, spelled out
    assert (explicit.meta, explicit.num_transfers) == (p.meta, p.num_transfers)
    pred = {a: int(p.meta[f"predicted_{a}_ns"]) for a in CANDIDATES if f"predicted_{a}_ns" in p.meta}
    fluid = {a: int(p.meta[f"fluid_{a}_ns"]) for a in CANDIDATES if f"fluid_{a}_ns" in p.meta}
    close = {a for a, v in pred.items() if v * 100 <= min(pred.values()) * 108}
    if len(close) >= 2:
        assert p.meta["refined_with"] == "fluid"
        assert set(fluid) == close
        best = min(fluid.values())
        assert p.meta["choice"] == next(a for a in CANDIDATES if fluid.get(a) == best)
        # The fluid model is the simulator's physics in integers: within 0.5% of it here.
        for a, ns in fluid.items():
            s = collsched.sim.simulate(plan_all_to_all(m, c, a), c).time_s * 1e9
            assert abs(ns / s - 1) < 0.005, (a, ns, s)
    else:
        assert p.meta["refined_with"] == "none" and not fluid


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
def test_auto_after_fork_plans_without_hanging():
    """From 32 GPUs auto evaluates candidates in pairs on a helper thread that persists per
    calling thread. A forked child (DataLoader workers, multiprocessing) has no such thread:
    it must start its own, not hand work to the parent's and wait forever."""
    import os
    import time

    c = collsched.Cluster.parse("h200:4")
    m = traffic.zipf(32, 0.8, 1 << 16, seed=7)
    parent = plan_all_to_all(m, c, "auto", cache=0, threads=2)  # starts the helper here
    pid = os.fork()
    if pid == 0:  # child: plan again and report through the exit status
        try:
            child = plan_all_to_all(m, c, "auto", cache=0, threads=2)
            os._exit(0 if child.hash == parent.hash else 3)
        except BaseException:
            os._exit(4)
    deadline = time.monotonic() + 60
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("auto hung in a forked child")
        time.sleep(0.05)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
