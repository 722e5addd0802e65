"""End-to-end MoE training with torchtitan 0.3.0 on 8 CPU ranks (EP 8 over 2 nodes x 4), three dispatchers.

torchtitan's own ``AllToAllTokenDispatcher`` against collsched's ``CollschedTokenDispatcher``
with ``exchange="all_to_all"`` (torchtitan's rows, collsched's all-to-all) and ``"dedup"``
(MoEBuffer, one copy per token per node). Every dispatcher trains the same Qwen3-MoE from the
same weights on the same batch (one fixed batch per rank, every step; FSDP over the 8 ranks,
EP 8, AdamW), for two routings:

- ``uniform``: the router as initialised (near uniform expert load);
- ``skewed``: a fixed router bias giving Zipf-like expert popularity (exponent ``--zipf``;
  the bias is ``--skew`` times the expert's Zipf weight over the largest, hot experts placed
  at random): the aux-loss-free balancer is not run, so the skew stays over the steps.

Per dispatcher and routing it reports the step time (median over the timed steps of the
slowest rank's step), tokens/s, the share of the step spent in dispatch + combine (forward
and backward, timed around the dispatcher's calls on each rank; median over steps of the
rank average) and the loss of every step; ``--plot`` draws the loss curves. ``--json``
prints one object ``{"setup": {...}, "results": [{"dispatcher", "routing", "step_s",
"a2a_share", "losses", ...}]}``.

``--compile`` trains every dispatcher a second time with torchtitan's ``compile.enable`` (each
transformer block compiled with ``fullgraph=True``, backend ``--compile-backend``, torchtitan's
default ``inductor``); "vs titan" compares with torchtitan's dispatcher run the same way. The
dispatch + combine share is measured in eager runs only (its timers are host code).

``--testbed`` (root) runs the ranks on the namespace testbed (collsched.testbed: 2 servers x 4
ranks, one NIC per rank shaped to ``--nic``), otherwise plain Gloo on loopback (no slow link:
times there show host overheads). The CPU settings torchtitan needs are in
tests/_torchtitan_model.py (`cpu_shims`). Needs torchtitan 0.3.0 (pip install 'collsched[torchtitan]').
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.join(os.path.dirname(HERE), "tests")
DISPATCHERS = ("torchtitan", "collsched_all_to_all", "collsched_dedup")
ROUTINGS = ("uniform", "skewed")


def zipf_bias(experts: int, exponent: float, scale: float, seed: int = 0):
    """Router bias [E] float32: ``scale * w_e / max(w)`` with Zipf weights ``w = rank^-exponent``,
    the ranks placed on experts by a fixed random permutation (hot experts anywhere)."""
    import numpy as np

    w = np.arange(1, experts + 1, dtype=np.float64) ** -exponent
    perm = np.random.default_rng(seed).permutation(experts)
    out = np.empty(experts, np.float32)
    out[perm] = scale * w / w.max()
    return out


def _instrument(disp, rec: dict):
    """Time a dispatcher's dispatch and combine, forward and backward, into ``rec['s']``.

    Backward: an identity autograd node on each side of the call records when the gradient
    reaches the call's output (its backward starts) and when it leaves through the input (ends).
    """
    import torch
    from torch.distributed._functional_collectives import AsyncCollectiveTensor

    class Mark(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t, key, side):
            ctx.key, ctx.side = key, side
            return t.view_as(t)

        @staticmethod
        def backward(ctx, g):
            # torchtitan's exchange returns an AsyncCollectiveTensor (functional collectives):
            # wait for it here, so its transfer counts inside the call, not wherever it is read.
            if isinstance(g, AsyncCollectiveTensor):
                g = g.wait()
            now = time.perf_counter()
            if ctx.side == "out":
                rec["open"][ctx.key] = now
            else:
                rec["s"] += now - rec["open"].pop(ctx.key, now)
            return g, None, None

    d0, c0 = disp.dispatch, disp.combine

    def dispatch(x, scores, ids, counts):
        key = ("d", rec["n"])
        rec["n"] += 1
        t = time.perf_counter()
        rows, per_expert, meta = d0(Mark.apply(x, key, "in"), scores, ids, counts)
        rows = Mark.apply(rows, key, "out")
        rec["s"] += time.perf_counter() - t
        return rows, per_expert, meta

    def combine(y, meta, x):
        key = ("c", rec["n"])
        rec["n"] += 1
        t = time.perf_counter()
        out = Mark.apply(c0(Mark.apply(y, key, "in"), meta, x), key, "out")
        rec["s"] += time.perf_counter() - t
        return out

    disp.dispatch, disp.combine = dispatch, combine


def worker(cfg_kw: dict, steps: int, warmup: int, batch_size: int, dispatchers: list, routings: list, bias: list,
           algorithm: str, seed: int, dtype: str, compile_backends: tuple = (None,)):
    """One rank: train every (routing, dispatcher, compile backend) for warmup + steps steps;
    per-step times, shares, losses. A compile backend turns on torchtitan's ``compile.enable``
    (each transformer block compiled, ``fullgraph=True``); None runs eagerly."""
    import _torchtitan_model as tm

    tm.cpu_shims()
    import numpy as np
    import torch
    import torch.distributed as dist

    from collsched.comm.launch import report_progress
    from collsched.moe.torchtitan import use_collsched_dispatcher

    torch.set_num_threads(1)  # 8 ranks share the host's cores
    rank = dist.get_rank()
    base = tm.model_config(**cfg_kw)
    seq = cfg_kw["seq_len"]
    out = {}
    # The first model of a process pays one-time costs (Gloo connections, allocator growth,
    # lazy imports): a throwaway run of the first pair keeps them out of every timed result.
    runs = [(routings[0], dispatchers[0], compile_backends[0], True)] + [
        (r, d, c, False) for c in compile_backends for r in routings for d in dispatchers]
    for routing, name, backend, throwaway in runs:
        cfg = tm.replace(base)
        if name == "collsched_all_to_all":
            use_collsched_dispatcher(cfg, exchange="all_to_all", algorithm=algorithm)
        elif name == "collsched_dedup":
            use_collsched_dispatcher(cfg, exchange="dedup")
        model, _ = tm.build(cfg, ep=dist.get_world_size(), dtype=dtype, seed=seed,
                            router_bias=np.asarray(bias, np.float32) if routing == "skewed" else None,
                            compile_backend=backend)
        rec = {"s": 0.0, "n": 0, "open": {}}
        for m in model.modules():
            # The timers are host code inside the block: compiled blocks run without them.
            if hasattr(m, "routed_experts") and backend is None:
                _instrument(m.routed_experts.token_dispatcher, rec)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
        times, shares, losses = [], [], []
        for step in range(warmup + (1 if throwaway else steps)):
            # One batch per rank for every step: the loss curve shows the model fitting it.
            tokens, labels = tm.batch(seed, rank, cfg.vocab_size, seq, batch_size)
            dist.barrier()
            rec["s"] = 0.0
            t0 = time.perf_counter()
            loss = tm.loss_of(model, tokens, labels)
            loss.backward()
            opt.step()
            opt.zero_grad()
            dt = time.perf_counter() - t0
            losses.append(float(loss))
            if step >= warmup:
                times.append(dt)
                shares.append(rec["s"] / dt if backend is None else float("nan"))
        del model, opt
        if throwaway:
            continue
        out[_key(name, routing, backend)] = {"times": times, "shares": shares, "losses": losses}
        report_progress(f"rank {rank}: {name} {routing} {backend or 'eager'} median step "
                        f"{statistics.median(times):.3f}s")
    return out


def _launch(a, args):
    if a.testbed:
        from collsched.testbed import FabricSpec, cluster_spec
        from collsched.testbed.launch import run_on_new_fabric

        spec = FabricSpec.from_knobs(a.servers, a.gpus, a.nic)
        cluster = cluster_spec(spec)
        sys.path[:0] = [TESTS, HERE]  # the forked ranks import the worker and the model harness
        res = run_on_new_fabric(spec, worker, args, env={"COLLSCHED_TIMEOUT_S": "300", "COLLSCHED_CLUSTER": cluster},
                                timeout_s=a.timeout, on_progress=lambda line: print(f"  {line}", file=sys.stderr))
        fabric_text = (f"namespace testbed: {a.servers} servers x {a.gpus} ranks, one NIC per rank shaped to {a.nic} "
                       f"per direction (cluster {cluster})")
        return res, fabric_text
    from collsched.comm.launch import run_local

    res = run_local("moe_training:worker", a.servers * a.gpus, args, gpus_per_server=a.gpus, timeout_s=a.timeout,
                    extra_pythonpath=[HERE, TESTS], env={"COLLSCHED_TIMEOUT_S": "300"},
                    on_progress=lambda line: print(f"  {line}", file=sys.stderr))
    return res, f"Gloo on loopback, one host: {a.servers} emulated nodes x {a.gpus} ranks (no slow link)"


def _key(name: str, routing: str, backend) -> str:
    return f"{name}/{routing}/{backend or 'eager'}"


def summarize(res: list, dispatchers, routings, tokens_per_step: int, compile_backends=(None,)) -> list:
    rows = []
    for backend, routing, name in ((b, r, n) for b in compile_backends for r in routings for n in dispatchers):
        per = [r[_key(name, routing, backend)] for r in res]
        steps = len(per[0]["times"])
        # A step ends when its slowest rank ends.
        slowest = [max(p["times"][i] for p in per) for i in range(steps)]
        share = [statistics.mean(p["shares"][i] for p in per) for i in range(steps)]
        step_s = statistics.median(slowest)
        rows.append({"dispatcher": name, "routing": routing, "compiled": backend or "eager",
                     "step_s": step_s, "step_max_s": max(slowest),
                     "tokens_per_s": tokens_per_step / step_s,
                     "a2a_share": statistics.median(share) if backend is None else None,
                     # the loss every rank saw, averaged over ranks (each rank has its own batch)
                     "losses": [statistics.mean(p["losses"][i] for p in per) for i in range(len(per[0]["losses"]))]})
    for row in rows:
        # torchtitan's own dispatcher run the same way (eager, or compiled with the same backend)
        ref = next(r for r in rows if r["routing"] == row["routing"] and r["dispatcher"] == "torchtitan"
                   and r["compiled"] == row["compiled"]) if "torchtitan" in dispatchers else None
        row["speedup_vs_torchtitan"] = ref["step_s"] / row["step_s"] if ref else None
    return rows


def plot(rows: list, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    routings = sorted({r["routing"] for r in rows}, key=ROUTINGS.index)
    fig, axes = plt.subplots(1, len(routings), figsize=(5 * len(routings), 3.5), squeeze=False)
    for ax, routing in zip(axes[0], routings):
        for r in rows:
            if r["routing"] == routing:
                label = r["dispatcher"] + ("" if r["compiled"] == "eager" else f" ({r['compiled']})")
                ax.plot(range(len(r["losses"])), r["losses"], marker="o", ms=3, label=label)
        ax.set_title(f"{routing} routing")
        ax.set_xlabel("step")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.set_ylabel("loss (mean over ranks)")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=5, help="timed steps per dispatcher and routing")
    ap.add_argument("--warmup", type=int, default=1, help="untimed first steps (plans, allocations)")
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--experts", type=int, default=32)
    ap.add_argument("--topk", type=int, default=8)
    ap.add_argument("--moe-hidden", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--seq", type=int, default=256, help="tokens per sequence")
    ap.add_argument("--batch", type=int, default=1, help="sequences per rank per step")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    ap.add_argument("--routing", default="both", choices=("uniform", "skewed", "both"))
    ap.add_argument("--zipf", type=float, default=1.2, help="skewed: Zipf exponent of expert popularity")
    ap.add_argument("--skew", type=float, default=0.1, help="skewed: router bias of the most popular expert")
    ap.add_argument("--dispatchers", default=",".join(DISPATCHERS))
    ap.add_argument("--algorithm", default="auto", help="collsched_all_to_all: collsched all-to-all algorithm")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--compile", action="store_true",
                    help="also train with torchtitan's compile.enable (each block compiled, fullgraph) beside eager")
    ap.add_argument("--compile-backend", default="inductor", help="--compile: torch.compile backend (torchtitan's "
                    "default: inductor; aot_eager skips code generation)")
    ap.add_argument("--testbed", action="store_true", help="run on the namespace testbed (root; docs/testbed.md)")
    ap.add_argument("--nic", default="100Mbps", help="--testbed: every emulated NIC's rate per direction")
    ap.add_argument("--servers", type=int, default=2)
    ap.add_argument("--gpus", type=int, default=4, help="ranks per server")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds for the whole run")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--plot", default=None, help="write the loss curves to this PNG")
    a = ap.parse_args(argv)
    world = a.servers * a.gpus
    dispatchers = [d.strip() for d in a.dispatchers.split(",") if d.strip()]
    for d in dispatchers:
        if d not in DISPATCHERS:
            ap.error(f"--dispatchers: {d!r} is not one of {DISPATCHERS}")
    if a.experts % world:
        ap.error(f"--experts {a.experts} must be a multiple of the {world} ranks (EP {world})")
    if a.steps < 1 or a.warmup < 0:
        ap.error("--steps must be at least 1 and --warmup at least 0")
    routings = list(ROUTINGS) if a.routing == "both" else [a.routing]
    cfg_kw = dict(dim=a.dim, n_layers=a.layers, experts=a.experts, top_k=a.topk, moe_hidden=a.moe_hidden,
                  vocab=a.vocab, heads=a.heads, head_dim=a.dim // a.heads, seq_len=a.seq)
    bias = zipf_bias(a.experts, a.zipf, a.skew, a.seed).tolist()
    compile_backends = (None, a.compile_backend) if a.compile else (None,)
    args = (cfg_kw, a.steps, a.warmup, a.batch, dispatchers, routings, bias, a.algorithm, a.seed, a.dtype,
            compile_backends)
    t0 = time.time()
    res, fabric = _launch(a, args)
    rows = summarize(res, dispatchers, routings, world * a.batch * a.seq, compile_backends)
    setup = {"model": {"family": "qwen3-moe (torchtitan 0.3.0)", **cfg_kw, "dtype": a.dtype},
             "ranks": world, "parallelism": f"FSDP {world} + EP {world}", "fabric": fabric,
             "skew": {"uniform": "router as initialised",
                      "skewed": f"router bias {a.skew} x Zipf({a.zipf}) weight / max, fixed (balancer off)"},
             "steps": a.steps, "warmup": a.warmup, "tokens_per_step": world * a.batch * a.seq,
             "collsched_all_to_all_algorithm": a.algorithm, "wall_s": time.time() - t0,
             "compiled": f"torchtitan compile.enable, backend {a.compile_backend}" if a.compile else "no",
             "load_average": os.getloadavg()[0], "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}
    if a.plot:
        plot(rows, a.plot)
    if a.json:
        print(json.dumps({"setup": setup, "results": rows}))
        return
    print(f"{fabric}; {setup['parallelism']}; load average {setup['load_average']:.1f}")
    print(f"{'dispatcher':<22}{'routing':<9}{'mode':<11}{'step s':>9}{'max s':>9}{'tok/s':>10}{'a2a share':>11}"
          f"{'vs titan':>10}  losses")
    for r in rows:
        sp = f"{r['speedup_vs_torchtitan']:.2f}x" if r["speedup_vs_torchtitan"] else "-"
        share = "-" if r["a2a_share"] is None else f"{r['a2a_share']:.2f}"
        print(f"{r['dispatcher']:<22}{r['routing']:<9}{r['compiled']:<11}{r['step_s']:>9.3f}{r['step_max_s']:>9.3f}"
              f"{r['tokens_per_s']:>10.0f}{share:>11}{sp:>10}  "
              + " ".join(f"{x:.4f}" for x in r["losses"]))


if __name__ == "__main__":
    main()
