"""`MoEBuffer.dispatch` / `combine` as ``torch.library`` operators, so compiled graphs hold them.

A dispatch plans on the host (the routing's counts, one count exchange, the forwarders) and
returns a `DispatchHandle` of host arrays that the combine and both backwards reuse. A graph
cannot carry that object, so the operators keep it in a registry on the buffer and pass a key:

    collsched::moe_dispatch(Tensor x, Tensor topk_idx, Tensor? topk_weights, str buffer_key)
        -> (Tensor tokens_per_expert [E_local], Tensor key [])
    collsched::moe_dispatch_rows(Tensor x, Tensor? topk_weights, str buffer_key, Tensor key,
        SymInt rows) -> (Tensor x_out [rows, H], Tensor weights [rows])
    collsched::moe_combine(Tensor y, str buffer_key, Tensor key, SymInt tokens, bool weighted)
        -> Tensor [T, H]
    collsched::moe_dispatch_backward(...), collsched::moe_redispatch(...): the two backwards.

N, the rows this rank receives, is data-dependent. As with torch's own ``all_to_all_single``,
whose split sizes come from a tensor's ``.tolist()``, it reaches the graph as an int read on
the host: ``tokens_per_expert.sum().item()``, an unbacked SymInt under
``torch._dynamo.config.capture_scalar_outputs = True`` (what torchtitan sets; without it
Dynamo breaks the graph there, as it does for torch's splits). The first operator moves the
data; the second hands it out with that size and carries the autograd edge. A handle lives as long as its key tensor
(``weakref.finalize``): the graph hands the key to combine and autograd saves it for both
backwards, so the handle goes when the last of them lets go (a second backward with
``retain_graph`` finds it). The registry is bounded (`MAX_LIVE_HANDLES`, oldest dropped).
"""
from __future__ import annotations

import weakref
from collections import OrderedDict
from dataclasses import dataclass

import torch

MAX_LIVE_HANDLES = 1024
# By key string (the id as text): Dynamo would make an int attribute that differs between
# layers a SymInt after a recompile, and an operator's scalar argument must stay a constant.
_BUFFERS: "weakref.WeakValueDictionary[str, object]" = weakref.WeakValueDictionary()


def register(buffer) -> None:
    """Make ``buffer`` reachable from the operators by its key, ``str(buffer.id)`` (held weakly)."""
    buffer.op_key = str(buffer.id)
    _BUFFERS[buffer.op_key] = buffer
    buffer._live_handles = OrderedDict()  # call id -> DispatchHandle


def _buffer(buffer_key: str):
    buf = _BUFFERS.get(buffer_key)
    if buf is None:
        raise RuntimeError(f"collsched MoE operator: MoEBuffer {buffer_key} no longer exists")
    return buf


def _handle(buf, key: torch.Tensor):
    call = int(key)
    h = buf._live_handles.get(call)
    if h is None:
        raise RuntimeError(f"collsched MoE operator: the dispatch handle of call {call} is gone (more than "
                           f"{MAX_LIVE_HANDLES} dispatches alive at once)")
    return h


def _drop(buffer_key: str, call: int) -> None:
    buf = _BUFFERS.get(buffer_key)
    if buf is not None:
        buf._live_handles.pop(call, None)


@dataclass
class TracedHandle:
    """What a traced dispatch returns in place of a `DispatchHandle` (pass it to combine).

    Attributes:
        buffer_key (str): the MoEBuffer's ``op_key``.
        key (Tensor [] int64): the dispatch's call id (the registry key).
        tokens (int | SymInt): T. rows (SymInt): N. hidden (int): H. topk (int): K.
        has_weights (bool): topk_weights were given.
    """

    buffer_key: str
    key: torch.Tensor
    tokens: object
    rows: object
    hidden: int
    topk: int
    has_weights: bool


