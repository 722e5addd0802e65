"""Resource guard: estimate what a command will need before it starts, refuse above a limit,
and show progress on anything long.

A plan, a simulation or a ForestColl generation grows with the square (or worse) of the
GPU count, so a typo such as ``h200:1000`` instead of ``h200:10`` would otherwise run for
minutes and take the machine's memory. The CLI asks :func:`check` first: the estimate is
compared with a memory limit (by default :data:`MEMORY_FRACTION` of the memory free when
the command starts; ``--max-memory`` raises it) and a time limit (``--max-time``), and an
estimate above either is refused with a message that says what was estimated, from what,
and how to go ahead anyway.

Estimates are deliberately coarse (within a few × of the measured cost on the presets):
they exist to catch the 100× mistakes, not to budget a run. The per-entry costs below were
measured with ``benchmarks``-style runs of every all-to-all algorithm on h200:16 and h200:64
(docs/cli.md, "Resource guard").
"""
from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass

MEMORY_FRACTION = 0.5
DEFAULT_MAX_SECONDS = 3600.0
PROGRESS_AFTER_S = 2.0

# Plan entries per (sender, receiver) pair, across algorithms: transfers + segments ≤ 3.2·P²
# (fanout 2.0, FAST 2.7, SABRE 2.2, hierarchical 2.0); auto keeps its candidates' plans alive
# while it decides, so it counts as AUTO_PLANS plans (measured: 2.8–3.7 plans of FAST's size).
ENTRIES_PER_PAIR = 3.2
AUTO_PLANS = 5
# Bytes per plan entry in the core (32-byte transfer or segment records, dependency lists,
# the Python-side copies of the matrix) and per simulated transfer (event state, flow routes).
BYTES_PER_ENTRY = 64
SIM_BYTES_PER_TRANSFER = 160
MATRIX_COPIES = 4  # generator output, its numpy copy, the wire copy for the core, the core's own
# Host time: the simulator's cost per transfer (max-min fair sharing over concurrent flows),
# planning per entry, and ForestColl generation (≈ 36 s for 1 024 GPUs, growing as GPUs^2.2).
SIM_SECONDS_PER_TRANSFER = 30e-6
PLAN_SECONDS_PER_ENTRY = 0.3e-6
FOREST_SECONDS_1024 = 36.0
FOREST_EXPONENT = 2.2
FOREST_BYTES_PER_GPU_SQUARED = 64
# `collsched bench`, per rank and byte of its largest size (bytes sent per rank): the input and
# the output, the expected output, the runtime's send and receive staging (rounded up to a
# power of two, so up to 2× each): 7 copies in the benchmark's dtype, plus the expected output's
# int64 pattern and its modulo (2 × 8 bytes per element) while it is built.
BENCH_DATA_COPIES = 7
BENCH_PATTERN_BYTES_PER_ELEMENT = 16
# Reading a file: bytes of memory per byte of the file while it is read and parsed. A plan: the
# bytes, their text copy, the core's parse and its records (JSON: records are smaller than their
# text). A CSV matrix is read a line at a time, so only its longest line is held (bounded by
# the file: the text and its decoded copy); its P×P result is bounded by its declared shape.
PLAN_FILE_COPIES = 4
CSV_FILE_COPIES = 2
# Small JSON files (topologies, calibrations) become Python objects: up to ~10× their text.
JSON_FILE_COPIES = 10


class ResourceLimitError(ValueError):
    """The estimated memory or time of a command is above its limit (raised before starting)."""


@dataclass(frozen=True)
class Estimate:
    """What a piece of work is expected to need. ``basis`` says what the numbers come from."""

    what: str
    memory_bytes: int
    seconds: float
    basis: str
    advice: str = "use fewer GPUs"


def _fmt_bytes(n: float) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def _fmt_seconds(s: float) -> str:
    if s >= 86400:
        return f"{s / 86400:.3g} days"
    if s >= 3600:
        return f"{s / 3600:.1f} h"
    if s >= 60:
        return f"{s / 60:.1f} min"
    return f"{s:.1f} s"


def free_memory() -> int | None:
    """Bytes this process can still allocate: MemAvailable, capped by a cgroup v2 limit; None if unknown."""
    avail = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    if avail is None:
        try:
            avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return None
    try:  # a container's limit can be far below the host's free memory
        with open("/sys/fs/cgroup/memory.max") as f:
            raw = f.read().strip()
        if raw != "max":
            with open("/sys/fs/cgroup/memory.current") as f:
                used = int(f.read().strip())
            avail = min(avail, max(int(raw) - used, 0))
    except (OSError, ValueError):
        pass
    return avail


def memory_limit(max_memory: str | int | None) -> tuple[int | None, str]:
    """(limit in bytes or None for "unknown", how it was chosen) for a ``--max-memory`` value."""
    if max_memory is not None and str(max_memory).strip():
        from collsched.units import parse_bytes

        try:
            limit = parse_bytes(max_memory)
        except ValueError as e:
            raise ValueError(f"--max-memory: {e} (expected a size such as 16GiB)") from None
        if limit <= 0:
            raise ValueError(f"--max-memory must be a positive size such as 16GiB, got {max_memory!r}")
        return limit, f"--max-memory {max_memory}"
    free = free_memory()
    if free is None:
        return None, "free memory unknown"
    return int(free * MEMORY_FRACTION), f"{MEMORY_FRACTION:.0%} of the {_fmt_bytes(free)} free now"


