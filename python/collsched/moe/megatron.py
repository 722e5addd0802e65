"""Megatron-core token dispatcher on `collsched.moe.MoEBuffer` (Fusco's dispatch and combine).

``CollschedTokenDispatcher`` subclasses megatron-core's ``MoETokenDispatcher`` (the interface of
``MoEAlltoAllTokenDispatcher`` and ``MoEFlexTokenDispatcher``): ``dispatch_preprocess`` turns
Megatron's ``routing_map [T, E]`` / ``probs [T, E]`` into ``topk_idx`` / ``topk_weights``,
``token_dispatch`` runs the differentiable `collsched.moe.dispatch` (expert-major rows straight
out, no permute), ``token_combine`` the differentiable `collsched.moe.combine`. As in Megatron's
all-to-all dispatcher, the experts apply the permuted probabilities, so combine sums unweighted.
`use_collsched_dispatcher` puts one into a built ``MoELayer``. See docs/megatron.md.

Needs megatron-core >=0.16.1,<0.20 (``pip install 'collsched[megatron]'``; 0.17 and later need
Python >= 3.12); another version raises ImportError on import.
"""
from __future__ import annotations

import importlib.metadata
import re
from types import SimpleNamespace
from typing import List, Optional

# [lowest, first unsupported): the `[megatron]` extra's pin. The tests run the lowest and the newest
# release (tests/test_moe_megatron_versions.py); the dispatcher interface is the same across it.
SUPPORTED = ((0, 16, 1), (0, 20, 0))
_RANGE = ">=0.16.1,<0.20"
_EXTRA = f"pip install 'collsched[megatron]' (megatron-core{_RANGE})"


def _check_version(found: str) -> None:
    """Raise ImportError unless ``found`` (a megatron-core version string) is in `SUPPORTED`."""
    nums = tuple(int(v) for v in re.findall(r"\d+", found)[:3])
    nums = nums + (0,) * (3 - len(nums))
    if not SUPPORTED[0] <= nums < SUPPORTED[1]:
        raise ImportError(f"collsched.moe.megatron supports megatron-core {_RANGE}, found {found}: "
                          f"{_EXTRA}")


try:  # the installed distribution's version, before the (slow) import
    _check_version(importlib.metadata.version("megatron-core"))
except importlib.metadata.PackageNotFoundError:
    pass  # not installed as a distribution (a source checkout): checked after the import
try:
    from megatron.core.transformer.moe.token_dispatcher import MoETokenDispatcher
except ImportError as exc:
    if not (exc.name or "").startswith("megatron"):
        raise  # megatron-core is there but one of its own dependencies is not
    raise ImportError(f"collsched.moe.megatron needs megatron-core: {_EXTRA}") from None
else:
    from megatron.core import package_info as _package_info

    _check_version(_package_info.__version__)

import torch  # noqa: E402  (after the checks: a failed import need not load torch first)

from collsched.moe.autograd import combine, dispatch
from collsched.moe.buffer import MoEBuffer


def routing_map_to_topk(routing_map: torch.Tensor, probs: torch.Tensor, topk: int):
    """Megatron's ``routing_map [T, E]`` (bool) and ``probs [T, E]`` as ``topk_idx [T, K]`` int64
    (ascending expert ids, -1 padded) and ``topk_weights [T, K]`` float32 (differentiable in probs).

    Raises:
        ValueError: a token routed to more than ``topk`` experts.
    """
    t, e = routing_map.shape
    per_token = routing_map.sum(1)
    if t and int(per_token.max()) > topk:
        raise ValueError(f"routing_map routes a token to {int(per_token.max())} experts, more than moe_router_topk={topk}")
    ids = torch.arange(e, device=routing_map.device).expand(t, e)
    key = torch.where(routing_map, ids, torch.full_like(ids, e))
    idx = torch.sort(key, dim=1).values[:, :topk]
    valid = idx < e
    idx = torch.where(valid, idx, torch.full_like(idx, -1))
    weights = probs.gather(1, idx.clamp(min=0)).float() * valid
    return idx.contiguous(), weights.contiguous()


