"""benchmarks/moe_gloo.py --testbed at a tiny size: MoE dispatch + combine on a real 2×4 fabric
(root only; skipped with the reason elsewhere). Outputs equal the torch baseline's, the cross-node
payload equals the planner's count, the emulated NICs carried at least that payload, and the
fabric is gone afterwards."""
from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from _netns import needs_netns  # noqa: E402
from collsched.testbed.fabric import list_namespaces  # noqa: E402

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "moe_gloo.py"


@pytest.fixture(scope="module")
def moe_gloo():
    # Imported under its own name: the testbed's ranks find the worker as ``moe_gloo:worker``.
    spec = importlib.util.spec_from_file_location("moe_gloo", BENCH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["moe_gloo"] = mod
    try:
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.modules.pop("moe_gloo", None)


@needs_netns
def test_moe_gloo_runs_on_the_testbed(moe_gloo, capsys):
    moe_gloo.main(["--testbed", "--tokens", "48", "--hidden", "64", "--iters", "1", "--routing", "single-node",
                   "--json"])
    out = json.loads(capsys.readouterr().out)
    assert "executed-on-testbed" in out["executed"] and out["cluster"].startswith("custom:2,gpus=4")
    rows = {r["method"]: r for r in out["rows"]}
    assert len(rows) == 4 and all(r["equal_to_torch"] for r in rows.values()), rows
    for name, r in rows.items():
        if name.startswith("collsched"):
            assert r["internode_payload_bytes"] == r["planner_internode_bytes"] > 0, name
        # Dispatch and combine each move the payload across the NICs once (plus headers, metadata).
        assert r["nic_tx_bytes_per_call"] >= 2 * r["internode_payload_bytes"], name
        assert r["nic_bound_s"] > 0
    node, torch_row = rows["collsched dedup=node"], rows["torch (nccl-style)"]
    assert node["nic_tx_bytes_per_call"] < torch_row["nic_tx_bytes_per_call"]
    assert out["node_dedup_bound_bytes"] > 0
    assert not [n for n in list_namespaces() if n.startswith(f"collsched-{os.getpid()}-")]


def test_moe_gloo_refuses_bad_knobs_before_building(moe_gloo, capsys):
    with pytest.raises(SystemExit):
        moe_gloo.main(["--testbed", "--experts", "30"])
    assert "--experts 30 must be a multiple of the 8 ranks" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        moe_gloo.main(["--testbed", "--nic", "5Gbps"])
    assert e.value.code == 2 and "--nic 5Gbps" in capsys.readouterr().err
