"""Differentiable all-to-all: a drop-in for Megatron's ``tensor_parallel.all_to_all`` and
``torch.distributed.nn.functional.all_to_all_single``.

The backward of an all-to-all is the transposed all-to-all: gradients travel
back along the same pairs, so the split sizes swap (and a `traffic=` matrix is
transposed). Both directions are planned (and cached) by collsched; when a
backward will follow, the forward plans the transposed matrix on a background
thread while it moves data, so the backward finds its plan ready.
"""
from __future__ import annotations

import numpy as np
import torch

from collsched.comm.api import all_to_all_single as _a2a
from collsched.comm.ops import traced_all_to_all, tracing


def _transpose(traffic):
    if traffic is None:
        return None
    if isinstance(traffic, torch.Tensor):
        return traffic.t().contiguous()
    return np.ascontiguousarray(np.asarray(traffic).T)


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, output_split_sizes, input_split_sizes, group, kw):
        ctx.group = group
        ctx.output_split_sizes = output_split_sizes
        ctx.input_split_sizes = input_split_sizes
        ctx.kw = kw
        ctx.in_shape = input.shape
        input = input.contiguous()
        rows = sum(output_split_sizes) if output_split_sizes is not None else input.size(0)
        output = input.new_empty((rows,) + tuple(input.shape[1:]))
        _a2a(output, input, output_split_sizes, input_split_sizes, group=group, **kw)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        kw = dict(ctx.kw)
        kw.pop("prefetch_transpose", None)
        if "traffic" in kw:
            kw["traffic"] = _transpose(kw["traffic"])
        grad_output = grad_output.contiguous()
        grad_input = grad_output.new_empty(ctx.in_shape)
        _a2a(grad_input, grad_output, ctx.input_split_sizes, ctx.output_split_sizes, group=ctx.group, **kw)
        return grad_input, None, None, None, None


def all_to_all_single(input: torch.Tensor, output_split_sizes=None, input_split_sizes=None, group=None, **kw):
    """Functional, differentiable all-to-all(v) along dim 0; returns the output tensor.

    ``kw`` goes to ``collsched.all_to_all_single`` (algorithm, cluster, traffic in rows, options, timeout).
    Split sizes are lists of ints (None = equal splits), as in Megatron's ``all_to_all(group, input, out, in)``;
    under ``torch.compile`` ints or SymInts, and ``kw`` literals (``cluster=`` a spec string).
    """
    prefetch = torch.is_grad_enabled() and input.requires_grad
    if tracing(input):
        # One graph node (the operator of comm/ops.py, its autograd registered there).
        return traced_all_to_all(input, output_split_sizes, input_split_sizes, group,
                                 **{"prefetch_transpose": prefetch, **kw})
    if output_split_sizes is not None:
        output_split_sizes = [int(x) for x in output_split_sizes]
    if input_split_sizes is not None:
        input_split_sizes = [int(x) for x in input_split_sizes]
    if prefetch:
        # A backward will move the transposed matrix: plan it while the forward moves data.
        kw = {"prefetch_transpose": True, **kw}
    return _AllToAll.apply(input, output_split_sizes, input_split_sizes, group, kw)


def all_to_all(group, input: torch.Tensor, output_split_sizes=None, input_split_sizes=None, use_nccl_stream=None,
               **kw):
    """Megatron's argument order: ``all_to_all(group, input, output_split_sizes, input_split_sizes)``.

    ``use_nccl_stream`` (megatron-core 0.19 passes it: whether its all-to-all runs on NCCL's
    internal stream) is accepted and ignored; collsched's runtime picks its streams itself.
    """
    return all_to_all_single(input, output_split_sizes, input_split_sizes, group=group, **kw)
