"""Rank bodies for tests/test_moe_torchtitan.py (run by `collsched.comm.launch.run_local`)."""
from __future__ import annotations

import _torchtitan_model as tm


def _train(cfg, dispatcher: dict | None, *, ep, steps, spmd_backend, dtype, seed=0, lr=1e-2, compile_backend=None):
    """Train `steps` AdamW steps; returns (losses, grads of the first step by name)."""
    import torch
    import torch.distributed as dist

    cfg = tm.replace(cfg)
    if dispatcher is not None:
        from collsched.moe.torchtitan import use_collsched_dispatcher

        use_collsched_dispatcher(cfg, **dispatcher)
    model, _ = tm.build(cfg, ep=ep, spmd_backend=spmd_backend, dtype=dtype, seed=seed, compile_backend=compile_backend)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    rank = dist.get_rank()
    kinds = sorted({type(m.routed_experts.token_dispatcher).__name__ + ":" + getattr(
        getattr(m.routed_experts.token_dispatcher, "config", None), "exchange", "-")
        for m in model.modules() if hasattr(m, "routed_experts")})
    losses, first = [], None
    for step in range(steps):
        tokens, labels = tm.batch(seed + step, rank, cfg.vocab_size, cfg.layers[0].attention.rope.max_seq_len)
        loss = tm.loss_of(model, tokens, labels)
        loss.backward()
        if first is None:
            first = tm.local_grads(model)
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach().clone())
    # Rows the dedup buffers sent across nodes in their last dispatch (0 for the other modes):
    # shows that the node-level path was exercised.
    internode = sum(getattr(m.routed_experts.token_dispatcher, "buffer", None).last_stats.get("internode_rows", 0)
                    for m in model.modules() if getattr(getattr(m, "routed_experts", None), "token_dispatcher", None)
                    is not None and getattr(m.routed_experts.token_dispatcher, "buffer", None) is not None)
    kinds.append(f"internode_rows={internode}") if dispatcher and dispatcher.get("exchange") == "dedup" else None
    return losses, first, kinds


def compare_training(modes=("all_to_all", "dedup"), *, ep: int, steps: int, spmd_backend: str = "partial_dtensor",
                     dtype: str = "float32", experts: int = 16, top_k: int = 4, compile_backend: str | None = None,
                     n_layers: int = 2):
    """Train torchtitan's dispatcher and collsched's (each of ``modes``) from the same weights and batches.

    Returns per rank and mode: the largest loss difference (any step), the largest absolute and
    relative gradient difference (first step, any parameter), whether all are exactly zero,
    the dispatcher classes the models held, and the parameter names compared. With
    ``compile_backend`` every model is compiled the same way (torchtitan's ``compile.enable``).
    """
    tm.cpu_shims()
    import torch

    cfg = tm.model_config(experts=experts, top_k=top_k, n_layers=n_layers)
    ref_losses, ref_grads, ref_kinds = _train(cfg, None, ep=ep, steps=steps, spmd_backend=spmd_backend, dtype=dtype,
                                              compile_backend=compile_backend)
    out = {"losses": [float(x) for x in ref_losses], "names": sorted(ref_grads), "kinds": ref_kinds}
    for mode in modes:
        opts = {"exchange": mode}
        got_losses, got_grads, got_kinds = _train(cfg, opts, ep=ep, steps=steps, spmd_backend=spmd_backend,
                                                  dtype=dtype, compile_backend=compile_backend)
        loss_diff = max(float((a.double() - b.double()).abs()) for a, b in zip(ref_losses, got_losses))
        grad_diff, grad_rel, bitwise = 0.0, 0.0, loss_diff == 0.0 and set(ref_grads) == set(got_grads)
        for name in ref_grads:
            a, b = ref_grads[name].double(), got_grads[name].double()
            d = float((a - b).abs().max()) if a.numel() else 0.0
            grad_diff = max(grad_diff, d)
            grad_rel = max(grad_rel, d / max(float(a.abs().max()), 1e-30) if a.numel() else 0.0)
            bitwise = bitwise and torch.equal(ref_grads[name], got_grads[name])
        out[mode] = {"loss_diff": loss_diff, "grad_diff": grad_diff, "grad_rel": grad_rel, "bitwise": bitwise,
                     "kinds": got_kinds, "same_names": sorted(got_grads) == out["names"],
                     "losses": [float(x) for x in got_losses]}
    return out


