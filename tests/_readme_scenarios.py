"""What each rank of tests/test_readme.py runs: README's runtime snippet, as written, with the
names it assumes defined, checked against torch's own all_to_all_single."""
from __future__ import annotations

import torch
import torch.distributed as dist


def run_snippet(code: str) -> dict:
    rank, n = dist.get_rank(), dist.get_world_size()
    g = torch.Generator().manual_seed(7)
    rows = torch.randint(0, 5, (n, n), generator=g)  # identical on every rank: rows i sends to j
    input_split_sizes = rows[rank].tolist()
    output_split_sizes = rows[:, rank].tolist()
    input = torch.arange(sum(input_split_sizes) * 3, dtype=torch.float32).reshape(-1, 3) + 1000 * rank
    output = torch.empty(sum(output_split_sizes), 3)
    ep_group = dist.new_group(list(range(n)))
    exec(compile(code, "README.md", "exec"), {"output": output, "input": input, "ep_group": ep_group,
                                                "input_split_sizes": input_split_sizes,
                                                "output_split_sizes": output_split_sizes})
    want = torch.empty_like(output)
    dist.all_to_all_single(want, input, output_split_sizes, input_split_sizes, group=ep_group)
    return {"equal": bool(torch.equal(output, want)), "rows": int(output.shape[0])}
