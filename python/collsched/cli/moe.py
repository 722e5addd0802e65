"""CLI of the MoE area: `collsched moe simulate` (Fusco's benchmark on the simulator)."""
from __future__ import annotations

import json

import typer

from collsched.cli.core import reporting_errors


def parse_tokens(text: str) -> list:
    """``4096..32768`` (doubling), ``4096,8192`` or ``16384``."""
    text = text.strip()
    try:
        if ".." in text:
            lo, hi = (int(v) for v in text.split(".."))
            if lo <= 0 or hi < lo:
                raise ValueError
            out = []
            while lo <= hi:
                out.append(lo)
                lo *= 2
            return out
        out = [int(v) for v in text.split(",") if v.strip()]
        if not out or min(out) <= 0:
            raise ValueError
        return out
    except ValueError:
        raise ValueError(f"--tokens must be positive integers: N, N1,N2,... or LO..HI (doubling), got {text!r}") from None


def register(app: typer.Typer) -> None:
    from collsched.moe.sim import FUSCO_TESTBED, ROUTINGS, VARIANTS

    moe = typer.Typer(help="MoE dispatch and combine (Fusco): simulate the variants.", no_args_is_help=True)
    app.add_typer(moe, name="moe")

    @moe.command("simulate")
    @reporting_errors
    def simulate(
        cluster: str = typer.Option(FUSCO_TESTBED, "--cluster", "-c", help="cluster spec (default: Fusco's 8×8 H100)"),
        tokens: str = typer.Option("4096..32768", "--tokens", "-t", help="tokens per GPU: N, N1,N2 or LO..HI (doubling)"),
        hidden: int = typer.Option(7168, "--hidden", help="hidden size H"),
        topk: int = typer.Option(8, "--topk", help="experts per token K"),
        experts: int = typer.Option(256, "--experts", help="experts E (contiguous blocks over the GPUs)"),
        routing: str = typer.Option("realistic", "--routing", help=" | ".join(ROUTINGS)),
        variants: str = typer.Option(",".join(VARIANTS), "--variants", help="comma list from: " + ",".join(VARIANTS)),
        elem_bytes: int = typer.Option(2, "--elem-bytes", help="bytes per element (2 = bf16)"),
        chunks: int = typer.Option(8, "--chunks", help="pieces per send (pipelined forwarding, as Fusco and DeepEP "
                                                    "do); 1 = each hop waits for the whole previous one"),
        seed: int = typer.Option(0, "--seed"),
        json_out: bool = typer.Option(False, "--json", help="print exactly one JSON object on stdout"),
    ) -> None:
        """Simulated dispatch + combine time and inter-node bytes per variant (aggregated Plans per rank pair)."""
        from collsched.moe.sim import run
        from collsched.topology import as_cluster

        c = as_cluster(cluster)  # also `calibrated`
        names = [v.strip() for v in variants.split(",") if v.strip()]
        if not names:
            raise ValueError("--variants is empty")
        for v in names:
            if v not in VARIANTS:
                raise ValueError(f"unknown variant {v!r} (known: {', '.join(VARIANTS)})")
        if routing not in ROUTINGS:
            raise ValueError(f"--routing must be one of {', '.join(ROUTINGS)}, got {routing!r}")
        for name, v in (("--hidden", hidden), ("--topk", topk), ("--experts", experts), ("--elem-bytes", elem_bytes),
                        ("--chunks", chunks)):
            if v <= 0:
                raise ValueError(f"{name} must be positive, got {v}")
        rows = run(c, parse_tokens(tokens), hidden, topk, experts, routing, names, seed, elem_bytes, chunks)
        for r in rows:
            base = {x["variant"]: x["time_s"] for x in rows if x["tokens"] == r["tokens"]}
            for ref in ("nccl", "deepep"):
                if ref in base:
                    r[f"speedup_vs_{ref}"] = base[ref] / r["time_s"]
        if json_out:
            print(json.dumps({"cluster": c.spec(), "routing": routing, "hidden": hidden, "topk": topk,
                              "experts": experts, "elem_bytes": elem_bytes, "chunks": chunks, "simulated": True,
                              "rows": rows}))
            return
        print(f"# simulated MoE dispatch + combine on {c.spec()}")
        print(f"# routing {routing}, H={hidden}, top-{topk}, {experts} experts, {elem_bytes} B/element, "
              f"{chunks} piece(s) per send")
        print(f"{'tokens':>7} {'variant':>18} {'time(ms)':>9} {'dispatch':>9} {'combine':>9} "
              f"{'internode(GB)':>13} {'vs nccl':>8} {'vs deepep':>9}")
        for r in rows:
            print(f"{r['tokens']:>7} {r['variant']:>18} {r['time_s'] * 1e3:>9.3f} {r['dispatch_s'] * 1e3:>9.3f} "
                  f"{r['combine_s'] * 1e3:>9.3f} {r['internode_bytes'] / 1e9:>13.3f} "
                  f"{r.get('speedup_vs_nccl', float('nan')):>8.2f} {r.get('speedup_vs_deepep', float('nan')):>9.2f}")