def compare_layer(*, ep: int, gpus_per_node: int, dtype: str = "float32", tokens: int = 24, dim: int = 32,
                  experts: int = 16, top_k: int = 4):
    """One MoE layer (dispatch, an expert function, combine) with fixed routing, torchtitan's
    AllToAllTokenDispatcher against collsched's two modes: outputs and gradients (x, scores).

    The routing puts each token's experts on its own node except at most one on the other
    node, so every combine adds the same numbers in the same order in float32 (see the test).
    """
    tm.cpu_shims()
    import numpy as np
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torchtitan.distributed import utils as dist_utils
    from torchtitan.models.common.token_dispatcher import AllToAllTokenDispatcher

    from collsched.moe.torchtitan import CollschedTokenDispatcher

    dist_utils.set_spmd_backend("partial_dtensor")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (ep,), mesh_dim_names=("ep",))
    tdt = getattr(torch, dtype)
    nodes = world // gpus_per_node
    per_node = experts // nodes
    per_rank = experts // world
    rng = np.random.default_rng(rank)
    ids = np.empty((tokens, top_k), np.int64)
    for t in range(tokens):
        home = 0  # the lowest node: torchtitan adds the lower expert ids first, as the dedup origin adds node 0 first
        ids[t, :top_k - 1] = rng.choice(per_node, size=top_k - 1, replace=False) + home * per_node
        ids[t, top_k - 1] = rng.integers(per_node) + ((home + 1) % nodes) * per_node
        if t % 5 == 0 and per_rank >= top_k:  # tokens that route to this rank only (no remote rank)
            ids[t] = rng.choice(per_rank, size=top_k, replace=False) + rank * per_rank
        rng.shuffle(ids[t])  # the order inside a row does not matter
    ids_t = torch.from_numpy(ids)
    g = torch.Generator().manual_seed(rank)
    x0 = torch.randn(tokens, dim, generator=g).to(tdt)
    s0 = torch.rand(tokens, top_k, generator=g)
    w = torch.randn(experts // world, dim, dim, generator=torch.Generator().manual_seed(7 + rank)).to(tdt)
    counts = torch.bincount(ids_t.reshape(-1), minlength=experts)

    def run(disp):
        x = x0.clone().requires_grad_(True)
        s = s0.clone().requires_grad_(True)
        rows, per_expert, meta = disp.dispatch(x, s, ids_t, counts)
        # A simple per-expert function of the rows (each local expert its own matrix).
        owner = torch.repeat_interleave(torch.arange(per_expert.numel()), per_expert)
        y = torch.tanh(torch.bmm(rows[:, None, :].float(), w[owner].float())[:, 0]).to(tdt)
        out = disp.combine(y, meta, x)
        gy = torch.randn(out.shape, generator=torch.Generator().manual_seed(100 + rank)).to(tdt)
        (out.float() * gy.float()).sum().backward()
        return out.detach(), x.grad, s.grad, rows.detach(), per_expert

    ref = AllToAllTokenDispatcher.Config(num_experts=experts, top_k=top_k).build()
    ref.wire_meshes(ep_mesh=mesh)
    want = run(ref)
    res = {}
    for mode in ("all_to_all", "dedup"):
        d = CollschedTokenDispatcher.Config(num_experts=experts, top_k=top_k, exchange=mode).build()
        d.wire_meshes(ep_mesh=mesh)
        got = run(d)
        res[mode] = {name: bool(torch.equal(a, b)) for name, a, b in
                     zip(("out", "grad_x", "grad_scores", "rows", "per_expert"), want, got)}
        res[mode]["max_out_diff"] = float((want[0].double() - got[0].double()).abs().max())
    try:
        CollschedTokenDispatcher.Config(num_experts=experts, top_k=top_k, exchange="ring").build()
        res["bad_exchange_error"] = "no error"
    except ValueError as e:
        res["bad_exchange_error"] = str(e)
    return res


def spmd_types_backend(mode: str, *, ep: int, steps: int = 1):
    """collsched's dispatcher (``mode``) under torchtitan's default ``spmd_types`` backend against
    torchtitan's dispatcher under ``partial_dtensor`` (which its own dispatcher needs on Gloo)."""
    tm.cpu_shims()
    cfg = tm.model_config()
    ref_losses, ref_grads, _ = _train(cfg, None, ep=ep, steps=steps, spmd_backend="partial_dtensor", dtype="float32")
    got_losses, got_grads, kinds = _train(cfg, {"exchange": mode}, ep=ep, steps=steps, spmd_backend="spmd_types",
                                          dtype="float32")
    diff = max(float((a.double() - b.double()).abs()) for a, b in zip(ref_losses, got_losses))
    gdiff = max(float((ref_grads[n].double() - got_grads[n].double()).abs().max()) for n in ref_grads
                if n in got_grads and ref_grads[n].numel())
    return {"loss_diff": diff, "grad_diff": gdiff, "kinds": kinds, "names_equal": set(ref_grads) == set(got_grads)}
