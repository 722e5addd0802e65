"""The namespace testbed: a real 2×2 fabric (root only; skipped with the reason elsewhere),
and the knob checks every host can run."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from collsched.testbed import fabric as fab  # noqa: E402
from collsched.testbed.fabric import Fabric, FabricSpec, TestbedError, list_namespaces  # noqa: E402
from collsched.testbed.runner import RunConfig, check_algorithms, check_size, make_matrix  # noqa: E402


from _netns import needs_netns  # noqa: E402


def _ours(prefix: str) -> list[str]:
    return [n for n in list_namespaces() if n.startswith(prefix)]


# ------------------------------------------------------------------ knobs (any host)


@pytest.mark.parametrize("knobs, match", [
    (dict(servers=2, gpus=4, nic="10Gbps"), r"NIC rates from 1 Mbit/s to 1000 Mbit/s"),
    (dict(servers=2, gpus=4, nic="100Kbps"), r"NIC rates from 1 Mbit/s"),
    (dict(servers=64, gpus=8, nic="100Mbps"), r"too many for this host: at most \d+"),
    (dict(servers=2, gpus=4, nic="100Mbps", latency="1ms"), r"no netem"),
    (dict(servers=2, gpus=8, nic="1Gbps"), r"16 Gbit/s of shaped traffic; this host \(\d+ cores\) emulates at most"),
    (dict(servers=0, gpus=4, nic="100Mbps"), r"--servers must be a positive integer"),
    (dict(servers=2, gpus=4, nic="100Mbps", nics=5), r"--nics must be an integer from 1 to --gpus \(4\)"),
    (dict(servers=2, gpus=4, nic="fast"), r"--nic: cannot parse"),
    (dict(servers=2, gpus=4, nic="100Mbps", queue="1KiB"), r"--queue 1KiB: must be between"),
    (dict(servers=2, gpus=4, nic="100Mbps", scaleup="50Mbps"), r"at least the NIC rate"),
    (dict(servers=2, gpus=4, nic="100Mbps", rto_min="1s"), r"--rto-min '1s': expected 1ms to 200ms"),
])
def test_knobs_the_host_cannot_emulate_are_refused_naming_the_limit(knobs, match):
    with pytest.raises(TestbedError, match=match):
        FabricSpec.from_knobs(**knobs)


def test_bad_workload_algorithm_and_size_are_one_line_errors():
    spec = FabricSpec.from_knobs(2, 2, "100Mbps")
    with pytest.raises(TestbedError, match="--workload: unknown workload 'zipp:1'"):
        make_matrix(spec, RunConfig(workload="zipp:1"))
    with pytest.raises(TestbedError, match="unknown algorithm 'fastest'"):
        check_algorithms(["torch", "fastest"])
    big = RunConfig(workload="balanced", mean=200 * 2**20)
    with pytest.raises(TestbedError, match="at most 256 MiB per rank"):
        check_size(spec, make_matrix(spec, big), big)
    slow = RunConfig(workload="balanced", mean=40 * 2**20, iters=50)
    with pytest.raises(TestbedError, match="the testbed runs at most 600 s"):
        check_size(spec, make_matrix(spec, slow), slow)


def test_not_root_is_one_line(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(TestbedError, match="needs root") as e:
        fab.check_available()
    assert "\n" not in str(e.value)


def test_prefixes_are_distinct_and_name_the_owner():
    a, b = fab.new_prefix(), fab.new_prefix()
    assert a != b and a.startswith(f"collsched-{os.getpid()}-")


# ------------------------------------------------------------------ real fabric (root + netns)


def send_timing(nbytes: int) -> dict:
    """Rank worker: rank 0 sends `nbytes` to rank 2 (other server), then to rank 1 (same server)."""
    import torch.distributed as dist

    rank = dist.get_rank()
    buf = torch.zeros(nbytes, dtype=torch.uint8) + rank
    out = {}
    for peer, name in ((2, "remote"), (1, "local")):
        dist.barrier()
        t0 = time.perf_counter()
        if rank == 0:
            dist.send(buf, peer)
        elif rank == peer:
            dist.recv(buf, 0)
            assert int(buf[0]) == 0 and int(buf[-1]) == 0
        out[name] = time.perf_counter() - t0
    return out


def both_cross(nbytes: int) -> float:
    """Rank worker: ranks 0 and 1 (server 0) send `nbytes` to ranks 2 and 3 (server 1) at once."""
    import torch.distributed as dist

    rank = dist.get_rank()
    buf = torch.zeros(nbytes, dtype=torch.uint8)
    dist.barrier()
    t0 = time.perf_counter()
    if rank < 2:
        dist.send(buf, rank + 2)
    else:
        dist.recv(buf, rank - 2)
    return time.perf_counter() - t0


def die_midway() -> int:
    import torch.distributed as dist

    dist.barrier()
    if dist.get_rank() == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()  # the survivors wait here for a rank that will never come
    time.sleep(60)
    return 0


@needs_netns
def test_2x2_fanout_and_fast_match_torch_and_leave_nothing():
    from collsched.testbed.runner import run

    spec = FabricSpec.from_knobs(2, 2, "200Mbps")
    cfg = RunConfig(workload="zipf:0.9", mean=96 * 1024, algorithms=["torch", "fanout", "fast"], iters=1, warmup=1,
                    timeout_s=60)
    prefixes = []
    res = run(spec, cfg, on_built=lambda f: prefixes.append(f.prefix))
    assert [r["algorithm"] for r in res["results"]] == ["torch", "fanout", "fast"]
    assert all(r["identical"] for r in res["results"])
    assert res["cluster"].startswith("custom:2,gpus=2,nics=2")
    for r in res["results"]:
        assert r["time_s"] > 0
        # The shaping binds: nothing gets far below the fabric's lower bound (htb's burst and one GSO
        # packet may pass at line rate; an unshaped veth would be ~50× faster). Precise: test_shaping_*.
        assert r["time_s"] >= 0.5 * res["lower_bound_s"], r
    assert res["results"][1]["predicted_s"] > 0
    assert _ours(prefixes[0]) == []


@needs_netns
def test_shaping_binds_across_servers_and_scaleup_is_faster():
    from collsched.testbed.launch import run_ranks

    nbytes = 1 << 20
    spec = FabricSpec.from_knobs(2, 2, "50Mbps", rto_min="5ms")
    with Fabric(spec) as f:
        assert len(_ours(f.prefix)) == 5  # 4 ranks + the switch
        res = run_ranks(f, send_timing, (nbytes,), timeout_s=60)
    assert _ours(f.prefix) == []
    # At the shaped rate, less what htb lets through before its bucket runs dry: its burst and
    # one GSO super-packet (up to 64 KiB) sent on a positive token count.
    wire = (nbytes - fab.htb_burst(spec.nic_bps) - 64 * 1024) / spec.nic_bps
    took = max(res[0]["remote"], res[2]["remote"])
    assert took >= wire, res
    assert took < 6 * nbytes / spec.nic_bps, res  # and not far slower (slack for a loaded host)
    assert res[1]["local"] < wire / 2, res  # same server: the unshaped scale-up path, not the NIC


def raise_on_rank0() -> int:
    import torch.distributed as dist

    if dist.get_rank() == 0:
        raise ValueError("bad split on purpose")
    dist.barrier()  # never completes: rank 0 is gone
    return 0


@needs_netns
def test_raising_rank_is_named_and_leaves_nothing():
    from collsched.testbed.launch import RankError, run_ranks

    with pytest.raises(RankError, match=r"^rank 0 raised ValueError: bad split on purpose"):
        with Fabric(FabricSpec.from_knobs(1, 2, "100Mbps")) as f:
            run_ranks(f, raise_on_rank0, timeout_s=60)
    assert _ours(f.prefix) == []


@needs_netns
def test_ranks_sharing_a_nic_share_its_rate():
    from collsched.testbed.launch import run_ranks

    nbytes = 1 << 20
    times = {}
    for nics in (1, 2):
        spec = FabricSpec.from_knobs(2, 2, "50Mbps", nics=nics, rto_min="5ms")
        with Fabric(spec) as f:
            assert len(_ours(f.prefix)) == (7 if nics == 1 else 5)  # + one namespace per shared NIC
            times[nics] = max(run_ranks(f, both_cross, (nbytes,), timeout_s=60))
        assert _ours(f.prefix) == []
    slack = fab.htb_burst(spec.nic_bps) + 64 * 1024
    assert times[1] >= (2 * nbytes - slack) / spec.nic_bps, times  # two flows through one shaped NIC
    assert times[2] < 0.75 * times[1], times  # one NIC each: about half the time


@needs_netns
def test_killed_rank_stops_the_run_quickly_and_leaves_nothing():
    from collsched.testbed.launch import RankError, run_ranks

    spec = FabricSpec.from_knobs(2, 2, "100Mbps")
    t0 = time.monotonic()
    with pytest.raises(RankError, match=r"rank 1 died \(signal 9\)"):
        with Fabric(spec) as f:
            run_ranks(f, die_midway, timeout_s=60)
    assert time.monotonic() - t0 < 30  # not the 60 s deadline
    assert _ours(f.prefix) == []


@needs_netns
def test_clean_removes_dead_runs_but_not_live_ones():
    # An owner pid above any pid_max is never alive; the random tag keeps concurrent test runs apart.
    dead = Fabric(FabricSpec.from_knobs(1, 2, "100Mbps"), prefix=f"collsched-999999999-{os.urandom(3).hex()}").build()
    live = Fabric(FabricSpec.from_knobs(1, 2, "100Mbps")).build()  # owned by this (live) process
    try:
        fab.clean()
        assert _ours(dead.prefix) == []  # gone (a concurrent clean may have been the one to remove it)
        assert len(_ours(live.prefix)) == 3
    finally:
        dead.teardown()
        live.teardown()
    assert _ours(live.prefix) == []


@needs_netns
def test_ctrl_c_tears_the_fabric_down():
    # 2 servers × 1 rank, so every byte crosses a 100 Mbit/s NIC: 51 calls of 4 MiB take ≥ 19 s,
    # and the run is surely still going when Ctrl-C comes. (On one server the bytes took the
    # unshaped scale-up path and the whole run could end first: Ctrl-C then met an exiting process.)
    proc = subprocess.Popen([sys.executable, "-m", "collsched.cli", "testbed", "run", "--servers", "2", "--gpus", "1",
                             "--nic", "100Mbps", "--workload", "balanced", "--mean", "4MiB", "--algorithms", "torch",
                             "--iters", "50"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            # A pytest started with SIGINT ignored (nohup, `&` in a script) passes
                            # that on, and Python then installs no KeyboardInterrupt handler.
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    prefix = f"collsched-{proc.pid}-"
    deadline = time.monotonic() + 30
    while not _ours(prefix) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert _ours(prefix), "the fabric never appeared"
    time.sleep(0.5)
    assert proc.poll() is None, "the run ended before Ctrl-C could interrupt it"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err[-3000:]
    assert "interrupted" in err and "Traceback" not in err
    assert _ours(prefix) == []


def test_signals_wait_for_the_block_even_when_another_thread_takes_them():
    # A process-directed SIGINT goes to a thread that does not block it (rich's refresh thread
    # during a run); a mask in this thread alone let KeyboardInterrupt cut the teardown short.
    import threading

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # even under nohup
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, daemon=True)
    other.start()
    done = []
    try:
        with pytest.raises(KeyboardInterrupt):
            try:
                with fab.signals_deferred():
                    os.kill(os.getpid(), signal.SIGINT)
                    for _ in range(20):  # bytecode runs, so a handler would have run by now
                        time.sleep(0.005)
                    done.append("block")
            finally:
                done.append("after")
    finally:
        stop.set()
        other.join(5)
    assert done == ["block", "after"]  # the block finished first, then the Ctrl-C was raised
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    signal.signal(signal.SIGINT, previous)


def test_bench_testbed_spec_is_parsed_or_refused():
    from collsched.testbed.bench import parse_testbed

    s = parse_testbed("2x4,nic=200Mbps,queue=128KiB")
    assert (s.servers, s.gpus, s.nic_bps, s.queue_bytes, s.scaleup_bps) == (2, 4, 25_000_000, 128 * 1024, None)
    assert parse_testbed("2x4,nic=200Mbps,nics=2").nics_per_server == 2
    for bad, match in (("2y4,nic=1Mbps", "expected SERVERSxGPUS"), ("2x4", "nic=RATE is required"),
                       ("2x4,nic=100Mbps,warp=9", "unknown or empty key 'warp'")):
        with pytest.raises(TestbedError, match=match):
            parse_testbed(bad)


@needs_netns
def test_cli_json_has_the_issue_shape():
    import json

    from typer.testing import CliRunner

    from collsched.cli import _register_all, app

    _register_all()
    r = CliRunner().invoke(app, ["testbed", "run", "--servers", "2", "--gpus", "2", "--nic", "200Mbps", "--workload",
                                 "hot:1.2", "--mean", "64KiB", "--algorithms", "torch,auto", "--iters", "1", "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout[r.stdout.index("{"):])
    assert res["cluster"].startswith("custom:2,gpus=2")
    assert [x["algorithm"] for x in res["results"]] == ["torch", "auto"]
    for x in res["results"]:
        assert {"algorithm", "time_s", "predicted_s", "algbw_gbps", "identical"} <= set(x) and x["identical"] is True
    assert res["results"][0]["predicted_s"] is None
    # auto is reported as the ranks ran it (Gloo's constants): torch's own call has no prediction.
    auto = res["results"][1]
    from collsched import _core

    assert auto["planned_by"] in _core.auto_candidates()
    assert (auto["predicted_s"] is None) == (auto["planned_by"] == "native")
    assert auto["predicted_s"] is None or auto["predicted_s"] > 0


def test_cli_errors_are_one_line(monkeypatch):
    from typer.testing import CliRunner

    from collsched.cli import _register_all, app

    _register_all()
    r = CliRunner().invoke(app, ["testbed", "run", "--servers", "40", "--gpus", "8"])
    assert r.exit_code == 2 and "too many for this host" in r.output and "Traceback" not in r.output
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    r = CliRunner().invoke(app, ["testbed", "run", "--servers", "2", "--gpus", "2", "--mean", "64KiB"])
    assert r.exit_code == 2 and "needs root" in r.output and len(r.output.strip().splitlines()) == 1


def test_calibration_fit_recovers_a_model_from_its_own_predictions():
    """Rows 'measured' by the simulator under known parameters: the fit must predict the held-out
    half (other matrices) within 2%, and the fitted goodput must be the true one."""
    from collsched.testbed import calibrate as cal
    from collsched.testbed.model import ModelParams

    spec = FabricSpec.from_knobs(2, 2, "200Mbps")
    truth = ModelParams(goodput=0.75, alpha_scaleout_us=300, alpha_scaleup_us=200, scaleup_bps=200_000_000,
                        barrier_steps=False, call_us=2000)
    case_list = cal.cases(spec.ranks, ("uniform", "zipf:0.9", "hot:1.2"), (512 * 1024, 4 * 2**20))
    pred = cal._Predictor(spec, case_list)
    rows = [{"workload": c["workload"], "bytes_per_rank": c["bytes_per_rank"], "half": c["half"], "algorithm": a,
             "case": i, "identical": True, "time_s": 0.0} for i, c in enumerate(case_list) for a in cal.ALGORITHMS]
    for r in rows:
        r["time_s"] = pred(r, truth)
    params, fitted = cal.fit(spec, case_list, rows)
    held = [abs(r["error"]) for r in fitted if r["half"] == "held-out"]
    assert held and max(held) < 0.02, (params, max(held))
    assert params.goodput == truth.goodput
    assert {e["half"] for e in cal.error_table(fitted)} == {"fit", "held-out"}


@needs_netns
def test_bench_runs_its_table_on_a_testbed_fabric():
    from collsched.cli.bench import BenchConfig
    from collsched.testbed.bench import run_bench_on_testbed

    cfg = BenchConfig(min_bytes=64 * 1024, max_bytes=64 * 1024, workload="zipf:0.9", warmup=1, iters=1,
                      algorithms=["torch", "fast"])
    res = run_bench_on_testbed(cfg, "1x2,nic=100Mbps", timeout_s=60)
    rows = res["rows"]
    assert [r["algorithm"] for r in rows] == ["torch", "fast"]
    assert all(r.get("wrong", 0) == 0 and "error" not in r for r in rows), rows
    assert _ours(f"collsched-{os.getpid()}-") == []


@settings(max_examples=60, deadline=None)
@given(servers=st.integers(1, 40), gpus=st.integers(1, 12), nic_kbps=st.integers(100, 3_000_000),
       queue_kib=st.integers(1, 100_000))
def test_knobs_give_a_cluster_of_the_fabric_or_a_named_limit(servers, gpus, nic_kbps, queue_kib):
    import collsched
    from collsched.testbed.model import DEFAULT_PARAMS, cluster_spec

    nic, queue = f"{nic_kbps}Kbps", f"{queue_kib}KiB"
    cores = os.cpu_count() or 1
    ok = (servers * gpus <= min(64, fab.MAX_RANKS_PER_CORE * cores)
          and fab.MIN_NIC_BPS <= nic_kbps * 125 <= fab.MAX_NIC_BPS
          and servers * gpus * nic_kbps * 125 <= fab.MAX_AGGREGATE_BPS_PER_CORE * cores
          and fab.MIN_QUEUE <= queue_kib * 1024 <= fab.MAX_QUEUE)
    if not ok:
        with pytest.raises(TestbedError, match=r"ranks is too many|--nic|--queue"):  # each names its knob
            FabricSpec.from_knobs(servers, gpus, nic, queue)
        return
    spec = FabricSpec.from_knobs(servers, gpus, nic, queue)
    c = collsched.Cluster.parse(cluster_spec(spec))
    assert (c.num_gpus, c.gpus_per_server) == (servers * gpus, gpus)
    assert c.nic_bw == int(nic_kbps * 125 * DEFAULT_PARAMS.goodput)
    assert spec.queue_bytes == queue_kib * 1024


@needs_netns
def test_clean_command_reports_what_it_removed():
    from typer.testing import CliRunner

    from collsched.cli import _register_all, app

    dead = Fabric(FabricSpec.from_knobs(1, 1, "100Mbps"), prefix=f"collsched-999999999-{os.urandom(3).hex()}").build()
    try:
        _register_all()
        r = CliRunner().invoke(app, ["testbed", "clean"])
        assert r.exit_code == 0, r.output
        assert r.output.startswith("removed ") and "namespace(s)" in r.output
        assert _ours(dead.prefix) == []
    finally:
        dead.teardown()


def _zombie() -> subprocess.Popen:
    """A child that exited and is not reaped yet (state Z) until the caller's ``wait()``."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with open(f"/proc/{proc.pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                return proc
        time.sleep(0.02)
    proc.kill()
    proc.wait()
    pytest.fail("the child never became a zombie")


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs /proc")
def test_a_zombie_owner_counts_as_dead():
    # After `timeout -s KILL`, the killed owner stays a zombie until reaped: `clean` saw it as
    # alive (os.kill(pid, 0) succeeds on a zombie) and kept its fabric.
    proc = _zombie()
    try:
        assert not fab._alive(proc.pid)
        assert fab._alive(os.getpid())
    finally:
        proc.wait()
    assert not fab._alive(proc.pid)  # reaped: gone from /proc


