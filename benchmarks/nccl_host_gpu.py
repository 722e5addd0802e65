"""Host time and GPU time per all-to-all call on NCCL: torch's own call against collsched's
paths, eager and captured in a CUDA graph, from 1 KiB to 64 MiB per rank.

Methods (the same balanced matrix, float32, size = bytes each rank sends):

    torch           torch.distributed.all_to_all_single
    torch-graph     torch's call captured in a CUDA graph, replayed
    native          collsched, call site in native mode (auto with candidates=["native"])
    planned         collsched, algorithm="fast", checked (header exchange every call)
    planned-device  the same with COLLSCHED_NCCL_EXCHANGE=device (exchange on the NCCL group)
    unchecked       collsched, algorithm="fast", traffic= and checks=False (no exchange)
    captured        the unchecked call captured in a CUDA graph, replayed

    host us   median host time of one call (from entering the call to its return), max over ranks
    gpu us    median GPU time of one call (CUDA events around it, on the current stream), max over ranks

Targets (issue 47): captured host <= torch host; native host <= 1.3x torch; planned host <= 0.5 ms.
8 ranks may share one GPU (the launcher gives each its own NCCL host id: bytes over loopback
sockets), so the GPU times say nothing of a real fabric; the host times are the point.

    python benchmarks/nccl_host_gpu.py [--ranks 8] [--reps 15] [--json out.json]
    python benchmarks/nccl_host_gpu.py --backend gloo --sizes 1KiB,64KiB   # CPU smoke test (no graphs)
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

METHODS = ("torch", "torch-graph", "native", "planned", "planned-device", "unchecked", "captured")
SIZES = tuple(1024 * 4 ** i for i in range(9))  # 1 KiB .. 64 MiB


def rank_main(sizes: tuple, reps: int, methods: tuple) -> dict:
    import numpy as np
    import torch
    import torch.distributed as dist

    import collsched

    rank, n = dist.get_rank(), dist.get_world_size()
    cuda = torch.cuda.is_available() and "nccl" in str(dist.get_backend()).lower()
    dev = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    host = dist.new_group(backend="gloo")  # lines the ranks up without touching the GPU
    cluster = f"h200:{max(1, n // 4)},gpus={min(n, 4)}"
    out: dict = {}

    def together():
        if cuda:
            torch.cuda.synchronize()
        dist.barrier(group=host)

    for size in sizes:
        per_pair = max(1, size // 4 // n)
        m = np.full((n, n), per_pair, dtype=np.int64)
        ins, outs = m[rank].tolist(), m[:, rank].tolist()
        x = torch.randn(sum(ins), device=dev)
        y = torch.empty(sum(outs), device=dev)
        calls = {
            "torch": lambda: dist.all_to_all_single(y, x, outs, ins),
            "native": lambda: collsched.all_to_all_single(y, x, outs, ins, algorithm="auto", cluster=cluster,
                                                          options={"candidates": ["native"]}),
            "planned": lambda: collsched.all_to_all_single(y, x, outs, ins, algorithm="fast", cluster=cluster),
            "unchecked": lambda: collsched.all_to_all_single(y, x, outs, ins, algorithm="fast", cluster=cluster,
                                                             traffic=m, checks=False),
        }
        calls["planned-device"] = calls["planned"]
        graphs = {"torch-graph": "torch", "captured": "unchecked"}
        for method in methods:
            if method in graphs and not cuda:
                continue
            os.environ["COLLSCHED_NCCL_EXCHANGE"] = "device" if method == "planned-device" else "host"
            fn = calls[graphs.get(method, method)]
            for _ in range(2):  # warm-up: communicators, plans, programs, pools
                fn()
            together()
            if method in graphs:
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    fn()
                torch.cuda.current_stream().wait_stream(side)
                together()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    fn()
                fn = graph.replay
                fn()
            host_t, gpu_t = [], []
            for _ in range(reps):
                together()
                if cuda:
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                t0 = time.perf_counter()
                fn()
                host_t.append(time.perf_counter() - t0)
                if cuda:
                    end.record()
                    end.synchronize()
                    gpu_t.append(start.elapsed_time(end) / 1e3)
            out[f"{size}:{method}"] = (statistics.median(host_t), statistics.median(gpu_t) if gpu_t else None)
    os.environ.pop("COLLSCHED_NCCL_EXCHANGE", None)
    return out


def _size_text(b: int) -> str:
    return f"{b // 2**20} MiB" if b >= 2**20 else f"{b // 1024} KiB"


def table(results: list, sizes: tuple, methods: tuple) -> tuple[str, list]:
    """Max over ranks per (size, method); the printed table and its rows."""
    rows, lines = [], [f"{'size':>8} {'method':>15} {'host us':>9} {'gpu us':>9} {'host/torch':>10} {'gpu/torch':>9}"]
    for size in sizes:
        base = None
        for method in methods:
            key = f"{size}:{method}"
            got = [r[key] for r in results if key in r]
            if not got:
                continue
            host_s = max(g[0] for g in got)
            gpu_s = max(g[1] for g in got) if got[0][1] is not None else None
            if method == "torch":
                base = (host_s, gpu_s)
            rh = host_s / base[0] if base else float("nan")
            rg = gpu_s / base[1] if base and gpu_s is not None and base[1] else float("nan")
            rows.append({"size": size, "method": method, "host_us": host_s * 1e6,
                         "gpu_us": None if gpu_s is None else gpu_s * 1e6, "host_vs_torch": rh, "gpu_vs_torch": rg})
            gpu_text = "-" if gpu_s is None else f"{gpu_s * 1e6:9.1f}"
            lines.append(f"{_size_text(size):>8} {method:>15} {host_s * 1e6:9.1f} {gpu_text:>9} {rh:10.2f} {rg:9.2f}")
    return "\n".join(lines), rows


def _sizes(text: str) -> tuple:
    from collsched.units import parse_bytes

    return tuple(int(parse_bytes(s)) for s in text.split(","))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--sizes", default=None, help="comma-separated bytes per rank (default 1KiB..64MiB, x4)")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--backend", default="nccl", choices=("nccl", "gloo"))
    ap.add_argument("--json", default=None, help="write {setup, results} here")
    args = ap.parse_args()
    sizes = _sizes(args.sizes) if args.sizes else SIZES
    methods = tuple(args.methods.split(","))
    unknown = set(methods) - set(METHODS)
    if unknown:
        sys.exit(f"--methods: unknown {sorted(unknown)}; choose from {METHODS}")
    from collsched.comm.launch import run_local

    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    import nccl_host_gpu  # the ranks import the function by module name, not from __main__

    res = run_local(nccl_host_gpu.rank_main, args.ranks, (sizes, args.reps, methods),
                    gpus_per_server=min(args.ranks, 4), timeout_s=540, backend=args.backend, extra_pythonpath=[here])
    text, rows = table(res, sizes, methods)
    print(f"# {args.ranks} ranks, backend {args.backend}, {args.reps} reps, median per rank, max over ranks")
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"setup": vars(args), "results": rows}, f, indent=1)


if __name__ == "__main__":
    main()
