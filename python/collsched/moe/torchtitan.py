"""torchtitan token dispatcher on collsched (`CollschedTokenDispatcher`), for torchtitan 0.3.0.

torchtitan's MoE layer (``RoutedExperts``) calls a token dispatcher twice per layer:
``dispatch(x_TD, topk_scores_TK, topk_expert_ids_TK, num_local_tokens_per_expert_E)`` returns
this rank's expert input rows (ordered by local expert, then source rank, then token), the row
count of each local expert and a metadata object; ``combine(routed_output_RD, metadata, x_TD)``
returns ``[T, D]`` with every token's expert outputs weighted by its routing scores and summed.

``CollschedTokenDispatcher`` implements that interface in two ways (``Config.exchange``):

- ``"all_to_all"``: torchtitan's own layout (one row per (token, expert) pair, sorted by
  expert id), with the token exchange done by ``collsched.all_to_all_single`` (``algorithm=``
  auto, fast, ...: a plan chosen for the actual traffic matrix). The per-expert counts of all
  EP ranks are gathered once per layer call, so every rank knows the whole matrix and the
  exchange skips collsched's descriptor exchange. Losses and gradients are bitwise those of
  torchtitan's ``AllToAllTokenDispatcher``: the same rows are summed in the same order.
- ``"dedup"``: `collsched.moe.MoEBuffer` (Fusco): one copy per token per destination node
  through balanced forwarders, partial sums on the forwarders in combine (docs/moe.md).

Both are differentiable: the backward of dispatch is a combine of the gradients along the
same routes, the backward of combine a dispatch. Select it for every MoE layer of a model
config with one line::

    from collsched.moe.torchtitan import use_collsched_dispatcher
    use_collsched_dispatcher(model_config, exchange="dedup")   # before model_config.build()

Importing this module needs torchtitan 0.3.0 (``pip install 'collsched[torchtitan]'``);
docs/torchtitan.md shows the setup, including the settings for CPU-only machines.
"""
from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass

SUPPORTED_TORCHTITAN = "0.3.0"


def _require_torchtitan() -> None:
    """Raise one clear ImportError when torchtitan is missing or not the supported version."""
    try:
        version = importlib.metadata.version("torchtitan")
    except importlib.metadata.PackageNotFoundError:
        raise ImportError(f"collsched.moe.torchtitan needs torchtitan {SUPPORTED_TORCHTITAN}: "
                          f"pip install 'collsched[torchtitan]'") from None
    # torchtitan follows torch nightly and renames its internals between releases; the
    # dispatcher interface used here is the one of this release only.
    if version != SUPPORTED_TORCHTITAN:
        raise ImportError(f"collsched.moe.torchtitan supports torchtitan {SUPPORTED_TORCHTITAN} only, found "
                          f"{version}: pip install 'collsched[torchtitan]'")


_require_torchtitan()

import torch  # noqa: E402
from torchtitan.models.common.token_dispatcher import BaseEPTokenDispatcher, LocalTokenDispatcher  # noqa: E402
from torchtitan.ops.scatter_add import deterministic_scatter_add  # noqa: E402

from collsched.comm.errors import resolve_timeout  # noqa: E402
from collsched.comm.groups import exchange_i64  # noqa: E402
from collsched.moe.routing import DEDUP_MODES, SCHEDULES  # noqa: E402
from collsched.planning import check_algorithm  # noqa: E402

EXCHANGES = ("all_to_all", "dedup")


@dataclass(frozen=True, kw_only=True)
class AllToAllMetadata:
    """What ``combine`` needs after an ``exchange="all_to_all"`` dispatch.

    Attributes:
        token_N (Tensor [N] int64): source token of each sent row (rows sorted by expert id).
        scores_N (Tensor [N]): routing score of each sent row (carries the router's gradient).
        perm_R (Tensor [R] int64): received row of each expert-major output row.
        traffic (Tensor [P, P] int64, on the host): rows rank i sent to rank j, the same on every EP rank.
    """

    token_N: torch.Tensor
    scores_N: torch.Tensor
    perm_R: torch.Tensor
    traffic: torch.Tensor


@dataclass(frozen=True, kw_only=True)
class DedupMetadata:
    """What ``combine`` needs after an ``exchange="dedup"`` dispatch.

    Attributes:
        handle (collsched.moe.DispatchHandle): the MoEBuffer routes.
        weights_R (Tensor [R] float32): routing score of each expert input row (differentiable).
    """

    handle: object
    weights_R: torch.Tensor


