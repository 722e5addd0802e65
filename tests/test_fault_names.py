"""Every fault names its rank: one of 8 Gloo ranks is killed (SIGKILL) or stopped (SIGSTOP) in
each mode (eager, native, planned), and every survivor raises within the timeout (+ slack),
naming that rank. The full campaign (many runs, every victim) is benchmarks/fault_names.py."""
from __future__ import annotations

import os
import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("torch")

from collsched.comm.culprits import local_tcp_ports, owner_of, peer_address, verdict  # noqa: E402
from collsched.comm.errors import CommTimeoutError, PeerFailureError, classify_transport_error  # noqa: E402
from collsched.comm.launch import RankFailure, run_local  # noqa: E402

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
WORLD = 8
TIMEOUT_S = 2.0
TARGET_S = TIMEOUT_S + 1.0  # the target: every survivor raises within the timeout + 1 s
LOAD_SLACK_S = 2.0  # 8 ranks on a shared 2-core machine: scheduling delay on top of the target

GLOO_CLOSED = ("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:561] Connection closed by peer "
               "[127.0.0.1]:46516. This is typically caused by a remote worker crashing. Check the logs of the remote "
               "worker before reporting an error. GLHF!")
GLOO_RESET = ("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:545] Read error [127.0.0.1]:59058: "
              "Connection reset by peer. This is typically caused by a remote worker hanging or bugs in the "
              "application.")


def test_transport_errors_keep_the_gist_and_the_address():
    e = classify_transport_error(RuntimeError(GLOO_CLOSED), "x on rank 0")
    assert isinstance(e, PeerFailureError)
    assert str(e) == ("x on rank 0: transport failure, a peer probably died "
                      "(Connection closed by peer [127.0.0.1]:46516)")
    assert e.transport_text == GLOO_CLOSED and e.ranks is None
    assert "Read error [127.0.0.1]:59058: Connection reset by peer)" in str(classify_transport_error(
        RuntimeError(GLOO_RESET), "x"))
    assert isinstance(classify_transport_error(RuntimeError("Operation timed out!"), "x"), CommTimeoutError)
    assert peer_address(GLOO_CLOSED) == ("127.0.0.1", 46516)
    assert peer_address(GLOO_RESET) == ("127.0.0.1", 59058)
    assert peer_address("[::ffff:10.0.0.2]:80 closed") == ("10.0.0.2", 80)
    assert peer_address("Operation timed out!") is None


def test_an_address_maps_to_the_rank_owning_its_port_in_either_byte_order():
    table = "0=127.0.0.1|35917,127.0.0.1|43441;2=127.0.0.1|46261,127.0.0.1|34962;3=0.0.0.0|5000;"
    assert owner_of(("127.0.0.1", 46261), table) == 2
    assert owner_of(("127.0.0.1", 0xB5B4), table) == 2  # 46261 as Gloo prints it (network byte order)
    assert owner_of(("127.0.0.1", 43441), table) == 0
    assert owner_of(("10.1.1.1", 5000), table) == 3  # bound to every address
    assert owner_of(("10.1.1.1", 46261), table) is None  # another host's port
    assert owner_of(("127.0.0.1", 1234), table) is None
    assert owner_of(("127.0.0.1", 35917), table + "5=127.0.0.1|35917;") is None  # two owners: nobody named
    # A rank that published again (after creating groups) still owns its earlier ports.
    assert owner_of(("127.0.0.1", 35917), table + "0=127.0.0.1|40000;") == 0


def test_local_tcp_ports_sees_this_processes_sockets():
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        assert ("127.0.0.1", srv.getsockname()[1]) in local_tcp_ports()


@given(st.integers(1, 12).flatmap(lambda w: st.tuples(
    st.just(w),
    st.dictionaries(st.integers(0, w - 1), st.one_of(st.none(), st.integers(0, w - 1)), max_size=w),
    st.dictionaries(st.integers(0, w - 1), st.sampled_from(["gone", "stopped", "alive"]), max_size=w))))
@settings(max_examples=100, deadline=None)
def test_the_verdict_never_names_a_rank_that_signed_in(case):
    world, present, states = case
    kind, ranks = verdict(present, world, states)
    assert not set(ranks) & set(present)
    named = {s for s in present.values() if s is not None} - set(present)
    missing = sorted(set(range(world)) - set(present))
    down = [r for r in missing if states.get(r) in ("gone", "stopped")]
    if named:
        assert (kind, ranks) == ("dead", sorted(named))
    elif down:  # a rank this host sees stopped or gone is named; a live one that is late is not
        assert (kind, ranks) == ("missing", down)
    elif missing:
        assert (kind, ranks) == ("missing", missing)
    else:
        assert (kind, ranks) == ("", [])


def test_process_state_tells_alive_stopped_and_gone():
    import signal
    import subprocess
    import time

    from collsched.comm.culprits import local_states, process_start, process_state

    me = os.getpid()
    assert process_state(me, process_start(me)) == "alive"
    assert process_state(me, process_start(me) + 1) == "gone"  # another process that got this pid
    child = subprocess.Popen(["sleep", "30"])
    try:
        start = process_start(child.pid)
        child.send_signal(signal.SIGSTOP)
        for _ in range(100):
            if process_state(child.pid, start) == "stopped":
                break
            time.sleep(0.01)
        host = socket.gethostname()
        table = f"10={host}/{me}/{process_start(me)};11={host}/{child.pid}/{start};12=elsewhere/{me}/1;"
        assert local_states(table, [10, 11, 12]) == {0: "alive", 1: "stopped"}  # rank 12: another host
    finally:
        child.kill()
        child.wait()
    assert process_state(child.pid, start) == "gone"