@needs_netns
def test_clean_after_sigkill_removes_zombie_owners_fabric_and_folder_and_says_what_it_kept(tmp_path):
    import tempfile

    from typer.testing import CliRunner

    from collsched.cli import _register_all, app

    proc = _zombie()
    dead = live = None
    dead_dir = tempfile.mkdtemp(prefix=f"collsched-testbed-{proc.pid}-")
    live_dir = fab.new_jobdir()  # owned by this (live) process
    try:
        dead = Fabric(FabricSpec.from_knobs(1, 1, "100Mbps"), prefix=f"collsched-{proc.pid}-{os.urandom(3).hex()}").build()
        live = Fabric(FabricSpec.from_knobs(1, 1, "100Mbps")).build()
        _register_all()
        r = CliRunner().invoke(app, ["testbed", "clean"])
        assert r.exit_code == 0, r.output
        assert _ours(dead.prefix) == [] and not os.path.exists(dead_dir)
        assert len(_ours(live.prefix)) == 2 and os.path.isdir(live_dir)
        assert f"{dead.prefix}-r0" in r.output and dead_dir in r.output
        assert (f"kept the namespaces of run {live.prefix}: its owner, pid {os.getpid()} "
                f"(") in r.output and "is still running (--all removes them too)" in r.output
        assert f"kept {live_dir}: its owner, pid {os.getpid()}" in r.output
    finally:
        for f in (dead, live):
            if f is not None:
                f.teardown()
        for d in (dead_dir, live_dir):
            shutil.rmtree(d, ignore_errors=True)
        proc.wait()
    assert _ours(live.prefix) == []