def check(est: Estimate, max_memory: str | int | None = None, max_time: float | None = None) -> None:
    """Raise :class:`ResourceLimitError` when ``est`` is above the memory or time limit.

    Args:
        est: the estimate (see :func:`estimate_all_to_all`, :func:`estimate_forest`).
        max_memory: a size (``"16GiB"``, bytes) or None for the default
            (:data:`MEMORY_FRACTION` of the free memory).
        max_time: seconds, or None for :data:`DEFAULT_MAX_SECONDS`.

    Raises:
        ResourceLimitError: the message names the estimate, its basis, the limit and the flag
            that raises it.
        ValueError: ``max_memory``/``max_time`` are not valid limits.
    """
    limit, how = memory_limit(max_memory)
    if max_time is None:
        max_time, time_how = DEFAULT_MAX_SECONDS, f"the default {_fmt_seconds(DEFAULT_MAX_SECONDS)}"
    else:
        if isinstance(max_time, bool) or not float(max_time) > 0:
            raise ValueError(f"--max-time must be a positive number of seconds, got {max_time!r}")
        max_time, time_how = float(max_time), f"--max-time {max_time:g}"
    if limit is not None and est.memory_bytes > limit:
        raise ResourceLimitError(
            f"{est.what} would need about {_fmt_bytes(est.memory_bytes)} of memory ({est.basis}), above the limit of "
            f"{_fmt_bytes(limit)} ({how}); {est.advice}, or raise the limit with --max-memory SIZE")
    if est.seconds > max_time:
        raise ResourceLimitError(
            f"{est.what} would take about {_fmt_seconds(est.seconds)} ({est.basis}), above the limit of "
            f"{_fmt_seconds(max_time)} ({time_how}); {est.advice}, or raise the limit with --max-time SECONDS")


def _pairs(gpus: int) -> int:
    return int(gpus) * int(gpus)


def estimate_traffic(gpus: int) -> Estimate:
    """A P×P matrix of 8-byte entries, in the copies the CLI makes of it."""
    mem = MATRIX_COPIES * 8 * _pairs(gpus)
    return Estimate(f"a traffic matrix for {gpus} GPUs", mem, _pairs(gpus) * 20e-9, f"{gpus}² pairs × 8 B × {MATRIX_COPIES} copies")


def estimate_all_to_all(gpus: int, algorithms: list[str], simulate: bool) -> Estimate:
    """Planning (and simulating) each of ``algorithms`` for an all-to-all over ``gpus`` ranks, one after another.

    Memory is the largest single algorithm's (plans are released between algorithms); time is the sum.
    """
    pairs = _pairs(gpus)
    entries = ENTRIES_PER_PAIR * pairs
    transfers = 1.2 * pairs  # at most about one transfer per pair (FAST: 1.16·P²)
    per_alg_mem, total_s = 0.0, 0.0
    for name in algorithms:
        plans = AUTO_PLANS if name == "auto" else 1
        mem = plans * entries * BYTES_PER_ENTRY + (transfers * SIM_BYTES_PER_TRANSFER if simulate else 0)
        per_alg_mem = max(per_alg_mem, mem)
        total_s += plans * entries * PLAN_SECONDS_PER_ENTRY + (transfers * SIM_SECONDS_PER_TRANSFER if simulate else 0)
    mem = per_alg_mem + MATRIX_COPIES * 8 * pairs
    verb = "planning and simulating" if simulate else "planning"
    what = f"{verb} {len(algorithms)} algorithm{'s' if len(algorithms) != 1 else ''} on {gpus} GPUs"
    advice = "use fewer GPUs" + (" or fewer algorithms (-a)" if len(algorithms) > 1 else "")
    return Estimate(what, int(mem), total_s, f"≈{transfers:,.0f} transfers per plan for {gpus}² rank pairs", advice)


def input_file_size(path, what: str) -> int:
    """The size of ``path``, a regular file that exists (``what`` names it in errors: "plan file").

    Raises:
        ValueError: missing, a directory, or not a regular file (a device or a pipe has no size
            to bound the read by: ``/dev/zero`` would never end).
    """
    import stat

    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ValueError(f"{what} {str(path)!r} does not exist") from None
    except OSError as e:
        raise ValueError(f"{what} {str(path)!r} cannot be read ({e.strerror or e})") from None
    if stat.S_ISDIR(st.st_mode):
        raise ValueError(f"{what} {str(path)!r} is a directory")
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{what} {str(path)!r} is not a regular file (save it to a file first)")
    return st.st_size


