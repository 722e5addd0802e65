"""`MoEBuffer.dispatch` / `combine` as ``torch.library`` operators, so compiled graphs hold them.

A dispatch plans on the host (the routing's counts, one count exchange, the forwarders) and
returns a `DispatchHandle` of host arrays that the combine and both backwards reuse. A graph
cannot carry that object, so the operators keep it in a registry on the buffer and pass a key:

    collsched::moe_dispatch(Tensor x, Tensor topk_idx, Tensor? topk_weights, int buffer_id)
        -> (Tensor x_out [N, H], Tensor weights [N], Tensor tokens_per_expert [E_local], Tensor key [])
    collsched::moe_combine(Tensor y, int buffer_id, Tensor key, SymInt tokens, bool weighted,
        bool release) -> Tensor [T, H]
    collsched::moe_dispatch_backward(...), collsched::moe_redispatch(...): the two backwards.

N, the rows this rank receives, is data-dependent: the fake implementation gives it an unbacked
size (``new_dynamic_size``), as torch's ``nonzero``. A handle is dropped by the last operator
that needs it (the dispatch's backward, the combine's backward, or the combine, depending on
which of them take part in autograd, decided at trace time); the registry is bounded
(`MAX_LIVE_HANDLES`) for graphs whose backward never runs.
"""
from __future__ import annotations

import weakref
from collections import OrderedDict
from dataclasses import dataclass

import torch

MAX_LIVE_HANDLES = 1024
_BUFFERS: "weakref.WeakValueDictionary[int, object]" = weakref.WeakValueDictionary()


def register(buffer) -> None:
    """Make ``buffer`` reachable from the operators by its id (held weakly)."""
    _BUFFERS[buffer.id] = buffer
    buffer._live_handles = OrderedDict()


def _buffer(buffer_id: int):
    buf = _BUFFERS.get(buffer_id)
    if buf is None:
        raise RuntimeError(f"collsched MoE operator: MoEBuffer {buffer_id} no longer exists")
    return buf


def _handle(buf, key: torch.Tensor, release: bool):
    call = int(key)
    live = buf._live_handles
    h = live.pop(call, None) if release else live.get(call)
    if h is None:
        raise RuntimeError(f"collsched MoE operator: the dispatch handle of call {call} is gone (more than "
                           f"{MAX_LIVE_HANDLES} dispatches alive at once, or a second backward)")
    return h


@dataclass
class TracedHandle:
    """What a traced dispatch returns in place of a `DispatchHandle` (pass it to combine).

    Attributes:
        buffer_id (int): the MoEBuffer's id.
        key (Tensor [] int64): the dispatch's call id (the registry key).
        tokens (int | SymInt): T. rows (SymInt): N. hidden (int): H. topk (int): K.
        has_weights (bool): topk_weights were given.
        dispatch_grad (bool): the dispatch takes part in autograd (its backward drops the handle).
    """

    buffer_id: int
    key: torch.Tensor
    tokens: object
    rows: object
    hidden: int
    topk: int
    has_weights: bool
    dispatch_grad: bool


