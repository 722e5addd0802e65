"""Bounded LRU of plans keyed by (matrix hash, cluster spec, algorithm, options).

MoE routing repeats: the same matrix shows up again whenever the router is
stable, and balanced/equal-split calls repeat exactly. A hit skips planning and
program compilation; the stored matrix is compared on a hit, so a 64-bit hash
collision can never return a wrong plan.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

import collsched
from collsched.comm.program import RankProgram, compile_rank_program
import hashlib

@dataclass
class CacheEntry:
    plan: object
    plan_hash: str
    matrix: np.ndarray
    algorithm: str  # the producer that made the plan
    plan_seconds: float
    note: str = ""
    programs: dict = field(default_factory=dict)

    def program(self, rank: int, collective_steps: bool = True) -> RankProgram:
        """This rank's program; one compiled with `collective_steps` also serves a request
        without (see `compile_rank_program`)."""
        prog = self.programs.get((rank, True)) or (None if collective_steps else self.programs.get((rank, False)))
        if prog is None:
            prog = self.programs[(rank, collective_steps)] = compile_rank_program(
                self.plan, rank, collective_steps=collective_steps)
        return prog


def fast_matrix_hash(matrix: np.ndarray) -> str:
    """Cache key of a u64 matrix: blake2b of its little-endian bytes (no validation pass; the
    planner validates on a miss)."""
    m = np.ascontiguousarray(matrix, dtype="<u8")
    return hashlib.blake2b(m.tobytes(), digest_size=16).hexdigest()


class PlanCache:
    def __init__(self, capacity: int = 64):
        if capacity < 1:
            raise ValueError("plan cache capacity must be at least 1")
        self.capacity = capacity
        self._d: OrderedDict = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(matrix: np.ndarray, cluster, algorithm: str, options: dict) -> tuple:
        return (fast_matrix_hash(matrix), matrix.shape[0], cluster.spec(), algorithm,
                tuple(sorted((str(k), str(v)) for k, v in options.items())))

    def get(self, matrix: np.ndarray, cluster, algorithm: str, options: dict) -> tuple[CacheEntry, bool]:
        """The entry for this demand, planning it on a miss. Returns (entry, hit)."""
        matrix = np.ascontiguousarray(matrix, dtype="<u8")
        key = self.key(matrix, cluster, algorithm, options)
        with self._lock:
            e = self._d.get(key)
            if e is not None and np.array_equal(e.matrix, matrix):
                self._d.move_to_end(key)
                self.hits += 1
                return e, True
        t0 = time.perf_counter()
        plan = collsched.plan_all_to_all(matrix, cluster, algorithm, **options)
        note = f"auto chose {plan.meta['choice']}" if algorithm == "auto" and "choice" in plan.meta else ""
        e = CacheEntry(plan=plan, plan_hash=plan.hash, matrix=matrix.copy(), algorithm=plan.algorithm,
                       plan_seconds=time.perf_counter() - t0, note=note)
        with self._lock:
            self.misses += 1
            self._d[key] = e
            self._d.move_to_end(key)
            while len(self._d) > self.capacity:
                self._d.popitem(last=False)
        return e, False

    def __len__(self) -> int:
        return len(self._d)

    def clear(self) -> None:
        with self._lock:
            self._d.clear()
            self.hits = self.misses = 0


DEFAULT_CACHE = PlanCache()
