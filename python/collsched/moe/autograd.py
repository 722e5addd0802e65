"""Differentiable dispatch and combine: a training step runs through them.

The backward of a dispatch is a combine of the gradients (each token sums the gradients of
its copies; each router weight gets its pair's gradient back), and the backward of a combine
is a dispatch of the gradient along the same routes (no count exchange: the handle has them).
Router-weight gradients flow through ``Dispatched.weights``: scale the expert outputs by it
and combine with ``weighted=False`` (a weighted combine treats the weights as constants).
"""
from __future__ import annotations

import torch

from collsched.comm.ops import tracing
from collsched.moe.buffer import Dispatched, DispatchHandle, MoEBuffer
from collsched.moe.ops import TracedHandle, traced_combine, traced_dispatch


class _Dispatch(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, topk_weights, topk_idx, buffer, box):
        d = buffer.dispatch(x, topk_idx, topk_weights)
        box.append(d)
        ctx.handle = d.handle
        if d.weights is None:
            return d.x, None
        return d.x, d.weights

    @staticmethod
    def backward(ctx, grad_x, grad_w):
        h = ctx.handle
        if grad_x is None:
            grad_x = torch.zeros((h.rows, h.hidden), dtype=h.dtype, device=h.place_t.device)
        scalar = None
        if h.has_weights:  # the same on every rank (checked at dispatch), so every rank moves the same
            scalar = grad_w if grad_w is not None else torch.zeros(h.rows, dtype=torch.float32,
                                                                     device=h.place_t.device)
        gx, gw = h.buffer._combine(grad_x, h, weighted=False, pair_scalar=scalar)
        return gx, gw, None, None, None


class _Combine(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y, handle, weighted):
        ctx.handle, ctx.weighted = handle, weighted
        return handle.buffer.combine(y, handle, weighted)

    @staticmethod
    def backward(ctx, grad_out):
        h = ctx.handle
        g = h.buffer._redispatch(grad_out.to(h.dtype), h)
        if ctx.weighted:
            g = (g.float() * h.row_weights[:, None]).to(h.dtype)
        return g, None, None


def dispatch(x: torch.Tensor, topk_idx: torch.Tensor, topk_weights: torch.Tensor | None,
             buffer: MoEBuffer) -> Dispatched:
    """Differentiable `MoEBuffer.dispatch` (gradients reach ``x`` and ``topk_weights``).

    Args:
        x (Tensor [T, H]): tokens. topk_idx (Tensor [T, K] int64): experts, -1 = none.
        topk_weights (Tensor [T, K] float32 or None): router weights.
        buffer (MoEBuffer): the buffer to move them with.
    Returns:
        Dispatched: ``.x`` and ``.weights`` carry gradients back. Under ``torch.compile`` the
        operator ``collsched::moe_dispatch`` with its registered autograd (moe/ops.py).
    """
    if tracing(x, topk_idx):
        return traced_dispatch(buffer, x, topk_idx, topk_weights)
    box: list = []
    dx, dw = _Dispatch.apply(x, topk_weights, topk_idx, buffer, box)
    d = box[0]
    return Dispatched(dx, dw, d.tokens_per_expert, d.handle)


def combine(y: torch.Tensor, handle: DispatchHandle, weighted: bool = True) -> torch.Tensor:
    """Differentiable `MoEBuffer.combine` (the gradient reaches ``y``).

    Args:
        y (Tensor [N, H]): expert outputs in the dispatched layout.
        handle (DispatchHandle | TracedHandle): from `dispatch` (a TracedHandle under torch.compile).
        weighted (bool): multiply by the router weights (constants here; see the module doc).
    Returns:
        Tensor [T, H].
    """
    if isinstance(handle, TracedHandle) and tracing(y):
        return traced_combine(y, handle, weighted)
    if not isinstance(handle, DispatchHandle):
        raise TypeError(f"handle must be a DispatchHandle from dispatch(), got {type(handle).__name__}")
    return _Combine.apply(y, handle, weighted)


__all__ = ["dispatch", "combine"]
