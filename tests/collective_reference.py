"""Test helpers: run a Plan on concrete bytes with a tiny reference interpreter
(independent of every producer and exporter) and compute what its collective
should produce."""
from __future__ import annotations

import json

import numpy as np

_DT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def sizes(collective: dict, rank: int) -> tuple[int, int]:
    k = collective["kind"]
    if k == "all_gather":
        return collective["shard_bytes"], collective["ranks"] * collective["shard_bytes"]
    if k == "reduce_scatter":
        return collective["ranks"] * collective["shard_bytes"], collective["shard_bytes"]
    return collective["bytes"], collective["bytes"]


def inputs_for(plan, seed: int = 1) -> list[np.ndarray]:
    p = json.loads(plan.to_json())
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, sizes(p["collective"], r)[0], dtype=np.uint8) for r in range(p["collective"]["ranks"])]


def run(plan, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Execute in (step, id) order; a message is a snapshot of the sender's segments."""
    p = json.loads(plan.to_json())
    c = p["collective"]
    elem = c.get("elem_bytes", 1)
    dt = _DT[elem]
    n = c["ranks"]
    bufs = [{"input": inputs[r].copy(), "output": np.zeros(sizes(c, r)[1], np.uint8), "scratch": np.zeros(p["scratch_bytes"][r], np.uint8)} for r in range(n)]
    order = sorted(range(len(p["transfers"])), key=lambda i: (p["transfers"][i]["step"], i))
    for i in order:
        t = p["transfers"][i]
        segs = p["segments"][t["seg_begin"] : t["seg_end"]]
        payload = [bufs[t["src"]][s["src_buf"]][s["src_off"] : s["src_off"] + s["len"]].copy() for s in segs]
        for s, data in zip(segs, payload):
            dst = bufs[t["dst"]][s["dst_buf"]]
            view = dst[s["dst_off"] : s["dst_off"] + s["len"]]
            if t["op"] == "copy":
                view[:] = data
            else:
                assert s["dst_off"] % elem == 0 and s["len"] % elem == 0, f"transfer {i}: unaligned reduction"
                v = view.view(dt)
                v += data.view(dt)
    return [b["output"] for b in bufs]


def expected(plan, inputs: list[np.ndarray]) -> list[np.ndarray]:
    p = json.loads(plan.to_json())
    c = p["collective"]
    n = c["ranks"]
    if c["kind"] == "all_gather":
        return [np.concatenate(inputs)] * n
    dt = _DT[c["elem_bytes"]]
    total = np.zeros(len(inputs[0]) // c["elem_bytes"], dt)
    for x in inputs:
        total += x.view(dt)
    total = total.view(np.uint8)
    if c["kind"] == "all_reduce":
        return [total] * n
    s = c["shard_bytes"]
    return [total[r * s : (r + 1) * s] for r in range(n)]


def assert_computes(plan, seed: int = 1) -> None:
    x = inputs_for(plan, seed)
    got, want = run(plan, x), expected(plan, x)
    for r, (g, w) in enumerate(zip(got, want)):
        assert np.array_equal(g, w), f"rank {r}: output differs from the collective's definition ({plan!r})"


def verify_if_available(plan) -> None:
    """Run the verifier (symbolic execution; raises VerificationError naming the transfer)."""
    plan.verify()


def torch_execute(plan, input, output, group=None, *, timeout=None):
    """A minimal step-synchronous executor on torch.distributed point-to-point ops,
    used by the Gloo tests until (and beside) collsched.comm.execute: per step,
    senders snapshot their segments, receivers receive into temporaries, then
    every transfer into this rank is applied in id order."""
    import torch
    import torch.distributed as dist

    p = json.loads(plan.to_json())
    me = dist.get_rank(group)
    elem = p["collective"].get("elem_bytes", 1)
    bufs = {
        "input": input.view(-1).view(torch.uint8),
        "output": output.view(-1).view(torch.uint8),
        "scratch": torch.zeros(p["scratch_bytes"][me], dtype=torch.uint8),
    }
    dtype = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[elem]
    if input.dtype.is_floating_point:
        dtype = input.dtype
    by_step: dict[int, list[int]] = {}
    for i, t in enumerate(p["transfers"]):
        if me in (t["src"], t["dst"]):
            by_step.setdefault(t["step"], []).append(i)

    def gather(t):
        segs = p["segments"][t["seg_begin"] : t["seg_end"]]
        return torch.cat([bufs[s["src_buf"]][s["src_off"] : s["src_off"] + s["len"]] for s in segs]).clone()

    for step in sorted(by_step):
        ids = by_step[step]
        ops, incoming = [], {}
        for i in ids:
            t = p["transfers"][i]
            if t["src"] == t["dst"]:
                incoming[i] = gather(t)
            elif t["src"] == me:
                ops.append(dist.P2POp(dist.isend, gather(t), t["dst"], group, tag=i % (1 << 20)))
            else:
                n = sum(s["len"] for s in p["segments"][t["seg_begin"] : t["seg_end"]])
                incoming[i] = torch.empty(n, dtype=torch.uint8)
                ops.append(dist.P2POp(dist.irecv, incoming[i], t["src"], group, tag=i % (1 << 20)))
        if ops:
            for w in dist.batch_isend_irecv(ops):
                w.wait()
        for i in ids:
            t = p["transfers"][i]
            if t["dst"] != me:
                continue
            data, off = incoming[i], 0
            for s in p["segments"][t["seg_begin"] : t["seg_end"]]:
                dst = bufs[s["dst_buf"]][s["dst_off"] : s["dst_off"] + s["len"]]
                piece = data[off : off + s["len"]]
                off += s["len"]
                if t["op"] == "copy":
                    dst.copy_(piece)
                else:
                    dst.view(dtype).add_(piece.view(dtype))