def check_input_file(path, what: str, copies: float, max_memory: str | int | None = None) -> int:
    """Refuse, before reading it, a file whose reading would need more memory than the limit.

    Args:
        path: the file.
        what (str): what it is, for messages ("plan file", "traffic file").
        copies (float): bytes of memory per byte of the file while it is read and parsed
            (:data:`PLAN_FILE_COPIES`, :data:`CSV_FILE_COPIES`, :data:`JSON_FILE_COPIES`).
        max_memory: as for :func:`check` (None: half the free memory).

    Returns:
        int: the file's size in bytes.

    Raises:
        ResourceLimitError: the estimate is above the limit (nothing was read).
        ValueError: the file is missing, a directory or not a regular file.
    """
    size = input_file_size(path, what)
    est = Estimate(f"reading {what} {str(path)!r}", int(size * copies), size * 10e-9,
                   f"a {_fmt_bytes(size)} file × {copies:g} while it is parsed", "check that it is the right file")
    check(est, max_memory)
    return size


def estimate_simulation(transfers: int, what: str) -> Estimate:
    """Simulating an existing plan of ``transfers`` transfers (``draw``)."""
    return Estimate(what, int(transfers * SIM_BYTES_PER_TRANSFER), transfers * SIM_SECONDS_PER_TRANSFER,
                    f"{transfers:,} transfers in the plan")


def estimate_forest(gpus: int) -> Estimate:
    """ForestColl schedule generation for ``gpus`` compute nodes (grows faster than quadratically)."""
    secs = FOREST_SECONDS_1024 * (gpus / 1024) ** FOREST_EXPONENT
    mem = FOREST_BYTES_PER_GPU_SQUARED * _pairs(gpus)
    return Estimate(f"ForestColl generation for {gpus} GPUs", int(mem), secs,
                    f"{FOREST_BYTES_PER_GPU_SQUARED} B per GPU pair; {FOREST_SECONDS_1024:g} s for 1 024 GPUs, "
                    f"growing as GPUs^{FOREST_EXPONENT}")


def estimate_bench(ranks_here: int, max_bytes: int, elem_bytes: int) -> Estimate:
    """``collsched bench``'s largest size on the ``ranks_here`` ranks that share this machine's
    memory (buffers are freed between sizes, so only the largest counts).

    Args:
        ranks_here (int): ranks on this machine (local spawn: ``--nprocs``; testbed: all ranks).
        max_bytes (int): the largest size, bytes each rank sends (``-e/--maxbytes``).
        elem_bytes (int): the element size of ``--dtype``.

    Returns:
        Estimate: memory for those ranks (time is not estimated: 0).
    """
    copies = BENCH_DATA_COPIES + BENCH_PATTERN_BYTES_PER_ELEMENT / elem_bytes
    mem = ranks_here * max_bytes * copies
    return Estimate(f"collsched bench at -e {_fmt_bytes(max_bytes)} per rank", int(mem), 0.0,
                    f"{ranks_here} ranks on this machine × {_fmt_bytes(max_bytes)} × ≈{copies:.0f} copies: input, "
                    "output, expected output, staging",
                    "use a smaller -e/--maxbytes or fewer ranks (--nprocs)")


@contextmanager
def progress(est: Estimate, total: int | None = None, enabled: bool = True):
    """Show progress on stderr while the body runs, when ``est`` is longer than
    :data:`PROGRESS_AFTER_S`: a rich bar on a terminal; elsewhere (a log, a pipe, CI) plain
    lines: the estimate when the work starts, one line per finished item. Either way a
    one-line summary follows when the work took that long.

    Yields ``advance(description)``, to call after each of ``total`` items (a no-op when hidden).
    """
    from rich.console import Console
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    err = Console(file=sys.stderr, highlight=False, soft_wrap=True)
    show_bar = enabled and err.is_terminal and est.seconds >= PROGRESS_AFTER_S
    t0 = time.perf_counter()
    if show_bar:
        columns = [SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                   TextColumn(f"(estimated {_fmt_seconds(est.seconds)})")]
        with Progress(*columns, console=err, transient=True) as bar:
            task = bar.add_task(est.what, total=total)

            def advance(description: str | None = None) -> None:
                bar.update(task, advance=1, description=description or est.what)

            yield advance
    elif enabled and est.seconds >= PROGRESS_AFTER_S:
        # No terminal to redraw a bar on: say up front what is coming, so a log shows why it waits.
        print(f"{est.what}: started, estimated {_fmt_seconds(est.seconds)} and {_fmt_bytes(est.memory_bytes)}",
              file=sys.stderr, flush=True)
        done = [0]

        def advance(description: str | None = None) -> None:
            done[0] += 1
            of = f"/{total}" if total else ""
            print(f"{est.what}: {done[0]}{of} done" + (f" ({description})" if description else "")
                  + f", {_fmt_seconds(time.perf_counter() - t0)} so far", file=sys.stderr, flush=True)

        yield advance
    else:
        yield lambda description=None: None
    took = time.perf_counter() - t0
    if enabled and took >= PROGRESS_AFTER_S:
        print(f"{est.what}: {_fmt_seconds(took)} (estimated {_fmt_seconds(est.seconds)}, "
              f"{_fmt_bytes(est.memory_bytes)})", file=sys.stderr)
