"""One call at a time per process group and process: calls on two groups from two threads run
side by side; two threads inside calls on one group are refused.

The ranks of a group pair their calls by order. Two threads of one rank calling on one group
would reach the wire in an order that differs between ranks (each rank's threads are scheduled
apart), pairing different calls silently, so the second thread is refused with an error instead
(torch's own collectives leave this to the user).
"""
from __future__ import annotations

import functools
import threading

import torch
import torch.distributed as dist

from collsched.comm.errors import CollschedCommError


class ConcurrentCallError(CollschedCommError):
    """Two threads of one process called collsched on the same process group at once."""


_BUSY: dict = {}  # id(group) -> the thread inside a call on it
_GUARD = threading.Lock()


def _members(group) -> str:
    try:
        if group is None or group is dist.GroupMember.WORLD:
            return f"the default group (ranks 0–{dist.get_world_size() - 1})"
        return f"the group of ranks {dist.get_process_group_ranks(group)}"
    except Exception:  # the error must not fail on its own message
        return "this group"


def _compiling() -> bool:
    is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    return bool(is_compiling()) if is_compiling is not None else False


def one_call_per_group(group_arg: int):
    """Decorate a collective whose process group is positional argument `group_arg` (or the
    keyword ``group``): a call on a group another thread is inside raises at once.

    Raises (from the decorated function):
        ConcurrentCallError: another thread of this process is inside a call on the same
            group (this rank's peers then wait for the refused call: their timeout ends it).
    """
    def wrap(fn):
        @functools.wraps(fn)
        def guarded(*args, **kwargs):
            if _compiling():  # traced: the operator's eager implementation runs the guarded call
                return fn(*args, **kwargs)
            group = args[group_arg] if len(args) > group_arg else kwargs.get("group")
            key = 0 if group is None or group is dist.GroupMember.WORLD else id(group)
            me = threading.get_ident()
            with _GUARD:
                other = _BUSY.get(key)
                if other is None:
                    _BUSY[key] = me
            if other is not None:
                raise ConcurrentCallError(
                    f"collsched.{fn.__name__}: another thread of this process (id {other}) is inside a call on "
                    f"{_members(group)}: calls on one process group must come from one thread at a time, or ranks "
                    "would pair different calls; give each thread a process group of its own")
            try:
                return fn(*args, **kwargs)
            finally:
                with _GUARD:
                    _BUSY.pop(key, None)
        return guarded
    return wrap


__all__ = ["ConcurrentCallError", "one_call_per_group"]
