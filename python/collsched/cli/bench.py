"""nccl-tests-style all-to-all(v) benchmark: torch's `all_to_all_single` and every
collsched algorithm, over a size sweep, on a real process group.

Sizes are bytes per rank (mean send volume), as nccl-tests' alltoall. Times are the
average over `iters` back-to-back calls, then the max across ranks (nccl-tests `-a 3`);
with `rounds` > 1 the methods are timed in interleaved rounds and the best round kept.
algbw = size / time, busbw = algbw × (n-1)/n (nccl-tests' alltoall factor). #wrong counts
output elements that differ from the value the deterministic input pattern predicts.
exec is the data-movement part of those same timed calls (the runtime's execute step, as
``comm.last_call_stats().execute_s`` records it), so exec ≤ time on every rank by construction.

Rows stream: rank 0 hands each size's rows to :func:`emit` as soon as they are measured
(``report_progress`` under ``run_local``, stdout under torchrun).
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field

from pathlib import Path

import numpy as np

DTYPES = {"float32": 4, "float16": 2, "bfloat16": 2, "int32": 4, "int64": 8, "uint8": 1}
# Pattern modulus per dtype: values stay exactly representable.
_PATTERN_MOD = {"float32": 1 << 24, "float16": 2048, "bfloat16": 256, "int32": 1 << 31, "int64": 1 << 40, "uint8": 256}
TORCH = "torch"


@dataclass
class BenchConfig:
    min_bytes: int = 1 << 20
    max_bytes: int = 16 << 20
    factor: int = 4
    workload: str = "balanced"
    warmup: int = 2
    iters: int = 5
    algorithms: list = field(default_factory=list)  # empty = torch + every available algorithm
    dtype: str = "float32"
    cluster: str = ""  # empty = from LOCAL_WORLD_SIZE
    seed: int = 0
    check: bool = True
    exec_only: bool = True  # also report exec: the data-movement part of the same timed calls
    rounds: int = 1  # interleaved repetitions over all methods; the best round is reported

    def validate(self) -> None:
        """Raise ValueError naming the flag for a setting that would make a number up."""
        for flag, name in (("-n/--iters", "iters"), ("--warmup", "warmup"), ("-r/--rounds", "rounds")):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{flag} must be at least 1, got {v!r} (a time over no calls would be invented)")
        if self.dtype not in DTYPES:
            raise ValueError(f"--dtype: unknown dtype {self.dtype!r} (known: {', '.join(DTYPES)})")
        sizes(self.min_bytes, self.max_bytes, self.factor)


def sizes(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    if min_bytes <= 0 or max_bytes < min_bytes:
        raise ValueError(f"need 0 < min_bytes <= max_bytes, got -b {min_bytes} -e {max_bytes}")
    if factor < 2:
        raise ValueError(f"the size factor must be at least 2, got -f {factor}")
    out, s = [], min_bytes
    while s <= max_bytes:
        out.append(s)
        s *= factor
    return out


def workload_rows(workload: str, n: int, bytes_per_rank: int, elem: int, seed: int = 0) -> np.ndarray:
    """Element counts (entry [i][j] = elements i sends to j) whose mean row sum is bytes_per_rank / elem."""
    import collsched.traffic as T
    from collsched.workloads import ACCEPTED, FILE_SUFFIXES, _exponent

    elems = max(bytes_per_rank // elem, 0)
    kind, _, arg = workload.partition(":")
    if kind == "balanced":
        base = np.full((n, n), 1.0)
    elif kind == "uniform":
        base = T.uniform(n, 1 << 20, seed=seed).astype(np.float64)
    elif kind == "zipf":
        base = T.zipf(n, _exponent(workload, arg or "1.2"), 1 << 20, seed=seed).astype(np.float64)
    elif kind == "hot":
        base = T.hot_experts(n, skew=_exponent(workload, arg or "1.0"), tokens_per_rank=4096, hidden=1, dtype_bytes=1,
                             seed=seed).astype(np.float64)
    elif Path(workload).suffix.lower() in FILE_SUFFIXES:
        base = T.load(workload).astype(np.float64)  # validated: square, non-negative integers
        if base.shape != (n, n):
            raise ValueError(f"matrix file {workload} is {base.shape[0]}×{base.shape[1]}, expected {n}×{n}")
    else:
        raise ValueError(f"unknown workload {workload!r}; accepted: {', '.join(ACCEPTED)}")
    total = base.sum()
    if total <= 0:
        return np.zeros((n, n), dtype=np.int64)
    return np.floor(base * (elems * n / total)).astype(np.int64)


def _pattern(torch, rank: int, start, count: int, mod: int):
    k = torch.arange(start, start + count, dtype=torch.int64)
    return (k + rank * 7919) % mod


def cluster_label(spec: str, n: int) -> str:
    """The cluster as the user would write it: ``spec`` itself, else the runtime's default
    (``LOCAL_WORLD_SIZE`` GPUs per server on the default preset), never the 170-character ``Cluster.spec()``."""
    if spec:
        return spec
    from collsched.comm.api import DEFAULT_PRESET

    local = int(os.environ.get("LOCAL_WORLD_SIZE", "0") or 0)
    if local <= 0 or local > n or n % local:
        local = n
    return f"{DEFAULT_PRESET}:{n // local},gpus={local}"


def emit(kind: str, payload: dict) -> None:
    """Hand a header or a finished row to whoever shows them: the parent of ``run_local`` ranks
    (through ``report_progress``), else stdout (under torchrun, rank 0 prints the table as it goes)."""
    from collsched.comm.launch import PROGRESS_ENV, report_progress

    if os.environ.get(PROGRESS_ENV):
        report_progress(f"bench-{kind} " + json.dumps(payload))
    elif kind == "header":
        print(format_header(payload), flush=True)
    else:
        print(format_row(payload, None), flush=True)


def bench_worker(cfg_dict: dict) -> dict | None:
    """Run on every rank of an initialised group; rank 0 returns the rows (and streams them through :func:`emit`)."""
    import torch
    import torch.distributed as dist

    import collsched
    from collsched import comm

    cfg = BenchConfig(**cfg_dict)
    cfg.validate()
    rank, n = dist.get_rank(), dist.get_world_size()
    dtype = getattr(torch, cfg.dtype)
    elem = DTYPES[cfg.dtype]
    mod = _PATTERN_MOD[cfg.dtype]
    device = torch.device("cpu")
    backend = str(dist.get_backend()).lower()
    if "nccl" in backend and torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
        torch.cuda.set_device(device)
    cluster = comm.resolve_cluster(cfg.cluster or None, n)
    algs = cfg.algorithms or default_algorithms(collsched)
    gpus = torch.cuda.device_count() if device.type == "cuda" else 0
    info = {"ranks": n, "backend": backend, "device": str(device), "cluster": cluster_label(cfg.cluster, n),
            "cluster_spec": cluster.spec(), "ranks_per_gpu": -(-n // gpus) if gpus else 0,
            "iters": cfg.iters, "warmup": cfg.warmup, "rounds": cfg.rounds}
    if rank == 0:
        emit("header", info)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    rows_out = []
    for size in sizes(cfg.min_bytes, cfg.max_bytes, cfg.factor):
        rows = workload_rows(cfg.workload, n, size, elem, cfg.seed)
        in_s = [int(x) for x in rows[rank]]
        out_s = [int(x) for x in rows[:, rank]]
        x = _pattern(torch, rank, 0, sum(in_s), mod).to(dtype).to(device)
        expected = torch.cat([_pattern(torch, i, int(rows[i, :rank].sum()), int(rows[i, rank]), mod)
                              for i in range(n)]).to(dtype) if n else None
        out = torch.empty(sum(out_s), dtype=dtype, device=device)
        calls, recs = {}, {}
        for alg in algs:
            rec = {"size": int(size), "count": int(sum(in_s)), "type": cfg.dtype, "algorithm": alg,
                   "workload": cfg.workload, "ranks": n}
            recs[alg] = rec
            try:
                if alg == TORCH:
                    def call():
                        dist.all_to_all_single(out, x, out_s, in_s)
                else:
                    def call(alg=alg):
                        collsched.all_to_all_single(out, x, out_s, in_s, algorithm=alg, cluster=cluster)
                out.zero_()
                dist.barrier()
                call()  # first call plans (cache miss)
                sync()
                if alg != TORCH:
                    st = comm.last_call_stats()
                    rec["plan_ms"] = st.plan_s * 1e3
                    rec["planned_by"] = st.planned_by
                    rec["steps"] = st.steps
                wrong = int((out.cpu() != expected).sum()) if cfg.check else 0
                w = torch.tensor([wrong], dtype=torch.int64, device=device)
                dist.all_reduce(w)
                rec["wrong"] = int(w.item())
                for _ in range(cfg.warmup):
                    call()
                calls[alg] = call
            except Exception as e:  # keep the sweep going; every rank sees the same collective errors
                rec["error"] = f"{type(e).__name__}: {e}"[:200]
        # Interleaved rounds, best round kept: on a shared machine this cancels most of the noise.
        best: dict = {}
        for _ in range(cfg.rounds):
            for alg, call in calls.items():
                try:
                    t, ex = _timed(call, cfg.iters, dist, torch, device, sync,
                                   comm if alg != TORCH and cfg.exec_only else None)
                except Exception as e:
                    recs[alg]["error"] = f"{type(e).__name__}: {e}"[:200]
                    continue
                if t < best.get(alg, (float("inf"), None))[0]:
                    best[alg] = (t, ex)
        done = []
        for alg, rec in recs.items():
            if "error" not in rec:
                t_us, ex_us = best[alg]
                rec["time_us"] = t_us
                if ex_us is not None:
                    rec["exec_us"] = ex_us
                t = t_us * 1e-6
                rec["algbw_gbs"] = size / t / 1e9 if t > 0 else 0.0
                rec["busbw_gbs"] = rec["algbw_gbs"] * (n - 1) / n
            done.append(rec)
        if rank == 0:
            torch_t = next((r.get("time_us") for r in done if r["algorithm"] == TORCH), None)
            for rec in done:
                emit("row", dict(rec, torch_time_us=torch_t))
        rows_out += done
    return dict(info, rows=rows_out) if rank == 0 else None


def _timed(call, iters: int, dist, torch, device, sync, comm=None) -> tuple[float, float | None]:
    """(mean µs per call, mean µs of its execute step) over `iters` back-to-back calls, each the
    max across ranks. The execute step is read from each call's own stats, inside the timed
    interval, so exec ≤ time on every rank and hence for the maxima."""
    if iters < 1:
        raise ValueError(f"-n/--iters must be at least 1, got {iters}")
    dist.barrier()
    sync()
    exec_s = 0.0
    t0 = time.perf_counter()
    for _ in range(iters):
        call()
        if comm is not None:
            exec_s += comm.last_call_stats().execute_s
    sync()
    mine = (time.perf_counter() - t0) / iters * 1e6
    t = torch.tensor([mine, exec_s / iters * 1e6], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t[0].item()), (float(t[1].item()) if comm is not None else None)


def _fixed_algorithms(collsched) -> list[str]:
    """Every fixed all-to-all algorithm (auto is listed on its own)."""
    return [name for name, _ in collsched.all_to_all_algorithms() if name != "auto"]


def default_algorithms(collsched) -> list[str]:
    """torch's own all_to_all_single, every fixed algorithm, then auto (the runtime's default)."""
    return [TORCH] + _fixed_algorithms(collsched) + ["auto"]


# Wide enough for "auto (balanced_direct)": the row names what auto ran.
_ALG_WIDTH = 22
_COLUMNS = (f"#{'size':>12} {'count':>11} {'type':>8} {'algorithm':>{_ALG_WIDTH}} {'time(us)':>11} {'algbw':>7} {'busbw':>7} "
            f"{'#wrong':>7} {'exec(us)':>10} {'plan(ms)':>9} {'vs torch':>8}")


def format_header(info: dict) -> str:
    """The lines above the rows: what ran where, how the columns are measured."""
    share = info.get("ranks_per_gpu", 0) or 0
    return (f"# collsched bench: {info['ranks']} ranks, backend {info['backend']}, device {info['device']}, "
            f"cluster {info['cluster']}\n"
            + (f"# {share} ranks share each GPU and talk over loopback sockets: "
               f"this checks outputs, its times say nothing of the hardware\n" if share > 1 else "")
            + "# time: mean of back-to-back calls, max across ranks; busbw = algbw × (n-1)/n (GB/s)\n"
            "# exec: the data-movement part of the same calls (≤ time); vs torch: time / torch's time (lower is faster)\n"
            + _COLUMNS)


def algorithm_label(r: dict) -> str:
    """The row's method, with what ``auto`` ran in parentheses (``auto (fast)``; ``native`` =
    torch's own call), as the JSON's ``planned_by`` says."""
    by = r.get("planned_by") or ""
    return r["algorithm"] if by in ("", r["algorithm"]) else f"{r['algorithm']} ({by})"


def format_row(r: dict, torch_time_us: float | None) -> str:
    """One row; ``torch_time_us`` (or the row's own ``torch_time_us``) gives the vs-torch ratio."""
    name = algorithm_label(r)
    if "error" in r:
        return f" {r['size']:>12} {r['count']:>11} {r['type']:>8} {name:>{_ALG_WIDTH}}  error: {r['error']}"
    base = torch_time_us if torch_time_us is not None else r.get("torch_time_us")
    ratio = f"{r['time_us'] / base:8.2f}" if base and r["algorithm"] != TORCH else f"{'':>8}"
    ex = f"{r['exec_us']:10.1f}" if "exec_us" in r else f"{'':>10}"
    pl = f"{r['plan_ms']:9.3f}" if "plan_ms" in r else f"{'':>9}"
    return (f" {r['size']:>12} {r['count']:>11} {r['type']:>8} {name:>{_ALG_WIDTH}} {r['time_us']:11.1f} "
            f"{r['algbw_gbs']:7.2f} {r['busbw_gbs']:7.2f} {r['wrong']:>7} {ex} {pl} {ratio}")


def format_footer(result: dict) -> str:
    """nccl-tests' closing lines: wrong values, then the average bus bandwidth (per method, GB/s)."""
    rows = result["rows"]
    wrong = sum(r.get("wrong", 0) for r in rows)
    errors = sum(1 for r in rows if "error" in r)
    lines = [f"# Out of bounds values : {wrong} {'OK' if not wrong and not errors else 'FAILED'}"
             + (f" ({errors} rows with errors)" if errors else "")]
    order = list(dict.fromkeys(r["algorithm"] for r in rows))
    for alg in order:
        bws = [r["busbw_gbs"] for r in rows if r["algorithm"] == alg and "busbw_gbs" in r]
        if bws:
            lines.append(f"# Avg bus bandwidth    : {sum(bws) / len(bws):8.3f}  {alg}")
    return "\n".join(lines)


def format_table(result: dict) -> str:
    """nccl-tests-like text table: header, rows, footer."""
    torch_t = {r["size"]: r.get("time_us") for r in result["rows"] if r["algorithm"] == TORCH}
    lines = [format_header(result)]
    lines += [format_row(r, torch_t.get(r["size"])) for r in result["rows"]]
    lines.append(format_footer(result))
    return "\n".join(lines)


def run_bench(cfg: BenchConfig, nprocs: int = 8, gpus_per_server: int = 4, timeout_s: float = 600.0,
              backend: str = "auto", on_progress=None) -> dict:
    """Under torchrun (or an initialised group): run here. Otherwise spawn `nprocs` local ranks
    on `backend` ("auto": NCCL when this machine has a CUDA GPU, else Gloo); ``on_progress(line)``
    then receives each header/row line rank 0 streams (see :func:`emit`)."""
    cfg.validate()
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return bench_worker(asdict(cfg))
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ and "MASTER_ADDR" in os.environ:
        import torch

        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend)
        try:
            return bench_worker(asdict(cfg))
        finally:
            dist.destroy_process_group()
    from collsched.comm.launch import run_local

    import torch

    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    elif backend == "nccl" and not torch.cuda.is_available():
        # Before any rank starts: each would fail on its own, after seconds, with NCCL's text.
        raise ValueError("--backend nccl needs a CUDA GPU, and torch finds none on this machine "
                         "(torch.cuda.is_available() is False); use --backend gloo, or auto")
    results = run_local(bench_worker, nprocs, (asdict(cfg),), gpus_per_server=gpus_per_server, timeout_s=timeout_s,
                        backend=backend, on_progress=on_progress)
    return results[0]


