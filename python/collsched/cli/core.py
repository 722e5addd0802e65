"""Core commands: clusters, traffic, plan, verify, simulate, draw.

Bad input (ValueError/TypeError/OSError) is reported in one place, :func:`reporting_errors`:
one line ``error: <message>`` on stderr and exit code 2, never a traceback.
"""
from __future__ import annotations

import functools
import json
import sys
from typing import Callable, Optional

import typer
from rich.console import Console
from rich.table import Table

EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 3


def _stdout() -> Console:
    # Built per call so CliRunner's redirected streams are honoured.
    # Wide when piped (files, docs, tests) so tables are not folded to 80 columns.
    con = Console(file=sys.stdout, highlight=False, soft_wrap=True)
    return con if con.is_terminal else Console(file=sys.stdout, highlight=False, soft_wrap=True, width=160)


def _stderr() -> Console:
    return Console(file=sys.stderr, highlight=False, soft_wrap=True)


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def reporting_errors(fn: Callable) -> Callable:
    """Turn bad-input exceptions into ``error: ...`` + exit 2 (the one place errors are caught).

    Other areas' commands can wrap themselves the same way: ``app.command("x")(reporting_errors(fn))``.
    """

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort, SystemExit, BrokenPipeError):
            raise  # BrokenPipeError: the reader of stdout went away; click (or main()) exits 1 quietly
        except (ValueError, TypeError, OSError) as e:
            print(f"error: {_one_line(e)}", file=sys.stderr)
            raise typer.Exit(EXIT_BAD_INPUT) from None
        except RuntimeError as e:  # a panic in the core: a bug, still reported on one line
            print(f"error: {_one_line(e)}", file=sys.stderr)
            raise typer.Exit(EXIT_INTERNAL) from None

    return wrapper


# ---------------------------------------------------------------- formatting


def fmt_time(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.1f} µs"


def fmt_bytes(n: float) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{int(n)} B"


def fmt_bw(bytes_per_s: float) -> str:
    return f"{bytes_per_s / 1e9:.0f} GB/s ({bytes_per_s * 8 / 1e9:.0f} Gb/s)"


# ---------------------------------------------------------------- shared helpers


def _cluster(spec: str):
    from collsched.planning import as_cluster

    return as_cluster(spec)


def parsed(flag: str, parse: Callable, text):
    """``parse(text)``, its ValueError prefixed with the flag the value came from."""
    try:
        return parse(text)
    except ValueError as e:
        raise ValueError(f"{flag}: {e}") from None


def writable(flag: str, path):
    """``path`` when a file can be written there, checked before the command's work starts
    (so a typo in ``-o`` costs no run); else ValueError naming the flag, reported on one line.

    Raises:
        ValueError: the path is a directory, its folder is missing or not a folder, or it is not writable.
    """
    import os
    from pathlib import Path

    if path is None:
        return None
    p = Path(path)
    folder = p.parent if str(p.parent) else Path(".")
    if p.is_dir():
        raise ValueError(f"{flag}: {str(path)!r} is a directory; give a file name")
    if not folder.exists():
        raise ValueError(f"{flag}: cannot write {str(path)!r}: folder {str(folder)!r} does not exist")
    if not folder.is_dir():
        raise ValueError(f"{flag}: cannot write {str(path)!r}: {str(folder)!r} is not a folder")
    if not os.access(p if p.exists() else folder, os.W_OK):
        raise ValueError(f"{flag}: cannot write {str(path)!r}: permission denied")
    return path


def _mean_bytes(text: str) -> int:
    from collsched.units import parse_bytes

    v = parsed("-m/--mean", parse_bytes, text)
    if v >= 2**64:
        raise ValueError(f"-m/--mean: {text!r} is too large (at most 2^64-1 bytes per pair)")
    return v


def _matrix(cluster, workload: str, mean: str, seed: int, max_memory: Optional[str] = None):
    from collsched.workloads import make_workload

    if not 0 <= seed < 2**64:
        raise ValueError(f"--seed must be an integer in [0, 2^64), got {seed}")
    return make_workload(workload, cluster.num_gpus, _mean_bytes(mean), seed, max_memory=max_memory)


