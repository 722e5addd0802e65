"""Per call site: which of the three paths a call takes, decided without a round of its own.

A *call site* is one (process group, configuration) pair: the configuration hash covers
cluster, algorithm, options, transport, version and auto's calibration, so every rank of a
group that makes the same calls in the same order holds the same sites in the same state.
The mode of the next call is a pure function of what the ranks already share, the matrix
gathered by the last *checked* call (one that exchanged descriptors):

- ``EAGER``: the last matrix was small (every pair at most `eager_capacity`). Pairs that fit
  travel inside the descriptor exchange itself; when every pair fits, that one round is the
  whole call, checks included.
- ``NATIVE``: auto chose torch's own all-to-all for the last matrix. The call *is* torch's
  call (split sizes validated locally, the wait bounded by the timeout), without an exchange,
  except every ``NATIVE_RECHECK_EVERY``-th call, which exchanges descriptors, checks them and
  chooses again.
- ``PLANNED``: anything else: descriptors (without payload), then the plan, then the data.

Every call on a process group has a sequence number (the group's count of calls so far on
this rank, `GroupCalls`), and every checked call carries it: ranks whose counts differ are told
at once, on every rank (`descriptor.check_sequence`). A NATIVE call between checks adds its
split sizes to two fingerprints (`split_fingerprint`) that the next checked call carries: a
contradiction between what ranks sent and what their peers expected, in any of those calls, is
caught there.

Tuned constants are data here, not prose elsewhere: see ``benchmarks/host_tax.py``.
"""
from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from functools import lru_cache
from operator import mul

import numpy as np

EAGER, PLANNED, NATIVE = 1, 2, 3
MODES = {EAGER: "eager", PLANNED: "planned", NATIVE: "native"}

# A pair travels eagerly when its bytes are at most min(EAGER_PAIR_BYTES, EAGER_RANK_BYTES / P)
# (packing and unpacking copy it once more than a planned call would). Every rank posts
# EAGER_RANK_BYTES / P of receive room per peer whatever its arguments (memory only: Gloo moves
# the bytes actually sent, and a peer can never send more than the room).
EAGER_PAIR_BYTES = 32 << 10
EAGER_RANK_BYTES = 1 << 20
# In NATIVE mode, one call in this many exchanges descriptors (validating every rank's
# arguments and choosing again on the current matrix).
NATIVE_RECHECK_EVERY = 16
MAX_SITES = 64


def eager_room(world: int) -> int:
    """Receive room per peer for payload in the exchange (a multiple of 8): the most any
    pair may carry, `eager_bytes` included."""
    return EAGER_RANK_BYTES // max(1, world) // 8 * 8


def eager_capacity(world: int) -> int:
    """Default bytes of payload a pair may carry inside the descriptor exchange (a multiple of 8)."""
    return min(EAGER_PAIR_BYTES, eager_room(world))


def next_mode(all_pairs_fit: bool, eager_capable: bool, chose_native: bool) -> int:
    """The mode of a site's next call, from its last checked call (every rank alike).

    Args:
        all_pairs_fit: every pair of the gathered matrix was at most `eager_capacity` bytes.
        eager_capable: the backend can carry payload in the exchange (Gloo, CPU tensors).
        chose_native: auto chose torch's own call for the gathered matrix.
    """
    if all_pairs_fit and eager_capable:
        return EAGER
    return NATIVE if chose_native else PLANNED


