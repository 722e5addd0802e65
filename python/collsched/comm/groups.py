"""Small facts about a process group that the runtime needs on every call."""
from __future__ import annotations

import time
from datetime import timedelta

import torch
import torch.distributed as dist

from collsched.comm.errors import CommTimeoutError, classify_transport_error

_GLOBAL_RANKS: dict[int, tuple[object, list[int]]] = {}


def require_initialized() -> None:
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("torch.distributed is not initialised: call torch.distributed.init_process_group first")


def global_ranks(group) -> list[int]:
    """Global rank of each group rank (P2POp peers are global ranks)."""
    if group is None or group is dist.GroupMember.WORLD:
        return list(range(dist.get_world_size()))
    hit = _GLOBAL_RANKS.get(id(group))
    if hit is not None and hit[0] is group:
        return hit[1]
    ranks = [dist.get_global_rank(group, i) for i in range(dist.get_world_size(group))]
    _GLOBAL_RANKS[id(group)] = (group, ranks)
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


def poll_until_done(works, timeout_s: float, what: str) -> None:
    """Bounded wait for small GPU collectives whose result the host needs anyway."""
    deadline = time.monotonic() + timeout_s
    sleep = 20e-6
    for w in works:
        while not w.is_completed():
            if time.monotonic() > deadline:
                raise CommTimeoutError(f"{what}: timed out after {timeout_s:g} s")
            time.sleep(sleep)
            sleep = min(sleep * 2, 1e-3)
        try:
            w.wait()
        except RuntimeError as e:
            raise classify_transport_error(e, what) from e


def all_gather_i64(values: torch.Tensor, group, timeout_s: float, what: str) -> torch.Tensor:
    """All-gather a small 1-D int64 tensor with a bounded wait; returns world × len on the host.

    On Gloo this is an all-to-all of copies: Gloo's all_gather is a ring (world-1 rounds
    of latency), its all-to-all posts every pair at once (one round)."""
    world = dist.get_world_size(group)
    blocking = blocking_waits(group, values.device)
    try:
        if blocking:
            out = torch.empty(world * values.numel(), dtype=values.dtype, device=values.device)
            work = dist.all_to_all_single(out, values.repeat(world), group=group, async_op=True)
        else:
            outs = [torch.empty_like(values) for _ in range(world)]
            work = dist.all_gather(outs, values, group=group, async_op=True)
    except RuntimeError as e:
        raise classify_transport_error(e, what) from e
    if blocking:
        wait_all([work], timeout_s, True, what)
        return out.reshape(world, -1).cpu()
    poll_until_done([work], timeout_s, what)
    return torch.stack(outs).cpu()
