"""CLI commands of the runtime: `collsched demo` and `collsched bench`."""
from __future__ import annotations

import json
from typing import Optional

import typer

from collsched.cli_core import reporting_errors


def register(app: typer.Typer) -> None:
    @app.command("demo")
    @reporting_errors
    def demo(tokens: int = typer.Option(2048, help="tokens per rank (each routed to top-2 experts)"),
             iters: int = typer.Option(7, help="timed calls per method (interleaved rounds)")) -> None:
        """Run a skewed MoE all-to-all on 8 local Gloo ranks through torch and collsched, check outputs,
        then show the simulated prediction for h200:8."""
        from collsched.demo import run_demo

        raise typer.Exit(run_demo(tokens, iters))

    @app.command("bench")
    @reporting_errors
    def bench(
        min_bytes: str = typer.Option("1MiB", "-b", "--minbytes", help="smallest size (bytes per rank)"),
        max_bytes: str = typer.Option("16MiB", "-e", "--maxbytes", help="largest size (bytes per rank)"),
        factor: int = typer.Option(4, "-f", "--stepfactor", help="multiply the size by this each step"),
        workload: str = typer.Option("balanced", "--workload",
                                     help="balanced | uniform | zipf:S | hot:S | path to a P×P matrix (.npy/.txt)"),
        warmup: int = typer.Option(2, "-w", "--warmup_iters", help="warm-up calls"),
        iters: int = typer.Option(5, "-n", "--iters", help="timed calls"),
        rounds: int = typer.Option(1, "-r", "--rounds", help="interleaved rounds over all methods; best kept"),
        algorithms: str = typer.Option("", "--algorithms", help="comma list (torch = torch's own); default all"),
        dtype: str = typer.Option("float32", "--dtype", help="float32 | float16 | bfloat16 | int32 | int64 | uint8"),
        cluster: str = typer.Option("", "--cluster", help="cluster spec to plan for (default from LOCAL_WORLD_SIZE)"),
        nprocs: int = typer.Option(8, "--nprocs", help="local ranks to spawn when not under torchrun"),
        gpus_per_server: int = typer.Option(4, "--gpus-per-server", help="emulated GPUs per server (local spawn)"),
        backend: str = typer.Option("auto", "--backend",
                                    help="local spawn: gloo | nccl | auto (nccl when this machine has a CUDA GPU)"),
        check: bool = typer.Option(True, "--check/--no-check", help="count wrong output elements"),
        json_out: Optional[str] = typer.Option(None, "--json", help="also write the rows to this JSON file"),
        planning: bool = typer.Option(False, "--planning",
                                      help="instead: time planning, program compilation and cache hits here"),
        testbed: Optional[str] = typer.Option(None, "--testbed",
                                              help="run on the namespace testbed, e.g. 2x4,nic=200Mbps (root; docs/testbed.md)"),
    ) -> None:
        """nccl-tests-style all-to-all benchmark of torch and every collsched algorithm (torchrun or local ranks)."""
        import torch.distributed as dist

        from collsched.bench import DTYPES, BenchConfig, format_table, run_bench
        from collsched.units import parse_bytes

        if planning:
            from collsched.bench import format_planning, planning_times

            rows = planning_times()
            print(format_planning(rows))
            if json_out:
                with open(json_out, "w") as f:
                    json.dump(rows, f, indent=1)
            return
        if dtype not in DTYPES:
            raise typer.BadParameter(f"unknown dtype {dtype!r} (known: {', '.join(DTYPES)})")
        cfg = BenchConfig(min_bytes=parse_bytes(min_bytes), max_bytes=parse_bytes(max_bytes), factor=factor,
                          workload=workload, warmup=warmup, iters=iters,
                          algorithms=[a for a in algorithms.split(",") if a], dtype=dtype, cluster=cluster,
                          check=check, rounds=rounds)
        from collsched.bench import sizes

        # Fail fast on a bad sweep, workload or cluster, before any rank starts.
        sizes(cfg.min_bytes, cfg.max_bytes, cfg.factor)
        import os

        from collsched import Cluster
        from collsched.workloads import make_workload

        world = int(os.environ.get("WORLD_SIZE", nprocs))
        make_workload(workload, world, 1 << 10, 0)
        if cluster:
            Cluster.parse(cluster)
        if backend not in ("auto", "gloo", "nccl"):
            raise typer.BadParameter(f"unknown backend {backend!r} (known: auto, gloo, nccl)")
        if testbed:
            from collsched.cli_testbed import testbed_errors
            from collsched.testbed.bench import run_bench_on_testbed

            result = testbed_errors(run_bench_on_testbed)(cfg, testbed)
        else:
            result = run_bench(cfg, nprocs=nprocs, gpus_per_server=gpus_per_server, backend=backend)
        if result is None:  # non-zero rank under torchrun
            return
        print(format_table(result))
        if json_out:
            with open(json_out, "w") as f:
                json.dump(result, f, indent=1)
        if any(r.get("wrong") for r in result["rows"]) or any("error" in r for r in result["rows"]):
            raise typer.Exit(1)
