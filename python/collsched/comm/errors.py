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