# ---------------------------------------------------------------------------- dispatch
@torch.library.custom_op("collsched::moe_dispatch", mutates_args=())
def moe_dispatch(x: torch.Tensor, topk_idx: torch.Tensor, topk_weights: torch.Tensor | None,
                 buffer_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """`MoEBuffer.dispatch` as an operator.

    Args:
        x (Tensor [T, H]), topk_idx (Tensor [T, K] int64), topk_weights (Tensor [T, K] float32, optional):
            as `MoEBuffer.dispatch`.
        buffer_id (int): the buffer's ``id``.
    Returns:
        (x_out [N, H], weights [N] float32 (zeros without topk_weights), tokens_per_expert
        [E_local] int64, key [] int64).
    """
    buf = _buffer(buffer_id)
    d = buf._dispatch(x, topk_idx, topk_weights)
    live = buf._live_handles
    live[d.handle.call_id] = d.handle
    while len(live) > MAX_LIVE_HANDLES:
        live.popitem(last=False)
    weights = d.weights if d.weights is not None else x.new_zeros(d.x.shape[0], dtype=torch.float32)
    return (d.x, weights, torch.tensor(d.tokens_per_expert, dtype=torch.int64, device=x.device),
            torch.tensor(d.handle.call_id, dtype=torch.int64))


@moe_dispatch.register_fake
def _(x, topk_idx, topk_weights, buffer_id):
    rows = torch.library.get_ctx().new_dynamic_size()
    local = len(_buffer(buffer_id).local_experts)
    return (x.new_empty((rows, x.shape[1])), x.new_empty((rows,), dtype=torch.float32),
            x.new_empty((local,), dtype=torch.int64), torch.empty((), dtype=torch.int64, device="cpu"))


@torch.library.custom_op("collsched::moe_dispatch_backward", mutates_args=())
def moe_dispatch_backward(grad_x: torch.Tensor, grad_w: torch.Tensor, buffer_id: int, key: torch.Tensor,
                          tokens: int, topk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The dispatch's backward: a combine of the gradients (rows and, with weights, the pairs'
    weight gradients) along the dispatch's routes. Drops the handle.

    Returns:
        (grad of x [T, H], grad of topk_weights [T, K] float32, zeros without weights).
    """
    buf = _buffer(buffer_id)
    h = _handle(buf, key, release=True)
    gx, gw = buf._combine(grad_x.contiguous(), h, weighted=False, pair_scalar=grad_w if h.has_weights else None)
    if gw is None:
        gw = grad_x.new_zeros((tokens, topk), dtype=torch.float32)
    return gx, gw


@moe_dispatch_backward.register_fake
def _(grad_x, grad_w, buffer_id, key, tokens, topk):
    return grad_x.new_empty((tokens, grad_x.shape[1])), grad_x.new_empty((tokens, topk), dtype=torch.float32)


def _dispatch_setup(ctx, inputs, output):
    x, idx, _, ctx.buffer_id = inputs
    ctx.tokens, ctx.topk = x.shape[0], idx.shape[1]
    ctx.save_for_backward(output[3])


def _dispatch_backward(ctx, grad_x, grad_w, _counts, _key):
    (key,) = ctx.saved_tensors
    gx, gw = moe_dispatch_backward(grad_x, grad_w, ctx.buffer_id, key, ctx.tokens, ctx.topk)
    return gx, None, gw, None


moe_dispatch.register_autograd(_dispatch_backward, setup_context=_dispatch_setup)


# ---------------------------------------------------------------------------- combine
@torch.library.custom_op("collsched::moe_combine", mutates_args=())
def moe_combine(y: torch.Tensor, buffer_id: int, key: torch.Tensor, tokens: int, weighted: bool,
                release: bool, dispatch_grad: bool) -> torch.Tensor:
    """`MoEBuffer.combine` as an operator (``release``: no later operator needs the handle;
    ``dispatch_grad``: the dispatch's backward runs after this one's and drops it).

    Returns:
        Tensor [T, H].
    """
    buf = _buffer(buffer_id)
    return buf._combine_call(y, _handle(buf, key, release), weighted)


@moe_combine.register_fake
def _(y, buffer_id, key, tokens, weighted, release, dispatch_grad):
    return y.new_empty((tokens, y.shape[1]))


@torch.library.custom_op("collsched::moe_redispatch", mutates_args=())
def moe_redispatch(grad: torch.Tensor, buffer_id: int, key: torch.Tensor, rows: int, weighted: bool,
                   release: bool) -> torch.Tensor:
    """The combine's backward: the gradient [T, H] dispatched along the same routes (no count
    exchange), times each row's router weight when the combine was weighted.

    Returns:
        Tensor [N, H] in the dispatched layout.
    """
    buf = _buffer(buffer_id)
    h = _handle(buf, key, release)
    g = buf._redispatch(grad.to(h.dtype).contiguous(), h)
    if weighted:
        g = (g.float() * h.row_weights[:, None]).to(h.dtype)
    return g


@moe_redispatch.register_fake
def _(grad, buffer_id, key, rows, weighted, release):
    return grad.new_empty((rows, grad.shape[1]))


def _combine_setup(ctx, inputs, output):
    y, ctx.buffer_id, key, _, ctx.weighted, _, ctx.dispatch_grad = inputs
    ctx.rows = y.shape[0]
    ctx.dtype = y.dtype
    ctx.save_for_backward(key)


def _combine_backward(ctx, grad_out):
    (key,) = ctx.saved_tensors
    # The dispatch's backward, when it takes part, runs after this one and drops the handle.
    g = moe_redispatch(grad_out.to(ctx.dtype), ctx.buffer_id, key, ctx.rows, ctx.weighted, not ctx.dispatch_grad)
    return g, None, None, None, None, None, None


moe_combine.register_autograd(_combine_backward, setup_context=_combine_setup)


# ---------------------------------------------------------------------------- traced entry points
def traced_dispatch(buffer, x: torch.Tensor, topk_idx: torch.Tensor, topk_weights: torch.Tensor | None):
    """A traced `MoEBuffer.dispatch`: returns a `Dispatched` whose ``tokens_per_expert`` is the
    int64 tensor [E_local] (the counts are data) and whose handle is a `TracedHandle`."""
    from collsched.moe.buffer import Dispatched

    grad = torch.is_grad_enabled() and (x.requires_grad or (topk_weights is not None and topk_weights.requires_grad))
    x_out, weights, counts, key = moe_dispatch(x, topk_idx, topk_weights, buffer.id)
    handle = TracedHandle(buffer.id, key, x.shape[0], x_out.shape[0], x.shape[1], topk_idx.shape[1],
                          topk_weights is not None, grad)
    return Dispatched(x_out, weights if topk_weights is not None else None, counts, handle)


def traced_combine(y: torch.Tensor, handle: TracedHandle, weighted: bool, buffer_id: int | None = None) -> torch.Tensor:
    """A traced combine of a `traced_dispatch`'s handle (``buffer_id``: the buffer it must come from)."""
    if not isinstance(handle, TracedHandle) or (buffer_id is not None and handle.buffer_id != buffer_id):
        raise TypeError("under torch.compile, combine takes the handle of this buffer's dispatch in the same graph")
    combine_grad = torch.is_grad_enabled() and y.requires_grad
    return moe_combine(y, handle.buffer_id, handle.key, handle.tokens, weighted,
                       not handle.dispatch_grad and not combine_grad, handle.dispatch_grad)


__all__ = ["moe_dispatch", "moe_combine", "moe_dispatch_backward", "moe_redispatch", "TracedHandle",
           "traced_dispatch", "traced_combine", "register", "MAX_LIVE_HANDLES"]
