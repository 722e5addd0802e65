"""`collsched demo`: a skewed MoE dispatch on 8 ranks (2 servers × 4 GPUs), through torch's
`all_to_all_single` and through every available collsched algorithm; outputs checked byte
for byte; then the simulator's prediction for the same workload shape on a real 8-server
H200 cluster beside the lower bound.

As root with network namespaces, the 8 ranks run on the testbed (docs/testbed.md): two
emulated servers whose ranks each own a 200 Mbit/s NIC, so the scale-out bottleneck, incast
and queues are real, and the simulator's prediction for that fabric is shown beside each
executed time. Otherwise they run on plain local Gloo ranks over loopback, which has no
NIC bottleneck (the demo says so). Executed timings are CPU processes over TCP either way;
what is shown for h200:8 is simulated.
"""
from __future__ import annotations

import time

import numpy as np

TORCH = "torch"
DEMO_RANKS = 8
DEMO_GPUS_PER_SERVER = 4
HIDDEN = 256  # local run: bf16 tokens of 256 elements (512 B); the h200 prediction uses 7168
SKEW = 1.2


def token_matrix(n: int, tokens_per_rank: int, seed: int = 0) -> np.ndarray:
    """Tokens rank i routes to rank j (hot experts: Zipf popularity, top-2)."""
    import collsched

    return collsched.traffic.hot_experts(n, skew=SKEW, tokens_per_rank=tokens_per_rank, top_k=2, hidden=1,
                                         dtype_bytes=1, seed=seed).astype(np.int64)


def available_algorithms() -> list[str]:
    """Every all-to-all algorithm collsched has (the demo runs them all)."""
    import collsched

    return [name for name, _ in collsched.all_to_all_algorithms()]


