"""Full-duplex point-to-point on Gloo: one process group per direction of every rank pair.

Gloo moves the two directions of one rank pair one after the other when both travel on
one process group (measured on a shaped two-server fabric, issue 32: a bidirectional
exchange took twice the one-way time, through ``isend``/``irecv`` and through
``all_to_all_single`` alike). Two extra Gloo groups over the same ranks restore full
duplex: every message from a lower to a higher group rank travels on ``up``, every message
from a higher to a lower rank on ``down``, so each direction has a connection of its own.
Tags stay unique per group: a transfer id always travels in one direction, so on one group.

The groups are created once per (group, backend) and cached. ``new_group`` is collective
over the members, so every rank of the group must reach `duplex_groups` in the same order
relative to other group creations; the executor calls it on every Gloo point-to-point
run, whether or not this rank sends anything, so that holds. NCCL is full duplex already
and never comes here.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import timedelta

import torch.distributed as dist

from collsched.comm.errors import classify_transport_error
from collsched.comm.groups import global_ranks

BACKEND = "gloo"


@dataclass(frozen=True)
class Router:
    """Where a message to or from a peer travels.

    `peers[p]` is group rank p's global rank (what ``isend``/``irecv`` take). With
    duplex groups, messages from lower to higher group ranks use `up` and the others
    `down`; without, both directions use `group`.
    """

    rank: int
    peers: list
    group: object
    up: object = None
    down: object = None

    @property
    def duplex(self) -> bool:
        return self.up is not None

    def send_group(self, peer: int):
        """The group a message from this rank to group rank `peer` travels on."""
        if self.up is None:
            return self.group
        return self.up if self.rank < peer else self.down

    def recv_group(self, peer: int):
        """The group a message from group rank `peer` to this rank travels on."""
        if self.up is None:
            return self.group
        return self.up if peer < self.rank else self.down


_LOCK = threading.Lock()
_GROUPS: dict = {}  # (id(group), backend) -> (group, up, down)


def duplex_groups(group, timeout_s: float) -> tuple:
    """The (up, down) Gloo groups over `group`'s ranks, created on first use (collectively:
    every member must call this) and cached for the life of `group`.

    Args:
        group: the process group (None: the default group).
        timeout_s: bound on the creation's rendezvous and on the new groups' own waits.

    Returns:
        (up, down): ``ProcessGroup`` objects over the same ranks as `group`.

    Raises:
        CommTimeoutError / PeerFailureError: a member never joined the creation.
    """
    g = dist.GroupMember.WORLD if group is None else group
    key = (id(g), BACKEND)
    with _LOCK:
        hit = _GROUPS.get(key)
        if hit is not None and hit[0] is g:  # the same object, not a new group at a reused address
            return hit[1], hit[2]
    ranks = global_ranks(group)
    what = f"collsched: creating the per-direction Gloo groups over ranks {ranks}"
    try:
        # Local synchronisation: only the members take part (the group may be a subgroup),
        # and the groups get names from their ranks, so the default group's counter (which
        # names the user's later groups) does not move.
        made = tuple(dist.new_group(ranks, backend=BACKEND, timeout=timedelta(seconds=timeout_s),
                                    use_local_synchronization=True) for _ in range(2))
    except RuntimeError as e:
        raise classify_transport_error(e, what) from e
    with _LOCK:
        _GROUPS[key] = (g, made[0], made[1])
    return made


def router(group, timeout_s: float, duplex: bool = True) -> Router:
    """A `Router` for this rank of `group`: over per-direction groups when `duplex`
    (Gloo; creates them on first use), else over `group` itself."""
    rank = dist.get_rank(group)
    peers = global_ranks(group)
    if not duplex or len(peers) < 2:
        return Router(rank, peers, group)
    up, down = duplex_groups(group, timeout_s)
    return Router(rank, peers, group, up, down)


def cached_groups() -> int:
    """How many groups have their direction groups cached (tests check reuse)."""
    with _LOCK:
        return len(_GROUPS)


__all__ = ["Router", "duplex_groups", "router", "cached_groups"]
