"""Bounded LRU of plans keyed by (matrix hash, cluster spec, algorithm, options, rank).

With a rank (what the runtime asks for), an entry holds only that rank's `RankPlan`
(`collsched.plan_for_rank`) and its `plan_hash` is the decisions' digest the ranks compare;
without, it holds the whole Plan and its content hash.

`auto` is cached like any algorithm (its key also holds the backend, in `options`, and the
calibration's digest): a repeated matrix is a hit, with no `choose`. A miss chooses and
expands the winner's rank part in one core call that reads the numpy matrix in place
(`_core.plan_auto_for_rank`); when `native` wins the entry holds no plan (`choice`
"native": the runtime calls torch).

MoE routing repeats: the same matrix shows up again whenever the router is
stable, and balanced/equal-split calls repeat exactly. A hit skips planning and
program compilation; the stored matrix is compared on a hit, so a 64-bit hash
collision can never return a wrong plan.

A demand known ahead can be planned in the background (`prefetch`): the transposed
matrix of a dispatch is what its combine and its backward move. A `get` for a demand
being prefetched waits for it (bounded) instead of planning it twice. At exit the
background thread finishes the plan it is on and ends (`_stop_prefetch_threads`).
"""
from __future__ import annotations

import atexit
import os
import queue
import threading
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

import collsched
from collsched import _core
from collsched.calibration import load
from collsched.choose import candidate_list
from collsched.comm.program import RankProgram, compile_rank_program
from collsched.planning import _plan_for_rank_timed, as_cluster

@dataclass
class CacheEntry:
    plan: object  # a whole Plan, or one rank's RankPlan; None when auto chose native
    plan_hash: str  # the Plan's content hash, or the RankPlan's decisions digest ("" for native)
    matrix: np.ndarray
    algorithm: str  # the producer that made the plan
    plan_seconds: float
    note: str = ""
    programs: dict = field(default_factory=dict)
    prefetched: bool = False  # planned in the background by `PlanCache.prefetch`
    decide_s: float = 0.0  # of `plan_seconds`: deciding (a whole plan: all of it)
    expand_s: float = 0.0  # of `plan_seconds`: expanding the rank's transfers
    compile_s: float = 0.0  # the last program compiled
    choice: str = ""  # auto: what `choose` picked ("native": torch's own call, no plan)
    choose_s: float = 0.0  # auto: of `decide_s`, choosing

    def program(self, rank: int, collective_steps: bool = True) -> RankProgram:
        """This rank's program; one compiled with `collective_steps` also serves a request
        without (see `compile_rank_program`)."""
        prog = self.programs.get((rank, True)) or (None if collective_steps else self.programs.get((rank, False)))
        if prog is None:
            t0 = time.perf_counter()
            prog = self.programs[(rank, collective_steps)] = compile_rank_program(
                self.plan, rank, collective_steps=collective_steps)
            self.compile_s = time.perf_counter() - t0
        return prog