class CollschedTokenDispatcher(BaseEPTokenDispatcher):
    """torchtitan EP token dispatcher whose token exchange runs on collsched.

    Built by torchtitan from its ``Config`` (``config.build()``); ``wire_meshes(ep_mesh=...)``
    installs the EP mesh (any sub-mesh: the exchange runs on its process group) and creates the
    `MoEBuffer` in ``dedup`` mode (collective over the EP group). With no EP mesh (EP = 1)
    it reorders locally like torchtitan's ``LocalTokenDispatcher``.

    Raises:
        ValueError: an unknown ``exchange``, ``algorithm``, ``dedup`` or ``schedule`` (when the
            ``Config`` is built), or ``num_experts`` not a multiple of the EP size.
    """

    @dataclass(kw_only=True, slots=True)
    class Config(BaseEPTokenDispatcher.Config):
        """Options (``num_experts`` and ``top_k`` as every torchtitan dispatcher).

        Attributes:
            exchange (str): ``"all_to_all"`` (torchtitan's rows, collsched's all-to-all) or
                ``"dedup"`` (MoEBuffer: one copy per token per node).
            algorithm (str): ``all_to_all`` mode: the ``collsched.all_to_all_single`` algorithm,
                a name of ``collsched.all_to_all_algorithms()`` (``"auto"``, ``"fast"``,
                ``"fanout"``, ...).
            dedup (str): ``dedup`` mode: MoEBuffer's ``dedup`` (``"node"``, ``"rank"``, ``"none"``).
            balance (bool): ``dedup`` mode: balance the forwarders (Fusco's balancer).
            schedule (str): ``dedup`` mode: ``"direct"`` or ``"fast"`` for hop 1.
            cluster (str, optional): GPUs per node of the EP group as a collsched cluster spec;
                default ``COLLSCHED_CLUSTER``, else ``LOCAL_WORLD_SIZE`` GPUs per node.
            timeout (float, optional): seconds each wait may take (default ``COLLSCHED_TIMEOUT_S`` or 60).
        """

        exchange: str = "all_to_all"
        algorithm: str = "auto"
        dedup: str = "node"
        balance: bool = True
        schedule: str = "direct"
        cluster: str | None = None
        timeout: float | None = None

        def __post_init__(self):
            # At construction, not at the first forward: a typo in a training config should
            # fail before the model is built. (No zero-argument super() in a slots dataclass.)
            base_post_init = getattr(BaseEPTokenDispatcher.Config, "__post_init__", None)
            if base_post_init is not None:
                base_post_init(self)
            if self.exchange not in EXCHANGES:
                raise ValueError(f"exchange must be one of {EXCHANGES}, got {self.exchange!r}")
            check_algorithm(self.algorithm)
            if self.dedup not in DEDUP_MODES:
                raise ValueError(f"dedup must be one of {DEDUP_MODES}, got {self.dedup!r}")
            if self.schedule not in SCHEDULES:
                raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")

    def __init__(self, config: Config):
        super().__init__(config)
        if config.exchange not in EXCHANGES:
            raise ValueError(f"exchange must be one of {EXCHANGES}, got {config.exchange!r}")
        self.config = config
        self.buffer = None

    def init_buffer(self) -> None:
        """Check the EP size; in ``dedup`` mode create the MoEBuffer (collective on the EP group)."""
        if self.ep_mesh is None:
            return
        # Read once here, outside any compiled region: the graph sees plain attributes.
        self._ep_group = self.ep_mesh.get_group()
        self._ep_size, self._ep_rank = self.ep_mesh.size(), self.ep_mesh.get_local_rank()
        self._timeout_s = resolve_timeout(self.config.timeout)
        ep = self.ep_mesh.size()
        if self.num_experts % ep:
            raise ValueError(f"num_experts = {self.num_experts} is not a multiple of the EP size {ep}")
        if self.config.exchange == "dedup":
            from collsched.moe.buffer import MoEBuffer

            c = self.config
            self.buffer = MoEBuffer(self._ep_group, self.num_experts, cluster=c.cluster, dedup=c.dedup,
                                    balance=c.balance, schedule=c.schedule, timeout=c.timeout)

    # ------------------------------------------------------------------ dispatch
    def dispatch(self, x_TD: torch.Tensor, topk_scores_TK: torch.Tensor, topk_expert_ids_TK: torch.Tensor,
                 num_local_tokens_per_expert_E: torch.Tensor):
        """Send each token's row to its experts' EP ranks.

        Collective over the EP group.

        Args:
            x_TD (Tensor [T, D]): this rank's tokens (float32 or bfloat16).
            topk_scores_TK (Tensor [T, K] float): routing scores (applied in ``combine``).
            topk_expert_ids_TK (Tensor [T, K] integer): global expert ids, distinct per token.
            num_local_tokens_per_expert_E (Tensor [E] integer): this rank's rows per expert.
        Returns:
            tuple: ``routed_input_RD`` (Tensor [R, D], rows by local expert, then source rank,
            then token), ``num_tokens_per_local_expert_e`` (Tensor [E / P] int64) and the
            metadata for ``combine``.
        Raises:
            CollectiveInputError, CommTimeoutError, PeerFailureError: from the exchange.
        """
        if self.ep_mesh is None:
            return LocalTokenDispatcher.dispatch(self, x_TD, topk_scores_TK, topk_expert_ids_TK,
                                                 num_local_tokens_per_expert_E)
        if self.config.exchange == "dedup":
            return self._dispatch_dedup(x_TD, topk_scores_TK, topk_expert_ids_TK)
        return self._dispatch_a2a(x_TD, topk_scores_TK, topk_expert_ids_TK, num_local_tokens_per_expert_E)

    def _dispatch_a2a(self, x_TD, scores_TK, ids_TK, counts_E):
        p, me = self._ep_size, self._ep_rank
        e_loc = self.num_experts // p
        k = ids_TK.shape[1]
        # Rows sorted by expert id (stable: by token inside an expert), so each destination
        # rank's rows are one contiguous block: the order torchtitan's combine sums in.
        order_N = torch.argsort(ids_TK.reshape(-1), stable=True)
        scores_N = scores_TK.reshape(-1)[order_N]
        token_N = order_N // k
        rows_ND = x_TD[token_N]
        # Every rank's per-expert counts: the whole traffic matrix on every rank (one small
        # host exchange), so the data exchange needs no descriptor round of its own.
        counts = self._gather_counts(counts_E)  # [P, E] int64, on the host
        traffic = counts.reshape(p, p, e_loc).sum(dim=2)  # [src, dst] rows
        mine = counts[:, me * e_loc:(me + 1) * e_loc]  # [src, local expert] rows arriving here
        recv_RD = self._exchange(rows_ND, traffic, transpose=False)
        perm_R = _expert_major(mine, recv_RD.shape[0]).to(x_TD.device)
        routed_RD = recv_RD[perm_R]
        per_expert = mine.sum(dim=0).to(x_TD.device)
        return routed_RD, per_expert, AllToAllMetadata(token_N=token_N, scores_N=scores_N, perm_R=perm_R,
                                                        traffic=traffic)

    def _gather_counts(self, counts_E: torch.Tensor) -> torch.Tensor:
        """Every EP rank's ``counts_E`` as ``[P, E]`` int64 on the host (an operator under the compiler)."""
        from collsched.comm.ops import exchange_i64_op, tracing

        values = counts_E.detach().to(torch.int64)
        what = "torchtitan dispatch count exchange"
        if tracing(counts_E):
            return exchange_i64_op(values, self._ep_group.group_name, self._timeout_s, what)
        return torch.from_numpy(exchange_i64(values.cpu().numpy(), self._ep_group, self._timeout_s, what))

    def _exchange(self, rows: torch.Tensor, traffic: torch.Tensor, transpose: bool) -> torch.Tensor:
        """Differentiable collsched all-to-all of ``rows`` along ``traffic`` [P, P] (or its transpose)."""
        from collsched.nn import all_to_all_single

        m = traffic.t().contiguous() if transpose else traffic
        me = self._ep_rank
        # checks=False: every rank derived `m` from the same gathered counts, so the
        # descriptor exchange would only repeat what is already known. The split sizes are
        # read on the host (unbacked SymInts under the compiler, as torchtitan's own).
        return all_to_all_single(rows.contiguous(), m[:, me].tolist(), m[me].tolist(), group=self._ep_group,
                                 algorithm=self.config.algorithm, cluster=self.config.cluster, traffic=m,
                                 checks=False, timeout=self.config.timeout)

    def _dispatch_dedup(self, x_TD, scores_TK, ids_TK):
        from collsched.moe.autograd import dispatch

        # MoEBuffer takes int64 ids and float32 weights; .float() keeps the router's gradient.
        d = dispatch(x_TD, ids_TK.to(torch.int64), scores_TK.float(), self.buffer)
        # A list in eager, an int64 tensor when traced (the counts are data there).
        per_expert = torch.as_tensor(d.tokens_per_expert, dtype=torch.int64).to(x_TD.device)
        return d.x, per_expert, DedupMetadata(handle=d.handle, weights_R=d.weights)

    # ------------------------------------------------------------------ combine
    def combine(self, routed_output_RD: torch.Tensor, metadata, x_TD: torch.Tensor) -> torch.Tensor:
        """Return the expert outputs to their tokens, weighted by the routing scores, summed.

        Collective over the EP group.

        Args:
            routed_output_RD (Tensor [R, D]): expert outputs, rows as ``dispatch`` returned them.
            metadata: ``dispatch``'s metadata.
            x_TD (Tensor [T, D]): the dispatched tokens (shape and dtype of the result).
        Returns:
            Tensor [T, D]: ``out[t] = sum_k score[t, k] * y(t, k)``, in ``x_TD``'s dtype.
        """
        if self.ep_mesh is None:
            return LocalTokenDispatcher.combine(self, routed_output_RD, metadata, x_TD)
        # The score is applied to each row in float32 and rounded to the row dtype, as
        # torchtitan's combine does, so both modes sum the same values.
        if isinstance(metadata, DedupMetadata):
            from collsched.moe.autograd import combine

            scaled = (routed_output_RD.float() * metadata.weights_R[:, None]).to(routed_output_RD.dtype)
            return combine(scaled, metadata.handle, weighted=False)
        back_RD = torch.empty_like(routed_output_RD).index_copy(0, metadata.perm_R, routed_output_RD)
        rows_ND = self._exchange(back_RD, metadata.traffic, transpose=True)
        scaled = (rows_ND.float() * metadata.scores_N[:, None]).to(rows_ND.dtype)
        index = metadata.token_N[:, None].expand(-1, x_TD.shape[-1])
        return deterministic_scatter_add(torch.zeros_like(x_TD), index, scaled)


