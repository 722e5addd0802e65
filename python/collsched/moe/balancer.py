"""Fusco's forwarder load balancer (Algorithm 1, §3.4): sort, circular shift, groups.

Numpy only (no torch), so the simulator and the CLI can use it without loading torch.
O(R log G) for R GPUs in nodes of G.
"""
from __future__ import annotations

import functools

import numpy as np


def balance_forwarders(load: np.ndarray, gpus_per_node: int, balance: bool = True) -> np.ndarray:
    """Forwarder table ``F[i, s]``: the GPU of node ``s`` that forwards GPU ``i``'s tokens for node ``s``.

    Fusco's Algorithm 1: sort each node's GPUs by cross-node load (descending, ties by
    index), rotate node ``s``'s order by ``s`` positions, and let position ``p`` of every
    node form communication group ``p``; the GPUs of a group forward for each other. With
    ``balance=False``, the static groups of GPUs with the same local index (DeepEP's choice).
    ``F[i, node(i)] == i``: a GPU is its own node's forwarder.

    Args:
        load (np.ndarray [R] int): cross-node units each GPU sends.
        gpus_per_node (int): G; R must be a multiple.
    Returns:
        np.ndarray [R, S] int64.
    """
    load = np.asarray(load, dtype=np.int64)
    g = gpus_per_node
    r = load.shape[0]
    s_count = r // g
    shift, base, static, positions = _tables(s_count, g)
    if balance:
        local = load.reshape(s_count, g)
        # Descending load, ties by local index: a stable sort of the negated loads.
        perm = np.argsort(-local, axis=1, kind="stable")
        # shifted[s, p] = perm[s, (p - s) mod G]; member[s, p]: the rank in group p on node s.
        member = np.take_along_axis(perm, shift, axis=1) + base
    else:
        member = static
    group_of = np.empty(r, dtype=np.int64)
    group_of[member.reshape(-1)] = positions
    return member[:, group_of].T.copy()  # F[i, s] = member[s, group_of[i]]


@functools.lru_cache(maxsize=16)
def _tables(s_count: int, g: int):
    """Per cluster shape (planning runs every call on one shape): the rotation, node bases,
    the static groups and each slot's group index. Read-only."""
    shift = (np.arange(g)[None, :] - np.arange(s_count)[:, None]) % g
    base = (np.arange(s_count) * g)[:, None]
    out = (shift, base, np.tile(np.arange(g), (s_count, 1)) + base, np.tile(np.arange(g), s_count))
    for a in out:
        a.flags.writeable = False
    return out
