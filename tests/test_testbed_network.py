"""`collsched testbed calibrate`: the network calibration on a real 2×2 fabric recovers its shape and
NIC rate (root only; skipped with the reason elsewhere), and its errors are one line."""
from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("torch")

from _netns import REASON, needs_netns  # noqa: E402
from collsched.testbed.fabric import FabricSpec, list_namespaces  # noqa: E402


@needs_netns
def test_2x2_shape_and_nic_rate_are_recovered_and_nothing_is_left(tmp_path):
    from typer.testing import CliRunner

    from collsched import network
    from collsched.cli import _register_all, app

    _register_all()
    before = set(list_namespaces())
    out = tmp_path / "net.json"
    r = CliRunner().invoke(app, ["testbed", "calibrate", "--servers", "2", "--gpus", "2", "--nic", "200Mbps", "--json",
                                 "--out", str(out)])
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout[r.stdout.index("{"):])
    truth, got = res["truth"], res["measured"]
    assert {"nic_bps", "scaleup_bps", "latency_s", "servers", "gpus_per_server"} <= set(got)
    assert (got["servers"], got["gpus_per_server"]) == (truth["servers"], truth["gpus_per_server"]) == (2, 2)
    assert got["nics_per_server"] == truth["nics_per_server"] == 2  # both ranks of a server send out at once
    assert got["separated_by"] == "bandwidth"  # every rank has one hostname here: the measurement decided
    assert abs(got["nic_bps"] / truth["nic_bps"] - 1) < 0.05, got
    assert got["nic_goodput_bps"] < got["nic_bps"]  # TCP's headers: the payload rate is below the line rate
    assert got["scaleup_bps"] > 2 * got["nic_bps"]  # the unshaped veth
    assert got["latency_s"]["scaleout"] > 0 and got["incast"]["senders"] == 2
    assert set(list_namespaces()) == before
    c = network.load(out)
    assert c["spec"] == res["spec"] and c["measured"]["servers"] == 2


def test_errors_are_one_line(monkeypatch):
    from typer.testing import CliRunner

    from collsched.cli import _register_all, app

    _register_all()
    runner = CliRunner()
    r = runner.invoke(app, ["testbed", "calibrate", "--servers", "40", "--gpus", "8"])
    assert r.exit_code == 2 and "too many for this host" in r.output and "Traceback" not in r.output
    if REASON is None:
        r = runner.invoke(app, ["testbed", "calibrate", "--servers", "1", "--gpus", "1"])
        assert r.exit_code == 2 and "at least 2 ranks" in r.output
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    r = runner.invoke(app, ["testbed", "calibrate", "--servers", "2", "--gpus", "2"])
    assert r.exit_code == 2 and "needs root" in r.output and len(r.output.strip().splitlines()) == 1


def test_truth_is_the_knobs():
    from collsched.testbed.netcal import truth_of

    t = truth_of(FabricSpec.from_knobs(3, 2, "100Mbps", scaleup="400Mbps"))
    assert t == {"servers": 3, "gpus_per_server": 2, "nics_per_server": 2, "nic_bps": 12_500_000,
                 "scaleup_bps": 50_000_000, "latency_s": None}


def test_a_rank_error_reads_as_the_probe_said_it():
    from collsched.testbed.launch import RankError
    from collsched.testbed.netcal import _rank_message

    msg = "the network measurement exceeded --max-time 1 s (during pair 3/28); nothing was written"
    err = RankError("...", [(0, f"rank 0 raised MeasurementTimeout: {msg}"), (1, "rank 1 was stopped (a peer failed)")])
    assert _rank_message(err) == msg
    other = RankError("rank 2 died (signal 9)", [(2, "rank 2 died (signal 9)")])
    assert _rank_message(other) == "rank 2 died (signal 9)"
