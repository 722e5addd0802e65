"""Campaign: two threads on two process groups, and call-sequence faults, run many times.

Part 1 (issue 48 item 1): on `--ranks` Gloo ranks, two process groups (the same members, or
two overlapping sets of different members), one thread each, both calling
``collsched.all_to_all_single`` at once; each rank starts its threads after random delays of
its own, so the ranks create collsched's own groups in different orders. Every call is compared
byte for byte with torch's call on the same group. Per layout and mode (eager, native, planned,
and all three mixed), `--runs` seeded runs; a row counts:

    runs     launches (each: a sum on the host-exchange group, then `--calls` calls per thread)
    aborts   runs in which a rank died (SIGABRT from Gloo) or was killed at the deadline
    errors   runs in which a thread raised
    wrong    calls whose output differed from torch's, and wrong sums, summed
    max s    the longest a thread took (its calls together), against `--timeout` per wait

Part 2 (item 2): the call-sequence faults of tests/test_call_sequence.py, `--runs` times each:
a rank one call ahead in a native site (raises alone, carries on), a native split
contradiction with ``checks=True`` and with ``checks="always"``; a row counts the runs in which
every rank raised the expected error (at the expected call) and the runs that aborted.

It runs only the public API (and tests/_thread_scenarios.py), so `--pythonpath` can point at
another checkout's ``python/`` to measure that version on the same machine (its per-run time
then includes the waits of a version that deadlocks: set `--timeout` low).

    python benchmarks/thread_groups.py [--ranks 4] [--runs 9] [--calls 4] [--timeout 8]
           [--part threads|sequence|both] [--pythonpath DIR] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.join(os.path.dirname(HERE), "tests")


def _launch(fn: str, ranks: int, args: tuple, deadline_s: float) -> list:
    from collsched.comm.launch import run_local

    return run_local(f"_thread_scenarios:{fn}", ranks, args, gpus_per_server=ranks, timeout_s=deadline_s,
                     extra_pythonpath=[TESTS], raise_on_failure=False)


def threads_part(ranks: int, runs: int, calls: int, timeout_s: float) -> list[dict]:
    rows = []
    for layout in ("same", "different"):
        for mode in ("eager", "native", "planned", "all"):
            row = {"layout": layout, "mode": mode, "runs": 0, "aborts": 0, "errors": 0, "wrong": 0, "calls": 0,
                   "max_s": 0.0, "first_error": ""}
            for run in range(runs):
                res = _launch("two_threads", ranks, (layout, [mode, mode], calls, timeout_s, 1000 + run),
                              4 * timeout_s + 60)
                row["runs"] += 1
                died = [r for r in res if not isinstance(r, dict)]
                row["aborts"] += bool(died)
                if died and not row["first_error"]:
                    row["first_error"] = str(died[0])[:160]
                errored = False
                for r in res:
                    if not isinstance(r, dict):
                        continue
                    for t in r.values():
                        row["wrong"] += t["wrong"]
                        row["calls"] += t["calls"] + 1
                        row["max_s"] = max(row["max_s"], t["elapsed"])
                        if t["error"]:
                            errored = True
                            row["first_error"] = row["first_error"] or t["error"][:160]
                row["errors"] += errored
            rows.append(row)
            print(f"{layout:9} {mode:8} runs {row['runs']:3}  aborts {row['aborts']:3}  errors {row['errors']:3}  "
                  f"wrong {row['wrong']:4}/{row['calls']:<5} max {row['max_s']:6.2f} s  {row['first_error']}",
                  flush=True)
    return rows


def sequence_part(ranks: int, runs: int, timeout_s: float) -> list[dict]:
    from collsched.comm.callsite import NATIVE_RECHECK_EVERY

    cases = {
        "rank ahead (native)": ("rank_ahead_in_native", (timeout_s, 1, 3),
                                lambda r, res: "rank 1 is 1 call ahead" in res.get("message", "")),
        "contradiction, checks=True": ("native_contradiction", (timeout_s, False),
                                       lambda r, res: res.get("raised_at") == NATIVE_RECHECK_EVERY),
        "contradiction, always": ("native_contradiction", (timeout_s, True),
                                  lambda r, res: res.get("raised_at") == 2),
    }
    rows = []
    for name, (fn, args, expected) in cases.items():
        row = {"case": name, "runs": 0, "caught_on_every_rank": 0, "aborts": 0, "max_s": 0.0}
        for _ in range(runs):
            t0 = time.monotonic()
            res = _launch(fn, ranks, args, 4 * timeout_s + 60)
            row["max_s"] = max(row["max_s"], time.monotonic() - t0)
            row["runs"] += 1
            row["aborts"] += any(not isinstance(r, dict) for r in res)
            row["caught_on_every_rank"] += all(isinstance(r, dict) and expected(i, r) for i, r in enumerate(res))
        rows.append(row)
        print(f"{name:28} runs {row['runs']:3}  caught on every rank {row['caught_on_every_rank']:3}  "
              f"aborts {row['aborts']:3}  max launch {row['max_s']:5.1f} s", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--calls", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=8.0, help="collsched's timeout per wait, seconds")
    ap.add_argument("--part", choices=("threads", "sequence", "both"), default="both")
    ap.add_argument("--pythonpath", help="import collsched from this directory instead")
    ap.add_argument("--json", help="write the rows here")
    a = ap.parse_args()
    if a.pythonpath:
        sys.path.insert(0, os.path.abspath(a.pythonpath))
        os.environ["PYTHONPATH"] = os.path.abspath(a.pythonpath) + os.pathsep + os.environ.get("PYTHONPATH", "")
    import collsched
    import torch

    print(f"collsched {collsched.__version__} from {os.path.dirname(collsched.__file__)}; torch {torch.__version__}; "
          f"{a.ranks} Gloo ranks on {os.cpu_count()} CPUs; load {os.getloadavg()[0]:.1f}", flush=True)
    out = {}
    t0 = time.monotonic()
    if a.part in ("threads", "both"):
        out["threads"] = threads_part(a.ranks, a.runs, a.calls, a.timeout)
    if a.part in ("sequence", "both"):
        out["sequence"] = sequence_part(a.ranks, a.runs, a.timeout)
    print(f"total {time.monotonic() - t0:.0f} s")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
