"""Start one rank per namespace of a built Fabric, run a function in each, collect results.

Ranks are forked from this process (torch already imported, so no rank pays the import),
enter their namespace with setns(2), die with their parent (PR_SET_PDEATHSIG), and bind
Gloo to their emulated NIC. Rank 0 hosts the rendezvous store on its NIC address. The
parent watches them: a rank that dies takes the others down within a second (no one waits
for a timeout), a run past its deadline is killed, and results travel back as files.
"""
from __future__ import annotations

import ctypes
import importlib
import os
import pickle
import shutil
import signal
import sys
import time
import traceback
from contextlib import contextmanager
from datetime import timedelta

from collsched.comm.launch import PROGRESS_ENV, relay_progress, report_progress  # noqa: F401  (ranks report progress with it)
from collsched.testbed.fabric import STORE_PORT, Fabric, TestbedError, new_jobdir, rank_addr, signals_deferred

CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1


class RankError(TestbedError):
    """A rank raised, died or was killed; ``failures`` holds (rank, one-line reason)."""

    def __init__(self, msg: str, failures: list[tuple[int, str]]):
        super().__init__(msg)
        self.failures = failures


@contextmanager
def teardown_on_signals():
    """Turn SIGTERM and SIGHUP into SystemExit (SIGINT already raises KeyboardInterrupt), so the
    `finally` blocks that tear the fabric down run however the run ends, short of SIGKILL
    (for that, `collsched testbed clean`)."""
    def _exit(signum, _frame):
        raise SystemExit(128 + signum)

    old = {}
    for s in (signal.SIGTERM, signal.SIGHUP):
        try:
            old[s] = signal.signal(s, _exit)
        except ValueError:  # not the main thread: leave handlers alone
            pass
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _enter_namespace(name: str, parent: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before prctl: no one would ever stop us
        os._exit(1)
    fd = os.open(f"/var/run/netns/{name}", os.O_RDONLY)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), f"setns into {name} failed")
    os.close(fd)