def _options(pairs: Optional[list[str]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for kv in pairs or []:
        k, sep, v = kv.partition("=")
        if not sep or not k.strip():
            raise ValueError(f"algorithm option {kv!r} must look like key=value")
        out[k.strip()] = v.strip()
    return out


def _skew(m, cluster) -> dict:
    """SABRE's MTM (send/recv/overall) and Gini where the skew module provides them."""
    from collsched import skew

    out: dict = {}
    mtm = getattr(skew, "mtm", None)
    if mtm is not None:
        r = mtm(m, cluster)
        out["mtm"] = {"send": float(r.send), "recv": float(r.recv), "overall": float(r.overall)}
    gini = getattr(skew, "gini", None)
    if gini is not None:
        out["gini"] = float(gini(m))
    return out


def _sim():
    from collsched import sim

    if not hasattr(sim, "simulate") or not hasattr(sim, "lower_bound"):
        raise ValueError("the simulator is not built into this collsched yet (collsched.sim.simulate missing)")
    return sim


def _known_algorithms() -> list[str]:
    from collsched.planning import all_to_all_algorithms

    return [name for name, _ in all_to_all_algorithms()]


def _not_implemented(e: Exception) -> bool:
    return "not implemented" in str(e)


def _check_plan_fits(plan, cluster) -> None:
    if plan.num_ranks != cluster.num_gpus or plan.gpus_per_server != cluster.gpus_per_server:
        raise ValueError(
            f"plan is for {plan.num_ranks} ranks with {plan.gpus_per_server} per server, "
            f"but the cluster has {cluster.num_gpus} GPUs with {cluster.gpus_per_server} per server"
        )


# ---------------------------------------------------------------- commands

def _algorithm_help() -> str:
    try:
        return ", ".join(_known_algorithms())
    except Exception:  # help text must never break the CLI
        return "see collsched.all_to_all_algorithms()"


_ALGORITHMS = _algorithm_help()


def _workload_help() -> str:
    from collsched.workloads import HELP

    return HELP


_WORKLOADS = _workload_help()
# The same flags mean the same thing in every command (docs/cli.md, "Flags").
MAX_MEMORY_HELP = "refuse work estimated above this much memory (default: half the free memory), e.g. 32GiB"
MAX_TIME_HELP = "refuse work estimated to take longer than this many seconds (default 3600)"


def _guard(est, max_memory: Optional[str], max_time: Optional[float]) -> None:
    from collsched.guard import check

    check(est, max_memory, max_time)


def _guard_cluster(c, max_memory: Optional[str], max_time: Optional[float]) -> None:
    """Before a matrix is generated: refuse a cluster whose P×P matrix alone is too big."""
    from collsched.guard import estimate_traffic

    _guard(estimate_traffic(c.num_gpus), max_memory, max_time)


def clusters_cmd(json_out: bool = typer.Option(False, "--json", help="print one JSON object instead of a table"),
                 show_calibration: bool = typer.Option(False, "--show-calibration",
                                                       help="show the cluster `collsched calibrate --network` measured "
                                                            "(the spec `-c calibrated` names) instead of the presets")) -> None:
    """List the cluster presets with their numbers (spec: NAME:SERVERS[,key=value...])."""
    from collsched import Cluster

    if show_calibration:
        from collsched.cli.calibrate import show_network

        show_network(json_out)
        return

    rows = []
    for name, description in Cluster.presets():
        d = Cluster.parse(f"{name}:1").to_dict()
        d["name"], d["description"] = name, description
        rows.append(d)
    if json_out:
        print(json.dumps({"presets": rows}))
        return
    t = Table(title="cluster presets (per server; bandwidths per direction)")
    for col in ("preset", "GPUs", "fabric", "scale-up per GPU", "NICs", "per NIC", "alpha local/up/out", "copy",
                "hardware model", "source"):
        t.add_column(col, overflow="fold")
    for d in rows:
        t.add_row(
            d["name"], str(d["gpus_per_server"]), d["fabric"], f"{d['gpu_scaleup_bw'] / 1e9:.0f} GB/s",
            str(d["nics_per_server"]), f"{d['nic_bw'] * 8 / 1e9:.0f} Gb/s",
            f"{d['alpha_local_ns'] / 1e3:g}/{d['alpha_scaleup_ns'] / 1e3:g}/{d['alpha_scaleout_ns'] / 1e3:g} µs",
            f"{d['local_copy_bw'] / 1e9:.0f} GB/s",
            ", ".join(f"{k}={v}" for k, v in d["hardware"].items()) or "neutral (= fluid)", d["description"],
        )
    _stdout().print(t)
    for d in rows:
        if d["hardware_source"]:
            # The source says whether the constants were fitted or carried over from another fit.
            _stdout().print(f"{d['name']} hardware-model constants: {d['hardware_source']}")
    keys = ", ".join(k for k, _ in Cluster.spec_keys())
    _stdout().print(f"overrides: {keys}   e.g. h200:4,nic=200Gbps,nics=4")
    _stdout().print("calibrated[:SERVERS]: the cluster `collsched calibrate --network` measured "
                    "(--show-calibration shows it)")


def traffic_cmd(
    cluster: str = typer.Option(..., "--cluster", "-c", help="cluster spec, e.g. h200:4"),
    workload: str = typer.Option("uniform", "--workload", "-w", help=_WORKLOADS),
    mean: str = typer.Option("64MiB", "--mean", "-m", help="mean bytes per (sender, receiver) pair"),
    seed: int = typer.Option(0, "--seed", help="generator seed"),
    out: Optional[str] = typer.Option(None, "--out", "-o", help="save the matrix (.npy or .csv)"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object instead of a table"),
    max_memory: Optional[str] = typer.Option(None, "--max-memory", help=MAX_MEMORY_HELP),
    max_time: Optional[float] = typer.Option(None, "--max-time", help=MAX_TIME_HELP),
) -> None:
    """Generate (or load) a traffic matrix and print its summary: sizes, skew, hash."""
    from collsched import traffic as tr

    c = _cluster(cluster)
    writable("-o/--out", out)
    _guard_cluster(c, max_memory, max_time)
    m = _matrix(c, workload, mean, seed, max_memory)
    info = {"cluster": cluster, "workload": workload, "seed": seed, **tr.summary(m), **_skew(m, c)}
    if out:
        tr.save(out, m)
        info["saved"] = out
    if json_out:
        print(json.dumps(info))
        return
    t = Table(title=f"traffic {workload} on {cluster} ({info['ranks']} ranks, seed {seed})", show_header=False)
    t.add_column("", style="bold")
    t.add_column("")
    t.add_row("total", fmt_bytes(info["total_bytes"]))
    t.add_row("mean pair", fmt_bytes(info["mean_pair_bytes"]))
    t.add_row("max pair", fmt_bytes(info["max_pair_bytes"]))
    t.add_row("max send / recv per rank", f"{fmt_bytes(info['max_send_bytes'])} / {fmt_bytes(info['max_recv_bytes'])}")
    if "mtm" in info:
        mt = info["mtm"]
        t.add_row("MTM send / recv / overall", f"{mt['send']:.3f} / {mt['recv']:.3f} / {mt['overall']:.3f}")
    else:
        t.add_row("MTM", "n/a (skew statistics not built yet)")
    t.add_row("Gini", f"{info['gini']:.3f}" if "gini" in info else "n/a")
    t.add_row("hash", info["hash"])
    if out:
        t.add_row("saved to", out)
    _stdout().print(t)


def plan_cmd(
    cluster: str = typer.Option(..., "--cluster", "-c", help="cluster spec, e.g. h200:4"),
    algorithm: str = typer.Option("auto", "--algorithm", "-a", help=f"all-to-all algorithm: {_ALGORITHMS}"),
    workload: str = typer.Option("uniform", "--workload", "-w", help=_WORKLOADS),
    mean: str = typer.Option("64MiB", "--mean", "-m", help="mean bytes per pair"),
    seed: int = typer.Option(0, "--seed"),
    option: Optional[list[str]] = typer.Option(None, "--option", "-O", help="algorithm knob key=value (repeatable)"),
    out: Optional[str] = typer.Option(None, "--out", "-o", help="write the plan: JSON, or binary for a .bin suffix"),
    max_memory: Optional[str] = typer.Option(None, "--max-memory", help=MAX_MEMORY_HELP),
    max_time: Optional[float] = typer.Option(None, "--max-time", help=MAX_TIME_HELP),
) -> None:
    """Plan an all-to-all (default algorithm: auto, as the runtime) and print a summary; optionally write the plan."""
    from collsched.guard import estimate_all_to_all, progress
    from collsched.planning import plan_all_to_all, save_plan

    c = _cluster(cluster)
    if algorithm not in _known_algorithms():
        raise ValueError(f"unknown algorithm {algorithm!r} (known: {', '.join(_known_algorithms())})")
    writable("-o/--out", out)
    est = estimate_all_to_all(c.num_gpus, [algorithm], simulate=False)
    _guard(est, max_memory, max_time)
    m = _matrix(c, workload, mean, seed, max_memory)
    with progress(est, total=1):
        plan = plan_all_to_all(m, c, algorithm, options=_options(option))
    if out:
        save_plan(plan, out)
    tiers = plan.bytes_per_tier()
    con = _stdout()
    con.print(f"{plan.algorithm} on {c.name} ({c.num_gpus} ranks): {plan.num_transfers} transfers, "
              f"{plan.num_segments} segments, {plan.num_steps} step{'s' if plan.num_steps != 1 else ''}, hash {plan.hash}")
    con.print(f"bytes: local {fmt_bytes(tiers['local'])}, scale-up {fmt_bytes(tiers['scale_up'])}, "
              f"scale-out {fmt_bytes(tiers['scale_out'])}; scratch max {fmt_bytes(max(plan.scratch_bytes, default=0))}")
    meta = plan.meta
    if meta:
        con.print("meta: " + ", ".join(f"{k}={v}" for k, v in meta.items()))
    if out:
        con.print(f"wrote {out}")


def verify_cmd(path: str = typer.Argument(..., help="plan file (JSON or binary)"),
               max_memory: Optional[str] = typer.Option(None, "--max-memory", help=MAX_MEMORY_HELP)) -> None:
    """Verify a plan file: OK with the report (exit 0) or the first violation (exit 1)."""
    from collsched import VerificationError
    from collsched.planning import load_plan

    plan = load_plan(path, max_memory)
    try:
        report = plan.verify()
    except VerificationError as e:
        print(f"violation: {_one_line(e)}")
        raise typer.Exit(1) from None
    print(f"OK: {plan.algorithm} {plan.collective} on {plan.num_ranks} ranks, {report['transfers']} transfers, "
          f"{report['segments']} segments, {report['bytes_moved']} bytes moved ({fmt_bytes(report['bytes_moved'])}), "
          f"hash {plan.hash}")


def _result_row(name: str, plan, r) -> dict:
    row = {
        "algorithm": name,
        "time_s": float(r.time_s),
        "algbw_gbps": float(r.algbw_gbps),
        "ratio_to_bound": None if r.ratio_to_bound is None else float(r.ratio_to_bound),
        "steps": int(r.steps),
        "scaleout_bytes": int(r.scaleout_bytes),
        "transfers": int(plan.num_transfers),
        "segments": int(plan.num_segments),
        "plan_hash": plan.hash,
    }
    meta = plan.meta
    choice = meta.get("choice")  # selectors (auto, sabre) record what they chose
    if choice:
        row["chosen"] = choice
    stages = meta.get("stages") or (meta.get(f"{choice}.stages") if choice else None)
    if stages is not None and str(stages).isdigit():
        row["stages"] = int(stages)
    return row


_MODEL_HELP = ("simulator model: hardware (the preset's fitted efficiency, chunk, per-stage, per-peer, rendezvous and incast "
               "terms; the fluid model where none are set) or fluid (links at their peaks)")


def _check_model(model: str) -> None:
    if model not in ("hardware", "fluid"):
        raise ValueError(f"--model must be 'hardware' or 'fluid', got {model!r}")


# Hardware-model keys that only collective-kernel plans (allgather, reduce-scatter, allreduce)
# run under (docs/simulator.md): an all-to-all plan ignores them.
COLLECTIVE_KERNEL_KEYS = ("coll_", "ll_")


def _model_line(c, model: str) -> str:
    """One line naming the simulator model and the hardware constants an all-to-all plan uses."""
    if model == "fluid":
        return "fluid (links at their peaks, per-tier alpha)"
    d = c.to_dict()
    terms = ", ".join(f"{k}={v}" for k, v in d["hardware"].items() if not k.startswith(COLLECTIVE_KERNEL_KEYS))
    if not terms and d["hardware"]:
        return "hardware, no point-to-point terms on this cluster (its collective-kernel terms do not apply): identical to the fluid model"
    if not terms:
        return "hardware, no terms set on this cluster: identical to the fluid model"
    return f"hardware ({terms}; constants: {d['hardware_source'] or 'set by the spec'})"


def simulate_cmd(
    cluster: str = typer.Option(..., "--cluster", "-c", help="cluster spec, e.g. h200:4"),
    workload: str = typer.Option("uniform", "--workload", "-w", help=_WORKLOADS),
    mean: str = typer.Option("64MiB", "--mean", "-m", help="mean bytes per pair"),
    algorithms: Optional[str] = typer.Option(None, "--algorithms", "-a",
                                             help=f"comma-separated from: {_ALGORITHMS}; default: every algorithm that plans"),
    seed: int = typer.Option(0, "--seed"),
    barrier_steps: bool = typer.Option(False, "--barrier-steps", help="simulate steps as global barriers"),
    warm_connections: bool = typer.Option(False, "--warm-connections",
                                          help="a stream's next piece hides its alpha behind the previous one (NCCL/MSCCL connections)"),
    model: str = typer.Option("hardware", "--model", help=_MODEL_HELP),
    json_out: bool = typer.Option(False, "--json", help="print exactly one JSON object on stdout"),
    max_memory: Optional[str] = typer.Option(None, "--max-memory", help=MAX_MEMORY_HELP),
    max_time: Optional[float] = typer.Option(None, "--max-time", help=MAX_TIME_HELP),
) -> None:
    """Plan and simulate an all-to-all with several algorithms; compare against the lower bound."""
    from collsched.guard import estimate_all_to_all, progress
    from collsched.planning import plan_all_to_all

    _check_model(model)
    c = _cluster(cluster)
    known = _known_algorithms()
    explicit = algorithms is not None
    names = [a.strip() for a in algorithms.split(",") if a.strip()] if explicit else list(known)
    if not names:
        raise ValueError("--algorithms is empty")
    unknown = [a for a in names if a not in known]
    if unknown:
        raise ValueError(f"unknown algorithm {unknown[0]!r} (known: {', '.join(known)})")
    est = estimate_all_to_all(c.num_gpus, names, simulate=True)
    _guard(est, max_memory, max_time)
    m = _matrix(c, workload, mean, seed, max_memory)
    sim = _sim()
    bound = sim.lower_bound(m, c)
    skew = _skew(m, c)
    err = _stderr()
    results, notes = [], []
    with progress(est, total=len(names)) as advance:
        for name in names:
            try:
                plan = plan_all_to_all(m, c, name)
            except ValueError as e:
                if explicit and not _not_implemented(e):
                    raise ValueError(f"{name}: {_one_line(e)}") from None
                notes.append(f"skipped {name}: {_one_line(e)}")
                advance(f"{name} skipped")
                continue
            r = sim.simulate(plan, c, barrier_steps=barrier_steps, warm_connections=warm_connections, model=model)
            results.append(_result_row(name, plan, r))
            advance(f"{name} simulated")
    if not results:
        raise ValueError("no algorithm produced a plan: " + "; ".join(notes))
    if json_out:
        doc = {"cluster": c.spec(), "cluster_spec": cluster, "workload": workload, "mean_bytes": int(m.sum()) // m.size,
               "seed": seed, "barrier_steps": barrier_steps, "warm_connections": warm_connections, "model": model,
               "hardware_terms": c.to_dict()["hardware"] if model == "hardware" else {}, "lower_bound_s": float(bound.seconds),
               "bound_term": str(bound.term), **skew, "results": results, "skipped": notes}
        print(json.dumps(doc))
        return
    for note in notes:
        err.print(f"note: {note}")
    con = _stdout()
    skew_text = ""
    if "mtm" in skew:
        mt = skew["mtm"]
        skew_text = f", MTM send {mt['send']:.2f} recv {mt['recv']:.2f} overall {mt['overall']:.2f}"
    if "gini" in skew:
        skew_text += f", Gini {skew['gini']:.3f}"
    con.print(f"cluster {cluster} ({c.servers}×{c.gpus_per_server} GPUs, {c.fabric}); workload {workload}, "
              f"mean pair {fmt_bytes(int(m.sum()) / m.size)}, seed {seed}{skew_text}")
    con.print(f"model: {_model_line(c, model)}")
    con.print(f"lower bound {fmt_time(float(bound.seconds))} (binding term: {bound.term}; fluid, links at their peaks)")
    with_stages = any("stages" in r for r in results)
    t = Table()
    for col in ("algorithm", "time", "algbw GB/s", "× bound", "steps") + (("stages",) if with_stages else ()) + (
            "scale-out bytes",):
        t.add_column(col, justify="left" if col == "algorithm" else "right")
    for r in results:
        name = r["algorithm"] + (f" → {r['chosen']}" if "chosen" in r else "")
        ratio = "" if r["ratio_to_bound"] is None else f"{r['ratio_to_bound']:.2f}"
        cells = [name, fmt_time(r["time_s"]), f"{r['algbw_gbps']:.1f}", ratio, str(r["steps"])]
        if with_stages:
            cells.append(str(r.get("stages", "")))
        t.add_row(*cells, fmt_bytes(r["scaleout_bytes"]))
    con.print(t)


def draw_cmd(
    path: str = typer.Argument(..., help="plan file (JSON or binary)"),
    cluster: str = typer.Option(..., "--cluster", "-c", help="cluster the plan runs on"),
    out: str = typer.Option("plan.png", "--out", "-o", help="Gantt chart output (.png, .svg, .pdf)"),
    links: Optional[str] = typer.Option(None, "--links", help="also draw per-link-class utilisation here"),
    barrier_steps: bool = typer.Option(False, "--barrier-steps", help="simulate steps as global barriers"),
    warm_connections: bool = typer.Option(False, "--warm-connections",
                                          help="a stream's next piece hides its alpha behind the previous one (NCCL/MSCCL connections)"),
    model: str = typer.Option("hardware", "--model", help=_MODEL_HELP),
    max_memory: Optional[str] = typer.Option(None, "--max-memory", help=MAX_MEMORY_HELP),
    max_time: Optional[float] = typer.Option(None, "--max-time", help=MAX_TIME_HELP),
) -> None:
    """Draw a plan's simulated execution (Gantt chart by tier, steps shaded) and link utilisation."""
    from collsched import draw
    from collsched.guard import estimate_simulation, progress
    from collsched.planning import load_plan

    _check_model(model)
    writable("-o/--out", out)
    writable("--links", links)
    plan = load_plan(path, max_memory)
    c = _cluster(cluster)
    _check_plan_fits(plan, c)
    sim = _sim()
    est = estimate_simulation(plan.num_transfers, f"simulating {plan.algorithm} on {c.num_gpus} GPUs")
    _guard(est, max_memory, max_time)
    with progress(est, total=1):
        r = sim.simulate(plan, c, barrier_steps=barrier_steps, warm_connections=warm_connections, model=model)
    draw.gantt(plan, c, out, result=r)
    print(f"wrote {out} ({plan.algorithm}, {fmt_time(float(r.time_s))} simulated, {model} model)")
    if links:
        draw.link_utilisation(r, links, title=f"{plan.algorithm} on {cluster}: link utilisation")
        print(f"wrote {links}")


def _version(value: bool) -> None:
    if value:
        import collsched

        print(f"collsched {collsched.__version__}")
        raise typer.Exit()


def register(app: typer.Typer) -> None:
    @app.callback()
    def _main(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                           help="print the version and exit")) -> None:
        """Plan, verify, simulate and run collective communication on two-tier GPU clusters."""

    for name, fn in (("clusters", clusters_cmd), ("traffic", traffic_cmd), ("plan", plan_cmd), ("verify", verify_cmd),
                     ("simulate", simulate_cmd), ("draw", draw_cmd)):
        app.command(name)(reporting_errors(fn))