# ---------------------------------------------------------------------------- dispatch
@torch.library.custom_op("collsched::moe_dispatch", mutates_args=())
def moe_dispatch(x: torch.Tensor, topk_idx: torch.Tensor, topk_weights: torch.Tensor | None,
                 buffer_key: str) -> tuple[torch.Tensor, torch.Tensor]:
    """`MoEBuffer.dispatch` as an operator, first half: moves the rows and keeps them with the
    handle; returns what sizes the second half's output (`moe_dispatch_rows`).

    Args:
        x (Tensor [T, H]), topk_idx (Tensor [T, K] int64), topk_weights (Tensor [T, K] float32, optional):
            as `MoEBuffer.dispatch`.
        buffer_key (str): the buffer's ``op_key`` (its id as text).
    Returns:
        (tokens_per_expert [E_local] int64, key [] int64).
    """
    buf = _buffer(buffer_key)
    with torch.no_grad():  # autograd is moe_dispatch_rows' (the rows it returns connect to x there)
        d = buf._dispatch(x.detach(), topk_idx, None if topk_weights is None else topk_weights.detach())
    live = buf._live_handles
    live[d.handle.call_id] = d.handle
    d.handle.arrived = (d.x, d.weights)  # for moe_dispatch_rows; freed with the handle
    while len(live) > MAX_LIVE_HANDLES:
        live.popitem(last=False)
    key = torch.tensor(d.handle.call_id, dtype=torch.int64)
    # The handle lives as long as its key: the graph passes the key to combine, and autograd
    # saves it for both backwards; when the last of them lets go, the handle goes.
    weakref.finalize(key, _drop, buffer_key, d.handle.call_id)
    return torch.tensor(d.tokens_per_expert, dtype=torch.int64, device=x.device), key


@moe_dispatch.register_fake
def _(x, topk_idx, topk_weights, buffer_key):
    local = len(_buffer(buffer_key).local_experts)
    return x.new_empty((local,), dtype=torch.int64), torch.empty((), dtype=torch.int64, device="cpu")


