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

    def __str__(self) -> str:
        if self.kind == "raised":
            return f"rank {self.rank} raised {self.exc_type}: {self.message}"
        return f"rank {self.rank} {self.kind}" + (f"; stderr: {self.stderr_tail[-400:]}" if self.stderr_tail else "")


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


def run_local(fn, world_size: int, args: tuple = (), kwargs: dict | None = None, *, gpus_per_server: int | None = None,
              timeout_s: float = 120.0, backend: str = "gloo", pg_timeout_s: float | None = None,
              extra_pythonpath: list[str] | None = None, env: dict | None = None, on_progress=None,
              raise_on_failure: bool = True) -> list:
    """Run ``fn(*args, **kwargs)`` on `world_size` local ranks of a fresh process group.

    Returns each rank's return value (a RankFailure where a rank raised, died or
    was killed at the deadline). With `raise_on_failure`, any failure raises
    LaunchError carrying the results. `on_progress(line)` receives lines workers
    wrote with `report_progress`.
    """
    import torch.distributed as dist

    if world_size < 1:
        raise ValueError("world_size must be at least 1")
    gps = gpus_per_server or world_size
    if world_size % gps:
        raise ValueError(f"{world_size} ranks are not a whole number of servers of {gps}")
    store = dist.TCPStore("127.0.0.1", 0, world_size, is_master=True, wait_for_workers=False,
                          timeout=timedelta(seconds=timeout_s))
    jobdir = tempfile.mkdtemp(prefix="collsched-ranks-")
    with open(os.path.join(jobdir, "job.pkl"), "wb") as f:
        pickle.dump({"fn": _fn_spec(fn), "args": tuple(args), "kwargs": dict(kwargs or {}), "backend": backend,
                     "pg_timeout_s": pg_timeout_s or max(2 * timeout_s, 30.0)}, f)
    progress_path = os.path.join(jobdir, "progress.log")
    open(progress_path, "w").close()
    base_env = dict(os.environ)
    base_env.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(store.port), "WORLD_SIZE": str(world_size),
                     "LOCAL_WORLD_SIZE": str(gps), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                     PROGRESS_ENV: progress_path})
    paths = [p for p in (extra_pythonpath or [])] + [p for p in sys.path if p]
    base_env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    base_env.update(env or {})
    procs = []
    errs = []
    try:
        for r in range(world_size):
            e = dict(base_env, RANK=str(r), LOCAL_RANK=str(r % gps), GROUP_RANK=str(r // gps))
            err = open(os.path.join(jobdir, f"stderr{r}.log"), "w")
            errs.append(err)
            procs.append(subprocess.Popen([sys.executable, "-m", "collsched.comm.launch", jobdir, str(r)], env=e,
                                          stdout=err, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
        deadline = time.monotonic() + timeout_s
        seen = 0
        while True:
            if on_progress is not None:
                with open(progress_path) as f:
                    lines = f.read().splitlines()
                for line in lines[seen:]:
                    on_progress(line)
                seen = len(lines)
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
                results.append(RankFailure(r, "killed" if r in killed else "died", stderr_tail=tail))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for err in errs:
            err.close()
        del store
    failures = [x for x in results if isinstance(x, RankFailure)]
    if failures and raise_on_failure:
        raise LaunchError("; ".join(str(f) for f in failures[:4]) + (" ..." if len(failures) > 4 else ""), results)
    return results


def _tail(path: str, n: int = 2000) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()[-n:]
    except OSError:
        return ""


def _worker(jobdir: str, rank: int) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    with open(os.path.join(jobdir, "job.pkl"), "rb") as f:
        job = pickle.load(f)
    world = int(os.environ["WORLD_SIZE"])
    out = os.path.join(jobdir, f"result{rank}.pkl")
    try:
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, is_master=False,
                              timeout=timedelta(seconds=job["pg_timeout_s"]))
        dist.init_process_group(job["backend"], store=store, rank=rank, world_size=world,
                                timeout=timedelta(seconds=job["pg_timeout_s"]))
        fn = _resolve(job["fn"])
        result = ("ok", fn(*job["args"], **job["kwargs"]))
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
