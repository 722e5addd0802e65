"""`collsched testbed run | clean | calibrate | fit`: the two-tier fabric on network namespaces (docs/testbed.md)."""
from __future__ import annotations

import functools
import json
import sys
from typing import Callable, Optional

import typer

from collsched.cli.core import EXIT_BAD_INPUT, _one_line, _stderr, _stdout, reporting_errors, writable

EXIT_INTERRUPTED = 130


def testbed_errors(fn: Callable) -> Callable:
    """TestbedError (not root, no namespaces, a limit of this host, a failed rank) → one line, exit 2;
    Ctrl-C → one line, exit 130 (the fabric is already gone: teardown runs in `finally`)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from collsched.testbed.fabric import TestbedError

        try:
            return fn(*args, **kwargs)
        except TestbedError as e:
            print(f"error: {_one_line(e)}", file=sys.stderr)
            raise typer.Exit(EXIT_BAD_INPUT) from None
        except KeyboardInterrupt:
            print("interrupted: ranks stopped, fabric removed", file=sys.stderr)
            raise typer.Exit(EXIT_INTERRUPTED) from None

    return reporting_errors(wrapper)


def format_results(res: dict) -> "object":
    """A rich Table of a run's results (lower time is better)."""
    from rich.table import Table

    fab = res["fabric"]
    t = Table(title=f"Executed on the testbed: {fab['servers']} servers × {fab['gpus']} ranks, NIC "
                    f"{fab['nic_bps'] * 8 / 1e6:g} Mbit/s, {res['workload']}, mean {res['mean_bytes'] / 2**20:g} MiB "
                    f"per pair, transport {res['transport']}; median of {res['iters']} rounds, slowest rank",
              caption="time: lower is better. speed-up = torch's time / this time (above 1 = faster than torch). "
                      "sim = simulated on the derived cluster; exec/sim = executed / simulated (1 = the model is exact). "
                      f"Lower bound {res['lower_bound_s'] * 1e3:.1f} ms.")
    for col in ("algorithm", "steps", "time ms", "sim ms", "exec/sim", "algbw GB/s", "speed-up", "output"):
        t.add_column(col, justify="left" if col == "algorithm" else "right", no_wrap=True)
    base = next((r["time_s"] for r in res["results"] if r["algorithm"] == "torch"), None)
    for r in res["results"]:
        pred = r["predicted_s"]
        name = r["algorithm"] if r["planned_by"] in (r["algorithm"], "") else f"{r['algorithm']} ({r['planned_by']})"
        t.add_row(name, str(r["steps"] or ""), f"{r['time_s'] * 1e3:.1f}",
                  "—" if pred is None else f"{pred * 1e3:.1f}",
                  "—" if pred is None else f"{r['ratio_to_predicted']:.2f}",
                  f"{r['algbw_gbps']:.4f}", "—" if base is None else f"{base / r['time_s']:.2f}×",
                  "[green]identical[/green]" if r["identical"] else "[red]DIFFERS[/red]")
    return t


