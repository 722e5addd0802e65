"""Full-duplex point-to-point on Gloo: one process group per direction of every rank pair.

Gloo moves the two directions of one rank pair one after the other when both travel on
one process group (measured on a shaped two-server fabric, issue 32: a bidirectional
exchange took twice the one-way time, through ``isend``/``irecv`` and through
``all_to_all_single`` alike). Two extra Gloo groups over the same ranks restore full
duplex: every message from a lower to a higher group rank travels on ``up``, every message
from a higher to a lower rank on ``down``, so each direction has a connection of its own.
Tags stay unique per group: a transfer id always travels in one direction, so on one group.

The groups are created once per group and cached (`groups.gloo_groups`). Creation is
collective over the members, so every member must come here: the executor calls it on every
Gloo point-to-point run, whether or not this rank sends anything. The groups are named after
the caller's group (not after the order of this process's creations), so members meet in the
right groups whatever else they create meanwhile, from any thread. NCCL is full duplex already
and never comes here.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch.distributed as dist

from collsched.comm.groups import cached_gloo_groups, gloo_groups, global_ranks


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


def duplex_groups(group, timeout_s: float) -> tuple:
    """The (up, down) Gloo groups over `group`'s ranks, created on first use (collectively:
    every member must call this) and cached for the life of `group` (`gloo_groups`).

    Raises:
        CommTimeoutError / PeerFailureError: a member never joined the creation.
    """
    return gloo_groups(group, "per-direction", 2, timeout_s)


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
    return cached_gloo_groups("per-direction")


__all__ = ["Router", "duplex_groups", "router", "cached_groups"]