def same_matrix(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two u64 matrices are equal, compared in place by the core (no P² temporary)."""
    return _core.matrices_equal(np.ascontiguousarray(a, dtype=np.uint64), np.ascontiguousarray(b, dtype=np.uint64))


def fast_matrix_hash(matrix: np.ndarray) -> str:
    """Cache key of a u64 matrix: a 64-bit word-wise hash of its size and entries, read in
    place, 16 hex digits (no validation pass; the planner validates on a miss). Not
    collision-proof: every use confirms a match by comparing the matrices."""
    return f"{_core.matrix_hash(np.ascontiguousarray(matrix, dtype=np.uint64)):016x}"


# Prefetches waiting for the background planner; more are dropped (a later call plans them).
PREFETCH_QUEUE = 4

# How long exit waits for a prefetch thread to finish the plan it is on (see `_stop_prefetch_threads`).
EXIT_JOIN_S = 30.0

# Caches whose prefetch thread was started (weakly: a cache dropped by its owner is not kept).
_PREFETCHING: "weakref.WeakSet[PlanCache]" = weakref.WeakSet()


# Default byte budget: a FAST plan for 1024 GPUs holds ~120 MB, so 64 of them would hold 8 GB.
DEFAULT_MAX_BYTES = 1 << 30


class PlanCache:
    """At most `capacity` entries and `max_bytes` of plan arrays and matrices (the newest entry
    is kept even when larger on its own), least recently used evicted first."""

    def __init__(self, capacity: int = 64, max_bytes: int = DEFAULT_MAX_BYTES):
        if capacity < 1:
            raise ValueError("plan cache capacity must be at least 1")
        if max_bytes < 1:
            raise ValueError("plan cache max_bytes must be at least 1")
        self.capacity = capacity
        self.max_bytes = max_bytes
        self.nbytes = 0  # held by the entries
        self._d: OrderedDict = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.prefetched = 0  # entries the background planner added
        self._generation = 0  # bumped by `clear`: a prefetch queued before it does not land
        self._start_prefetching()

    @property
    def _workspace(self):
        """Planning's working memory, reused by this cache's per-rank planning (a call that
        finds it in use, e.g. by the prefetch thread, plans in fresh memory). Per process."""
        if getattr(self, "_ws_pid", None) != os.getpid():
            self._ws, self._ws_pid = _core.Workspace(), os.getpid()
        return self._ws

    def _start_prefetching(self) -> None:
        self._inflight: dict = {}  # key -> Event set when its prefetch is over (planned or failed)
        self._queue: queue.Queue = queue.Queue(maxsize=PREFETCH_QUEUE)
        self._worker: threading.Thread | None = None
        self._pid = os.getpid()

    def _after_fork(self) -> None:
        """In a forked child the parent's prefetch thread does not exist: its prefetches in
        flight would never finish (a `get` would wait for them), and the lock may have been
        held at the fork. Start over (the entries stay)."""
        if self._pid != os.getpid():
            self._lock = threading.Lock()
            self._start_prefetching()

    @staticmethod
    def key(matrix: np.ndarray, cluster, algorithm: str, options: dict, rank: int | None = None,
            calibration=None, matrix_hash: str | None = None, moving_pairs: bool = False) -> tuple:
        return (matrix_hash or fast_matrix_hash(matrix), matrix.shape[0], cluster.spec(), algorithm,
                tuple(sorted((str(k), str(v)) for k, v in options.items())), rank,
                calibration.digest if calibration is not None else "", moving_pairs and rank is not None)

    def get(self, matrix: np.ndarray, cluster, algorithm: str, options: dict,
            wait_s: float = 60.0, rank: int | None = None, calibration=None, matrix_hash: str | None = None,
            copy: bool = True, moving_pairs: bool = False) -> tuple[CacheEntry, bool]:
        """The entry for this demand, planning it on a miss: only `rank`'s part when given
        (`collsched.plan_for_rank`), the whole plan otherwise. Returns (entry, hit). A demand
        being prefetched is waited for, at most `wait_s`, then planned here.

        `calibration` (`_core.Calibration`): auto's constants (default: the built-in table
        for a whole plan, `collsched.calibration.load()` per rank); part of the key.
        `matrix_hash`: `fast_matrix_hash(matrix)` when the caller has it already. `copy`:
        False when the caller hands the matrix over and never changes it (the entry keeps it
        to confirm later hits). `moving_pairs`: a rank's part also counts the whole plan's
        moving pairs (see `collsched.plan_for_rank`), which the collective transports need."""
        self._after_fork()
        matrix = np.ascontiguousarray(matrix, dtype=np.uint64)
        key = self.key(matrix, cluster, algorithm, options, rank, calibration, matrix_hash, moving_pairs)
        for waited in (False, True):
            with self._lock:
                e = self._d.get(key)
                if e is not None and same_matrix(e.matrix, matrix):
                    self._d.move_to_end(key)
                    self.hits += 1
                    return e, True
                pending = self._inflight.get(key)
            if waited or pending is None:
                break
            pending.wait(timeout=wait_s)
        e = self._plan(matrix if not copy else matrix.copy(), cluster, algorithm, options, rank, self._workspace,
                       calibration, moving_pairs)
        with self._lock:
            self.misses += 1
            self._insert(key, e)
        return e, False

    def prefetch(self, matrix: np.ndarray, cluster, algorithm: str, options: dict, rank: int | None = None,
                 collective_steps: bool = False, transpose: bool = False, per_rank: bool = False,
                 calibration=None) -> bool:
        """Plan this demand on the background thread, and compile `rank`'s program (see
        `compile_rank_program`) when given; with `per_rank`, plan only `rank`'s part (what
        `get(..., rank=rank)` finds). With `transpose`, the demand is the transposed
        matrix, transposed on that thread (a 1024-rank matrix takes milliseconds), and nothing
        is planned for a symmetric one; a `get` for it waits for it only once that thread has
        taken it up (before, it plans it itself). False when the queue is full or, without
        `transpose`, when the demand is cached or already being prefetched. Planning errors
        are dropped here: the call that needs the plan plans it again and raises them itself.
        `calibration`: as for `get`. `collective_steps`: compile the program for the
        collective transports (and, with `per_rank`, count the moving pairs they need, as
        `get(..., moving_pairs=True)` finds)."""
        self._after_fork()
        matrix = np.ascontiguousarray(matrix, dtype=np.uint64)
        # Hashed before taking the lock (a millisecond at 1024 ranks; `get`s wait on the lock).
        if per_rank and rank is None:
            raise ValueError("prefetch(per_rank=True) needs the rank")
        part = rank if per_rank else None
        key = None if transpose else self.key(matrix, cluster, algorithm, options, part, calibration,
                                              moving_pairs=collective_steps)
        done = None  # with `transpose`, both are known once transposed
        with self._lock:
            if key is not None:
                if key in self._d or key in self._inflight:
                    return False
                done = self._inflight[key] = threading.Event()
            try:
                self._queue.put_nowait((key, matrix, cluster, algorithm, dict(options), rank, collective_steps, done,
                                        self._generation, part, calibration))
            except queue.Full:
                if key is not None:
                    del self._inflight[key]
                return False
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._prefetch_loop, name="collsched-prefetch", daemon=True)
                self._worker.start()
                _PREFETCHING.add(self)
        return True

    def _prefetch_loop(self) -> None:
        q = self._queue  # this thread's queue: a forked child starts its own
        while (item := q.get()) is not None:  # None: `_stop_prefetching`
            self._prefetch_one(*item)

    def _stop_prefetching(self, timeout_s: float) -> None:
        """End the prefetch thread: what is queued is skipped, the plan in flight finishes
        (dropped), the thread returns; waits at most about `timeout_s` twice."""
        with self._lock:
            worker = self._worker
            if worker is None or not worker.is_alive():
                return
            self._generation += 1  # as `clear`: queued prefetches are skipped, the one in flight not stored
            self._inflight.clear()
        try:
            self._queue.put(None, timeout=timeout_s)
        except queue.Full:  # the thread is stuck in one plan: nothing more to do
            return
        worker.join(timeout_s)

    def _prefetch_one(self, key, matrix, cluster, algorithm, options, rank, collective_steps, done,
                      generation, part=None, calibration=None) -> None:
        if generation != self._generation:  # cleared since it was queued: its plan would be dropped
            if done is not None:
                done.set()
            return
        fresh = key is None
        if key is None:  # `transpose`: the demand is known from here on
            t = np.ascontiguousarray(matrix.T)
            if np.array_equal(t, matrix):
                return
            matrix, key = t, self.key(t, cluster, algorithm, options, part, calibration, moving_pairs=collective_steps)
            with self._lock:
                if key in self._d or key in self._inflight:
                    return
                done = self._inflight[key] = threading.Event()
        try:
            # The transposed matrix is this thread's own; the caller's may change after the call.
            e = self._plan(matrix if fresh else matrix.copy(), cluster, algorithm, options, part, self._workspace,
                           calibration, collective_steps)
            e.prefetched = True
            if rank is not None and e.plan is not None:
                e.program(rank, collective_steps)
            with self._lock:
                if generation == self._generation:  # not cleared since it was queued
                    self.prefetched += 1
                    self._insert(key, e)
        except Exception:  # noqa: BLE001 - see `prefetch`: the caller's own planning reports it
            pass
        finally:
            with self._lock:
                if self._inflight.get(key) is done:  # not a newer prefetch of it, after a `clear`
                    del self._inflight[key]
            done.set()

    @staticmethod
    def _plan(matrix: np.ndarray, cluster, algorithm: str, options: dict, rank: int | None = None,
              workspace=None, calibration=None, moving_pairs: bool = False) -> CacheEntry:
        """Plan the demand into a new entry, which keeps `matrix` (the caller's to hand over)."""
        t0 = time.perf_counter()
        if rank is not None and algorithm == "auto":
            return _plan_auto(matrix, cluster, options, rank, workspace, calibration, t0, moving_pairs)
        if rank is not None:
            rp, decide_s, expand_s = _plan_for_rank_timed(matrix, cluster, rank, algorithm, options, workspace,
                                                          moving_pairs=moving_pairs)
            return CacheEntry(plan=rp, plan_hash=rp.digest, matrix=matrix, algorithm=rp.algorithm,
                              plan_seconds=time.perf_counter() - t0, decide_s=decide_s, expand_s=expand_s)
        if algorithm == "auto" and calibration is not None:
            options = dict(options, calibration=calibration.to_json())
        plan = collsched.plan_all_to_all(matrix, cluster, algorithm, **options)
        choice = plan.meta.get("choice", "") if algorithm == "auto" else ""
        note = f"auto chose {choice}" if choice else ""
        dt = time.perf_counter() - t0
        return CacheEntry(plan=plan, plan_hash=plan.hash, matrix=matrix, algorithm=plan.algorithm,
                          plan_seconds=dt, note=note, decide_s=dt, choice=choice)

    def _insert(self, key: tuple, e: CacheEntry) -> None:
        """Under the lock: store `e` as the newest entry, dropping the oldest past the bounds."""
        old = self._d.pop(key, None)
        if old is not None:
            self.nbytes -= _entry_bytes(old)
        self._d[key] = e
        self.nbytes += _entry_bytes(e)
        while len(self._d) > self.capacity or (self.nbytes > self.max_bytes and len(self._d) > 1):
            _, dropped = self._d.popitem(last=False)
            self.nbytes -= _entry_bytes(dropped)

    def __len__(self) -> int:
        return len(self._d)

    def clear(self) -> None:
        """Drop every entry. Prefetches queued or in flight before it still run, but their plans
        are dropped, not stored: a later `get` plans its demand itself rather than wait for
        one, and the same demand can be prefetched again."""
        with self._lock:
            self._generation += 1
            self._inflight.clear()
            self._d.clear()
            self.nbytes = 0
            self.hits = self.misses = self.prefetched = 0


def _plan_auto(matrix: np.ndarray, cluster, options: dict, rank: int, workspace, calibration,
               t0: float, moving_pairs: bool = False) -> CacheEntry:
    """auto for `rank`: one core call chooses (backend and candidates from `options`) and
    expands the winner's rank part; nothing to expand when `native` wins."""
    opts = dict(options)
    backend = str(opts.pop("backend", "nccl"))
    candidates = candidate_list(opts.pop("candidates", None))
    if opts:
        raise ValueError(f"algorithm='auto' takes the options 'backend' and 'candidates' here, got {sorted(opts)}")
    cal = calibration if calibration is not None else load()
    (choice, _, _), rp, choose_ns, decide_ns, expand_ns = _core.plan_auto_for_rank(
        matrix, as_cluster(cluster), rank, backend, cal, candidates, workspace, moving_pairs)
    return CacheEntry(plan=rp, plan_hash=rp.digest if rp is not None else "", matrix=matrix, algorithm=choice,
                      plan_seconds=time.perf_counter() - t0, note=f"auto chose {choice}", decide_s=decide_ns * 1e-9,
                      expand_s=expand_ns * 1e-9, choice=choice, choose_s=choose_ns * 1e-9)


def _entry_bytes(e: CacheEntry) -> int:
    """What an entry holds: the plan's arrays and the matrix (programs are small beside them)."""
    return (int(e.plan.nbytes) if e.plan is not None else 0) + int(e.matrix.nbytes)


@atexit.register
def _stop_prefetch_threads() -> None:
    """At exit, end every cache's prefetch thread before the interpreter shuts down.

    The thread plans in the native core with the GIL released; if it is still planning when
    shutdown begins, taking the GIL back ends it by a forced unwind through the core's
    frames, which aborts the process (SIGABRT, no message). Exit handlers run before that,
    so waiting here for the plan in flight is enough."""
    for cache in list(_PREFETCHING):
        cache._stop_prefetching(EXIT_JOIN_S)


DEFAULT_CACHE = PlanCache()
