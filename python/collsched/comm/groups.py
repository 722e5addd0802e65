"""Small facts about a process group that the runtime needs on every call."""
from __future__ import annotations

import threading
import time
import weakref
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist

from collsched.comm.culprits import publish_local_ports
from collsched.comm.errors import CommTimeoutError, classify_transport_error

# Caches keyed by the caller's process group hold it weakly: a strong reference here would keep
# a group alive after ``destroy_process_group`` dropped torch's, and with it its Gloo worker
# threads, until interpreter shutdown. A worker that then drops the last reference to a
# finished work's tensor takes the GIL to free the tensor's Python object, which at shutdown
# ends the thread by a forced unwind and aborts the process ("terminate called without an
# active exception"; issue 41 item 7). An entry goes when its group is freed.
_GLOBAL_RANKS: "weakref.WeakKeyDictionary[object, list[int]]" = weakref.WeakKeyDictionary()


def require_initialized() -> None:
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("torch.distributed is not initialised: call torch.distributed.init_process_group first")


def global_ranks(group) -> list[int]:
    """Global rank of each group rank (P2POp peers are global ranks)."""
    if group is None or group is dist.GroupMember.WORLD:
        return list(range(dist.get_world_size()))
    hit = _GLOBAL_RANKS.get(group)
    if hit is not None:
        return hit
    ranks = [dist.get_global_rank(group, i) for i in range(dist.get_world_size(group))]
    _GLOBAL_RANKS[group] = ranks
    return ranks


def blocking_waits(group, device: torch.device) -> bool:
    """True when waits block the host (Gloo, CPU); False for NCCL on a GPU, where
    `Work.wait()` only orders the current stream and NCCL's watchdog enforces the
    process group's timeout."""
    if device.type != "cuda":
        return True
    backend = str(dist.get_backend(group)).lower()
    return "nccl" not in backend


def wait_all(works, timeout_s: float, blocking: bool, what: str) -> None:
    """Wait for every work; raise CommTimeoutError/PeerFailureError naming `what`."""
    if not blocking:
        for w in works:
            w.wait()
        return
    deadline = time.monotonic() + timeout_s
    for w in works:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise CommTimeoutError(f"{what}: timed out after {timeout_s:g} s")
        try:
            ok = w.wait(timeout=timedelta(seconds=remaining))
        except RuntimeError as e:
            raise classify_transport_error(e, what) from e
        if ok is False:
            raise CommTimeoutError(f"{what}: timed out after {timeout_s:g} s")


_GLOO = "gloo"
_LOCK = threading.Lock()
# group -> {purpose: (gloo groups...)}, the group held weakly (see `_GLOBAL_RANKS`): when the
# caller's group is freed (``destroy_process_group``), collsched's groups over it are dropped
# with it, so none of them outlives the user's groups either.
_GLOO_GROUPS: "weakref.WeakKeyDictionary[object, dict]" = weakref.WeakKeyDictionary()


def gloo_groups(group, purpose: str, count: int, timeout_s: float) -> tuple:
    """`count` Gloo groups over `group`'s ranks for `purpose`, created on first use and cached
    for the life of `group` (held weakly: freeing `group` drops them).

    Creation is collective over the members (not the whole job): every member must ask for
    the same purposes in the same order relative to its other group creations.

    Args:
        group: the process group (None: the default group).
        purpose: what the groups are for ("per-direction", "host-exchange"): one cache entry
            each, and the name errors give them.
        count: how many groups to create.
        timeout_s: bound on the creation's rendezvous and on the new groups' own waits.

    Returns:
        tuple of `count` ``ProcessGroup`` objects over the same ranks as `group`.

    Raises:
        CommTimeoutError / PeerFailureError: a member never joined the creation.
    """
    g = dist.GroupMember.WORLD if group is None else group
    # Created under the lock: two threads of one rank (autograd's backward beside the caller)
    # must not both create them, or this rank would join one creation more than its peers.
    with _LOCK:
        hit = _GLOO_GROUPS.get(g, {}).get(purpose)
        if hit is not None:
            return hit
        ranks = global_ranks(group)
        what = f"collsched: creating the {purpose} Gloo group{'s' if count > 1 else ''} over ranks {ranks}"
        try:
            # Local synchronisation: only the members take part (the group may be a subgroup),
            # and the groups get names from their ranks, so the default group's counter (which
            # names the user's later groups) does not move.
            made = tuple(dist.new_group(ranks, backend=_GLOO, timeout=timedelta(seconds=timeout_s),
                                        use_local_synchronization=True) for _ in range(count))
        except RuntimeError as e:
            raise classify_transport_error(e, what) from e
        _GLOO_GROUPS.setdefault(g, {})[purpose] = made
        publish_local_ports()  # the new groups' connections, so a fault on them names its rank
        return made


def cached_gloo_groups(purpose: str) -> int:
    """How many process groups have their `purpose` Gloo groups cached (tests check reuse)."""
    with _LOCK:
        return sum(1 for by_purpose in _GLOO_GROUPS.values() if purpose in by_purpose)


def host_group(group, timeout_s: float):
    """The group that small host-side exchanges (split sizes, hashes) travel on: `group`
    itself when its backend moves CPU tensors, else (NCCL) a Gloo group over the same ranks.

    An exchange on an NCCL group would run on the GPU behind every kernel already queued
    there, so the host would wait for the queue to drain on every call; on a Gloo group the
    host only waits for its peers, and then enqueues the data movement and returns, as
    torch's own ``all_to_all_single`` does.
    """
    backends = str(dist.get_backend(group)).lower()
    if "gloo" in backends:
        return group
    return gloo_groups(group, "host-exchange", 1, timeout_s)[0]


def exchange_i64(values, group, timeout_s: float, what: str) -> np.ndarray:
    """Every rank's `values` (the same number of int64 on each), gathered on the host over
    `host_group`: an array of shape ``[world, len(values)]`` with ``numpy.int64``, row r from
    group rank r. Never touches a GPU.

    On Gloo this is an all-to-all of copies: Gloo's all_gather is a ring (world − 1 rounds of
    latency), its all-to-all posts every pair at once (one round).

    Raises:
        CommTimeoutError / PeerFailureError: a peer did not take part within `timeout_s`.
    """
    g = host_group(group, timeout_s)
    mine = torch.as_tensor(np.asarray(values, dtype=np.int64))
    world = dist.get_world_size(g)
    out = torch.empty(world * mine.numel(), dtype=torch.int64)
    try:
        work = dist.all_to_all_single(out, mine.repeat(world), group=g, async_op=True)
    except RuntimeError as e:
        raise classify_transport_error(e, what) from e
    wait_all([work], timeout_s, True, what)
    return out.reshape(world, -1).numpy()