# mode, fault, victim: each mode once per fault, victims spread over the group (rank 0 included).
CASES = [("eager", "kill", 0), ("eager", "stop", 5), ("native", "kill", 7), ("native", "stop", 3),
         ("planned", "kill", 1), ("planned", "stop", 6)]


@pytest.mark.parametrize("mode,fault,victim", CASES)
def test_every_survivor_names_the_killed_or_stopped_rank(mode, fault, victim):
    res = run_local("_fault_scenarios:fault_in_mode", WORLD, (mode, fault, victim, TIMEOUT_S), timeout_s=60,
                    extra_pythonpath=[TESTS_DIR], raise_on_failure=False)
    assert isinstance(res[victim], RankFailure) and res[victim].kind == "died", str(res[victim])
    for r, got in enumerate(res):
        if r == victim:
            continue
        assert isinstance(got, dict), str(got)
        assert got["modes"] == [mode, mode], got  # the calls before the fault ran in the mode under test
        expected = ("CommTimeoutError",) if fault == "stop" else ("PeerFailureError", "CommTimeoutError")
        assert got["raised"] in expected, (r, got)
        assert got["ranks"] == [victim], (r, got["message"])
        blame = got["message"].split("; ")[-1]
        assert blame.startswith(f"rank {victim} "), (r, got["message"])
        assert got["elapsed"] <= TARGET_S + LOAD_SLACK_S, (r, got["elapsed"])


class _DictStore:
    """The store calls the roll call makes, in memory (one rank's view)."""

    def __init__(self, data=None, block: bool = False):
        self.data, self.block = dict(data or {}), block

    def _wait(self):
        if self.block:  # a store whose host is stopped: the reply never comes
            import time

            time.sleep(3600)

    def check(self, keys):
        self._wait()
        return all(k in self.data for k in keys)

    def get(self, key):
        self._wait()
        return self.data[key].encode()

    def append(self, key, value):
        self._wait()
        self.data[key] = self.data.get(key, "") + value


def _with_store(monkeypatch, store, members, me):
    from collsched.comm import culprits

    monkeypatch.setattr(culprits, "_membership", lambda group: (store, members, me))
    monkeypatch.setattr(culprits, "_FAULTS", {})


def test_the_roll_call_names_the_ranks_that_never_signed_in(monkeypatch):
    import time

    from collsched.comm.culprits import name_culprits

    store = _DictStore({"collsched/fault/0-1-2-3/1": "2:,"})  # rank 2 came; 1 and 3 never do
    _with_store(monkeypatch, store, [0, 1, 2, 3], 0)
    t0 = time.monotonic()
    out = name_culprits(CommTimeoutError("x on rank 0: timed out"), None, t0, 0.2)
    assert isinstance(out, CommTimeoutError) and out.ranks == [1, 3]
    assert str(out).startswith("x on rank 0: timed out; ranks 1, 3 never reached this call"), str(out)
    assert "(ranks 0, 2 waited)" in str(out)
    assert 0.2 <= time.monotonic() - t0 < 0.2 + 0.5 + 0.3 + 1.0  # timeout + grace (+ slack on a loaded host)


def test_an_address_names_the_dead_rank_at_once(monkeypatch):
    import time

    from collsched.comm.culprits import PORTS_KEY, name_culprits

    # Global ranks 10–13 (a subgroup); 12 owned the port Gloo names (in network byte order).
    store = _DictStore({PORTS_KEY: "10=127.0.0.1|5001;11=127.0.0.1|5002;12=127.0.0.1|46261;13=127.0.0.1|5004;",
                        "collsched/fault/10-11-12-13/1": "1:2,3:,"})
    _with_store(monkeypatch, store, [10, 11, 12, 13], 0)
    exc = classify_transport_error(RuntimeError(GLOO_CLOSED), "x on rank 0")
    t0 = time.monotonic()
    out = name_culprits(exc, None, t0, 30.0)
    assert isinstance(out, PeerFailureError) and out.ranks == [2], str(out)
    assert str(out).endswith("; rank 2 failed: its connection closed (seen by ranks 0, 1), the process probably died")
    assert time.monotonic() - t0 < 5.0  # not the 30 s timeout: the address settled it
    assert store.data["collsched/fault/10-11-12-13/1"] == "1:2,3:,0:2,"  # this rank signed in with its evidence


def test_an_address_of_a_rank_that_signed_in_is_not_believed(monkeypatch):
    from collsched.comm.culprits import PORTS_KEY, name_culprits

    # Rank 2 timed out first and Gloo closed its pair: rank 0 sees rank 2's address, but rank 2 is
    # alive (it signed in); rank 3 never came.
    store = _DictStore({PORTS_KEY: "2=127.0.0.1|46261;", "collsched/fault/0-1-2-3/1": "1:,2:,"})
    _with_store(monkeypatch, store, [0, 1, 2, 3], 0)
    out = name_culprits(classify_transport_error(RuntimeError(GLOO_CLOSED), "x"), None, 0.0, 0.1)
    assert isinstance(out, CommTimeoutError) and out.ranks == [3], str(out)
    assert "rank 2 closed the connection when its own wait timed out or failed" in str(out)


def test_a_store_that_never_answers_costs_at_most_the_deadline(monkeypatch):
    import time

    from collsched.comm.culprits import GRACE_S, STORE_SLACK_S, name_culprits

    _with_store(monkeypatch, _DictStore(block=True), [0, 1, 2, 3], 0)
    exc = CommTimeoutError("x: timed out")
    t0 = time.monotonic()
    assert name_culprits(exc, None, t0, 0.2) is exc  # nobody named, no hang
    assert time.monotonic() - t0 < 0.2 + GRACE_S + STORE_SLACK_S + 1.0