def _expert_major(mine: torch.Tensor, total) -> torch.Tensor:
    """Where each expert-major row comes from in the arrived order.

    Rows arrive by source rank, then local expert (``mine`` [P, e]: rows from each source rank
    for each local expert); the experts want them by local expert, then source rank.

    Returns:
        Tensor [total] int64: arrived row of each expert-major row.
    """
    p, e = mine.shape
    flat = mine.reshape(-1)
    arrived_start = (flat.cumsum(0) - flat).reshape(p, e).t().reshape(-1)  # segment (expert, source) starts
    seg_len = mine.t().reshape(-1)
    seg = torch.repeat_interleave(torch.arange(p * e), seg_len, output_size=total)
    out_start = seg_len.cumsum(0) - seg_len
    return arrived_start[seg] + torch.arange(total) - out_start[seg]


def use_collsched_dispatcher(model_config, **options) -> int:
    """Give every MoE layer of a torchtitan model config a `CollschedTokenDispatcher`.

    Call it before ``model_config.build()``; ``num_experts`` and ``top_k`` come from each
    layer's current dispatcher config.

    Args:
        model_config: a torchtitan decoder config (``layers[i].moe.routed_experts.token_dispatcher``).
        **options: ``CollschedTokenDispatcher.Config`` fields (``exchange``, ``algorithm``, ...).
    Returns:
        int: the number of MoE layers changed.
    Raises:
        ValueError: the config has no MoE layer.
    """
    changed = 0
    for layer in model_config.layers:
        moe = getattr(layer, "moe", None)
        if moe is None:
            continue
        old = moe.routed_experts.token_dispatcher
        moe.routed_experts.token_dispatcher = CollschedTokenDispatcher.Config(num_experts=old.num_experts,
                                                                              top_k=old.top_k, **options)
        changed += 1
    if not changed:
        raise ValueError("model_config has no MoE layer (no layers[i].moe)")
    return changed


__all__ = ["CollschedTokenDispatcher", "AllToAllMetadata", "DedupMetadata", "use_collsched_dispatcher",
           "SUPPORTED_TORCHTITAN"]
