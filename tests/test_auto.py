"""`plan_all_to_all(..., "auto")` from Python: it plans what `collsched.choose` picks (fanout
when that is `native`, torch's own call, which moves the same data) and records the choice."""
import pytest

import collsched
from collsched import _core, plan_all_to_all, traffic
from collsched.choose import choose


@pytest.mark.parametrize("spec", ["h200:2,gpus=4", "perlmutter:3", "mi300x:2,gpus=4,nics=2"])
@pytest.mark.parametrize("kind", ["uniform", "zipf", "hot"])
@pytest.mark.parametrize("backend", ["gloo", "nccl"])
def test_auto_plans_the_choice(spec, kind, backend):
    c = collsched.Cluster.parse(spec)
    n = c.num_gpus
    m = {"uniform": lambda: traffic.uniform(n, 1 << 18, seed=3),
         "zipf": lambda: traffic.zipf(n, 0.99, 1 << 20, seed=3),
         "hot": lambda: traffic.hot_experts(n, skew=1.5, tokens_per_rank=256, hidden=512, seed=3)}[kind]()
    p = plan_all_to_all(m, c, "auto", backend=backend)
    p.verify()
    want = choose(m, c, backend, calibration=_core.Calibration.defaults())
    assert p.algorithm == "auto"
    assert p.meta["choice"] == want.algorithm and p.meta["backend"] == backend
    planned = "fanout" if want.algorithm == "native" else want.algorithm
    assert p.meta["planned"] == planned
    for name in _core.auto_candidates():
        assert int(p.meta[f"predicted_{name}_ns"]) == round(want.candidates[name] * 1e9)
    direct = plan_all_to_all(m, c, planned)
    assert (p.num_transfers, p.num_segments, p.scratch_bytes) == (direct.num_transfers, direct.num_segments,
                                                                  direct.scratch_bytes)


def test_native_is_planned_as_fanout_and_says_so():
    m = traffic.uniform(8, 64, seed=1)
    p = plan_all_to_all(m, "h200:2,gpus=4", "auto", backend="nccl")
    assert p.meta["choice"] == "native" and p.meta["planned"] == "fanout"
    assert "torch" in p.meta["reason"]


def test_bad_options():
    m = traffic.uniform(8, 100, seed=1)
    with pytest.raises(ValueError, match="unknown candidate 'nccl'"):
        plan_all_to_all(m, "h200:1", "auto", candidates="nccl")
    with pytest.raises(ValueError, match="unknown option 'refine'"):
        plan_all_to_all(m, "h200:1", "auto", refine="fluid")
    with pytest.raises(ValueError, match="unknown backend 'mpi'"):
        plan_all_to_all(m, "h200:1", "auto", backend="mpi")
    with pytest.raises(ValueError, match="calibration"):
        plan_all_to_all(m, "h200:1", "auto", calibration="{}")
