"""Issue 41 item 7: every rank exits with status 0 after calls that used a FAST plan.

Each rank: three ``collsched.all_to_all_single(..., algorithm="fast")`` on a skewed matrix, a
sleep that differs per rank, one ``all_reduce``, ``destroy_process_group``, then a normal
interpreter exit. The crash it guards against happened in that exit: collsched's group cache
kept the default group (and its own Gloo groups) alive past ``destroy_process_group``, so a
Gloo worker thread could still drop the all_reduce's tensor once interpreter shutdown had
begun, and taking the GIL there aborts the process ("terminate called without an active
exception").

Two ways to run it:

- one process per rank, as the issue did: ``torchrun --nproc-per-node 8 tests/_exit_reproducer.py``;
- as its own launcher (what ``tests/test_exit.py`` runs):
  ``python tests/_exit_reproducer.py --runs 20 --world 8 --parallel 4``. It imports torch and
  collsched once and forks the ranks of each run; every rank unwinds back to this script's top
  level and leaves through the normal interpreter shutdown, as a torchrun rank does (the children
  of ``multiprocessing`` leave by ``os._exit`` and skip it, so they cannot show an exit crash).
  Prints one JSON line (runs, failures, each failed rank's exit status) and exits 1 on any failure.

The race: a Gloo worker that completed the all_reduce still needs the GIL once to release
its reference to the tensor's Python object. When the group is freed in
``destroy_process_group`` its destructor joins the worker with the GIL released, so that
happens there. When the group outlives it, the worker competes for the GIL with the main
thread, which hands it over only every switch interval (5 ms by default); a rank that gets
through ``destroy_process_group`` and into shutdown within one interval never hands it over
before shutdown, and the worker is ended there. ``--switch-interval 0.5`` (what the test uses)
widens that interval so the race is lost on most runs whenever a group outlives
``destroy_process_group``; it changes only when threads take turns, not what any rank does.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist

import collsched
import collsched.comm

_ROW = 8  # elements per row


def _splits(rank: int, world: int) -> tuple[list[int], list[int]]:
    """Rows this rank sends to / receives from each rank: rank 0 sends sixteen times more."""
    def rows(src: int, dst: int) -> int:
        return (64 if src == 0 else 4) * (1 + (src + dst) % 3)
    return [rows(rank, j) for j in range(world)], [rows(j, rank) for j in range(world)]


def _rows_of(rank: int, world: int) -> torch.Tensor:
    """Rank `rank`'s input: float32 rows numbered from 1000 * rank, shape [sum of its sends, _ROW]."""
    n = sum(_splits(rank, world)[0])
    return torch.arange(n * _ROW, dtype=torch.float32).reshape(n, _ROW) + 1000 * rank


def scenario(sleep_s: float, cluster: str | None = None) -> None:
    """The issue's sequence on the initialised default group (Gloo); raises on a wrong result.

    Args:
        sleep_s: the last rank sleeps this long before the all_reduce, rank 0 half of it.
        cluster: collsched cluster spec (default: two servers of world / 2 GPUs).
    """
    rank, world = dist.get_rank(), dist.get_world_size()
    cluster = cluster or f"h200:2,gpus={world // 2}"
    ins, outs = _splits(rank, world)
    out = torch.empty(sum(outs), _ROW)
    for _ in range(3):
        collsched.all_to_all_single(out, _rows_of(rank, world), outs, ins, algorithm="fast", cluster=cluster,
                                    eager_bytes=0)  # planned by FAST, as in the report (small pairs would ride in the exchange)
    stats = collsched.comm.last_call_stats()
    if stats.planned_by != "fast":
        raise AssertionError(f"rank {rank}: the plan came from {stats.planned_by!r}, not FAST")
    want = torch.cat([_rows_of(j, world).split(_splits(j, world)[0])[rank] for j in range(world)])
    if not torch.equal(out, want):
        raise AssertionError(f"rank {rank}: all_to_all_single output differs from the rows sent")
    time.sleep(sleep_s * (0.5 + 0.5 * rank / max(1, world - 1)))
    t = torch.ones(1)
    dist.all_reduce(t)
    dist.destroy_process_group()
    if int(t.item()) != world:
        raise AssertionError(f"rank {rank}: all_reduce gave {t.item()}, expected {world}")
    # The crash's precondition, checked on every run: with every group destroyed, no Gloo
    # thread may be left to run into the interpreter's shutdown.
    left = gloo_threads()
    if left:
        raise AssertionError(f"rank {rank}: Gloo threads alive after destroy_process_group: {left}")


