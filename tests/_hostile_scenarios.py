"""What each rank of tests/test_hostile_input.py runs: calls a new user gets wrong. Returns
what each rank saw; the pytest side asserts."""
from __future__ import annotations

import torch
import torch.distributed as dist

import collsched
from collsched import comm


def _call(n: int, rows: int, **kw) -> str:
    """One all-to-all of ``rows`` rows per peer; "" or the error's text."""
    out = torch.empty(rows * n, 2)
    try:
        collsched.all_to_all_single(out, torch.ones(rows * n, 2), [rows] * n, [rows] * n, timeout=20.0, **kw)
    except comm.CollectiveInputError as e:
        return f"{type(e).__name__}: {e}"
    return ""


def misspelt_algorithm_and_one_bad_rank() -> dict:
    n, rank = dist.get_world_size(), dist.get_rank()
    cl = f"h200:1,gpus={n}"
    res = {
        # A small call (its data rides in the descriptor exchange: nothing is planned) and a
        # large one: both refuse the name, on every rank, with the same text.
        "small": _call(n, 1, algorithm="fanuot", cluster=cl),
        "large": _call(n, 4096, algorithm="fanuot", cluster=cl, eager_bytes=0),
    }
    res["ok"] = _call(n, 1, algorithm="fanout", cluster=cl)
    st = comm.last_call_stats()
    res["stats"] = (st.algorithm, st.mode)
    res["ok_planned"] = _call(n, 4096, algorithm="fanout", cluster=cl, eager_bytes=0)
    st = comm.last_call_stats()
    res["stats_planned"] = (st.algorithm, st.mode, st.planned_by)
    # One rank's split sizes are not integers: every rank gets the same text; only that rank
    # knows the value, in `local_detail`.
    out, x = torch.empty(2 * n, 2), torch.ones(2 * n, 2)
    splits = [2] * n
    bad = ["two"] * n if rank == 1 else splits
    try:
        collsched.all_to_all_single(out, x, splits, bad, algorithm="fanout", cluster=cl, timeout=20.0)
        res["one_bad"], res["detail"] = "", None
    except comm.CollectiveInputError as e:
        res["one_bad"], res["detail"] = str(e), getattr(e, "local_detail", None)
    return res