_MASK = (1 << 64) - 1


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on uint64 (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


# Up to this many ranks a Python sum of products beats numpy's per-call overhead.
_PY_SUM_RANKS = 32


@lru_cache(maxsize=64)
def _pair_weights(world: int, rank: int) -> tuple:
    """Odd 64-bit weights of the pairs (rank → j) and (i → rank), the same on every rank
    (numpy arrays, or Python lists for small groups)."""
    j = np.arange(world, dtype=np.uint64)
    sent = _mix(np.uint64(rank) * np.uint64(world) + j + np.uint64(1)) | np.uint64(1)
    recv = _mix(j * np.uint64(world) + np.uint64(rank) + np.uint64(1)) | np.uint64(1)
    if world <= _PY_SUM_RANKS:
        return [int(v) for v in sent], [int(v) for v in recv]
    return sent, recv


def _mix_int(x: int) -> int:
    """`_mix` on one Python int (numpy scalars cost a microsecond per operation)."""
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & _MASK
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB & _MASK
    return x ^ (x >> 31)


def split_fingerprint(seq: int, rank: int, in_splits: list, out_splits: list) -> tuple[int, int]:
    """This rank's terms of one call's fingerprints: (rows it sent, rows it expected), each a
    sum over pairs of rows × an odd weight of (call, source, destination), mod 2^64.

    Summed over every rank and call, the two are equal when every receiver expected what its
    sender sent; one contradicting pair always makes them differ (an odd weight times a
    non-zero difference below 2^64 is non-zero mod 2^64), several cancel with odds ~2^-64.

    Args:
        seq: the call's sequence number at its site.
        rank: this rank in the group.
        in_splits, out_splits: rows to / from each rank, ``[P]`` Python ints.

    Returns:
        (sent, expected), each in [0, 2^64).
    """
    w_sent, w_recv = _pair_weights(len(in_splits), rank)
    call = _mix_int(seq & _MASK) | 1
    if isinstance(w_sent, list):
        sent, recv = sum(map(mul, w_sent, in_splits)), sum(map(mul, w_recv, out_splits))
    else:  # uint64 array arithmetic wraps silently (only numpy scalars warn on overflow)
        sent = int(np.dot(w_sent, np.asarray(in_splits, dtype=np.uint64)))
        recv = int(np.dot(w_recv, np.asarray(out_splits, dtype=np.uint64)))
    return call * sent & _MASK, call * recv & _MASK


@dataclass
class CallSite:
    """What a call site remembers between calls (identical on every rank)."""

    mode: int = EAGER
    unchecked: int = 0  # NATIVE calls since the last checked call
    last_digest: int = 0  # digest of the last plan executed here (checked at the next exchange)

    def skips_exchange(self) -> bool:
        """Whether this call runs torch's call without an exchange (NATIVE between checks)."""
        return self.mode == NATIVE and self.unchecked + 1 < NATIVE_RECHECK_EVERY

    def ran_unchecked(self) -> None:
        self.unchecked += 1

    def checked(self, mode: int) -> None:
        self.mode, self.unchecked = mode, 0


@dataclass
class GroupCalls:
    """The call sequence of one process group on this rank: counted per group, not per call
    site, since a rank whose arguments are bad (or differ) may land its call on another site
    than its peers while all of them still make the same call on the wire."""

    calls: int = 0  # calls started on the group on this rank (the next call's sequence number)
    last_check: int = -1  # sequence number of the last checked call at which every rank agreed
    sent_fp: int = 0  # fingerprints of the NATIVE calls since the last exchange (`split_fingerprint`)
    recv_fp: int = 0

    def begin(self) -> int:
        """Count a call (before anything can fail on this rank alone): its sequence number."""
        seq = self.calls
        self.calls += 1
        return seq

    def ran_native(self, seq: int, rank: int, in_splits: list, out_splits: list) -> None:
        """A NATIVE call went to torch without an exchange: its split sizes join the fingerprints."""
        s, r = split_fingerprint(seq, rank, in_splits, out_splits)
        self.sent_fp = (self.sent_fp + s) & _MASK
        self.recv_fp = (self.recv_fp + r) & _MASK

    def exchanged(self, seqs) -> None:
        """After a checked call's exchange (`seqs`: every rank's sequence number), whatever its
        verdict: the fingerprints start again; when every rank was at this call, it is the
        last check. Ranks at different calls stay so (their later calls still meet other
        calls on the wire), so every later check raises again."""
        if (seqs == seqs[0]).all():
            self.last_check = int(seqs[0])
        self.sent_fp = self.recv_fp = 0


class GroupSequences:
    """`GroupCalls` per process group, the group held weakly (a freed group's count goes with it,
    and a new group never inherits it through a reused id)."""

    def __init__(self):
        self._d: "weakref.WeakKeyDictionary[object, GroupCalls]" = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def get(self, group) -> GroupCalls:
        """The count of `group` (a ``ProcessGroup``; the caller resolves None to the default group)."""
        hit = self._d.get(group)
        if hit is None:
            with self._lock:
                hit = self._d.setdefault(group, GroupCalls())
        return hit


class CallSites:
    """A bounded LRU of call sites; every rank evicts the same ones, since it makes the same calls."""

    def __init__(self, capacity: int = MAX_SITES):
        self.capacity = capacity
        self._d: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key) -> CallSite:
        with self._lock:
            site = self._d.get(key)
            if site is None:
                site = self._d[key] = CallSite()
                while len(self._d) > self.capacity:
                    self._d.popitem(last=False)
            else:
                self._d.move_to_end(key)
            return site

    def clear(self) -> None:
        with self._lock:
            self._d.clear()


SITES = CallSites()
GROUPS = GroupSequences()
