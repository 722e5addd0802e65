"""Small facts about a process group that the runtime needs on every call."""
from __future__ import annotations

import hashlib
import os
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
# group -> {purpose: (gloo groups...)}, the group held weakly (see `_GLOBAL_RANKS`): when the
# caller's group is freed (``destroy_process_group``), collsched's groups over it are dropped
# with it, so none of them outlives the user's groups either. A failed creation is kept too
# (its error's type and text): the rendezvous keys it left in the store cannot be reused safely.
_GLOO_GROUPS: "weakref.WeakKeyDictionary[object, dict]" = weakref.WeakKeyDictionary()
# One lock per (group name, purpose), never one for all: a creation blocks until every member
# joins, so a single lock would make a thread creating group A's groups wait for another
# thread creating group B's, while a peer's threads hold them in the other order (deadlock).
_LOCKS: dict = {}
_LOCKS_GUARD = threading.Lock()  # held only to look a lock up, never during a creation
# Without ``Store.clone`` (torch < 2.8) every store wait of this process shares one connection,
# whose waits run one at a time: two creations at once would wait for each other.
_ONE_AT_A_TIME = threading.Lock()
_STORE_CLONES = hasattr(getattr(dist, "Store", None), "clone")


class _Failed:
    """A creation that failed: its error's type and text (not the error: its frames hold tensors)."""

    def __init__(self, error: BaseException):
        self.kind, self.text = type(error), str(error)


def aux_group_name(group, purpose: str, index: int) -> str:
    """The name (and so the rendezvous prefix in the default store) of collsched's `index`-th
    `purpose` group over `group`: derived from what every member agrees on, the group's own
    torch name (its members rendezvoused under it) and its ranks, never from the order in which
    this process happened to create groups.

    Raises:
        RuntimeError: this torch keeps no name for `group` (a private structure changed).
    """
    from torch.distributed import distributed_c10d as c10d

    g = dist.GroupMember.WORLD if group is None else group
    names = getattr(getattr(c10d, "_world", None), "pg_names", None)
    parent = names.get(g) if names is not None else None
    if parent is None:
        raise RuntimeError(f"collsched: torch {torch.__version__} keeps no name for this process group "
                           "(torch.distributed.distributed_c10d._world.pg_names), which collsched derives its own "
                           "Gloo groups' names from; please report this torch version")
    ranks = "_".join(map(str, global_ranks(group)))
    digest = hashlib.sha1(ranks.encode(), usedforsecurity=False).hexdigest()[:12]
    return f"collsched:{purpose}:{index}:{parent}:{digest}"


def _new_gloo_group(name: str, ranks: list[int], timeout_s: float):
    """A Gloo group over global `ranks` (this rank among them) named `name`, registered with
    torch like ``new_group``'s, so ``isend``/``irecv`` and ``get_group_rank`` accept it.

    ``new_group`` cannot be used: it names its groups from a per-process counter (and moves
    the counter that names the user's later groups). Its helper takes the name.
    """
    from torch.distributed import distributed_c10d as c10d

    helper = getattr(c10d, "_new_process_group_helper", None)
    world = getattr(c10d, "_world", None)
    if helper is None or world is None:
        raise RuntimeError(f"collsched: torch {torch.__version__} has no "
                           "torch.distributed.distributed_c10d._new_process_group_helper, which collsched creates its "
                           "Gloo groups with (checked on torch 2.15); please report this torch version")
    if name in world.pg_names.values():
        raise RuntimeError(f"collsched: a process group named {name!r} exists already: collsched's groups over an "
                           "earlier group of the same name were not destroyed")
    _, store = world.pg_map[c10d._get_default_group()]
    clone = getattr(store, "clone", None)
    # A connection of its own: the rendezvous waits on it without holding up another thread's.
    store = clone() if clone is not None else store
    try:
        made, _ = helper(len(ranks), ranks.index(dist.get_rank()), ranks, _GLOO, store, name,
                         timeout=timedelta(seconds=timeout_s))
    except TypeError as e:
        raise RuntimeError(f"collsched: torch {torch.__version__}'s _new_process_group_helper takes other arguments "
                           f"than collsched expects ({e}); please report this torch version") from e
    world.pg_group_ranks[made] = {g: i for i, g in enumerate(ranks)}
    return made


def gloo_groups(group, purpose: str, count: int, timeout_s: float) -> tuple:
    """`count` Gloo groups over `group`'s ranks for `purpose`, created on first use and cached
    for the life of `group` (held weakly: freeing `group` drops them).

    Creation is collective over the members (not the whole job), and safe from any thread:
    each new group is named after `group` and `purpose` (`aux_group_name`), so the members
    meet in the right group whatever else each of them creates meanwhile, and creations of
    different groups' auxiliaries never wait for each other (one lock per group and purpose;
    torch >= 2.8: one store connection each). It leaves torch's group counter alone, so the
    user's later ``new_group`` calls get the same names on every rank.

    Args:
        group: the process group (None: the default group).
        purpose: what the groups are for ("per-direction", "host-exchange"): one cache entry
            each, part of their names, and the name errors give them.
        count: how many groups to create.
        timeout_s: bound on the creation's rendezvous and on the new groups' own waits.

    Returns:
        tuple of `count` ``ProcessGroup`` objects over the same ranks as `group`.

    Raises:
        CommTimeoutError / PeerFailureError: a member never joined the creation (also on
            every later call over `group`: its store keys cannot be reused).
        RuntimeError: this torch lacks what the creation needs (the message names it).
    """
    g = dist.GroupMember.WORLD if group is None else group
    hit = _GLOO_GROUPS.get(g, {}).get(purpose)
    if hit is not None and not isinstance(hit, _Failed):
        return hit
    names = [aux_group_name(group, purpose, i) for i in range(count)]
    with _LOCKS_GUARD:
        lock = _LOCKS.setdefault((names[0], purpose), threading.Lock())
    # Created under the lock: two threads of one rank (autograd's backward beside the caller)
    # must not both create them, or this rank would join one creation more than its peers.
    with lock:
        hit = _GLOO_GROUPS.get(g, {}).get(purpose)
        if isinstance(hit, _Failed):
            raise hit.kind(f"{hit.text} (earlier; the group cannot be used: tear it down)")
        if hit is not None:
            return hit
        ranks = global_ranks(group)
        what = f"collsched: creating the {purpose} Gloo group{'s' if count > 1 else ''} over ranks {ranks}"
        try:
            made = _create_all(names, ranks, timeout_s, what)
        except RuntimeError as e:
            _GLOO_GROUPS.setdefault(g, {})[purpose] = _Failed(e)
            raise
        _GLOO_GROUPS.setdefault(g, {})[purpose] = made
        publish_local_ports()  # the new groups' connections, so a fault on them names its rank
        return made


