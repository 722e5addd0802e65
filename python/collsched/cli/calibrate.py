"""CLI: `collsched calibrate` — measure the backend constants `choose` uses and store them."""
from __future__ import annotations

import json
import os
from typing import Optional

import typer

from collsched.cli.core import reporting_errors, writable


_NAMES = {"gloo": "Gloo", "nccl": "NCCL"}


def under_torchrun() -> bool:
    """Whether torchrun (or another launcher setting its variables) started this process as a rank."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ and "MASTER_ADDR" in os.environ


def init_torchrun_group(backend: str) -> str:
    """Join the launcher's process group: `backend` gloo, nccl, or auto (NCCL when CUDA is there);
    NCCL ranks take GPU LOCAL_RANK. Returns the backend used.

    Raises:
        ValueError: NCCL asked for on a machine without a CUDA GPU.
    """
    import torch
    import torch.distributed as dist

    gpus = torch.cuda.device_count()
    if backend == "auto":
        backend = "nccl" if gpus else "gloo"
    if backend == "nccl":
        if not gpus:
            raise ValueError("--backend nccl needs a CUDA GPU, and this machine has none")
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % gpus)
    dist.init_process_group(backend)
    return backend


def _measure(nprocs: int, iters: int, mib: int, timeout_s: float, backend: str,
             shared_gpus: bool) -> tuple[dict, str]:
    """Rank 0's measurements and where they were taken: under torchrun in this process group
    (NCCL when `backend` is "auto" and CUDA is there), else on `nprocs` local ranks."""
    import torch
    import torch.distributed as dist

    from collsched.comm.calibrate import measure_rank

    gpus = torch.cuda.device_count()
    if under_torchrun():
        backend = init_torchrun_group(backend)
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


def measure_network(nprocs: int, settings: dict, timeout_s: float, backend: str, on_progress=None) -> Optional[dict]:
    """The network probe's rank-0 result (``collsched.comm.netprobe``): under torchrun in this process
    group (None on ranks other than 0), else on `nprocs` local ranks (one server: loopback).

    Raises:
        ValueError: a rank reported bad input, a shape the measurements cannot give, or the
            run passed ``max_time_s`` (every rank's error is the same; the message is rank 0's).
    """
    import torch.distributed as dist

    from collsched.comm.netprobe import probe_rank

    if under_torchrun():
        init_torchrun_group(backend)
        try:
            return probe_rank(settings)
        finally:
            dist.destroy_process_group()
    from collsched.comm.launch import RankFailure, run_local

    if backend == "nccl":
        raise ValueError("--network with --backend nccl runs under torchrun (one rank per GPU); local ranks use Gloo")
    results = run_local(probe_rank, nprocs, (settings,), timeout_s=timeout_s, backend="gloo", gpus_per_server=nprocs,
                        raise_on_failure=False, on_progress=on_progress)
    failures = [r for r in results if isinstance(r, RankFailure)]
    if failures:
        raised = [f for f in failures if f.kind == "raised"]
        if raised and raised[0].exc_type in ("ValueError", "ShapeError", "MeasurementTimeout"):
            raise ValueError(raised[0].message)
        raise RuntimeError("; ".join(str(f) for f in failures[:3]))
    return results[0]


def format_network(doc: dict, where) -> list[str]:
    """Lines describing a stored network calibration (``clusters --show-calibration``)."""
    m = doc["measured"]

    def rate(v):
        return "—" if v is None else f"{v * 8 / 1e9:.3g} Gbit/s ({v / 1e6:.4g} MB/s)"

    def secs(v):
        return "—" if v is None else f"{v * 1e6:.1f} µs"

    lines = [f"# {where}", f"source: {doc.get('source', '?')}", f"spec:   {doc['spec']}",
             f"use it: -c calibrated (or calibrated:SERVERS, calibrated,key=value), cluster=\"calibrated\", "
             f"COLLSCHED_CLUSTER=calibrated",
             f"shape: {m['servers']} server{'s' if m['servers'] != 1 else ''} × {m['gpus_per_server']} GPUs "
             f"(told apart by {m['separated_by']}"
             + ("" if m.get("hosts_agree") in (None, True) else "; hostnames group the ranks differently") + ")",
             f"NICs per server: {m.get('nics_per_server', m['gpus_per_server'])}"
             + ("" if m.get("egress_ratio") is None else
                f" (the server's ranks sending out at once reach {m['egress_ratio']:.2f}× one flow's rate)"),
             f"scale-out: payload {rate(m['nic_goodput_bps'])}, line rate {rate(m['nic_bps'])}, "
             f"latency {secs(m['latency_s']['scaleout'])}",
             f"scale-up:  payload {rate(m['scaleup_goodput_bps'])}, line rate {rate(m['scaleup_bps'])}, "
             f"latency {secs(m['latency_s']['scaleup'])}"]
    frac = m.get("fraction_of_peak") or {}
    if any(v is not None for v in frac.values()):
        lines.append("fraction of the stated peak: " + ", ".join(f"{k} {v:.3f}" for k, v in frac.items() if v is not None))
    if m.get("incast"):
        lines.append(f"incast: {m['incast']['senders']} senders into one rank move {m['incast']['ratio']:.3f}× "
                     "one sender's rate")
    return lines


def show_network(json_out: bool = False) -> None:
    """Print the stored network calibration (or say there is none: ValueError)."""
    from collsched.network import load, path_in_use

    doc = load()
    if json_out:
        print(json.dumps({"path": str(path_in_use()), **{k: doc[k] for k in ("spec", "measured", "source")}}))
        return
    for line in format_network(doc, path_in_use()):
        print(line)


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
        network: bool = typer.Option(False, "--network",
                                     help="measure the network instead: each tier's rate and latency, incast, which "
                                          "ranks share a server; store the cluster spec `-c calibrated` uses"),
        max_time: float = typer.Option(300.0, "--max-time", help="--network: seconds the measurement may take "
                                                                  "(every rank stops together past it; nothing written)"),
        max_bytes: str = typer.Option("256MiB", "--max-bytes", help="--network: largest message"),
        nic_peak: Optional[str] = typer.Option(None, "--nic-peak", help="--network: the NIC's stated line rate "
                                                                         "(e.g. 400Gbps), for the fraction of peak"),
        scaleup_peak: Optional[str] = typer.Option(None, "--scaleup-peak",
                                                   help="--network: the scale-up link's stated rate, e.g. 450GB/s"),
    ) -> None:
        """Measure one backend's per-call, per-step, per-message and per-MiB costs, torch's half duplex and
        the planners' cost per transfer on this machine, and store them for `collsched.choose` (auto);
        the other backend's row is kept. With --network: measure the network and store the cluster
        spec that `-c calibrated` names (docs/simulator.md, "Your own cluster")."""
        import datetime

        from collsched import _core
        from collsched.calibration import load, path_in_use, save
        from collsched.comm.calibrate import measure_planning

        writable("-o/--out", output)
        if network:
            _network_cmd(show, nprocs, timeout_s, backend, output, max_time, max_bytes, nic_peak, scaleup_peak)
            return
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


def _network_cmd(show: bool, nprocs: int, timeout_s: float, backend: str, output: Optional[str], max_time: float,
                 max_bytes: str, nic_peak: Optional[str], scaleup_peak: Optional[str]) -> None:
    """``collsched calibrate --network``: check, measure, fit, store (rank 0), print."""
    from collsched.cli.core import _stderr
    from collsched.comm.netprobe import check_settings
    from collsched.network import document, save
    from collsched.units import parse_bandwidth, parse_bytes

    if show:
        show_network()
        return
    if not 2 <= nprocs <= 64:
        raise ValueError(f"--nprocs must be between 2 and 64 (a network needs 2 ranks), got {nprocs}")
    if backend not in ("auto", "gloo", "nccl"):
        raise ValueError(f"--backend must be gloo, nccl or auto, got {backend!r}")
    peaks = {}
    for key, text, flag in (("nic", nic_peak, "--nic-peak"), ("scaleup", scaleup_peak, "--scaleup-peak")):
        if text is not None:
            try:
                peaks[key] = parse_bandwidth(text)
            except ValueError as e:
                raise ValueError(f"{flag}: {e}") from None
    try:
        limit = parse_bytes(max_bytes)
    except ValueError as e:
        raise ValueError(f"--max-bytes: {e}") from None
    settings = check_settings({"max_time_s": float(max_time), "max_bytes": limit})
    timeout_s = max(timeout_s, max_time + 30.0)  # the deadline stops the ranks; the timeout is the backstop
    with _stderr().status("measuring the network…") as status:
        raw = measure_network(nprocs, settings, timeout_s, backend, on_progress=lambda line: status.update(line))
    if raw is None:  # a rank other than 0 under torchrun: rank 0 writes and prints
        return
    under = "torchrun" if under_torchrun() else "local ranks"
    doc = document(raw, peaks, f"{raw['world']} {_NAMES[raw['backend']]} ranks ({under})")
    path = save(doc, output)
    for line in format_network(doc, path):
        print(line)
    print(f"wrote {path}" + (" (point COLLSCHED_NETWORK at it for `calibrated` to name it)" if output else ""))
