"""The whole call, end to end: collsched's `all_to_all_single` against torch's, and where its time goes.

For each size (mean bytes each rank sends, 1 KiB to 64 MiB, ×4 steps), on 8 Gloo ranks, every
method is called on a log-normal traffic matrix, either a *new* matrix every call (MoE: the
router changes every step) or the same one again (*hit*: the plan cache's best case), methods
interleaved call by call so a load spike hits all alike. A call's time is the slowest rank's,
each call starting after a barrier; the table shows the median over ``--iters`` calls:

    torch ms      torch.distributed.all_to_all_single, the same matrices, in the same run
    <method> ms   collsched.all_to_all_single(algorithm=<method>)  (auto: what it ran, in brackets)
    ×torch        the method's median / torch's median

and, per method, the stages of `collsched.comm.last_call_stats()` on rank 0 (median µs):
validate, exchange (with the small pairs that ride in it), decide (+choose), expand,
compile, post, wait (a planned call's execute is post+wait), ops (backend operations per
call) and the mode (eager / native / planned; '*' marks a mix over the calls).

    python benchmarks/host_tax.py [--iters 9] [--sizes 1KiB:64MiB] [--methods torch,auto,fanout,fast]
    python benchmarks/host_tax.py --testbed [--nic 400mbit] [--means 16KiB,256KiB]   # root: the emulated fabric
    python benchmarks/host_tax.py --json > host_tax.json
    python benchmarks/host_tax.py --methods torch,fast,fast@alltoallv   # ALGORITHM@TRANSPORT

Outputs are checked against torch's on the first call of every (size, case, method).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

METHODS = ("torch", "auto", "fanout", "fast")
STAGES = ("validate_s", "exchange_s", "decide_s", "expand_s", "compile_s", "post_s", "wait_s", "execute_s")
SIGMA = 0.5  # log-normal spread of pair sizes around the mean


def lognormal_rows(n: int, mean_pair: int, seed: int, sigma: float = SIGMA) -> np.ndarray:
    """An n×n matrix of bytes, log-normal pair sizes with the given mean (the same on every rank)."""
    rng = np.random.default_rng(seed)
    w = rng.lognormal(0.0, sigma, (n, n))
    return np.floor(w / w.mean() * mean_pair).astype(np.int64)


def rank_main(sizes: list, methods: list, iters: int, warmup: int, cluster: str, sigma: float) -> dict:
    """Runs in every rank; returns per (size, case, method) the call times and rank 0's stages."""
    import torch
    import torch.distributed as dist

    import collsched
    from collsched import comm

    rank, n = dist.get_rank(), dist.get_world_size()
    out: dict = {}
    for size in sizes:
        mean_pair = max(1, size // n)
        for case in ("new", "hit"):
            times = {m: [] for m in methods}
            stages = {m: [] for m in methods}
            correct = {}
            for it in range(warmup + iters):
                seed = 1000 * size + (it if case == "new" else 0)
                rows = lognormal_rows(n, mean_pair, seed, sigma)
                ins, outs = rows[rank].tolist(), rows[:, rank].tolist()
                gen = torch.Generator().manual_seed(seed + rank)
                x = torch.randint(0, 256, (sum(ins),), dtype=torch.uint8, generator=gen)
                y = torch.zeros(sum(outs), dtype=torch.uint8)  # touched: no method pays its page faults
                ref = None
                # A different method goes first each call (the first after a barrier meets the
                # stragglers of the barrier itself).
                for m in methods[it % len(methods):] + methods[:it % len(methods)]:
                    dist.barrier()
                    t0 = time.perf_counter()
                    if m == "torch":
                        dist.all_to_all_single(y, x, outs, ins)
                    else:  # "fast@alltoallv": algorithm fast, transport alltoallv
                        alg, _, transport = m.partition("@")
                        collsched.all_to_all_single(y, x, outs, ins, algorithm=alg, cluster=cluster,
                                                    transport=transport or "auto")
                    dt = time.perf_counter() - t0
                    if it == 0:
                        if ref is None:
                            ref = torch.empty_like(y)
                            dist.all_to_all_single(ref, x, outs, ins)
                        correct[m] = bool(torch.equal(y, ref))
                    if it < warmup:
                        continue
                    times[m].append(dt)
                    if m != "torch":
                        st = comm.last_call_stats()
                        stages[m].append({**{k: getattr(st, k) for k in STAGES}, "ops": st.ops, "mode": st.mode,
                                          "ran": st.choice or st.planned_by})
            out[f"{size}|{case}"] = {"times": times, "stages": stages if rank == 0 else {}, "correct": correct}
    return out


def summarize(results: list, sizes: list, methods: list) -> list[dict]:
    rows = []
    for size in sizes:
        for case in ("new", "hit"):
            key = f"{size}|{case}"
            per_call = {m: np.max(np.array([r[key]["times"][m] for r in results]), axis=0) for m in methods}
            med = {m: float(np.median(per_call[m])) for m in methods}
            mean = {m: float(np.mean(per_call[m])) for m in methods}
            row = {"bytes_per_rank": size, "case": case, "median_s": med, "mean_s": mean,
                   "correct": all(all(r[key]["correct"].values()) for r in results), "stages": {}}
            for m in methods:
                st = results[0][key]["stages"].get(m) or []
                if not st:
                    continue
                modes = sorted({s["mode"] for s in st})
                ran = sorted({s["ran"] for s in st})
                row["stages"][m] = {**{k: float(np.median([s[k] for s in st])) for k in STAGES},
                                    "ops": float(np.median([s["ops"] for s in st])),
                                    "mode": modes[0] + ("*" if len(modes) > 1 else ""),
                                    "ran": "/".join(ran)}
            rows.append(row)
    return rows


def _fmt_size(b: int) -> str:
    for unit, k in (("MiB", 20), ("KiB", 10)):
        if b >= 1 << k and b % (1 << k) == 0:
            return f"{b >> k} {unit}"
    return f"{b} B"


def print_tables(rows: list, methods: list, title: str) -> None:
    others = [m for m in methods if m != "torch"]
    print(f"\n## {title}\n")
    head = "| size/rank | case | torch ms | " + " | ".join(f"{m} ms | ×torch" for m in others) + " |"
    print(head)
    print("|" + "---|" * (3 + 2 * len(others)))
    worst = {m: 0.0 for m in others}
    for r in rows:
        t = r["median_s"]["torch"]
        cells = []
        for m in others:
            ratio = r["median_s"][m] / t if t > 0 else float("nan")
            worst[m] = max(worst[m], ratio)
            ran = r["stages"].get(m, {}).get("ran", "")
            tag = f" ({ran})" if m == "auto" and ran else ""
            cells.append(f"{r['median_s'][m] * 1e3:.2f}{tag} | {ratio:.2f}")
        flag = "" if r["correct"] else " WRONG OUTPUT"
        print(f"| {_fmt_size(r['bytes_per_rank'])} | {r['case']} | {t * 1e3:.2f} | " + " | ".join(cells) + f" |{flag}")
    print("\nworst ×torch over the sizes: " + ", ".join(f"{m} {worst[m]:.2f}" for m in others))
    print("\n### where collsched's time goes (rank 0, median µs per call)\n")
    print("| size/rank | case | method | mode | " + " | ".join(k[:-2] for k in STAGES) + " | ops |")
    print("|" + "---|" * 13)
    for r in rows:
        for m in others:
            s = r["stages"].get(m)
            if not s:
                continue
            us = [f"{s[k] * 1e6:.0f}" for k in STAGES]
            print(f"| {_fmt_size(r['bytes_per_rank'])} | {r['case']} | {m} | {s['mode']} | " + " | ".join(us)
                  + f" | {s['ops']:.0f} |")


def parse_sizes(text: str) -> list[int]:
    from collsched.units import parse_bytes

    if ":" in text:
        lo, hi = (parse_bytes(p) for p in text.split(":"))
        out, s = [], lo
        while s <= hi:
            out.append(s)
            s *= 4
        return out
    return [parse_bytes(p) for p in text.split(",")]


def _load() -> str:
    try:
        return " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        return "?"


def _worker():
    """rank_main as the ranks import it (this file as module `host_tax`, not `__main__`)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import host_tax

    return host_tax.rank_main


def run_loopback(args, methods, sizes) -> list:
    from collsched.comm.launch import run_local

    here = os.path.dirname(os.path.abspath(__file__))
    return run_local(_worker(), args.ranks, args=(sizes, methods, args.iters, args.warmup,
                                                  f"h200:{args.ranks // 4},gpus=4", args.sigma),
                     gpus_per_server=4, timeout_s=args.timeout, extra_pythonpath=[here])


def run_testbed(args, methods, means) -> list:
    from collsched.testbed.fabric import FabricSpec
    from collsched.testbed.launch import run_on_new_fabric
    from collsched.testbed.model import DEFAULT_PARAMS, cluster_spec

    spec = FabricSpec.from_knobs(2, 4, args.nic)
    here = os.path.dirname(os.path.abspath(__file__))
    sizes = [m * spec.ranks for m in means]
    cluster = cluster_spec(spec, DEFAULT_PARAMS)
    res = run_on_new_fabric(spec, _worker(), (sizes, methods, args.iters, args.warmup, cluster, args.sigma),
                            env={"PYTHONPATH": os.pathsep.join([here] + [p for p in sys.path if p])},
                            timeout_s=args.timeout)
    return res, sizes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1KiB:64MiB", help="bytes per rank: LO:HI (×4 steps) or a list")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--iters", type=int, default=9)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--sigma", type=float, default=SIGMA, help="log-normal spread of the pair sizes")
    ap.add_argument("--timeout", type=float, default=1200.0)
    ap.add_argument("--testbed", action="store_true", help="on the emulated 2×4 fabric (root)")
    ap.add_argument("--nic", default="400Mbps", help="testbed NIC rate per direction")
    ap.add_argument("--means", default="16KiB,256KiB", help="testbed: mean bytes per pair")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.iters < 1 or args.warmup < 0 or args.ranks < 4 or args.ranks % 4:
        ap.error("--iters ≥ 1, --warmup ≥ 0, --ranks a multiple of 4")
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    if "torch" not in methods:
        methods.insert(0, "torch")
    load_before = _load()
    t0 = time.time()
    if args.testbed:
        from collsched.units import parse_bytes

        results, sizes = run_testbed(args, methods, [parse_bytes(m) for m in args.means.split(",")])
        where = f"testbed 2×4 ranks, {args.nic} NICs, log-normal σ={args.sigma}"
    else:
        sizes = parse_sizes(args.sizes)
        results = run_loopback(args, methods, sizes)
        where = f"{args.ranks} Gloo ranks over loopback, log-normal σ={args.sigma}"
    rows = summarize(results, sizes, methods)
    meta = {"where": where, "iters": args.iters, "cores": os.cpu_count(), "load_before": load_before,
            "load_after": _load(), "seconds": round(time.time() - t0, 1),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    if args.json:
        print(json.dumps({"setup": meta, "results": rows}, indent=1))
    else:
        print(f"# host tax: {where}; median of {args.iters} calls, slowest rank; {meta['date']}; "
              f"{meta['cores']} cores, load {meta['load_before']} → {meta['load_after']}")
        print_tables(rows, methods, where)
    return 0 if all(r["correct"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