def _child(fabric: Fabric, rank: int, jobdir: str, job: dict, mask, parent: int) -> None:
    """Body of a forked rank (started with SIGINT/SIGTERM/SIGHUP blocked); never returns."""
    code = 0
    try:
        for s in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which stops us
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        fd = os.open(os.path.join(jobdir, f"stderr{rank}.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        _enter_namespace(fabric.rank_ns(rank), parent)
        os.environ.update(job["env"])
        os.environ.update({"RANK": str(rank), "LOCAL_RANK": str(rank % fabric.spec.gpus),
                           "GROUP_RANK": str(rank // fabric.spec.gpus)})
        result = ("ok", _rank_main(rank, jobdir, job))
    except BaseException as e:  # report everything to the parent
        result = ("error", f"{type(e).__name__}: {e}", traceback.format_exc())
        code = 1
    try:
        tmp = os.path.join(jobdir, f"result{rank}.pkl.tmp")
        with open(tmp, "wb") as f:
            pickle.dump(result, f)
        os.replace(tmp, os.path.join(jobdir, f"result{rank}.pkl"))
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        # Skip interpreter and process-group teardown: after a peer died it could block.
        os._exit(code)


def _rank_main(rank: int, jobdir: str, job: dict):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    world = job["world"]
    timeout = timedelta(seconds=job["pg_timeout_s"])
    store = dist.TCPStore(rank_addr(0), STORE_PORT, world, is_master=(rank == 0), timeout=timeout,
                          wait_for_workers=False)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=timeout)
    mod, _, name = job["fn"].partition(":")
    fn = getattr(importlib.import_module(mod), name)
    return fn(*job["args"])


def run_ranks(fabric: Fabric, fn, args: tuple = (), *, env: dict | None = None, timeout_s: float = 300.0,
              on_progress=None, grace_s: float = 1.0) -> list:
    """Run ``fn(*args)`` in every rank of ``fabric`` (rank r in namespace ``fabric.rank_ns(r)``).

    Args:
        fabric: a built Fabric.
        fn: a module-level function (pickled by name) run after ``init_process_group("gloo")``.
        env: extra environment for the ranks (``GLOO_SOCKET_IFNAME=nic`` is always set).
        timeout_s: the whole run's deadline; ranks still running then are killed.
        on_progress: called with each line a rank passed to ``report_progress``.
        grace_s: after one rank failed, how long the others get before they are killed.

    Returns:
        Each rank's return value, in rank order.

    Raises:
        RankError: a rank raised, died or was killed (one line naming the first ranks).
    """
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        raise TestbedError("cannot fork testbed ranks after CUDA was initialised in this process")
    spec = fabric.spec
    jobdir = new_jobdir()
    progress = os.path.join(jobdir, "progress.log")
    open(progress, "w").close()
    job = {"fn": f"{fn.__module__}:{fn.__qualname__}", "args": tuple(args), "world": spec.ranks,
           "pg_timeout_s": max(30.0, timeout_s),
           "env": {"GLOO_SOCKET_IFNAME": "nic", "MASTER_ADDR": rank_addr(0), "MASTER_PORT": str(STORE_PORT),
                   "WORLD_SIZE": str(spec.ranks), "LOCAL_WORLD_SIZE": str(spec.gpus), "OMP_NUM_THREADS": "1",
                   "MKL_NUM_THREADS": "1", PROGRESS_ENV: progress, **(env or {})}}
    pids: dict[int, int] = {}
    status: dict[int, int] = {}
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        # Signals wait while ranks are forked: a Ctrl-C must never run in a child that has not
        # yet left the parent's code (it would tear the parent's fabric down from the child), nor
        # in the parent between fork() and `pids[r] = pid` (that rank would never be stopped).
        old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])  # the ranks' mask once they are set up
        parent = os.getpid()
        with signals_deferred():
            for r in range(spec.ranks):
                pid = os.fork()
                if pid == 0:
                    try:
                        _child(fabric, r, jobdir, job, old_mask, parent)
                    finally:
                        os._exit(70)
                pids[r] = pid
        deadline = time.monotonic() + timeout_s
        first_failure = None
        seen = 0
        while len(status) < len(pids):
            for r, pid in pids.items():
                if r in status:
                    continue
                got, st = os.waitpid(pid, os.WNOHANG)
                if got == pid:
                    status[r] = os.waitstatus_to_exitcode(st)
                    if status[r] != 0 and first_failure is None:
                        first_failure = time.monotonic()
            seen = relay_progress(progress, seen, on_progress)
            now = time.monotonic()
            if now > deadline or (first_failure is not None and now > first_failure + grace_s):
                break
            time.sleep(0.02)
        killed = _kill_all(pids, status)
        return _collect(jobdir, spec.ranks, status, killed, timeout_s)
    finally:
        with signals_deferred():  # a second Ctrl-C must not leave ranks running or files behind
            _kill_all(pids, status)
            shutil.rmtree(jobdir, ignore_errors=True)


def run_on_new_fabric(spec, fn, args: tuple = (), *, env: dict | None = None, timeout_s: float = 300.0,
                      on_progress=None) -> list:
    """Build a fabric for `spec`, run ``fn(*args)`` in its ranks (`run_ranks`), tear it down
    (always; also on Ctrl-C). Checks that namespaces can be made first, and says on stderr when
    the host has fewer cores than the fabric wants (`FabricSpec.cpu_warning`).

    Returns:
        Each rank's return value, in rank order.

    Raises:
        TestbedError: no namespaces here, or a rank failed (RankError).
    """
    from collsched.testbed.fabric import check_available

    check_available()
    warn = spec.cpu_warning()
    if warn:
        print(warn, file=sys.stderr)
    with teardown_on_signals(), Fabric(spec) as fabric:
        return run_ranks(fabric, fn, args, env=env, timeout_s=timeout_s, on_progress=on_progress)


def _kill_all(pids: dict[int, int], status: dict[int, int]) -> set[int]:
    killed = set()
    for r, pid in pids.items():
        if r not in status:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            killed.add(r)
    for r in killed:
        _, st = os.waitpid(pids[r], 0)
        status[r] = os.waitstatus_to_exitcode(st)
    return killed


def _collect(jobdir: str, world: int, status: dict[int, int], killed: set[int], timeout_s: float) -> list:
    results, failures = [], []
    for r in range(world):
        path = os.path.join(jobdir, f"result{r}.pkl")
        if os.path.exists(path):
            with open(path, "rb") as f:
                res = pickle.load(f)
            if res[0] == "ok":
                results.append(res[1])
                continue
            failures.append((r, f"rank {r} raised {res[1]}"))
        elif r in killed:
            failures.append((r, f"rank {r} was stopped (a peer failed or the {timeout_s:g} s deadline passed)"))
        else:
            code = status.get(r, 0)
            how = f"signal {-code}" if code < 0 else f"exit code {code}"
            failures.append((r, f"rank {r} died ({how})"))
        results.append(None)
    if failures:
        # The rank that failed first is the cause; the others were stopped because of it.
        failures.sort(key=lambda f: "was stopped" in f[1])
        raise RankError("; ".join(m for _, m in failures[:3]) + (" ..." if len(failures) > 3 else ""), failures)
    return results
