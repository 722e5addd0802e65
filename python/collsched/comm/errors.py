"""Exceptions of the runtime and the timeout every wait is bounded by.

Every error that can be detected collectively is raised on *every* rank with the
same message, so a job fails loudly instead of hanging.
"""
from __future__ import annotations

import os
import re

DEFAULT_TIMEOUT_S = 60.0
TIMEOUT_ENV = "COLLSCHED_TIMEOUT_S"


class CollschedCommError(RuntimeError):
    """Base class of every runtime failure.

    Attributes:
        ranks: the group ranks a timeout or a broken connection was traced to
            (``comm.culprits``), or None when none was.
        transport_text: the backend's own error text, when the backend raised one.
    """

    ranks: list | None = None
    transport_text: str = ""


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


# Gloo's text: "[/path/gloo/transport/tcp/pair.cc:561] Connection closed by peer [IP]:port. This is
# typically caused by ... GLHF!": the source location and the advice are dropped from our message.
_GLOO_LOCATION = re.compile(r"^\[[^\]]*\.(?:cc|cpp|h):\d+\]\s*")
_GLOO_ADVICE = re.compile(r"\.?\s*This is typically caused by.*$")


def transport_gist(text: str) -> str:
    """The first line of a backend's error without Gloo's source location and advice."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return _GLOO_ADVICE.sub("", _GLOO_LOCATION.sub("", line)).strip()


def classify_transport_error(exc: BaseException, what: str) -> CollschedCommError:
    """Turn a backend exception (Gloo/NCCL RuntimeError) into one of ours, keeping the cause text
    (``transport_text``: where ``comm.culprits`` finds the peer's address)."""
    text = str(exc)
    low = text.lower()
    gist = transport_gist(text)
    if "timed out" in low or "timeout" in low:
        out: CollschedCommError = CommTimeoutError(f"{what}: timed out ({gist or 'no detail'})")
    else:
        out = PeerFailureError(f"{what}: transport failure, a peer probably died ({gist or type(exc).__name__})")
    out.transport_text = text
    return out


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