@torch.library.custom_op("collsched::moe_dispatch_rows", mutates_args=())
def moe_dispatch_rows(x: torch.Tensor, topk_weights: torch.Tensor | None, buffer_key: str, key: torch.Tensor,
                      rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Second half of a dispatch: the rows `moe_dispatch` moved, sized by ``rows`` (an int, or
    an unbacked SymInt from ``tokens_per_expert.sum().item()`` under the compiler). Takes ``x``
    and ``topk_weights`` so that autograd connects them to the rows (its backward combines).

    Returns:
        (x_out [rows, H], weights [rows] float32: zeros without topk_weights).
    """
    out, weights = _handle(_buffer(buffer_key), key).arrived
    if weights is None:
        weights = x.new_zeros((out.shape[0],), dtype=torch.float32)
    # Fresh tensor objects over the kept storage: autograd marks what an operator returns.
    return out.detach(), weights.detach()


@moe_dispatch_rows.register_fake
def _(x, topk_weights, buffer_key, key, rows):
    return x.new_empty((rows, x.shape[1])), x.new_empty((rows,), dtype=torch.float32)


@torch.library.custom_op("collsched::moe_dispatch_backward", mutates_args=())
def moe_dispatch_backward(grad_x: torch.Tensor, grad_w: torch.Tensor | None, buffer_key: str, key: torch.Tensor,
                          tokens: int, topk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The dispatch's backward: a combine of the gradients (rows and, with weights, the pairs'
    weight gradients) along the dispatch's routes.

    Returns:
        (grad of x [T, H], grad of topk_weights [T, K] float32, zeros without weights).
    """
    buf = _buffer(buffer_key)
    h = _handle(buf, key)
    scalar = None
    if h.has_weights:  # every rank moves the weight gradients alike (checked at dispatch)
        scalar = grad_w if grad_w is not None else grad_x.new_zeros((h.rows,), dtype=torch.float32)
    gx, gw = buf._combine(grad_x.contiguous(), h, weighted=False, pair_scalar=scalar)
    if gw is None:
        gw = grad_x.new_zeros((tokens, topk), dtype=torch.float32)
    return gx, gw


@moe_dispatch_backward.register_fake
def _(grad_x, grad_w, buffer_key, key, tokens, topk):
    return grad_x.new_empty((tokens, grad_x.shape[1])), grad_x.new_empty((tokens, topk), dtype=torch.float32)


def _dispatch_setup(ctx, inputs, output):
    x, w, ctx.buffer_key, key, _ = inputs
    ctx.tokens, ctx.topk = x.shape[0], (w.shape[1] if w is not None else 0)
    ctx.save_for_backward(key)


def _dispatch_backward(ctx, grad_x, grad_w):
    (key,) = ctx.saved_tensors
    gx, gw = moe_dispatch_backward(grad_x, grad_w, ctx.buffer_key, key, ctx.tokens, ctx.topk)
    return gx, (gw if ctx.topk else None), None, None, None


moe_dispatch_rows.register_autograd(_dispatch_backward, setup_context=_dispatch_setup)


# ---------------------------------------------------------------------------- combine
@torch.library.custom_op("collsched::moe_combine", mutates_args=())
def moe_combine(y: torch.Tensor, buffer_key: str, key: torch.Tensor, tokens: int, weighted: bool) -> torch.Tensor:
    """`MoEBuffer.combine` as an operator.

    Returns:
        Tensor [T, H].
    """
    buf = _buffer(buffer_key)
    return buf._combine_call(y, _handle(buf, key), weighted)


@moe_combine.register_fake
def _(y, buffer_key, key, tokens, weighted):
    return y.new_empty((tokens, y.shape[1]))


@torch.library.custom_op("collsched::moe_redispatch", mutates_args=())
def moe_redispatch(grad: torch.Tensor, buffer_key: str, key: torch.Tensor, rows: int, weighted: bool) -> torch.Tensor:
    """The combine's backward: the gradient [T, H] dispatched along the same routes (no count
    exchange), times each row's router weight when the combine was weighted.

    Returns:
        Tensor [N, H] in the dispatched layout.
    """
    buf = _buffer(buffer_key)
    h = _handle(buf, key)
    g = buf._redispatch(grad.to(h.dtype).contiguous(), h)
    if weighted:
        g = (g.float() * h.row_weights[:, None]).to(h.dtype)
    return g


@moe_redispatch.register_fake
def _(grad, buffer_key, key, rows, weighted):
    return grad.new_empty((rows, grad.shape[1]))


def _combine_setup(ctx, inputs, output):
    y, ctx.buffer_key, key, _, ctx.weighted = inputs
    ctx.rows = y.shape[0]
    ctx.dtype = y.dtype
    ctx.save_for_backward(key)


def _combine_backward(ctx, grad_out):
    (key,) = ctx.saved_tensors
    g = moe_redispatch(grad_out.to(ctx.dtype), ctx.buffer_key, key, ctx.rows, ctx.weighted)
    return g, None, None, None, None


moe_combine.register_autograd(_combine_backward, setup_context=_combine_setup)


# ---------------------------------------------------------------------------- traced entry points
def traced_dispatch(buffer, x: torch.Tensor, topk_idx: torch.Tensor, topk_weights: torch.Tensor | None):
    """A traced `MoEBuffer.dispatch`: returns a `Dispatched` whose ``tokens_per_expert`` is the
    int64 tensor [E_local] (the counts are data) and whose handle is a `TracedHandle`."""
    from collsched.moe.buffer import Dispatched

    counts, key = moe_dispatch(x, topk_idx, topk_weights, buffer.op_key)
    rows = counts.sum().item()  # an unbacked SymInt under the compiler (capture_scalar_outputs), as torch's splits
    torch._check_is_size(rows)
    x_out, weights = moe_dispatch_rows(x, topk_weights, buffer.op_key, key, rows)
    handle = TracedHandle(buffer.op_key, key, x.shape[0], x_out.shape[0], x.shape[1], topk_idx.shape[1],
                          topk_weights is not None)
    return Dispatched(x_out, weights if topk_weights is not None else None, counts, handle)


def traced_combine(y: torch.Tensor, handle: TracedHandle, weighted: bool,
                   buffer_key: str | None = None) -> torch.Tensor:
    """A traced combine of a `traced_dispatch`'s handle (``buffer_key``: the buffer it must come from)."""
    if not isinstance(handle, TracedHandle) or (buffer_key is not None and handle.buffer_key != buffer_key):
        raise TypeError("under torch.compile, combine takes the handle of this buffer's dispatch in the same graph")
    return moe_combine(y, handle.buffer_key, handle.key, handle.tokens, weighted)


__all__ = ["moe_dispatch", "moe_combine", "moe_dispatch_backward", "moe_redispatch", "TracedHandle",
           "traced_dispatch", "traced_combine", "register", "MAX_LIVE_HANDLES"]