def demo_worker(tokens_per_rank: int, iters: int) -> dict | None:
    import torch
    import torch.distributed as dist

    import collsched
    from collsched import comm
    from collsched.comm.launch import report_progress

    rank, n = dist.get_rank(), dist.get_world_size()
    cluster = comm.resolve_cluster(None, n)  # LOCAL_WORLD_SIZE=4 → h200:2,gpus=4
    rows = token_matrix(n, tokens_per_rank)
    in_s, out_s = [int(x) for x in rows[rank]], [int(x) for x in rows[:, rank]]
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(sum(in_s), HIDDEN, generator=g).to(torch.bfloat16)
    ref = torch.empty(sum(out_s), HIDDEN, dtype=torch.bfloat16)
    methods = [TORCH] + available_algorithms()
    results, calls = [], {}
    for m in methods:
        if rank == 0:
            report_progress(f"planning and checking {m}")
        out = torch.zeros_like(ref)
        if m == TORCH:
            def call(out=out):
                dist.all_to_all_single(out, x, out_s, in_s)
        else:
            def call(out=out, m=m):
                collsched.all_to_all_single(out, x, out_s, in_s, algorithm=m, cluster=cluster)
        dist.barrier()
        call()
        rec = {"method": m, "t_call": [], "t_exec": []}
        if m == TORCH:
            ref.copy_(out)
            same = True
        else:
            same = bool(torch.equal(out.view(torch.uint8), ref.view(torch.uint8)))
            st = comm.last_call_stats()
            rec.update(plan_ms=st.plan_s * 1e3, planned_by=st.planned_by, steps=st.steps, note=st.note)
        flag = torch.tensor([int(same)])
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        rec["identical"] = bool(flag.item())
        results.append(rec)
        calls[m] = call
    # Timed in interleaved rounds, so load spikes on a shared machine hit every method alike.
    for it in range(iters):
        if rank == 0:
            report_progress(f"timing round {it + 1}/{iters}")
        for rec in results:
            dist.barrier()
            t0 = time.perf_counter()
            calls[rec["method"]]()
            rec["t_call"].append(time.perf_counter() - t0)
            if rec["method"] != TORCH:
                rec["t_exec"].append(comm.last_call_stats().execute_s)
    for rec in results:
        t_call, t_exec = rec.pop("t_call"), rec.pop("t_exec")
        t = torch.tensor([float(np.median(t_call)), float(np.median(t_exec)) if t_exec else 0.0], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        rec["call_ms"], rec["exec_ms"] = float(t[0]) * 1e3, float(t[1]) * 1e3
    if rank == 0:
        return {"results": results, "rows": rows.tolist(), "cluster": cluster.spec(),
                "bytes_per_rank": float(rows.sum(axis=1).mean() * HIDDEN * 2)}
    return None


def simulate_h200(console, tokens_per_rank: int = 4096, hidden: int = 7168) -> None:
    """Prediction for the same workload shape on 8 servers × 8 H200 (simulated, not executed)."""
    from rich.table import Table

    import collsched

    cluster = collsched.Cluster.parse("h200:8")
    n = cluster.num_gpus
    matrix = (token_matrix(n, tokens_per_rank) * (hidden * 2)).astype(np.uint64)
    try:
        from collsched import sim

        simulate, lower_bound = sim.simulate, sim.lower_bound
    except (ImportError, AttributeError):
        console.print("[yellow]Simulator not merged yet: the h200:8 prediction will appear once "
                      "collsched.sim lands.[/yellow]")
        return
    try:
        bound = lower_bound(matrix, cluster)
    except Exception as e:  # still being built
        console.print(f"[yellow]Lower bound unavailable ({type(e).__name__}: {e}).[/yellow]")
        bound = None
    table = Table(title=f"Simulated on {cluster.name}:8 ({n} GPUs), hot experts skew {SKEW}, "
                        f"{tokens_per_rank} tokens × top-2 × {hidden} bf16 per rank")
    for col in ("algorithm", "steps", "predicted time (ms)", "algbw (GB/s)", "× lower bound"):
        table.add_column(col, justify="right" if col != "algorithm" else "left")
    for name in available_algorithms():
        try:
            plan = collsched.plan_all_to_all(matrix, cluster, name)
            r = simulate(plan, cluster)
        except Exception as e:
            table.add_row(name, "", f"[yellow]{type(e).__name__}: {str(e)[:50]}[/yellow]", "", "")
            continue
        ratio = getattr(r, "ratio_to_bound", None)
        table.add_row(name, str(getattr(r, "steps", plan.num_steps)), f"{r.time_s * 1e3:.3f}",
                      f"{getattr(r, 'algbw_gbps', float('nan')):.1f}", f"{ratio:.2f}" if ratio else "")
    if bound is not None:
        table.add_row("[bold]lower bound[/bold]", "", f"{bound.seconds * 1e3:.3f}", "", "1.00")
        table.caption = f"binding term: {getattr(bound, 'term', '?')}"
    console.print(table)


TESTBED_NIC = "200Mbps"
TESTBED_MEAN = 2**20  # bytes per rank pair at the default 2048 tokens per rank


def run_on_testbed(console, tokens_per_rank: int, iters: int) -> int:
    """The demo on a 2×4 namespace fabric (caller checked that it can be built)."""
    from rich.panel import Panel

    from collsched.cli.testbed import format_results
    from collsched.testbed.fabric import FabricSpec
    from collsched.testbed.runner import RunConfig, run

    spec = FabricSpec.from_knobs(DEMO_RANKS // DEMO_GPUS_PER_SERVER, DEMO_GPUS_PER_SERVER, TESTBED_NIC)
    mean = max(1024, TESTBED_MEAN * tokens_per_rank // 2048)
    cfg = RunConfig(workload=f"hot:{SKEW}", mean=mean, algorithms=[TORCH] + available_algorithms(),
                    iters=iters, warmup=1)
    console.print(Panel.fit(
        f"[bold]collsched demo[/bold] on the testbed: {spec.servers} emulated servers × {spec.gpus} ranks, one "
        f"{TESTBED_NIC} NIC per rank (network namespaces + tc), Gloo over TCP\n"
        f"MoE dispatch, hot experts (Zipf {SKEW}, top-2), {mean / 2**20:g} MiB mean per rank pair"))
    with console.status("building the fabric…") as status:
        res = run(spec, cfg, on_progress=lambda line: status.update(line))
    console.print(f"cluster model of this fabric: {res['cluster']}")
    console.print(format_results(res))
    t = {r["algorithm"]: r["time_s"] for r in res["results"]}
    best = min((a for a in t if a != TORCH), key=t.get)
    auto = f" (auto: {t[TORCH] / t['auto']:.2f}×)" if "auto" in t and best != "auto" else ""
    console.print(f"fastest: [bold]{best}[/bold], {t[TORCH] / t[best]:.2f}× torch's speed{auto}, executed on this "
                  "fabric (above 1× = faster than torch).")
    return 0 if all(r["identical"] for r in res["results"]) else 1


def run_demo(tokens_per_rank: int = 2048, iters: int = 7, timeout_s: float = 240.0, use_testbed: bool = True) -> int:
    """The demo; on the namespace testbed when ``use_testbed`` and this process may build it (root)."""
    from rich.console import Console
    from rich.panel import Panel
    from rich.table import Table

    from collsched.comm.launch import run_local
    from collsched.testbed.fabric import TestbedError, check_available

    console = Console(width=None if Console().is_terminal else 100)
    try:
        if not use_testbed:
            raise TestbedError("--no-testbed")
        check_available()
    except TestbedError as e:
        console.print(f"[yellow]testbed not used ({e}); running on plain local Gloo ranks over loopback, which "
                      f"has no NIC bottleneck, so torch's single call is hard to beat here[/yellow]")
    else:
        # Root changes the host's network configuration here: say so before doing it, and how not to.
        console.print("running as root: building a 2 × 4 network-namespace testbed (namespaces, veth pairs and "
                      "qdiscs named collsched-*, all removed at the end, also on failure; docs/testbed.md). To run "
                      "without it, on loopback: `collsched demo --no-testbed` (or `make demo DEMO_ARGS=--no-testbed`)")
        t0 = time.perf_counter()
        code = run_on_testbed(console, tokens_per_rank, min(iters, 5))
        simulate_h200(console)
        console.print(f"done in {time.perf_counter() - t0:.1f} s")
        return code
    console.print(Panel.fit(
        f"[bold]collsched demo[/bold]: {DEMO_RANKS} local ranks on Gloo emulating "
        f"{DEMO_RANKS // DEMO_GPUS_PER_SERVER} servers × {DEMO_GPUS_PER_SERVER} GPUs\n"
        f"MoE dispatch, hot experts (Zipf {SKEW}), {tokens_per_rank} tokens × top-2 per rank, "
        f"bf16 × {HIDDEN}"))
    t0 = time.perf_counter()
    with console.status("starting ranks…") as status:
        res = run_local(demo_worker, DEMO_RANKS, (tokens_per_rank, iters), gpus_per_server=DEMO_GPUS_PER_SERVER,
                        timeout_s=timeout_s, on_progress=lambda line: status.update(line))[0]
    rows = np.asarray(res["rows"])
    console.print(f"per-rank send volume: mean {res['bytes_per_rank'] / 2**20:.2f} MiB, "
                  f"max/mean {rows.sum(1).max() / rows.sum(1).mean():.2f} (send), "
                  f"{rows.sum(0).max() / rows.sum(0).mean():.2f} (receive)")
    table = Table(title="Executed on this machine (CPU, Gloo): median of "
                        f"{iters} interleaved calls, max across ranks")
    for col in ("method", "planned by", "steps", "plan ms", "call ms", "exec ms", "vs torch", "output"):
        table.add_column(col, justify="left" if col in ("method", "planned by") else "right", no_wrap=True)
    base = next(r["call_ms"] for r in res["results"] if r["method"] == TORCH)
    ok_all = True
    for r in res["results"]:
        ok_all &= r["identical"]
        table.add_row(
            r["method"] if r["method"] == TORCH else f"{r['method']}",
            r.get("planned_by", "—"), str(r.get("steps", "")),
            f"{r['plan_ms']:.2f}" if "plan_ms" in r else "", f"{r['call_ms']:.2f}",
            f"{r['exec_ms']:.2f}" if r["method"] != TORCH else "",
            f"{r['call_ms'] / base:.2f}×" if r["method"] != TORCH else "1.00×",
            "[green]identical[/green]" if r["identical"] else "[red]DIFFERS[/red]")
    console.print(table)
    notes = {r["note"] for r in res["results"] if r.get("note")}
    for note in notes:
        console.print(f"[dim]note: {note}[/dim]")
    console.print("[dim]lower is better; vs torch = this call's time / torch's (below 1.00× = faster than torch). "
                  "call = whole drop-in call (split-size exchange, cached plan, execution); "
                  "exec = data movement only. CPU timings on an oversubscribed machine say nothing about GPUs; "
                  "the prediction below does.[/dim]")
    simulate_h200(console)
    console.print(f"done in {time.perf_counter() - t0:.1f} s")
    return 0 if ok_all else 1