def register(app: typer.Typer) -> None:
    tb = typer.Typer(help="Two-tier fabric on network namespaces: run plans on shaped NICs (root; docs/testbed.md).",
                     no_args_is_help=True)
    app.add_typer(tb, name="testbed")

    @tb.command("run")
    @testbed_errors
    def run_cmd(
        servers: int = typer.Option(2, "--servers", help="emulated servers"),
        gpus: int = typer.Option(4, "--gpus", help="ranks per server (one emulated NIC each)"),
        nic: str = typer.Option("200Mbps", "--nic", help="NIC rate per direction (htb), e.g. 200Mbps"),
        nics: Optional[int] = typer.Option(None, "--nics", help="NICs per server (default: one per rank); "
                                           "rank g uses NIC g mod nics"),
        queue: str = typer.Option("1MiB", "--queue", help="bounded queue (bfifo) of every shaped port"),
        scaleup: str = typer.Option("unshaped", "--scaleup", help="scale-up rate between ranks of a server, or 'unshaped'"),
        latency: Optional[str] = typer.Option(None, "--latency",
                                              help="added latency: needs netem, which this kernel lacks (refused)"),
        rto_min: str = typer.Option("default", "--rto-min", help="TCP minimum retransmission timeout on every "
                                    "route, e.g. 5ms ('default': the kernel's 200 ms)"),
        workload: str = typer.Option("zipf:0.8", "--workload", "-w", help="balanced | uniform | zipf:S | hot:S | path"),
        mean: str = typer.Option("1MiB", "--mean", "-m", help="mean bytes per rank pair"),
        algorithms: str = typer.Option("torch,fanout,fast,auto", "--algorithms", "-a",
                                       help="comma list; torch = torch.distributed.all_to_all_single"),
        iters: int = typer.Option(5, "--iters", help="timed rounds (median reported)"),
        warmup: int = typer.Option(1, "--warmup", help="untimed calls per method first"),
        transport: str = typer.Option("auto", "--transport", help="collsched's transport (passed through)"),
        seed: int = typer.Option(0, "--seed", help="workload seed"),
        timeout: float = typer.Option(300.0, "--timeout", help="deadline of the whole run (s)"),
        json_out: bool = typer.Option(False, "--json", help="print JSON instead of the table"),
    ) -> None:
        """Build the fabric, run each algorithm through the normal runtime, compare with torch, tear down."""
        from collsched.testbed.fabric import FabricSpec
        from collsched.testbed.runner import RunConfig, run
        from collsched.units import parse_bytes

        spec = FabricSpec.from_knobs(servers, gpus, nic, queue, scaleup, latency, rto_min, nics)
        if iters < 1 or warmup < 0:
            raise ValueError(f"--iters must be ≥ 1 and --warmup ≥ 0, got {iters} and {warmup}")
        cfg = RunConfig(workload=workload, mean=parse_bytes(mean), algorithms=[a.strip() for a in algorithms.split(",")
                                                                               if a.strip()],
                        iters=iters, warmup=warmup, transport=transport, seed=seed, timeout_s=timeout)
        err = _stderr()
        if spec.cpu_warning():
            err.print(spec.cpu_warning())

        def built(fabric):
            from collsched.testbed.model import cluster_spec

            err.print(f"fabric {fabric.prefix}: cluster {cluster_spec(spec, cfg.params)}")

        with err.status("building fabric…") as status:
            res = run(spec, cfg, on_progress=lambda line: status.update(line), on_built=built)
        if json_out:
            print(json.dumps(res, indent=1))
        else:
            out = _stdout()
            out.print(f"cluster: {res['cluster']}")
            out.print(format_results(res))
        if not all(r["identical"] for r in res["results"]):
            raise typer.Exit(1)

    @tb.command("calibrate")
    @testbed_errors
    def calibrate_network_cmd(
        servers: int = typer.Option(2, "--servers", help="emulated servers (the truth)"),
        gpus: int = typer.Option(4, "--gpus", help="ranks per server (the truth)"),
        nic: str = typer.Option("200Mbps", "--nic", help="shaped NIC rate per direction (the truth)"),
        scaleup: str = typer.Option("unshaped", "--scaleup", help="scale-up rate between ranks of a server, or 'unshaped'"),
        nics: Optional[int] = typer.Option(None, "--nics", help="NICs per server (default: one per rank)"),
        max_time: float = typer.Option(110.0, "--max-time", help="seconds the measurement may take (stopped past it)"),
        json_out: bool = typer.Option(False, "--json", help="print {\"truth\", \"measured\", ...} as JSON"),
        output: Optional[str] = typer.Option(None, "--out", "-o", help="also store the calibration here (the file "
                                             "`calibrate --network` writes; COLLSCHED_NETWORK=FILE makes -c calibrated "
                                             "name it)"),
    ) -> None:
        """Run `collsched calibrate --network` on a fabric of known shape and rates and print truth beside
        measured (the ranks are not told the shape; docs/testbed.md, "Network calibration")."""
        from collsched.network import save
        from collsched.testbed.fabric import FabricSpec
        from collsched.testbed.netcal import calibrate_network

        writable("-o/--out", output)
        spec = FabricSpec.from_knobs(servers, gpus, nic, scaleup=scaleup, nics=nics)
        if spec.ranks < 2:
            raise ValueError(f"--servers × --gpus must be at least 2 ranks (a network needs two), got {spec.ranks}")
        err = _stderr()
        with err.status("building fabric…") as status:
            res = calibrate_network(spec, max_time, on_progress=lambda line: status.update(line))
        if output:
            res["written"] = str(save(res["document"], output))
        doc = res.pop("document")
        if json_out:
            print(json.dumps(res, indent=1))
            return
        from collsched.cli.calibrate import format_network

        t, m = res["truth"], res["measured"]
        out = _stdout()
        up = "unshaped" if t["scaleup_bps"] is None else f"{t['scaleup_bps'] * 8 / 1e6:g} Mbit/s"
        out.print(f"truth:    {t['servers']} servers × {t['gpus_per_server']} ranks, NIC {t['nic_bps'] * 8 / 1e6:g} Mbit/s, "
                  f"scale-up {up}")
        out.print(f"measured: {m['servers']} servers × {m['gpus_per_server']} ranks, NIC {m['nic_bps'] * 8 / 1e6:.1f} Mbit/s "
                  f"({m['nic_bps'] / t['nic_bps'] - 1:+.1%}), in {res['seconds']:.1f} s (load {res['load'][0]:.1f})")
        for line in format_network(doc, res.get("written", "not stored (--out FILE stores it)")):
            out.print(line, highlight=False)

    @tb.command("fit")
    @testbed_errors
    def fit_cmd(
        nic: str = typer.Option("200Mbps", "--nic", help="NIC rate of the 2×4 calibration fabric"),
        iters: int = typer.Option(3, "--iters", help="timed rounds per case (median kept)"),
        transport: str = typer.Option("auto", "--transport", help="collsched's transport (passed through)"),
        json_out: Optional[str] = typer.Option(None, "--json", help="also write every row and the fit here"),
    ) -> None:
        """Measure fanout, SpreadOut and FAST over 18 matrices on a 2×4 fabric (a few minutes), fit the
        model on half of them, print the error on the other half (docs/testbed.md, "Calibration")."""
        from collsched.testbed.calibrate import calibrate
        from collsched.testbed.fabric import FabricSpec

        writable("--json", json_out)
        spec = FabricSpec.from_knobs(2, 4, nic)
        if iters < 1:
            raise ValueError(f"--iters must be ≥ 1, got {iters}")
        err = _stderr()
        with err.status("calibrating…") as status:
            res = calibrate(spec, iters, transport, on_progress=lambda line: status.update(line))
        out = _stdout()
        out.print(f"fitted on cases ≥ {res['min_bytes'] >> 10} KiB per rank: {res['params']}")
        for e in res["errors"]:
            out.print(f"{e['half']:>8} {e['algorithm']:>10}: {e['cases']} cases, mean |error| "
                      f"{e['mean_abs_error'] * 100:.0f}%, max {e['max_abs_error'] * 100:.0f}%")
        if json_out:
            with open(json_out, "w") as f:
                json.dump(res, f, indent=1)

    @tb.command("clean")
    @testbed_errors
    def clean_cmd(all_runs: bool = typer.Option(False, "--all", help="also remove fabrics of runs still alive")) -> None:
        """Remove the namespaces (and with them veths, bridges, qdiscs) and the scratch folders
        left by runs that died (a zombie owner counts as dead); say what was kept and why."""
        from collsched.testbed.fabric import check_available, clean

        check_available()
        for line in format_clean(clean(all_runs)):
            print(line)


def format_clean(report) -> list[str]:
    """The lines ``testbed clean`` prints for a ``fabric.CleanReport``: what it removed, then
    one line per run or folder it kept, with the reason and how to remove it anyway."""
    lines = [f"removed {len(report.removed)} namespace(s)" + (": " + " ".join(report.removed) if report.removed else "")]
    if report.removed_dirs:
        lines.append(f"removed {len(report.removed_dirs)} scratch folder(s): " + " ".join(report.removed_dirs))
    for prefix, why in report.kept.items():
        lines.append(f"kept the namespaces of run {prefix}: {why} (--all removes them too)")
    for path, why in report.kept_dirs.items():
        lines.append(f"kept {path}: {why} (--all removes it too)")
    return lines
