"""Start N local ranks (subprocesses) on one machine, run a function in each, collect results.

Used by `collsched demo`, `collsched bench` (when not under torchrun) and the tests.
The parent owns the rendezvous store, so a rank that dies does not take the
store with it; every run has a hard deadline after which stragglers are killed.

Workers: ``python -m collsched.comm.launch JOBDIR RANK``.
"""
from __future__ import annotations

import importlib
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from datetime import timedelta

PROGRESS_ENV = "COLLSCHED_PROGRESS_FILE"


@dataclass
class RankFailure:
    """A rank that raised, died or was killed; stands in its place in the results."""

    rank: int
    kind: str  # "raised" | "died" | "killed"
    exc_type: str = ""
    message: str = ""
    traceback: str = ""
    stderr_tail: str = ""
    cause: str = ""  # died / killed: the error line found in its stderr (a C++ abort's what(), a Python error)

    def __str__(self) -> str:
        if self.kind == "raised":
            return f"rank {self.rank} raised {self.exc_type}: {self.message}"
        return (f"rank {self.rank} {self.kind}" + (f": {self.cause}" if self.cause else "")
                + (f"; stderr: {self.stderr_tail[-400:]}" if self.stderr_tail else ""))


class LaunchError(RuntimeError):
    def __init__(self, msg: str, results: list):
        super().__init__(msg)
        self.results = results


def report_progress(text: str) -> None:
    """From a worker: append a line the parent shows as progress (no-op outside `run_local`)."""
    path = os.environ.get(PROGRESS_ENV)
    if path:
        with open(path, "a") as f:
            f.write(text.replace("\n", " ") + "\n")


def relay_progress(path: str, seen: int, on_progress) -> int:
    """Hand the lines the ranks appended to the progress file `path` since line `seen` to
    `on_progress` (when given); returns the new count of lines seen."""
    if on_progress is None:
        return seen
    with open(path) as f:
        lines = f.read().splitlines()
    for line in lines[seen:]:
        on_progress(line)
    return len(lines)


def _fn_spec(fn) -> str:
    if isinstance(fn, str):
        return fn
    mod = fn.__module__
    if mod == "__main__":
        raise ValueError("run_local needs a function importable by module name, not one defined in __main__")
    return f"{mod}:{fn.__qualname__}"


def _resolve(spec: str):
    mod, _, name = spec.partition(":")
    obj = importlib.import_module(mod)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def default_start_method(backend: str) -> str:
    """"fork" for Gloo on Linux while CUDA is not initialised in this process, else "spawn".

    NCCL ranks always start fresh: a process that has touched the CUDA driver (even
    ``torch.cuda.is_available()`` does, without ``torch.cuda.is_initialized()`` saying so)
    cannot hand it to a forked child, whose CUDA calls then fail.
    """
    import torch

    gloo_only = "nccl" not in backend.lower()
    return "fork" if sys.platform.startswith("linux") and gloo_only and not torch.cuda.is_initialized() else "spawn"


