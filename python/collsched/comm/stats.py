"""What the last `all_to_all_single` call did, stage by stage (host seconds)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class CallStats:
    """One call of `collsched.all_to_all_single`, in the order of its stages.

    validate → exchange → decide → plan (expand, compile) → post → wait; a stage the call
    skipped stays 0. ``mode`` says which path it took: ``eager`` (the data rode in the
    descriptor exchange: one round), ``native`` (torch's own call; ``exchanged`` False
    between checks), ``planned`` (exchange, plan, execute) or ``unchecked`` (``checks=False``).
    """

    algorithm: str = ""
    mode: str = ""
    exchanged: bool = False  # this call exchanged descriptors
    planned_by: str = ""  # the producer of the plan that ran ("native": torch's call; "eager")
    plan_hash: str = ""
    cache_hit: bool = False
    prefetched: bool = False  # the plan came from a background prefetch (`prefetch_transpose`)
    note: str = ""
    choice: str = ""  # algorithm="auto": what it chose ("native" = torch's own call), also on a cache hit
    validate_s: float = 0.0  # local checks, configuration
    exchange_s: float = 0.0  # the descriptor exchange (eager payload included)
    decide_s: float = 0.0  # on a miss: the decisions every rank computes alike
    choose_s: float = 0.0  # of decide_s: auto choosing (0 on a cache hit)
    plan_s: float = 0.0  # cache lookup + planning on a miss (decide_s + expand_s + overhead)
    expand_s: float = 0.0  # on a miss: expanding this rank's transfers
    compile_s: float = 0.0  # compiling this rank's program (0 when cached)
    post_s: float = 0.0  # handing the data movement to the backend (eager: packing is in exchange_s)
    wait_s: float = 0.0  # waiting for it and scattering what arrived
    execute_s: float = 0.0  # post_s + wait_s (a planned call's steps interleave both)
    total_s: float = 0.0
    ops: int = 0  # backend operations this call posted (exchange included)
    bytes_sent: int = 0
    bytes_received: int = 0
    steps: int = 0

    @property
    def check_s(self) -> float:
        """Kept for callers of earlier versions: plan digests now travel in the next exchange."""
        return 0.0


class _Last:
    stats: CallStats | None = None


# Process-wide, not per thread: autograd runs the backward of CUDA tensors on a thread of its
# own, and the caller of `.backward()` wants that call's stats.
_last = _Last()


def record(stats: CallStats) -> None:
    _last.stats = stats


def last_call_stats() -> CallStats | None:
    """Stats of the last `all_to_all_single` call in this process, on any thread (autograd's
    backward included; None before the first)."""
    return _last.stats
