"""Reusable byte buffers for scratch and staging, keyed by device and size class.

Allocating per call costs a malloc (CPU) or a caching-allocator round trip and
fragmentation (GPU); plans reuse the same few sizes call after call, so buffers
are rounded up to a power of two and kept. On GPU every use is ordered on the
current stream, so a buffer released at the end of a call can be reused by the
next call without a host synchronisation.
"""
from __future__ import annotations

import threading

import torch

MIN_CLASS = 4096


def size_class(nbytes: int) -> int:
    """Smallest power of two >= nbytes (at least 4 KiB)."""
    if nbytes <= MIN_CLASS:
        return MIN_CLASS
    return 1 << (int(nbytes) - 1).bit_length()


class BufferPool:
    """A small free list per (device, size class); holds at most `max_cached_bytes` idle bytes."""

    def __init__(self, max_cached_bytes: int = 2 << 30, per_class: int = 4):
        self.max_cached_bytes = max_cached_bytes
        self.per_class = per_class
        self._free: dict[tuple[str, int], list[torch.Tensor]] = {}
        self._cached = 0
        self._lock = threading.Lock()
        self.allocations = 0  # how many buffers were ever allocated (tests check reuse)

    def acquire(self, nbytes: int, device: torch.device) -> torch.Tensor:
        """A uint8 tensor of at least `nbytes` (exactly its size class)."""
        cls = size_class(nbytes)
        key = (str(device), cls)
        with self._lock:
            lst = self._free.get(key)
            if lst:
                self._cached -= cls
                return lst.pop()
            self.allocations += 1
        return torch.empty(cls, dtype=torch.uint8, device=device)

    def release(self, buf: torch.Tensor) -> None:
        cls = buf.numel()
        key = (str(buf.device), cls)
        with self._lock:
            lst = self._free.setdefault(key, [])
            if len(lst) < self.per_class and self._cached + cls <= self.max_cached_bytes:
                lst.append(buf)
                self._cached += cls

    def cached_bytes(self) -> int:
        with self._lock:
            return self._cached

    def clear(self) -> None:
        with self._lock:
            self._free.clear()
            self._cached = 0


DEFAULT_POOL = BufferPool()