def run_local(fn, world_size: int, args: tuple = (), kwargs: dict | None = None, *, gpus_per_server: int | None = None,
              timeout_s: float = 120.0, backend: str = "gloo", pg_timeout_s: float | None = None,
              extra_pythonpath: list[str] | None = None, env: dict | None = None, on_progress=None,
              raise_on_failure: bool = True, start_method: str | None = None) -> list:
    """Run ``fn(*args, **kwargs)`` on `world_size` local ranks of a fresh process group.

    Returns each rank's return value (a RankFailure where a rank raised, died or
    was killed at the deadline). With `raise_on_failure`, any failure raises
    LaunchError carrying the results. `on_progress(line)` receives lines workers
    wrote with `report_progress`. `start_method`: "fork" (default on Linux for Gloo while
    CUDA is not initialised here: children share the already imported torch, which saves
    seconds per rank) or "spawn" (fresh interpreters: ``python -m collsched.comm.launch``;
    the default for NCCL).
    """
    import torch.distributed as dist

    if start_method is None:
        start_method = default_start_method(backend)
    if start_method not in ("fork", "spawn"):
        raise ValueError(f"start_method must be 'fork' or 'spawn', got {start_method!r}")

    if world_size < 1:
        raise ValueError("world_size must be at least 1")
    gps = gpus_per_server or world_size
    if world_size % gps:
        raise ValueError(f"{world_size} ranks are not a whole number of servers of {gps}")
    jobdir = tempfile.mkdtemp(prefix="collsched-ranks-")
    with open(os.path.join(jobdir, "job.pkl"), "wb") as f:
        pickle.dump({"fn": _fn_spec(fn), "args": tuple(args), "kwargs": dict(kwargs or {}), "backend": backend,
                     "pg_timeout_s": pg_timeout_s or max(2 * timeout_s, 30.0)}, f)
    progress_path = os.path.join(jobdir, "progress.log")
    open(progress_path, "w").close()
    base_env = dict(os.environ)
    base_env.update({"MASTER_ADDR": "127.0.0.1", "WORLD_SIZE": str(world_size),
                     "LOCAL_WORLD_SIZE": str(gps), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                     PROGRESS_ENV: progress_path})
    paths = [p for p in (extra_pythonpath or [])] + [p for p in sys.path if p]
    base_env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    base_env.update(env or {})
    procs = []
    errs = []
    store = None
    try:
        # Forked ranks start before the store (whose server thread must not be forked) and
        # learn its port through a pipe; spawned ranks get it in the environment.
        if start_method == "fork":
            for r in range(world_size):
                e = dict(base_env, RANK=str(r), LOCAL_RANK=str(r % gps), GROUP_RANK=str(r // gps))
                procs.append(_ForkedRank(jobdir, r, e, os.path.join(jobdir, f"stderr{r}.log"), extra_pythonpath or []))
        store = dist.TCPStore("127.0.0.1", 0, world_size, is_master=True, wait_for_workers=False,
                              timeout=timedelta(seconds=timeout_s))
        base_env["MASTER_PORT"] = str(store.port)
        for p in procs:
            p.send_port(store.port)
        for r in range(world_size if start_method == "spawn" else 0):
            e = dict(base_env, RANK=str(r), LOCAL_RANK=str(r % gps), GROUP_RANK=str(r // gps))
            err = open(os.path.join(jobdir, f"stderr{r}.log"), "w")
            errs.append(err)
            procs.append(subprocess.Popen([sys.executable, "-m", "collsched.comm.launch", jobdir, str(r)], env=e,
                                          stdout=err, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
        deadline = time.monotonic() + timeout_s
        seen = 0
        while True:
            seen = relay_progress(progress_path, seen, on_progress)
            if all(p.poll() is not None for p in procs) or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        killed = set()
        for r, p in enumerate(procs):
            if p.poll() is None:
                p.kill()
                killed.add(r)
        for p in procs:
            p.wait()
        results = []
        for r in range(world_size):
            path = os.path.join(jobdir, f"result{r}.pkl")
            tail = _tail(os.path.join(jobdir, f"stderr{r}.log"))
            if os.path.exists(path):
                with open(path, "rb") as f:
                    status, payload = pickle.load(f)
                if status == "ok":
                    results.append(payload)
                else:
                    results.append(RankFailure(r, "raised", *payload, stderr_tail=tail))
            else:
                results.append(RankFailure(r, "killed" if r in killed else "died", stderr_tail=tail,
                                           cause=_cause(os.path.join(jobdir, f"stderr{r}.log"))))
    finally:
        for p in procs:
            if getattr(p, "_port_fd", None) is not None:
                os.close(p._port_fd)  # the store never came up: let the child exit
                p._port_fd = None
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        for err in errs:
            err.close()
        del store
        shutil.rmtree(jobdir, ignore_errors=True)
    failures = [x for x in results if isinstance(x, RankFailure)]
    if failures and raise_on_failure:
        raise LaunchError(_failure_summary(failures), results)
    return results


def _failure_summary(failures: list) -> str:
    """One clause per distinct failure, ranks collapsed: "ranks 0–7 raised ValueError: ..." (not eight clauses)."""
    from collsched.comm.errors import collapse_rank_messages

    def what(f: RankFailure) -> str:
        if f.kind == "raised":
            return f"raised {f.exc_type}: {f.message}"
        return f.kind  # died / killed: their stderr tails differ, so they are shown below for the first one

    text = collapse_rank_messages((f.rank, what(f)) for f in failures)
    first_dead = next((f for f in failures if f.kind != "raised" and f.stderr_tail), None)
    if first_dead is not None:
        text += (f"; rank {first_dead.rank}" + (f": {first_dead.cause}" if first_dead.cause else "")
                 + f"; stderr: {first_dead.stderr_tail[-400:]}")
    return text


class _ForkedRank:
    """A rank forked from this process (Popen-like: poll, kill, wait)."""

    def __init__(self, jobdir: str, rank: int, env: dict, log: str, pythonpath: list[str]):
        sys.stdout.flush()
        sys.stderr.flush()
        rfd, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: never returns
            try:
                os.close(wfd)
                # readline, not read: later siblings inherited this pipe's write end, so EOF never comes.
                with os.fdopen(rfd, "r") as f:
                    port = f.readline().strip()
                if not port:
                    os._exit(71)
                env = dict(env, MASTER_PORT=port)
                fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                devnull = os.open(os.devnull, os.O_RDONLY)
                os.dup2(devnull, 0)
                os.environ.clear()
                os.environ.update(env)
                for p in reversed(pythonpath):
                    if p not in sys.path:
                        sys.path.insert(0, p)
                _worker(jobdir, rank)
            finally:
                os._exit(70)
        os.close(rfd)
        self._port_fd = wfd
        self.pid = pid
        self.returncode = None

    def send_port(self, port: int) -> None:
        os.write(self._port_fd, f"{port}\n".encode())
        os.close(self._port_fd)
        self._port_fd = None

    def poll(self):
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid == self.pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def kill(self):
        if self.poll() is None:
            try:
                os.kill(self.pid, 9)
            except ProcessLookupError:
                pass

    def wait(self):
        if self.returncode is None:
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


_CAUSE = re.compile(r"what\(\):\s*(.+)|^(?:[\w.]+\.)?(\w+(?:Error|Exception|Interrupt)\b.*)$")


def _cause(path: str, n: int = 65536) -> str:
    """The error a dead rank's stderr names: a C++ abort's ``what():`` line (NCCL's watchdog
    prints it above a long stack, which the tail alone cuts off), else the last Python error line."""
    found = ""
    for line in _tail(path, n).splitlines():
        m = _CAUSE.search(line.strip())
        if m and m.group(1):
            return m.group(1)[:300]
        if m and m.group(2):
            found = m.group(2)[:300]
    return found


def _tail(path: str, n: int = 2000) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()[-n:]
    except OSError:
        return ""


def use_gpu_for_nccl(rank: int, world: int) -> None:
    """Bind this rank to GPU ``LOCAL_RANK mod GPUs``. When ranks outnumber the GPUs (a test
    of several ranks on one GPU), each rank claims a host of its own (NCCL_HOSTID), because
    NCCL refuses two ranks of one host on one GPU; they then talk over loopback sockets,
    which is slow but exercises every NCCL code path."""
    import torch

    gpus = torch.cuda.device_count()
    if gpus == 0:
        raise RuntimeError("backend 'nccl' needs a CUDA GPU, and this machine has none: use backend 'gloo'")
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)) % gpus)
    if world > gpus:
        os.environ.setdefault("NCCL_HOSTID", f"collsched-rank-{rank}")
        os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
        os.environ.setdefault("NCCL_IB_DISABLE", "1")


def _drain(store, rank: int, world: int, timeout_s: float) -> None:
    """Before a rank exits: its queued GPU work done, and every rank at this point; both bounded
    (after a fault test the queued work may wait on a dead peer forever).

    NCCL calls return once queued, so a rank can finish its function while its last transfers
    still run; exiting then kills its side of them and the peers' watchdogs abort the peers."""
    import torch

    deadline = time.monotonic() + timeout_s
    done = torch.cuda.Event()
    done.record()
    while not done.query() and time.monotonic() < deadline:
        time.sleep(0.005)
    store.add("collsched/drained", 1)
    while int(store.add("collsched/drained", 0)) < world and time.monotonic() < deadline:
        time.sleep(0.01)


def _worker(jobdir: str, rank: int) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    with open(os.path.join(jobdir, "job.pkl"), "rb") as f:
        job = pickle.load(f)
    world = int(os.environ["WORLD_SIZE"])
    out = os.path.join(jobdir, f"result{rank}.pkl")
    try:
        if "nccl" in job["backend"].lower():
            use_gpu_for_nccl(rank, world)
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, is_master=False,
                              timeout=timedelta(seconds=job["pg_timeout_s"]))
        dist.init_process_group(job["backend"], store=store, rank=rank, world_size=world,
                                timeout=timedelta(seconds=job["pg_timeout_s"]))
        fn = _resolve(job["fn"])
        result = ("ok", fn(*job["args"], **job["kwargs"]))
        if "nccl" in job["backend"].lower():
            _drain(store, rank, world, min(10.0, job["pg_timeout_s"]))
    except BaseException as e:  # report everything, including SystemExit from a scenario
        result = ("error", (type(e).__name__, str(e), traceback.format_exc()))
    tmp = out + ".tmp"
    with open(tmp, "wb") as f:
        pickle.dump(result, f)
    os.replace(tmp, out)
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter and process-group teardown: after a fault test the group is broken
    # and a graceful shutdown could block.
    os._exit(0)


if __name__ == "__main__":
    _worker(sys.argv[1], int(sys.argv[2]))
