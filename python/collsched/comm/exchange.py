"""The descriptor exchange: every rank's header to every rank, small pairs' data riding along.

On Gloo with CPU tensors it is one ``all_to_all_single`` of bytes: to each peer, this rank's
header, then the pair's rows when the call site is EAGER and the pair fits the eager capacity.
Every rank posts room for header + capacity from every peer: Gloo accepts a message shorter
than the posted receive (and aborts the process on a longer one), so a rank that disagrees
about the mode or the sizes can never overrun a peer; the bytes on the wire are only those
sent. The header says how many payload bytes follow it.

Elsewhere (NCCL) the headers travel on the host (`groups.exchange_i64`, a Gloo group over the
same ranks) so the call never waits for the GPU's queue, and no payload rides along.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from collsched.comm.descriptor import CallArgs, HEADER_WORDS, W_EAGER
from collsched.comm.errors import classify_transport_error
from collsched.comm.groups import exchange_i64, wait_all
from collsched.comm.pool import BufferPool


@dataclass
class Exchanged:
    """What the exchange brought back.

    Attributes:
        gathered: ``[P, HEADER_WORDS + 2 P]`` with ``numpy.int64``: row r is rank r's header.
        recv: the pooled receive buffer (uint8), or None after a header-only exchange.
        offsets: where each peer's message starts in `recv` (room for header + capacity;
            this rank sends itself nothing).
        header_bytes: bytes of one header.
    """

    gathered: np.ndarray
    recv: torch.Tensor | None = None
    offsets: list | None = None
    header_bytes: int = 0
    self_src: torch.Tensor | None = None  # this rank's rows to itself (a view of the input)


def exchange_room(group, world: int) -> int:
    """Payload bytes every rank posts for each peer: ``callsite.eager_room`` on a Gloo group,
    whose exchange is one all-to-all that payload can ride in; 0 elsewhere (NCCL: headers on
    the host group). Depends on nothing a caller passes, so every rank posts the same."""
    from collsched.comm.callsite import eager_room

    return eager_room(world) if "gloo" in str(dist.get_backend(group)).lower() else 0


def eager_capable(group, device: torch.device) -> bool:
    """Whether payload can ride in the exchange: Gloo moving CPU tensors."""
    return device.type == "cpu" and "gloo" in str(dist.get_backend(group)).lower()


def payload_sizes(args: CallArgs, capacity: int, eager: bool) -> list[int]:
    """Bytes this rank sends to each peer inside the exchange."""
    if not eager or args.problem is not None:
        return [0] * len(args.in_splits)
    rb = args.row_bytes
    return [n * rb if n * rb <= capacity else 0 for n in args.in_splits]


def exchange(hdr: np.ndarray, args: CallArgs, in_b: torch.Tensor | None, group, rank: int, timeout_s: float,
             what: str, pool: BufferPool, room: int, capacity: int, eager: bool) -> Exchanged:
    """Run the exchange (see the module docstring); `eager` sends the payload that fits.

    Args:
        hdr: this rank's header (``descriptor.header``), ``[HEADER_WORDS + 2 P]`` int64.
        args: this rank's validated arguments (split sizes in rows).
        in_b: the input's bytes (uint8, flat), or None when nothing rides along.
        rank: this rank in `group`.
        room: payload bytes posted for each peer (``callsite.eager_room``, the same on every
            rank of a Gloo group whatever its arguments); 0: headers on the host group (NCCL).
        capacity: eager bytes per pair this rank sends at most (≤ `room`).

    Raises:
        CommTimeoutError / PeerFailureError: a peer did not take part within `timeout_s`.
    """
    if room <= 0:
        return Exchanged(exchange_i64(hdr, group, timeout_s, what))
    world = len(args.in_splits)
    hb = 8 * hdr.size
    sizes = payload_sizes(args, min(capacity, room), eager)
    rows = np.tile(hdr, (world, 1))
    rows[:, W_EAGER] = sizes
    hdr_t = torch.from_numpy(rows).view(torch.uint8)  # [world, hb]
    # Nothing travels to this rank itself: its header is known, its own rows are copied
    # straight from the input (`unpack`). Every other slot is `stride` bytes of room.
    pieces, off, rb = [], 0, args.row_bytes
    self_src = None
    for j, n in enumerate(args.in_splits):
        if j == rank:
            if sizes[j]:
                self_src = in_b[off:off + sizes[j]]
        else:
            pieces.append(hdr_t[j])
            if sizes[j]:
                pieces.append(in_b[off:off + sizes[j]])
        off += n * rb
    send = torch.cat(pieces) if pieces else hdr_t[:0].reshape(-1)
    stride = hb + room
    send_splits = [hb + n for n in sizes]
    send_splits[rank] = 0
    recv_splits = [stride] * world
    recv_splits[rank] = 0
    total = stride * (world - 1)
    buf = pool.acquire(total, torch.device("cpu"))
    recv = buf[:total]
    try:
        work = dist.all_to_all_single(recv, send, recv_splits, send_splits, group=group, async_op=True)
    except RuntimeError as e:
        raise classify_transport_error(e, what) from e
    wait_all([work], timeout_s, True, what)
    peers = recv.view(world - 1, stride)[:, :hb].contiguous().view(torch.int64).numpy()
    gathered = np.concatenate((peers[:rank], rows[rank:rank + 1], peers[rank:]))
    offsets = [i * stride if i < rank else (i - 1) * stride for i in range(world)]
    return Exchanged(gathered, buf, offsets, hb, self_src)


def unpack(ex: Exchanged, out_b: torch.Tensor, out_splits: list, row_bytes: int, rank: int) -> None:
    """Copy every peer's payload from the receive buffer (this rank's own rows from its input)
    into its place in the output."""
    dsts, srcs, off = [], [], 0
    for i, rows in enumerate(out_splits):
        n = rows * row_bytes
        if n:
            dsts.append(out_b[off:off + n])
            if i == rank:
                srcs.append(ex.self_src)
            else:
                at = ex.offsets[i] + ex.header_bytes
                srcs.append(ex.recv[at:at + n])
        off += n
    if len(dsts) == 1:
        dsts[0].copy_(srcs[0])
    elif dsts:
        torch._foreach_copy_(dsts, srcs)


def all_pairs_fit(rows: np.ndarray, row_bytes: int, capacity: int) -> bool:
    """Whether every pair of the gathered rows matrix fits the eager capacity."""
    return capacity > 0 and int(rows.max(initial=0)) * row_bytes <= capacity


__all__ = ["Exchanged", "exchange", "exchange_room", "unpack", "eager_capable", "payload_sizes", "all_pairs_fit",
           "HEADER_WORDS"]
