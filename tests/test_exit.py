"""Processes that used collsched exit cleanly (issue 41 item 7).

Each test runs real processes that leave through the interpreter's normal shutdown, where
the crashes happened (a forked ``multiprocessing`` child leaves by ``os._exit`` and skips it).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the reproducer forks its ranks")


def test_fast_calls_then_destroy_exit_cleanly_5_times():
    """The issue's reproducer, 5 runs of 4 ranks (all at once): three FAST calls, staggered
    ranks, an all_reduce, destroy_process_group. Every rank must exit 0; each rank also checks
    the crash's precondition, that no Gloo thread outlives destroy_process_group (collsched's
    group cache used to keep the default group and its own Gloo groups alive). That check fails
    on every run when the bug is back, and the 0.5 s switch interval makes the crash itself
    likely on each run (tests/_exit_reproducer.py), so 5 runs catch what 20 did; more runs are
    the reproducer's own job (``--runs``)."""
    runs = 5
    cmd = [sys.executable, os.path.join(TESTS_DIR, "_exit_reproducer.py"), "--runs", str(runs), "--world", "4",
           "--parallel", str(runs), "--sleep", "0.2", "--switch-interval", "0.5", "--timeout", "60"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    assert lines, f"no summary (exit {r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    res = json.loads(lines[-1])
    assert res["runs"] == runs and res["switch_interval"] == 0.5
    assert res["failed_runs"] == 0 and r.returncode == 0, f"{res['failures']}\n{r.stderr[-4000:]}"


_PREFETCH_THEN_EXIT = """
import time
import numpy as np
import collsched
from collsched.comm.cache import PlanCache

n = 2048
m = np.random.default_rng(0).lognormal(10, 1.5, (n, n)).astype(np.uint64)
np.fill_diagonal(m, 0)
cluster = collsched.Cluster.parse(f"h200:{n // 8},gpus=8")
cache = PlanCache()
# A full queue behind the plan in flight: the thread stays busy well into the shutdown
# unless the exit handler ends it.
assert cache.prefetch(m, cluster, "fast", {}, rank=0, per_rank=True)
deadline = time.monotonic() + 30
while not cache._queue.empty() and time.monotonic() < deadline:  # the thread has taken it up
    time.sleep(0.001)
for k in range(1, 5):
    assert cache.prefetch(m + np.uint64(k), cluster, "fast", {}, rank=0, per_rank=True)
print("exiting with a plan in flight", flush=True)
"""


def test_exit_with_a_prefetch_in_flight():
    """A process that exits while the prefetch thread plans (in the native core, without the
    GIL) exits 0: the exit handler waits for that plan. Without it, taking the GIL back during
    shutdown ended the thread by a forced unwind through the core and aborted the process."""
    r = subprocess.run([sys.executable, "-c", _PREFETCH_THEN_EXIT], capture_output=True, text=True, timeout=120)
    assert "plan in flight" in r.stdout, r.stderr[-2000:]
    assert r.returncode == 0, f"exit status {r.returncode}\n{r.stderr[-2000:]}"
