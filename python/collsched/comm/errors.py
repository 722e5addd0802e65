"""Exceptions of the runtime and the timeout every wait is bounded by.

Every error that can be detected collectively is raised on *every* rank with the
same message, so a job fails loudly instead of hanging.
"""
from __future__ import annotations

import os

DEFAULT_TIMEOUT_S = 60.0
TIMEOUT_ENV = "COLLSCHED_TIMEOUT_S"


class CollschedCommError(RuntimeError):
    """Base class of every runtime failure."""


class CommTimeoutError(CollschedCommError, TimeoutError):
    """A wait ran past its timeout (a peer is missing, stuck or too slow)."""


class PeerFailureError(CollschedCommError):
    """The transport reported a broken connection (a peer died or reset)."""


class PlanMismatchError(CollschedCommError):
    """Ranks computed different plans (different matrix, cluster, algorithm, options or version)."""


class CollectiveInputError(CollschedCommError, ValueError):
    """Bad arguments on at least one rank; raised on every rank with the same message."""


class TrafficMismatchError(CollectiveInputError):
    """Ranks passed different traffic matrices, or matrices that contradict their split sizes."""


def resolve_timeout(timeout: float | None) -> float:
    """The timeout in seconds: the argument, else ``COLLSCHED_TIMEOUT_S``, else 60 s."""
    if timeout is None:
        raw = os.environ.get(TIMEOUT_ENV)
        if raw is None or raw.strip() == "":
            return DEFAULT_TIMEOUT_S
        try:
            timeout = float(raw)
        except ValueError:
            raise ValueError(f"{TIMEOUT_ENV} must be a number of seconds, got {raw!r}") from None
    timeout = float(timeout)
    if not timeout > 0 or timeout != timeout or timeout == float("inf"):
        raise ValueError(f"timeout must be a positive finite number of seconds, got {timeout!r}")
    return timeout


def classify_transport_error(exc: BaseException, what: str) -> CollschedCommError:
    """Turn a backend exception (Gloo/NCCL RuntimeError) into one of ours, keeping the cause text."""
    text = str(exc)
    low = text.lower()
    if "timed out" in low or "timeout" in low:
        return CommTimeoutError(f"{what}: timed out ({text.strip().splitlines()[0] if text.strip() else 'no detail'})")
    return PeerFailureError(f"{what}: transport failure, a peer probably died ({text.strip().splitlines()[0] if text.strip() else type(exc).__name__})")


def rank_ranges(ranks) -> str:
    """``[0, 1, 2, 3, 6]`` → ``"ranks 0–3, 6"``; one rank → ``"rank 5"``."""
    rs = sorted(set(int(r) for r in ranks))
    parts, i = [], 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        parts.append(str(rs[i]) if i == j else f"{rs[i]}–{rs[j]}" if j > i + 1 else f"{rs[i]}, {rs[j]}")
        i = j + 1
    return ("rank " if len(rs) == 1 else "ranks ") + ", ".join(parts)


def collapse_rank_messages(items) -> str:
    """``[(rank, message), ...]`` → one clause per distinct message, ranks first:
    eight identical errors read ``"ranks 0–7: input is not a contiguous tensor"``, not eight clauses.
    Messages keep the order in which they first appear."""
    groups: dict[str, list[int]] = {}
    for rank, msg in items:
        groups.setdefault(str(msg), []).append(int(rank))
    return "; ".join(f"{rank_ranges(rs)}: {msg}" for msg, rs in groups.items())


# Timeouts seen per group: present ranks time out on the same wait, so the n-th timeout of a
# group is the same event on each of them (its store keys meet there).
_TIMEOUTS: dict[str, int] = {}
MISSING_WAIT_S = 5.0
MISSING_QUIET_S = 0.3


def name_missing_ranks(exc: CommTimeoutError, group, timeout_s: float) -> CommTimeoutError:
    """After a collective wait timed out: find which ranks of ``group`` never reached it and
    return ``exc`` with them named (``exc`` unchanged when they cannot be told).

    Each rank that timed out leaves a key in the process group's store and waits up to
    for the others' keys until none has come for ``MISSING_QUIET_S`` (present ranks time out
    together), at most ``min(MISSING_WAIT_S, timeout_s)``; a rank with no key never reached
    the call, or is stuck before it. Nothing is added to calls that do not time out.
    """
    try:
        import torch.distributed as dist
        from torch.distributed import distributed_c10d as c10d

        store = c10d._get_default_store()
        world = dist.get_world_size(group)
        rank = dist.get_rank(group)
        members = [dist.get_global_rank(group, r) for r in range(world)] if group is not None \
            and group is not dist.GroupMember.WORLD else list(range(world))
    except Exception:  # no default group or store: keep the plain timeout
        return exc
    gid = "-".join(map(str, members)) if len(members) <= 16 else f"{members[0]}-{members[-1]}x{len(members)}"
    n = _TIMEOUTS.get(gid, 0) + 1
    _TIMEOUTS[gid] = n
    key = f"collsched/timeout/{gid}/{n}/"
    import time

    try:
        store.set(key + str(rank), "1")
        start = time.monotonic()
        deadline = start + min(MISSING_WAIT_S, float(timeout_s))
        keys = [key + str(r) for r in range(world)]
        present: set[int] = set()
        changed = start
        while time.monotonic() < deadline:
            now_present = {r for r in range(world) if store.check([keys[r]])}
            if now_present != present:
                present, changed = now_present, time.monotonic()
            # Everyone is here, or nobody new came for a while (present ranks time out together).
            if len(present) == world or time.monotonic() - changed > MISSING_QUIET_S:
                break
            time.sleep(0.02)
    except Exception:
        return exc
    missing = [r for r in range(world) if r not in present]
    if not missing:
        return exc
    out = CommTimeoutError(f"{exc}; {rank_ranges(missing)} never reached this call "
                           f"({rank_ranges(sorted(present))} did): check that every rank makes the same collective calls")
    return out
