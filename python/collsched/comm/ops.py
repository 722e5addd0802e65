"""collsched's all-to-all as a ``torch.library`` operator, so compiled graphs hold it as one node.

``torch.compile`` (Dynamo, AOTAutograd, Inductor), ``make_fx`` and export cannot trace the
runtime's Python (numpy, the plan cache, process-group objects, host timers): they would break
the graph there. The operator hides it the way torch's functional collectives hide theirs:

    collsched::all_to_all_single(Tensor input, SymInt[]? output_split_sizes,
        SymInt[]? input_split_sizes, str group_name, Tensor? traffic, str config,
        bool prefetch_transpose) -> Tensor
    collsched::exchange_i64(Tensor values, str group_name, float timeout, str what) -> Tensor

- functional (returns a new output), with a fake implementation (the output is
  ``[sum(output_split_sizes), *input.shape[1:]]``: split sizes are ints or SymInts, unbacked
  ones when they come from a tensor's ``.tolist()`` under ``capture_scalar_outputs``);
- the process group by its name (``group.group_name``), as functional collectives pass it;
- ``traffic``: the ``[P, P]`` int64 matrix of rows (optional, as ``traffic=``);
- ``config``: the call's other keyword arguments as a literal (``call_config``), fixed at trace
  time, so the graph is self-contained;
- autograd registered: the backward is the transposed all-to-all (splits swapped, traffic
  transposed), itself this operator.

The implementation calls `collsched.comm.api.all_to_all_single`, the eager call path, so a
compiled call moves the same bytes with the same plan as an eager one. ``exchange_i64`` is
the host exchange of small counts (the MoE dispatchers' count exchange), whose result the
compiled code turns into split sizes with ``.tolist()``.
"""
from __future__ import annotations

import ast
import functools

import torch
import torch.distributed as dist

# Keyword arguments of `all_to_all_single` a traced call may carry (literals only).
CONFIG_KEYS = ("algorithm", "cluster", "options", "timeout", "transport", "checks", "eager_bytes")


@torch.compiler.assume_constant_result
def call_config(algorithm="auto", cluster=None, options=None, timeout=None, transport="auto", checks=True,
                eager_bytes=None) -> str:
    """The keyword arguments of a traced call as one string (a Python literal), evaluated once at
    trace time (``assume_constant_result``): the operator's ``config`` argument.

    Raises:
        TypeError: an argument that is not a literal (a ``Cluster`` object: pass its spec string).
    """
    if cluster is not None and not isinstance(cluster, str):
        raise TypeError("under torch.compile cluster= must be a spec string (Cluster.spec()) or None, got "
                        f"{type(cluster).__name__}")
    text = repr({"algorithm": algorithm, "cluster": cluster, "options": dict(options or {}), "timeout": timeout,
                 "transport": transport, "checks": bool(checks), "eager_bytes": eager_bytes})
    try:
        ast.literal_eval(text)
    except (ValueError, SyntaxError):
        raise TypeError(f"under torch.compile the keyword arguments must be literals (str, int, float, bool, "
                        f"None, lists and dicts of them), got {text}") from None
    return text


@functools.lru_cache(maxsize=256)
def _config(text: str) -> dict:
    return ast.literal_eval(text)


def group_name(group) -> str:
    """The name a traced call passes for ``group`` (None: the default group)."""
    return (dist.group.WORLD if group is None else group).group_name


def _group(name: str):
    from torch.distributed.distributed_c10d import _resolve_process_group

    return _resolve_process_group(name)


def _out_rows(input: torch.Tensor, output_split_sizes) -> int:
    return input.shape[0] if output_split_sizes is None else sum(output_split_sizes)


@torch.library.custom_op("collsched::all_to_all_single", mutates_args=())
def all_to_all_single_op(input: torch.Tensor, output_split_sizes: list[int] | None,
                         input_split_sizes: list[int] | None, group_name: str, traffic: torch.Tensor | None,
                         config: str, prefetch_transpose: bool) -> torch.Tensor:
    """Functional all-to-all along dim 0 through collsched (see the module docstring).

    Args:
        input (Tensor [sum(input_split_sizes), *row]): any dtype.
        output_split_sizes (list[int] | None): rows from each rank (None: equal splits).
        input_split_sizes (list[int] | None): rows to each rank (None: equal splits).
        group_name (str): the process group's ``group_name``.
        traffic (Tensor [P, P] int64, optional): rows rank i sends to rank j, on every rank alike.
        config (str): `call_config`'s literal.
        prefetch_transpose (bool): plan the transposed matrix meanwhile (a backward follows).
    Returns:
        Tensor [sum(output_split_sizes), *row], input's dtype and device.
    Raises:
        What `collsched.all_to_all_single` raises.
    """
    from collsched.comm.api import all_to_all_single

    out = input.new_empty((_out_rows(input, output_split_sizes),) + tuple(input.shape[1:]))
    tr = None if traffic is None else traffic.detach().cpu().numpy()
    all_to_all_single(out, input.contiguous(), None if output_split_sizes is None else list(output_split_sizes),
                      None if input_split_sizes is None else list(input_split_sizes), group=_group(group_name),
                      traffic=tr, prefetch_transpose=prefetch_transpose, **_config(config))
    return out