def gloo_threads() -> dict:
    """{thread name: count} of this process's Gloo threads (worker and transport loop), read
    from /proc; empty where /proc does not list threads."""
    names: dict = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return names
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
        except OSError:  # the thread ended meanwhile
            continue
        if "gloo" in name:
            names[name] = names.get(name, 0) + 1
    return names


def _child(store: str, rank: int, world: int, sleep_s: float, switch_s: float | None, timeout_s: float) -> None:
    """One forked rank: run the scenario, then raise SystemExit so that the rank leaves through
    the interpreter's normal shutdown (never returns)."""
    code = 0
    if switch_s:
        sys.setswitchinterval(switch_s)
    try:
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                                timeout=timedelta(seconds=timeout_s))
        scenario(sleep_s)
    except BaseException:  # noqa: BLE001 - reported, then this rank exits 1
        traceback.print_exc()
        code = 1
    raise SystemExit(code)


def _reap(pids: dict, deadline: float) -> dict:
    """Wait for the forked ranks until `deadline` (monotonic); SIGKILL the rest. Returns
    {pid: exit code} (negative: killed by that signal; "timeout": killed at the deadline)."""
    codes: dict = {}
    while len(codes) < len(pids) and time.monotonic() < deadline:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            time.sleep(0.02)
            continue
        if pid in pids:
            codes[pid] = os.waitstatus_to_exitcode(status)
    for pid in pids:
        if pid not in codes:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            codes[pid] = "timeout"
    return codes


def launch(runs: int, world: int, parallel: int, sleep_s: float, switch_s: float | None, timeout_s: float) -> dict:
    """Run the scenario `runs` times on `world` forked ranks, `parallel` runs at a time.

    Returns:
        {"runs", "world", "switch_interval", "failed_runs", "failures": ["run R rank K: exit code"],
        "seconds"}; an exit code -6 is SIGABRT, "timeout" a rank killed at the deadline.
    """
    t0 = time.monotonic()
    # The forked ranks share the parent's objects copy-on-write; frozen, the collector of
    # each rank's shutdown does not walk (and so copy) them.
    gc.collect()
    gc.freeze()
    tmp = tempfile.mkdtemp(prefix="collsched-exit-")
    failures: list[str] = []
    failed_runs: set[int] = set()
    for start in range(0, runs, parallel):
        pids: dict = {}
        for run in range(start, min(runs, start + parallel)):
            store = os.path.join(tmp, f"store{run}")
            for rank in range(world):
                # Nothing buffered may be copied into the child (it would be printed twice).
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    _child(store, rank, world, sleep_s, switch_s, timeout_s)
                pids[pid] = (run, rank)
        for pid, code in _reap(pids, time.monotonic() + 2 * timeout_s).items():
            if code != 0:
                run, rank = pids[pid]
                failed_runs.add(run)
                failures.append(f"run {run} rank {rank}: {code}")
    shutil.rmtree(tmp, ignore_errors=True)
    return {"runs": runs, "world": world, "switch_interval": switch_s, "failed_runs": len(failed_runs),
            "failures": sorted(failures), "seconds": round(time.monotonic() - t0, 1)}


def main() -> int:
    if "LOCAL_RANK" in os.environ:  # under torchrun: this process is one rank
        dist.init_process_group("gloo")
        if os.environ.get("EXIT_REPRO_SWITCH_S"):
            sys.setswitchinterval(float(os.environ["EXIT_REPRO_SWITCH_S"]))
        scenario(float(os.environ.get("EXIT_REPRO_SLEEP", "3")))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--world", type=int, default=8, help="ranks per run (even: two servers)")
    ap.add_argument("--parallel", type=int, default=4, help="runs at a time")
    ap.add_argument("--sleep", type=float, default=3.0, help="the last rank's sleep in seconds (rank 0: half)")
    ap.add_argument("--switch-interval", type=float, default=None,
                    help="sys.setswitchinterval in every rank, seconds (default: the interpreter's)")
    ap.add_argument("--timeout", type=float, default=60.0, help="bound on each collective wait, seconds")
    a = ap.parse_args()
    if a.world < 2 or a.world % 2:
        ap.error("--world must be an even number of ranks, at least 2")
    res = launch(a.runs, a.world, max(1, a.parallel), a.sleep, a.switch_interval, a.timeout)
    print(json.dumps(res), flush=True)
    return 1 if res["failed_runs"] else 0


if __name__ == "__main__":
    sys.exit(main())
