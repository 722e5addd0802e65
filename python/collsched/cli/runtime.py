"""CLI commands of the runtime: `collsched demo` and `collsched bench`."""
from __future__ import annotations

import json
from typing import Optional

import typer

from collsched.cli.core import _WORKLOADS, MAX_MEMORY_HELP, parsed, reporting_errors, writable


def _stream(line: str) -> bool:
    """Print a header or row a bench rank streamed (``bench.emit``); True when it was one."""
    from collsched.cli.bench import format_header, format_row

    kind, _, payload = line.partition(" ")
    if kind == "bench-header":
        print(format_header(json.loads(payload)), flush=True)
    elif kind == "bench-row":
        print(format_row(json.loads(payload), None), flush=True)
    else:
        return False
    return True


def _printed_by_rank0() -> bool:
    """Under torchrun rank 0 prints its rows itself as they finish (``bench.emit``)."""
    import os

    return "RANK" in os.environ and "WORLD_SIZE" in os.environ and "MASTER_ADDR" in os.environ


def register(app: typer.Typer) -> None:
    @app.command("demo")
    @reporting_errors
    def demo(tokens: int = typer.Option(2048, help="tokens per rank (each routed to top-2 experts)"),
             iters: int = typer.Option(7, help="timed calls per method (interleaved rounds)"),
             testbed: bool = typer.Option(True, "--testbed/--no-testbed",
                                          help="as root, run on a 2 x 4 network-namespace testbed it builds and "
                                               "removes (--no-testbed: plain ranks over loopback)")) -> None:
        """Run a skewed MoE all-to-all on 8 Gloo ranks (on the 2 x 4 namespace testbed when root, else
        over loopback) through torch and collsched, check outputs, then show the simulated prediction for h200:8."""
        from collsched.cli.demo import run_demo

        raise typer.Exit(run_demo(tokens, iters, use_testbed=testbed))

    @app.command("bench")
    @reporting_errors
    def bench(
        min_bytes: str = typer.Option("1MiB", "-b", "--minbytes", help="smallest size (bytes per rank)"),
        max_bytes: str = typer.Option("16MiB", "-e", "--maxbytes", help="largest size (bytes per rank)"),
        factor: int = typer.Option(4, "-f", "--stepfactor", help="multiply the size by this each step"),
        workload: str = typer.Option("balanced", "--workload", "-w", help=_WORKLOADS + " (a P×P matrix)"),
        warmup: int = typer.Option(2, "--warmup", "--warmup_iters", help="warm-up calls per method (at least 1)"),
        iters: int = typer.Option(5, "-n", "--iters", help="timed calls per method (at least 1)"),
        rounds: int = typer.Option(1, "-r", "--rounds", help="interleaved rounds over all methods; best kept (at least 1)"),
        algorithms: str = typer.Option("", "--algorithms", "-a",
                                       help="comma list (torch = torch's own); default torch, every algorithm, auto"),
        dtype: str = typer.Option("float32", "--dtype", help="float32 | float16 | bfloat16 | int32 | int64 | uint8"),
        cluster: str = typer.Option("", "--cluster", "-c", help="cluster spec to plan for (default from LOCAL_WORLD_SIZE)"),
        nprocs: int = typer.Option(8, "--nprocs", help="local ranks to spawn when not under torchrun"),
        gpus_per_server: int = typer.Option(4, "--gpus-per-server", help="emulated GPUs per server (local spawn)"),
        backend: str = typer.Option("auto", "--backend",
                                    help="local spawn: gloo | nccl | auto (nccl when this machine has a CUDA GPU)"),
        check: bool = typer.Option(True, "--check/--no-check", help="count wrong output elements"),
        out: Optional[str] = typer.Option(None, "--out", "-o", help="also write the rows to this JSON file"),
        json_out: Optional[str] = typer.Option(None, "--json", hidden=True, help="old name of --out"),
        planning: bool = typer.Option(False, "--planning",
                                      help="instead: time planning, program compilation and cache hits here"),
        testbed: Optional[str] = typer.Option(None, "--testbed",
                                              help="run on the namespace testbed, e.g. 2x4,nic=200Mbps (root; docs/testbed.md)"),
        max_memory: Optional[str] = typer.Option(None, "--max-memory", help=MAX_MEMORY_HELP),
    ) -> None:
        """nccl-tests-style all-to-all benchmark of torch and every collsched algorithm (torchrun or local ranks)."""
        from collsched.cli.bench import BenchConfig, format_footer, format_table, run_bench
        from collsched.units import parse_bytes

        json_out = writable("-o/--out", out or json_out)
        if planning:
            from collsched.cli.bench import format_planning, planning_times

            rows = planning_times()
            print(format_planning(rows))
            if json_out:
                with open(json_out, "w") as f:
                    json.dump(rows, f, indent=1)
            return
        cfg = BenchConfig(min_bytes=parsed("-b/--minbytes", parse_bytes, min_bytes),
                          max_bytes=parsed("-e/--maxbytes", parse_bytes, max_bytes), factor=factor,
                          workload=workload, warmup=warmup, iters=iters,
                          algorithms=[a.strip() for a in algorithms.split(",") if a.strip()], dtype=dtype,
                          cluster=cluster, check=check, rounds=rounds)
        # Fail fast on a bad count, sweep, workload or cluster, before any rank starts.
        cfg.validate()
        import os

        import collsched
        from collsched.topology import as_cluster
        from collsched.workloads import make_workload

        world = int(os.environ.get("WORLD_SIZE", nprocs))
        make_workload(workload, world, 1 << 10, 0)
        if cluster:
            as_cluster(cluster)  # also `calibrated` (collsched.network)
        if backend not in ("auto", "gloo", "nccl"):
            raise typer.BadParameter(f"unknown backend {backend!r} (known: auto, gloo, nccl)")
        known = {"torch"} | {name for name, _ in collsched.all_to_all_algorithms()}
        unknown = [a for a in cfg.algorithms if a not in known]
        if unknown:
            raise ValueError(f"--algorithms: unknown algorithm {unknown[0]!r} (known: {', '.join(sorted(known))})")
        # Resource guard, before any rank starts: the ranks this machine holds at the largest size.
        from collsched.cli.bench import DTYPES
        from collsched.guard import check, estimate_bench

        if testbed:
            from collsched.cli.testbed import testbed_errors
            from collsched.testbed.bench import parse_testbed

            here = testbed_errors(parse_testbed)(testbed).ranks  # every rank of the fabric runs here
        elif _printed_by_rank0():  # under torchrun: this node's ranks
            here = int(os.environ.get("LOCAL_WORLD_SIZE", world))
        else:
            here = nprocs
        # Under torchrun every rank checks alone: only an explicit limit is the same on all of them
        # (the free memory differs from rank to rank, and one rank refusing would leave the others waiting).
        if max_memory is not None or not _printed_by_rank0():
            check(estimate_bench(here, cfg.max_bytes, DTYPES[cfg.dtype]), max_memory)
        streamed = []
        if testbed:
            from collsched.cli.testbed import testbed_errors
            from collsched.testbed.bench import run_bench_on_testbed

            result = testbed_errors(run_bench_on_testbed)(cfg, testbed)
        else:
            result = run_bench(cfg, nprocs=nprocs, gpus_per_server=gpus_per_server, backend=backend,
                               on_progress=lambda line: streamed.append(_stream(line)))
        if result is None:  # non-zero rank under torchrun
            return
        # Rows were printed as they finished (local ranks, or rank 0 under torchrun); else print them now.
        print(format_footer(result) if any(streamed) or _printed_by_rank0() else format_table(result), flush=True)
        if json_out:
            with open(json_out, "w") as f:
                json.dump(result, f, indent=1)
        if any(r.get("wrong") for r in result["rows"]) or any("error" in r for r in result["rows"]):
            raise typer.Exit(1)
