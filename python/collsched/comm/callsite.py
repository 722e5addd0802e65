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

Tuned constants are data here, not prose elsewhere: see ``benchmarks/host_tax.py``.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

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
