"""The wheel check's runtime smoke test (.ci/check-wheel): 8 local Gloo ranks (2 servers x 4) call
collsched.all_to_all_single on uneven splits and compare with torch's own all_to_all_single.

Run as `python .ci/wheel_smoke.py` with the installed wheel's interpreter; each rank imports this
file as the module `wheel_smoke` (run_local needs a function importable by name)."""
from __future__ import annotations

import os
import sys


def rank_main() -> dict:
    """One rank: uneven splits (rank i sends (i + j) % 3 rows of 4 floats to rank j), then the same
    exchange through torch.

    Returns:
        {"equal": bool, "rows": int, "core": path of the collsched._core the rank loaded}.
    """
    import torch
    import torch.distributed as dist

    import collsched

    rank, n = dist.get_rank(), dist.get_world_size()
    send = [(rank + j) % 3 for j in range(n)]
    recv = [(i + rank) % 3 for i in range(n)]
    inp = torch.arange(sum(send) * 4, dtype=torch.float32).reshape(-1, 4) + 1000 * rank
    out = torch.empty(sum(recv), 4)
    collsched.all_to_all_single(out, inp, recv, send)
    want = torch.empty_like(out)
    dist.all_to_all_single(want, inp, recv, send)
    return {"equal": bool(torch.equal(out, want)), "rows": int(out.shape[0]),
            "core": collsched._core.__file__}


def main() -> int:
    import collsched
    from collsched.comm.launch import run_local

    # Timeout: a hung rank is killed and reported instead of stalling CI.
    res = run_local("wheel_smoke:rank_main", 8, gpus_per_server=4, timeout_s=120,
                    extra_pythonpath=[os.path.dirname(os.path.abspath(__file__))], raise_on_failure=False)
    venv = sys.prefix
    bad = [f"rank {i}: {r}" for i, r in enumerate(res)
           if not (isinstance(r, dict) and r["equal"] and r["core"].startswith(venv))]
    if bad:
        print("wheel smoke test failed:\n" + "\n".join(bad), file=sys.stderr)
        return 1
    print(f"8 Gloo ranks: collsched.all_to_all_single equals torch's on every rank "
          f"(collsched {collsched.__version__} from {os.path.dirname(collsched.__file__)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
