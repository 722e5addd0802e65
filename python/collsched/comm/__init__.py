"""torch.distributed runtime: executes any Plan, and a drop-in ``all_to_all_single``.

Importing this package imports torch; ``import collsched`` alone does not.
"""
from collsched.comm.errors import (CollectiveInputError, CollschedCommError, CommTimeoutError, PeerFailureError,
                                   PlanMismatchError, TrafficMismatchError, resolve_timeout, DEFAULT_TIMEOUT_S,
                                   TIMEOUT_ENV)
from collsched.comm.program import PlanArrays, plan_arrays, compile_rank_program
from collsched.comm.pool import BufferPool, DEFAULT_POOL
from collsched.comm.executor import execute, ExecStats
from collsched.comm.cache import PlanCache, DEFAULT_CACHE
from collsched.comm.api import all_to_all_single, resolve_cluster
from collsched.comm.stats import CallStats, last_call_stats
from collsched.comm.inflight import ConcurrentCallError

__all__ = [
    "execute", "ExecStats", "all_to_all_single", "last_call_stats", "CallStats", "resolve_cluster",
    "plan_arrays", "PlanArrays", "compile_rank_program", "BufferPool", "DEFAULT_POOL", "PlanCache", "DEFAULT_CACHE",
    "CollschedCommError", "CommTimeoutError", "PeerFailureError", "PlanMismatchError", "CollectiveInputError",
    "TrafficMismatchError", "ConcurrentCallError", "resolve_timeout", "DEFAULT_TIMEOUT_S", "TIMEOUT_ENV",
]
