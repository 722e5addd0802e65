"""Megatron-core token dispatcher on `collsched.moe.MoEBuffer` (Fusco's dispatch and combine).

``CollschedTokenDispatcher`` subclasses megatron-core's ``MoETokenDispatcher`` (the interface of
``MoEAlltoAllTokenDispatcher`` and ``MoEFlexTokenDispatcher``): ``dispatch_preprocess`` turns
Megatron's ``routing_map [T, E]`` / ``probs [T, E]`` into ``topk_idx`` / ``topk_weights``,
``token_dispatch`` runs the differentiable `collsched.moe.dispatch` (expert-major rows straight
out, no permute), ``token_combine`` the differentiable `collsched.moe.combine`. As in Megatron's
all-to-all dispatcher, the experts apply the permuted probabilities, so combine sums unweighted.

Importing this module needs ``megatron-core`` (``pip install 'collsched[megatron]'``).
"""
from __future__ import annotations

from typing import List, Optional

import torch

try:
    from megatron.core.transformer.moe.token_dispatcher import MoETokenDispatcher
except ImportError as _e:
    import importlib.util

    if importlib.util.find_spec("megatron") is None:  # not installed: say how to get it, in one line
        raise ImportError("collsched.moe.megatron needs megatron-core, which is not installed: "
                          "pip install 'collsched[megatron]'") from None
    raise ImportError(f"collsched.moe.megatron needs megatron-core's MoETokenDispatcher, which the installed "
                      f"megatron does not provide ({_e}); pip install -U 'collsched[megatron]'") from None

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
        cluster, dedup, balance, schedule, timeout: as `MoEBuffer`.
    Raises:
        ValueError: expert tensor parallelism, or local experts that are not the contiguous block.
    """

    def __init__(self, num_local_experts: int, local_expert_indices: List[int], config, pg_collection=None,
                 cluster=None, dedup: str = "node", balance: bool = True, schedule: str = "direct",
                 timeout: Optional[float] = None):
        super().__init__(config=config, pg_collection=pg_collection)
        if self.tp_size != 1:
            raise ValueError(f"CollschedTokenDispatcher does not support expert tensor parallelism (expt_tp size "
                             f"{self.tp_size}); use Megatron's all-to-all dispatcher there")
        self.num_local_experts = num_local_experts
        self.local_expert_indices = list(local_expert_indices)
        self.buffer = MoEBuffer(self.ep_group, config.num_moe_experts, cluster=cluster, dedup=dedup, balance=balance,
                                schedule=schedule, timeout=timeout)
        if self.buffer.local_experts != self.local_expert_indices:
            raise ValueError(f"local_expert_indices {self.local_expert_indices} are not this rank's contiguous block "
                             f"{self.buffer.local_experts}")
        self._idx = self._weights = self._dispatched = None
        self.hidden_shape = None

    def dispatch_preprocess(self, tokens: torch.Tensor, routing_map: torch.Tensor, probs: torch.Tensor):
        """Flatten tokens to [T, H]; routing as top-k ids and weights (no communication)."""
        self.hidden_shape = tokens.shape
        hidden = tokens.reshape(-1, self.hidden_shape[-1])
        self._idx, self._weights = routing_map_to_topk(routing_map.reshape(hidden.shape[0], -1),
                                                       probs.reshape(hidden.shape[0], -1), self.config.moe_router_topk)
        return hidden, self._weights

    def token_dispatch(self, hidden_states: torch.Tensor, probs: torch.Tensor):
        """Dispatch: rows arrive expert-major on the experts' ranks, with their probabilities."""
        self._dispatched = dispatch(hidden_states, self._idx, probs, self.buffer)
        return self._dispatched.x, self._dispatched.weights

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


__all__ = ["CollschedTokenDispatcher", "routing_map_to_topk"]
