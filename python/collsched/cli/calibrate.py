"""CLI: `collsched calibrate` — measure the backend constants `choose` uses and store them."""
from __future__ import annotations

import json
import os
from typing import Optional

import typer

from collsched.cli.core import reporting_errors, writable


_NAMES = {"gloo": "Gloo", "nccl": "NCCL"}


def _measure(nprocs: int, iters: int, mib: int, timeout_s: float, backend: str,
             shared_gpus: bool) -> tuple[dict, str]:
    """Rank 0's measurements and where they were taken: under torchrun in this process group
    (NCCL when `backend` is "auto" and CUDA is there), else on `nprocs` local ranks."""
    import torch
    import torch.distributed as dist

    from collsched.comm.calibrate import measure_rank

    gpus = torch.cuda.device_count()
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ and "MASTER_ADDR" in os.environ:
        if backend == "auto":
            backend = "nccl" if gpus else "gloo"
        if backend == "nccl":
            if not gpus:
                raise ValueError("--backend nccl needs a CUDA GPU, and this machine has none")
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % gpus)
        dist.init_process_group(backend)
        try:
            return measure_rank(iters, mib), f"torchrun, {dist.get_world_size()} {_NAMES[backend]} ranks"
        finally:
            dist.destroy_process_group()
    from collsched.comm.launch import run_local

    if backend == "auto":
        backend = "gloo"
    if backend == "nccl":
        if not gpus:
            raise ValueError("--backend nccl needs a CUDA GPU, and this machine has none")
        if gpus < nprocs and not shared_gpus:
            raise ValueError(f"--backend nccl with {nprocs} local ranks needs {nprocs} GPUs, this machine has {gpus}: "
                             f"ranks sharing a GPU talk over sockets, which says nothing of the fabric (use "
                             f"--nprocs {gpus}, run under torchrun, or pass --shared-gpus to test the path anyway)")
    results = run_local(measure_rank, nprocs, (iters, mib), timeout_s=timeout_s, backend=backend,
                        gpus_per_server=nprocs)
    shared = " sharing GPUs over sockets" if backend == "nccl" and gpus < nprocs else ""
    return results[0], f"{nprocs} local {_NAMES[backend]} ranks{shared}"


def register(app: typer.Typer) -> None:
    @app.command("calibrate")
    @reporting_errors
    def calibrate(
        nprocs: int = typer.Option(8, "--nprocs",
                                   help="local ranks to spawn when not under torchrun (Gloo, or NCCL with --backend nccl)"),
        iters: int = typer.Option(20, "--iters", help="timed repetitions of each measurement (bounded)"),
        mib: int = typer.Option(4, "--mib", help="MiB per message for the copy and duplex measurements"),
        output: Optional[str] = typer.Option(None, "--out", "-o",
                                             help="file to write (default: the user cache dir; "
                                                  "COLLSCHED_CALIBRATION points choose at another)"),
        show: bool = typer.Option(False, "--show", help="print the table choose uses now and where it comes from; "
                                                        "measure nothing"),
        timeout_s: float = typer.Option(180.0, "--timeout", help="seconds before the ranks are stopped"),
        backend: str = typer.Option("auto", "--backend",
                                    help="gloo, nccl, or auto: under torchrun NCCL when CUDA is there, else Gloo; "
                                         "local ranks: Gloo"),
        shared_gpus: bool = typer.Option(False, "--shared-gpus",
                                         help="let local NCCL ranks share GPUs (tests the path; the constants then "
                                              "describe sockets, not the fabric)"),
    ) -> None:
        """Measure one backend's per-call, per-step, per-message and per-MiB costs, torch's half duplex and
        the planners' cost per transfer on this machine, and store them for `collsched.choose` (auto);
        the other backend's row is kept."""
        import datetime

        from collsched import _core
        from collsched.calibration import load, path_in_use, save
        from collsched.comm.calibrate import measure_planning

        writable("-o/--out", output)
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
        if backend not in ("auto", "gloo", "nccl"):
            raise ValueError(f"--backend must be gloo, nccl or auto, got {backend!r}")
        table = json.loads(load().to_json())
        measured, how = _measure(nprocs, iters, mib, timeout_s, backend, shared_gpus)
        world, name = measured.pop("world"), measured.pop("backend")
        table["backends"][name] = {k: round(float(v), 3) for k, v in measured.items()}
        table["planning_ns_per_transfer"] = measure_planning(max(iters // 4, 3))
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        kept = ", ".join(b for b in sorted(table["backends"]) if b != name) or "nothing"
        table["source"] = (f"{name} measured by `collsched calibrate` on {how} ({world} ranks, {iters} iterations, "
                           f"{mib} MiB), {stamp}; {kept} kept from the previous table; planning measured on this host")
        path = save(table, output)
        print(json.dumps(table["backends"][name], indent=2))
        print(f"wrote {path}" + ("" if output is None and "COLLSCHED_CALIBRATION" not in os.environ
                                 else " (point COLLSCHED_CALIBRATION at it for choose to use it)"
                                 if output is not None else ""))
        _core.Calibration.from_json(path.read_text(encoding="utf-8"))