class CollschedTokenDispatcher(MoETokenDispatcher):
    """``MoETokenDispatcher`` with collsched's node-deduplicating dispatch and combine.

    Args:
        num_local_experts (int): experts on this rank.
        local_expert_indices (list[int]): their global ids (contiguous blocks, as Megatron places them).
        config (TransformerConfig): ``num_moe_experts`` and ``moe_router_topk`` are read.
        pg_collection (ProcessGroupCollection): ``ep`` is the dispatch group; expert tensor
            parallelism (``expt_tp`` larger than 1) is not supported.
        cluster, dedup, balance, schedule, timeout, combine_precision: as `MoEBuffer`.
    Raises:
        ValueError: expert tensor parallelism, padding to capacity or for quantization (this
            dispatcher moves exactly the routed pairs), or local experts that are not the
            contiguous block.
    """

    def __init__(self, num_local_experts: int, local_expert_indices: List[int], config, pg_collection=None,
                 cluster=None, dedup: str = "node", balance: bool = True, schedule: str = "direct",
                 timeout: Optional[float] = None, combine_precision: str = "float32"):
        super().__init__(config=config, pg_collection=pg_collection)
        if self.tp_size != 1:
            raise ValueError(f"CollschedTokenDispatcher does not support expert tensor parallelism (expt_tp size "
                             f"{self.tp_size}); use Megatron's all-to-all dispatcher there")
        for flag in ("moe_pad_expert_input_to_capacity", "moe_router_padding_for_quantization"):
            if getattr(config, flag, False):
                raise ValueError(f"CollschedTokenDispatcher does not support {flag}=True (it moves exactly the "
                                 f"routed pairs, no padding rows)")
        self.num_local_experts = num_local_experts
        self.local_expert_indices = list(local_expert_indices)
        self.buffer = MoEBuffer(self.ep_group, config.num_moe_experts, cluster=cluster, dedup=dedup, balance=balance,
                                schedule=schedule, timeout=timeout, combine_precision=combine_precision)
        if self.buffer.local_experts != self.local_expert_indices:
            raise ValueError(f"local_expert_indices {self.local_expert_indices} are not this rank's contiguous block "
                             f"{self.buffer.local_experts}")
        self._idx = self._weights = self._dispatched = None
        self._probs_dtype = None
        self.hidden_shape = None

    def dispatch_preprocess(self, tokens: torch.Tensor, routing_map: torch.Tensor, probs: torch.Tensor):
        """Flatten tokens to [T, H]; routing as top-k ids and float32 weights (no communication).

        Returns:
            (Tensor [T, H], Tensor [T, K] float32): tokens and each token's top-k weights.
        """
        self.hidden_shape = tokens.shape
        self._probs_dtype = probs.dtype
        hidden = tokens.reshape(-1, self.hidden_shape[-1])
        self._idx, self._weights = routing_map_to_topk(routing_map.reshape(hidden.shape[0], -1),
                                                       probs.reshape(hidden.shape[0], -1), self.config.moe_router_topk)
        return hidden, self._weights

    def token_dispatch(self, hidden_states: torch.Tensor, probs: torch.Tensor):
        """Dispatch: rows arrive expert-major on the experts' ranks, with their probabilities.

        Returns:
            (Tensor [N, H], Tensor [N]): rows for the local experts (expert-major) and each row's
            probability in the router's dtype (as Megatron's dispatchers hand them to the experts).
        """
        self._dispatched = dispatch(hidden_states, self._idx, probs, self.buffer)
        return self._dispatched.x, self._dispatched.weights.to(self._probs_dtype)

    def dispatch_postprocess(self, hidden_states: torch.Tensor, probs: torch.Tensor):
        """Nothing to permute: returns (tokens, tokens_per_expert [local experts] int64, probs)."""
        tpe = torch.tensor(self._dispatched.tokens_per_expert, dtype=torch.int64)
        return hidden_states, tpe, probs

    def combine_preprocess(self, hidden_states: torch.Tensor):
        return hidden_states

    def token_combine(self, hidden_states: torch.Tensor):
        """Combine: forwarders sum their node's outputs per token; one vector per node returns."""
        return combine(hidden_states, self._dispatched.handle, weighted=False)

    def combine_postprocess(self, hidden_states: torch.Tensor):
        return hidden_states.view(self.hidden_shape)


def use_collsched_dispatcher(moe_layer, **kwargs) -> CollschedTokenDispatcher:
    """Replace a built Megatron ``MoELayer``'s token dispatcher by a `CollschedTokenDispatcher`.

    Collective: every rank of the layer's expert-parallel group calls it (it creates a `MoEBuffer`).
    The layer keeps its router and experts; only the dispatch and combine change.

    Args:
        moe_layer (MoELayer): built with ``moe_token_dispatcher_type="alltoall"`` (or any dispatcher
            whose process groups are the ones to use).
        **kwargs: ``cluster``, ``dedup``, ``balance``, ``schedule``, ``timeout``, ``combine_precision``.
    Returns:
        CollschedTokenDispatcher: the new ``moe_layer.token_dispatcher``.
    Raises:
        ValueError: shared-expert overlap (it runs inside Megatron's own dispatchers), or what
            `CollschedTokenDispatcher` rejects.
    """
    if getattr(moe_layer, "shared_expert_overlap", False):
        raise ValueError("use_collsched_dispatcher: moe_shared_expert_overlap=True is not supported (the shared "
                         "expert's overlap runs inside Megatron's own dispatchers)")
    old = moe_layer.token_dispatcher
    # MoETokenDispatcher reads these three groups from its pg_collection.
    groups = SimpleNamespace(ep=old.ep_group, expt_tp=old.tp_group, tp_ep=old.tp_ep_group)
    new = CollschedTokenDispatcher(moe_layer.num_local_experts, moe_layer.local_expert_indices, moe_layer.config,
                                   pg_collection=groups, **kwargs)
    moe_layer.token_dispatcher = new
    return new


__all__ = ["CollschedTokenDispatcher", "routing_map_to_topk", "use_collsched_dispatcher", "SUPPORTED"]