def _create_all(names: list[str], ranks: list[int], timeout_s: float, what: str) -> tuple:
    """Create the groups `names` in order (one at a time per process without ``Store.clone``).

    Raises:
        CommTimeoutError / PeerFailureError: a member never joined (or, without
            ``Store.clone``, another thread's creation held this one up past `timeout_s`).
    """
    serial = None if _STORE_CLONES else _ONE_AT_A_TIME
    if serial is not None and not serial.acquire(timeout=timeout_s):
        raise CommTimeoutError(f"{what}: timed out after {timeout_s:g} s waiting for another thread's group creation "
                               f"(torch {torch.__version__} has no Store.clone, so this process creates one group at a "
                               "time: make a first call on each group from one thread, or use torch >= 2.8)")
    try:
        return tuple(_new_gloo_group(n, ranks, timeout_s) for n in names)
    except RuntimeError as e:
        if str(e).startswith("collsched:"):
            raise
        raise classify_transport_error(e, what) from e
    finally:
        if serial is not None:
            serial.release()


def cached_gloo_groups(purpose: str) -> int:
    """How many process groups have their `purpose` Gloo groups cached (tests check reuse)."""
    return sum(1 for by_purpose in list(_GLOO_GROUPS.values())
               if by_purpose.get(purpose) is not None and not isinstance(by_purpose[purpose], _Failed))


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
    if exchange_on_device(group):
        return exchange_i64_on_group(values, group, torch.device("cuda", torch.cuda.current_device()), timeout_s,
                                     what)
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


EXCHANGE_ENV = "COLLSCHED_NCCL_EXCHANGE"
EXCHANGES = ("host", "device")


def exchange_on_device(group) -> bool:
    """Whether the small exchanges of an NCCL group travel on the group itself, as device
    tensors (``COLLSCHED_NCCL_EXCHANGE=device``), instead of the Gloo host group (``host``, the
    default). Every rank must set the same (the two travel on different groups).

    Device: no Gloo side channel (no second set of connections, nothing outside NCCL), but
    the host reads the result, so the call waits for the GPU queue ahead of the exchange.
    Host: the call waits only for its peers, and its data movement is enqueued behind the
    queue (see `host_group`).

    Raises:
        ValueError: the variable holds something else.
    """
    mode = os.environ.get(EXCHANGE_ENV, "host").strip().lower() or "host"
    if mode not in EXCHANGES:
        raise ValueError(f"{EXCHANGE_ENV} must be one of {EXCHANGES}, got {mode!r}")
    return mode == "device" and "nccl" in str(dist.get_backend(group)).lower() and torch.cuda.is_available()


def exchange_i64_on_group(values, group, device: torch.device, timeout_s: float, what: str) -> np.ndarray:
    """`exchange_i64` on `group` itself with tensors on `device` (NCCL: a CUDA device; any
    backend works, so Gloo with the CPU tests it): one ``all_to_all_single`` of the values
    repeated per peer, then one copy to the host, waited for with the timeout (a CUDA event
    polled, so a stuck peer raises instead of blocking in the copy).

    Returns:
        ``[world, len(values)]`` int64 numpy array, row r from group rank r.

    Raises:
        CommTimeoutError / PeerFailureError: a peer did not take part within `timeout_s`.
    """
    mine = torch.as_tensor(np.asarray(values, dtype=np.int64))
    world = dist.get_world_size(group)
    send = mine.repeat(world).to(device, non_blocking=True)
    out = torch.empty(world * mine.numel(), dtype=torch.int64, device=device)
    try:
        work = dist.all_to_all_single(out, send, group=group, async_op=True)
    except RuntimeError as e:
        raise classify_transport_error(e, what) from e
    if device.type != "cuda":
        wait_all([work], timeout_s, True, what)
        return out.reshape(world, -1).numpy()
    work.wait()  # orders the current stream after the exchange
    host = torch.empty(out.shape, dtype=torch.int64, pin_memory=True)
    host.copy_(out, non_blocking=True)
    done = torch.cuda.Event()
    done.record()
    deadline = time.monotonic() + timeout_s
    while not done.query():
        if time.monotonic() > deadline:
            raise CommTimeoutError(f"{what}: timed out after {timeout_s:g} s (exchange on the NCCL group)")
        time.sleep(20e-6)
    return host.reshape(world, -1).numpy()
