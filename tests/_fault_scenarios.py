"""What each rank of tests/test_fault_names.py (and benchmarks/fault_names.py) runs: calls of one
mode (eager, native, planned), then one rank is killed (SIGKILL) or stopped (SIGSTOP) and the
others make the next call. Returns what each survivor raised; the caller asserts."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time

import torch
import torch.distributed as dist

import collsched
from collsched import comm
from collsched.comm import api
from collsched.comm.culprits import process_start

ROWS = 4  # rows per pair: 16 bytes of float32, small enough to ride in an eager exchange


def _mode_kwargs(mode: str, n: int, timeout_s: float, algorithm: str) -> dict:
    kw = dict(cluster=f"h200:{n // 4},gpus=4" if n % 4 == 0 else f"h200:1,gpus={n}", timeout=timeout_s)
    if mode == "eager":
        return dict(kw, algorithm=algorithm)
    if mode == "native":  # auto may only choose torch's call: the site turns native, no exchange after
        return dict(kw, algorithm="auto", options={"candidates": ["native"]}, eager_bytes=0)
    if mode == "planned":
        return dict(kw, algorithm=algorithm, eager_bytes=0)
    raise ValueError(f"mode must be eager, native or planned, got {mode!r}")


def _fault(kind: str, outlive_s: float) -> None:
    """This process dies (kill) or stops (stop; a watchdog kills it `outlive_s` later, so the
    launcher does not wait for its deadline)."""
    if kind == "stop":
        pid = os.getpid()
        # Kills only this process: if it is gone by then (the launcher's deadline), its pid may
        # belong to another process, told apart by its start time (field 22 of /proc/PID/stat).
        watchdog = (f"sleep {outlive_s:g}; s=$(cat /proc/{pid}/stat 2>/dev/null) || exit 0; s=${{s##*) }}; "
                    f"set -- $s; [ \"${{20}}\" = \"{process_start(pid)}\" ] && kill -9 {pid}")
        subprocess.Popen(["sh", "-c", watchdog], start_new_session=True,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.kill(os.getpid(), signal.SIGSTOP)
        while True:  # sent from a thread, the stop may land a moment after kill() returns
            time.sleep(1.0)
    os.kill(os.getpid(), signal.SIGKILL)


def fault_in_mode(mode: str, kind: str, victim: int, timeout_s: float, at: str = "", algorithm: str = "fanout",
                  rows: int = ROWS) -> dict:
    """Two calls of `mode`, then the fault on `victim` at its third call: ``at="call"`` before
    it (the survivors' exchange, or torch's call in native mode, sees it), ``at="execute"``
    after its exchange (the survivors' planned execution sees it; the default for planned);
    ``at="random"``: every rank calls in a loop and the victim's fault comes at a random
    moment 0.05 – 0.3 s into it. Survivors report what their failing call raised and how long
    it took. `rows` (float32, one column) per pair."""
    rank, n = dist.get_rank(), dist.get_world_size()
    at = at or ("execute" if mode == "planned" else "call")
    kw = _mode_kwargs(mode, n, timeout_s, algorithm)
    x = torch.arange(n * rows, dtype=torch.float32) + 1000 * rank
    out = torch.empty_like(x)
    modes = []
    for _ in range(2):  # a long timeout: on a loaded host the first calls (groups, plans) may be slow
        collsched.all_to_all_single(out, x, **dict(kw, timeout=max(30.0, timeout_s)))
        modes.append(comm.last_call_stats().mode)
    dist.barrier()
    if at == "random":
        return _loop_until_fault(kw, x, out, modes, kind, victim, timeout_s)
    if rank == victim:
        if at == "execute":  # after the exchange, before this rank's transfers
            real = api.run_program

            def dies_first(*a, **k):
                _fault(kind, timeout_s + 1.5)
                return real(*a, **k)

            api.run_program = dies_first
        else:
            _fault(kind, timeout_s + 1.5)
    t0 = time.perf_counter()
    try:
        collsched.all_to_all_single(out, x, **kw)
        got = {"raised": None, "message": "", "ranks": None}
    except comm.CollschedCommError as e:
        got = {"raised": type(e).__name__, "message": str(e), "ranks": e.ranks}
    got.update(elapsed=time.perf_counter() - t0, modes=modes)
    return got


def _loop_until_fault(kw: dict, x, out, modes: list, kind: str, victim: int, timeout_s: float) -> dict:
    """Calls in a loop; the victim's fault comes from a timer at a random moment."""
    if dist.get_rank() == victim:
        threading.Timer(random.uniform(0.05, 0.3), _fault, (kind, timeout_s + 1.5)).start()
    got = {"raised": None, "message": "", "ranks": None, "elapsed": 0.0}
    end = time.monotonic() + timeout_s + 3.0
    calls = 0
    while time.monotonic() < end:
        t0 = time.perf_counter()
        try:
            collsched.all_to_all_single(out, x, **kw)
        except comm.CollschedCommError as e:
            got = {"raised": type(e).__name__, "message": str(e), "ranks": e.ranks,
                   "elapsed": time.perf_counter() - t0}
            break
        calls += 1
    got.update(modes=modes, calls=calls)
    return got