@all_to_all_single_op.register_fake
def _(input, output_split_sizes, input_split_sizes, group_name, traffic, config, prefetch_transpose):
    return input.new_empty((_out_rows(input, output_split_sizes),) + tuple(input.shape[1:]))


def _setup_context(ctx, inputs, output):
    _, ctx.output_split_sizes, ctx.input_split_sizes, ctx.group_name, traffic, ctx.config, _ = inputs
    ctx.traffic = None if traffic is None else traffic.t().contiguous()


def _backward(ctx, grad_output):
    # The gradient travels back along the same pairs: splits swapped, traffic transposed.
    grad_input = all_to_all_single_op(grad_output.contiguous(), ctx.input_split_sizes, ctx.output_split_sizes,
                                      ctx.group_name, ctx.traffic, ctx.config, False)
    return grad_input, None, None, None, None, None, None


all_to_all_single_op.register_autograd(_backward, setup_context=_setup_context)


@torch.library.custom_op("collsched::exchange_i64", mutates_args=())
def exchange_i64_op(values: torch.Tensor, group_name: str, timeout: float, what: str) -> torch.Tensor:
    """`groups.exchange_i64` as an operator: every rank's ``values`` gathered on the host.

    Args:
        values (Tensor [n] int64): this rank's values (any device; read on the host).
        group_name (str): the process group's ``group_name``.
        timeout (float): seconds the exchange may take.
        what (str): how a timeout names the exchange.
    Returns:
        Tensor [P, n] int64 on the CPU: row r from group rank r.
    """
    from collsched.comm.groups import exchange_i64

    got = exchange_i64(values.detach().cpu().numpy(), _group(group_name), timeout, what)
    return torch.from_numpy(got.copy())


@exchange_i64_op.register_fake
def _(values, group_name, timeout, what):
    return torch.empty((dist.get_world_size(_group(group_name)), values.shape[0]), dtype=torch.int64, device="cpu")


def traffic_tensor(traffic) -> torch.Tensor | None:
    """``traffic=`` as the operator takes it: an int64 tensor on the host (None stays None)."""
    if traffic is None:
        return None
    if isinstance(traffic, torch.Tensor):
        return traffic.to(device="cpu", dtype=torch.int64)
    return torch.as_tensor(traffic, dtype=torch.int64)


def tracing(*tensors) -> bool:
    """True while a tracer runs the Python (Dynamo, or make_fx/export on fake tensors): the call
    must then be the operator, not the runtime's Python."""
    if torch.compiler.is_compiling():
        return True
    from torch._subclasses.fake_tensor import FakeTensor

    return any(isinstance(t, FakeTensor) for t in tensors) or torch._C._get_dispatch_mode(
        torch._C._TorchDispatchModeKey.PROXY) is not None


def _int_list(sizes):
    return None if sizes is None else [s if isinstance(s, torch.SymInt) else int(s) for s in sizes]


def traced_all_to_all(input: torch.Tensor, output_split_sizes, input_split_sizes, group, *, traffic=None,
                      prefetch_transpose: bool = False, cache=None, **kw) -> torch.Tensor:
    """The operator call for ``collsched.all_to_all_single``'s arguments; returns the output.

    Raises:
        TypeError: ``cache=`` (the default cache only in a traced call) or a keyword argument
            that is not a literal.
    """
    if cache is not None:
        raise TypeError("cache= is not supported under torch.compile (the operator uses the default plan cache)")
    unknown = set(kw) - set(CONFIG_KEYS)
    if unknown:
        raise TypeError(f"unexpected keyword arguments {sorted(unknown)}")
    return all_to_all_single_op(input, _int_list(output_split_sizes), _int_list(input_split_sizes),
                                group_name(group), traffic_tensor(traffic), call_config(**kw),
                                bool(prefetch_transpose))


__all__ = ["all_to_all_single_op", "exchange_i64_op", "call_config", "group_name", "traced_all_to_all", "tracing",
           "traffic_tensor",
           "CONFIG_KEYS"]