def planning_times(specs=("h200:2,gpus=4", "h200:8"), skew: float = 1.2, reps: int = 5) -> list[dict]:
    """Host time to plan, to hash the plan, to compile one rank's
    program (for the p2p transport, NCCL's default, and with the steps every rank joins, for
    alltoallv and hybrid, Gloo's default), and a plan-cache hit, per algorithm (hot-expert
    matrix, 4096 tokens × top-2 × 7168 bf16 per rank). Runs in this process."""
    import collsched
    from collsched.comm import compile_rank_program
    from collsched.comm.cache import PlanCache

    out = []
    for spec in specs:
        cl = collsched.Cluster.parse(spec)
        n = cl.num_gpus
        m = (collsched.traffic.hot_experts(n, skew=skew, tokens_per_rank=4096, top_k=2, hidden=1, dtype_bytes=1,
                                           seed=0).astype(np.uint64) * np.uint64(14336))
        for name in _fixed_algorithms(collsched):
            def best(fn, k):
                ts = []
                for _ in range(k):
                    t0 = time.perf_counter()
                    fn()
                    ts.append(time.perf_counter() - t0)
                return min(ts)

            plan = collsched.plan_all_to_all(m, cl, name)
            cache = PlanCache()
            cache.get(m, cl, name, {})
            out.append({"cluster": spec, "ranks": n, "algorithm": name, "transfers": plan.num_transfers,
                        "steps": plan.num_steps,
                        "plan_ms": best(lambda: collsched.plan_all_to_all(m, cl, name), reps) * 1e3,
                        "hash_ms": best(lambda: plan.hash, reps) * 1e3,
                        "p2p_compile_ms": best(lambda: compile_rank_program(plan, 0, collective_steps=False), reps) * 1e3,
                        "compile_ms": best(lambda: compile_rank_program(plan, 0), reps) * 1e3,
                        "cache_hit_us": best(lambda: cache.get(m, cl, name, {}), reps * 10) * 1e6})
    return out


def format_planning(rows: list[dict]) -> str:
    lines = [f"#{'cluster':>14} {'P':>4} {'algorithm':>16} {'transfers':>9} {'steps':>5} {'plan(ms)':>9} "
             f"{'hash(ms)':>8} {'p2p compile(ms)':>15} {'full compile(ms)':>16} {'hit(us)':>8}"]
    for r in rows:
        lines.append(f" {r['cluster']:>14} {r['ranks']:>4} {r['algorithm']:>16} {r['transfers']:>9} {r['steps']:>5} "
                     f"{r['plan_ms']:9.3f} {r['hash_ms']:8.3f} {r['p2p_compile_ms']:15.3f} {r['compile_ms']:16.3f} "
                     f"{r['cache_hit_us']:8.1f}")
    return "\n".join(lines)
