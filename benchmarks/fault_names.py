"""Fault campaign: one rank killed (SIGKILL) or stopped (SIGSTOP) per run; does every survivor
raise within the timeout + 1 s, naming that rank?

Each run starts 8 Gloo ranks (local, forked), makes two calls of one mode, then a victim drawn
at random dies or stops at its third call, and every survivor reports what that call raised
(tests/_fault_scenarios.py, the scenario the CI test runs once per mode and fault). Cases:

    eager            small pairs riding in the exchange; the fault before the call
    native           torch's own call between checks; the fault before the call
    planned@call     a planned call; the fault before the call (its exchange sees it)
    planned@execute  a planned call; the fault after the exchange (its transfers see it),
                     with fanout, and with fast on 2 × 4 ranks (relayed transfers: most
                     survivors wait on a healthy rank, not on the victim)
    <mode>@random    every rank calls in a loop; the fault comes at a random moment
                     0.05 – 0.3 s into it (inside a call or between two; native mode
                     checks every 16th call), so survivors may fail in different calls

Per case and fault it prints: runs, runs that failed before the fault (the calls before it
time out on an overloaded host; their survivors are not counted), survivors, how many named
exactly the victim (`named`),
how many named a healthy rank (`wrong`), named nobody, the slowest survivor's time from
the start of its failing call (max and 95th percentile) and the share within timeout + 1 s.

    python benchmarks/fault_names.py [--runs 10] [--timeout 2] [--ranks 8] [--cases eager,native,...]
    python benchmarks/fault_names.py --json > faults.json
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.join(os.path.dirname(HERE), "tests")
# case name -> (mode, where the fault hits, algorithm, rows of float32 per pair)
CASES = {
    "eager": ("eager", "call", "fanout", 4),
    "native": ("native", "call", "auto", 4096),
    "planned@call": ("planned", "call", "fanout", 4096),
    "planned@execute": ("planned", "execute", "fanout", 4096),
    "planned@execute/fast": ("planned", "execute", "fast", 16384),
    "eager@random": ("eager", "random", "fanout", 4),
    "native@random": ("native", "random", "auto", 4096),
    "planned@random": ("planned", "random", "fanout", 4096),
}
FAULTS = ("kill", "stop")
TARGET_SLACK_S = 1.0  # the target: every survivor raises within the timeout + 1 s


def one_run(case: str, fault: str, victim: int, ranks: int, timeout_s: float) -> list:
    """Every rank's result of one run (a RankFailure in the victim's place)."""
    from collsched.comm.launch import run_local

    mode, at, algorithm, rows = CASES[case]
    return run_local("_fault_scenarios:fault_in_mode", ranks, (mode, fault, victim, timeout_s, at, algorithm, rows),
                     timeout_s=60 + 4 * timeout_s, extra_pythonpath=[TESTS], raise_on_failure=False)


def score(results: list, victim: int, mode: str) -> dict:
    """Per survivor: named the victim exactly, named someone else, named nobody; its time."""
    out = {"survivors": 0, "named": 0, "wrong": 0, "nobody": 0, "no_error": 0, "elapsed": [], "wrong_mode": 0,
           "examples": [], "setup_failed": 0}
    if any(not isinstance(got, dict) and got.kind == "raised" for r, got in enumerate(results) if r != victim):
        # A rank raised before the fault (the calls before it timed out on an overloaded host):
        # this run says nothing about naming the victim; it is counted apart.
        out["setup_failed"] = 1
        out["examples"].append(next(f"rank {r}: {got}" for r, got in enumerate(results)
                                    if r != victim and not isinstance(got, dict)))
        return out
    for r, got in enumerate(results):
        if r == victim:
            continue
        out["survivors"] += 1
        if not isinstance(got, dict):
            out["nobody"] += 1
            out["examples"].append(f"rank {r}: {got}")
            continue
        out["wrong_mode"] += got["modes"] != [mode, mode]
        out["elapsed"].append(got["elapsed"])
        if got["raised"] is None:
            out["no_error"] += 1
        elif got["ranks"] == [victim]:
            out["named"] += 1
        elif got["ranks"]:
            out["wrong"] += 1
            out["examples"].append(f"rank {r}: {got['message'][:300]}")
        else:
            out["nobody"] += 1
            out["examples"].append(f"rank {r}: {got['message'][:300]}")
    return out


def _pct(values: list, q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def campaign(cases: list, runs: int, ranks: int, timeout_s: float, seed: int) -> list:
    rng = random.Random(seed)
    rows = []
    for case in cases:
        for fault in FAULTS:
            total = {"case": case, "fault": fault, "runs": runs, "survivors": 0, "named": 0, "wrong": 0,
                     "nobody": 0, "no_error": 0, "wrong_mode": 0, "elapsed": [], "examples": [], "victims": [],
                     "setup_failed": 0}
            for _ in range(runs):
                victim = rng.randrange(ranks)
                s = score(one_run(case, fault, victim, ranks, timeout_s), victim, CASES[case][0])
                total["victims"].append(victim)
                for k in ("survivors", "named", "wrong", "nobody", "no_error", "wrong_mode", "setup_failed"):
                    total[k] += s[k]
                total["elapsed"] += s["elapsed"]
                total["examples"] += s["examples"][:2]
            el = total["elapsed"]
            total.update(max_s=max(el, default=float("nan")), p95_s=_pct(el, 0.95),
                         within=sum(e <= timeout_s + TARGET_SLACK_S for e in el) / max(1, total["survivors"]))
            rows.append(total)
            print(f"  {case} {fault}: {total['named']}/{total['survivors']} named, max {total['max_s']:.2f} s",
                  file=sys.stderr, flush=True)
    return rows


def _load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def print_table(rows: list, timeout_s: float) -> None:
    print(f"| case | fault | runs | failed before the fault | survivors | named the victim | named a healthy rank | "
          f"named nobody | max s | p95 s | within {timeout_s + TARGET_SLACK_S:g} s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for t in rows:
        pct = 100.0 * t["named"] / max(1, t["survivors"])
        print(f"| {t['case']} | {t['fault']} | {t['runs']} | {t['setup_failed']} | {t['survivors']} | "
              f"{t['named']} ({pct:.1f} %) | "
              f"{t['wrong']} | {t['nobody'] + t['no_error']} | {t['max_s']:.2f} | {t['p95_s']:.2f} | "
              f"{100.0 * t['within']:.1f} % |")
    surv = sum(t["survivors"] for t in rows)
    named = sum(t["named"] for t in rows)
    within = sum(t["within"] * t["survivors"] for t in rows)
    print(f"\nall: {named}/{surv} survivors named the victim ({100.0 * named / max(1, surv):.1f} %); "
          f"{100.0 * within / max(1, surv):.1f} % raised within {timeout_s + TARGET_SLACK_S:g} s; "
          f"{sum(t['wrong_mode'] for t in rows)} runs' calls before the fault were not in the mode under test; "
          f"{sum(t['setup_failed'] for t in rows)} runs failed before the fault (not counted)")
    for t in rows:
        for ex in t["examples"][:3]:
            print(f"- {t['case']} {t['fault']}: {ex}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10, help="runs per case and fault (a random victim each)")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--timeout", type=float, default=2.0, help="the calls' timeout in seconds")
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = [c for c in cases if c not in CASES]
    if unknown or args.runs < 1 or args.ranks < 4 or args.ranks % 4 or not args.timeout > 0:
        ap.error(f"--cases of {', '.join(CASES)} (unknown: {unknown}); --runs ≥ 1; --ranks a multiple of 4 (≥ 4); "
                 "--timeout > 0")
    load_before, t0 = _load(), time.time()
    rows = campaign(cases, args.runs, args.ranks, args.timeout, args.seed)
    meta = {"ranks": args.ranks, "timeout_s": args.timeout, "runs": args.runs, "seed": args.seed,
            "cores": os.cpu_count(), "load_before": load_before, "load_after": _load(),
            "seconds": round(time.time() - t0, 1), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    if args.json:
        print(json.dumps({"setup": meta, "results": rows}, indent=1))
    else:
        print(f"# fault campaign: {args.ranks} Gloo ranks over loopback, timeout {args.timeout:g} s, {args.runs} runs "
              f"per case and fault; {meta['date']}; {meta['cores']} cores, "
              f"load {load_before} → {meta['load_after']}; {meta['seconds']} s\n")
        print_table(rows, args.timeout)
    return 0 if all(t["wrong"] == 0 for t in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
