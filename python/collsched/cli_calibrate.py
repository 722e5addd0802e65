"""CLI: `collsched calibrate` — measure the backend constants `choose` uses and store them."""
from __future__ import annotations

import json
import os
from typing import Optional

import typer

from collsched.cli_core import reporting_errors


def _measure(nprocs: int, iters: int, mib: int, timeout_s: float) -> tuple[dict, str]:
    """Rank 0's measurements and the backend they were taken on: under torchrun in this
    process group, else on `nprocs` local Gloo ranks."""
    import torch.distributed as dist

    from collsched.calibration import measure_rank

    if "RANK" in os.environ and "WORLD_SIZE" in os.environ and "MASTER_ADDR" in os.environ:
        import torch

        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            raise ValueError("calibrate measures the Gloo backend (CPU tensors); run it without CUDA_VISIBLE_DEVICES "
                             "or on local ranks (NCCL's defaults are kept)")
        dist.init_process_group(backend)
        try:
            return measure_rank(iters, mib), f"torchrun, {dist.get_world_size()} ranks"
        finally:
            dist.destroy_process_group()
    from collsched.comm.launch import run_local

    results = run_local(measure_rank, nprocs, (iters, mib), timeout_s=timeout_s, backend="gloo")
    return results[0], f"{nprocs} local Gloo ranks"


def register(app: typer.Typer) -> None:
    @app.command("calibrate")
    @reporting_errors
    def calibrate(
        nprocs: int = typer.Option(8, "--nprocs", help="local Gloo ranks to spawn when not under torchrun"),
        iters: int = typer.Option(20, "--iters", help="timed repetitions of each measurement (bounded)"),
        mib: int = typer.Option(4, "--mib", help="MiB per message for the copy and duplex measurements"),
        output: Optional[str] = typer.Option(None, "--out", "-o",
                                             help="file to write (default: the user cache dir; "
                                                  "COLLSCHED_CALIBRATION points choose at another)"),
        show: bool = typer.Option(False, "--show", help="print the table choose uses now and where it comes from; "
                                                        "measure nothing"),
        timeout_s: float = typer.Option(180.0, "--timeout", help="seconds before the ranks are stopped"),
    ) -> None:
        """Measure Gloo's per-call, per-step, per-message and per-MiB costs, torch's half duplex and the
        planners' cost per transfer on this machine, and store them for `collsched.choose` (auto)."""
        import datetime

        from collsched import _core
        from collsched.calibration import load, measure_planning, path_in_use, save

        if show:
            where = path_in_use()
            print(f"# {'built-in defaults' if where is None else where}")
            print(load().to_json())
            return
        if not 1 <= iters <= 1000:
            raise ValueError(f"--iters must be between 1 and 1000, got {iters}")
        if not 1 <= mib <= 256:
            raise ValueError(f"--mib must be between 1 and 256, got {mib}")
        if not 2 <= nprocs <= 64:
            raise ValueError(f"--nprocs must be between 2 and 64, got {nprocs}")
        table = json.loads(load().to_json())
        measured, how = _measure(nprocs, iters, mib, timeout_s)
        world = measured.pop("world")
        table["backends"]["gloo"] = {k: round(float(v), 3) for k, v in measured.items()}
        table["planning_ns_per_transfer"] = measure_planning(max(iters // 4, 3))
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        table["source"] = (f"gloo measured by `collsched calibrate` on {how} ({world} ranks, {iters} iterations, "
                           f"{mib} MiB), {stamp}; nccl kept from the previous table; planning measured on this host")
        path = save(table, output)
        print(json.dumps(table["backends"]["gloo"], indent=2))
        print(f"wrote {path}" + ("" if output is None and "COLLSCHED_CALIBRATION" not in os.environ
                                 else " (point COLLSCHED_CALIBRATION at it for choose to use it)"
                                 if output is not None else ""))
        _core.Calibration.from_json(path.read_text(encoding="utf-8"))
