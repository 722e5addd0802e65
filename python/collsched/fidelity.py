"""Published hardware measurements and the simulator's prediction of each.

The measurements live in ``benchmarks/data/hardware/*.csv`` (one file per source; README.md
there cites each). :func:`load_rows` reads them; :func:`predict` reproduces one with collsched's
own planners and simulator: all-to-all with :func:`collsched.plan_all_to_all` and
:func:`collsched.simulate`, allgather/allreduce with :func:`collsched.plan_collective`, MoE
dispatch/combine with the aggregated plans of :mod:`collsched.moe.sim`. Every simulation goes
through :func:`_simulate`, the one place where the simulator's model is chosen.

Predictions are simulated, never executed. They are cached per distinct setup, because the
fit (``hw-model``'s script) calls :func:`predict` many times with different ``extra_spec``.
"""
from __future__ import annotations

import csv
import functools
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DATA_DIR = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "hardware"
SETS = ("fit", "validation")
MODELS = ("hardware", "fluid")
OPERATIONS = ("all_to_all", "allgather", "allreduce", "moe_dispatch", "moe_combine")
ALGORITHMS = {
    "all_to_all": ("fanout", "spreadout", "fast", "balanced_direct", "hierarchical"),
    "allgather": ("ring", "tree", "ring_tree"),
    "allreduce": ("ring", "tree", "ring_tree"),
    "moe_dispatch": ("deepep", "fusco", "nccl"),
    "moe_combine": ("deepep", "fusco", "nccl"),
}
SIZE_CONVENTIONS = ("fast_per_gpu", "per_rank_buffer", "nccl_tests_size", "deepep_nvlink_bytes", "deepep_rdma_bytes")
COLUMNS = ("source", "platform", "cluster", "operation", "algorithm", "workload", "size_bytes",
           "size_convention", "measured_s", "measured_value", "measured_unit", "samples", "min_s", "max_s",
           "set", "excluded", "params", "note")
FAST_ELEM_BYTES = 4  # FAST's test counts int32 elements
FAST_ALIGN_ELEMS = 512  # ... rounded up to 512 elements per pair (its mem_align)
FAST_WEIGHT_RANGE = 1024  # its random/skewed pair weights lie in [0, 1024) / [1, 1024]
MOE_CHUNKS = 8  # pieces of each forwarded MoE send (the moe CLI's default piece count)
# DeepEP's normal kernels are persistent: each of their channels (num_sms / 2 = 12 in its
# benchmark) streams its ~340 tokens in chunks of 4-32 tokens (the benchmark tunes
# rdma_chunk_size / nvl_chunk_size) through ring buffers of 128 / 512 tokens, so 10-80 chunks
# per channel and destination are in flight one behind another; 32 pieces per send, on warm
# connections (a piece's start-up overlaps the previous piece of its stream), stand for that.
DEEPEP_CHUNKS = 32


@dataclass(frozen=True)
class Row:
    """One published measurement (see benchmarks/data/hardware/README.md for every field)."""

    source: str
    platform: str
    cluster: str
    operation: str
    algorithm: str
    workload: str
    size_bytes: int
    size_convention: str
    measured_s: float
    measured_value: str
    measured_unit: str
    samples: int
    set: str
    excluded: str | None
    params: tuple[tuple[str, str], ...]
    note: str
    file: str
    line: int

    def param(self, name: str, default: str | None = None) -> str:
        """The value of ``name`` in the row's ``params`` column.

        Raises:
            ValueError: the row has no such parameter and no ``default`` was given.
        """
        for k, v in self.params:
            if k == name:
                return v
        if default is None:
            raise ValueError(f"{self.file}:{self.line}: params has no {name!r} (got {dict(self.params)})")
        return default

    @property
    def ranks(self) -> int:
        """GPUs in the row's cluster."""
        return _cluster(self.cluster, "").num_gpus


def _fail(path: Path, line: int, msg: str):
    raise ValueError(f"{path.name}:{line}: {msg}")


def _parse(path: Path, line: int, d: dict) -> Row:
    from collsched import Cluster

    missing = [c for c in COLUMNS if c not in d or d[c] is None]
    if missing:
        _fail(path, line, f"missing column(s) {', '.join(missing)}")
    try:
        size, measured = int(d["size_bytes"]), float(d["measured_s"])
        samples = int(d["samples"] or 1)
    except ValueError as e:
        _fail(path, line, f"size_bytes, measured_s and samples must be numbers ({e})")
    if size <= 0 or not (math.isfinite(measured) and measured > 0) or samples < 1:
        _fail(path, line, f"size_bytes and measured_s must be positive, samples >= 1; "
                          f"got {size}, {measured}, {samples}")
    if d["set"] not in SETS:
        _fail(path, line, f"set must be one of {SETS}, got {d['set']!r}")
    if d["operation"] not in OPERATIONS:
        _fail(path, line, f"operation must be one of {OPERATIONS}, got {d['operation']!r}")
    if d["algorithm"] not in ALGORITHMS[d["operation"]]:
        _fail(path, line, f"algorithm {d['algorithm']!r} is not known for {d['operation']} "
                          f"(known: {', '.join(ALGORITHMS[d['operation']])})")
    if d["size_convention"] not in SIZE_CONVENTIONS:
        _fail(path, line, f"size_convention must be one of {SIZE_CONVENTIONS}, got {d['size_convention']!r}")
    try:
        Cluster.parse(d["cluster"])
    except ValueError as e:
        _fail(path, line, f"cluster {d['cluster']!r}: {e}")
    params = []
    for item in filter(None, d["params"].split(";")):
        k, sep, v = item.partition("=")
        if not sep:
            _fail(path, line, f"params entry {item!r} is not key=value")
        params.append((k.strip(), v.strip()))
    return Row(source=d["source"], platform=d["platform"], cluster=d["cluster"], operation=d["operation"],
               algorithm=d["algorithm"], workload=d["workload"], size_bytes=size,
               size_convention=d["size_convention"], measured_s=measured, measured_value=d["measured_value"],
               measured_unit=d["measured_unit"], samples=samples, set=d["set"], excluded=d["excluded"] or None,
               params=tuple(params), note=d["note"], file=path.name, line=line)


def load_rows(set: str | None = None, data_dir: str | Path | None = None) -> list[Row]:
    """Every published measurement, in file order (files sorted by name).

    Args:
        set (str, optional): ``"fit"`` or ``"validation"`` for one set only; None for both.
        data_dir (str or Path, optional): the folder of CSV files; default
            ``benchmarks/data/hardware`` of this checkout.

    Returns:
        list[Row]: the rows, excluded ones included (their ``excluded`` says why).

    Raises:
        ValueError: ``set`` is not a known set, the folder holds no CSV file, or a row is
            malformed (the message names the file and line).
    """
    if set is not None and set not in SETS:
        raise ValueError(f"set must be one of {SETS} or None, got {set!r}")
    folder = Path(data_dir) if data_dir is not None else DATA_DIR
    files = sorted(folder.glob("*.csv"))
    if not files:
        raise ValueError(f"no measurement files (*.csv) in {folder}")
    rows = []
    for path in files:
        with open(path, newline="", encoding="utf-8") as f:
            for i, d in enumerate(csv.DictReader(f), start=2):
                r = _parse(path, i, d)
                if set is None or r.set == set:
                    rows.append(r)
    return rows


# ---------------------------------------------------------------------------------------------
# Prediction


@functools.lru_cache(maxsize=256)
def _cluster(spec: str, extra_spec: str):
    from collsched import Cluster

    from collsched.topology import with_overrides

    return Cluster.parse(with_overrides(spec, extra_spec))


def _simulate(plan, cluster, model: str, exact: bool = False, warm_connections: bool = False) -> float:
    """Simulated seconds of ``plan``: the one call that picks the simulator's model.

    ``exact``: exact event times (``tolerance=0``) instead of the default coalescing, which moves
    the all-to-all predictions by -0.05 % to +0.8 % (either way under incast: docs/simulator.md,
    "Speed"; the fitted constants' residuals were recorded without it).
    ``warm_connections``: a piece's start-up overlaps the previous piece of its stream (the
    simulator's option of that name), for backends that stream pieces on one connection.
    """
    from collsched import simulate
    from collsched.sim import DEFAULT_TOLERANCE

    return simulate(plan, cluster, model=model, tolerance=0.0 if exact else DEFAULT_TOLERANCE,
                    warm_connections=warm_connections).time_s


def _fast_weights(n: int, workload: str, rng) -> np.ndarray:
    """FAST's test's off-diagonal pair weights (diagonal 0): uniform integers in [0, 1024) for
    ``uniform``, Zipf(s) over [1, 1024] for ``zipf:s`` (exact discrete sampling; the test inverts
    an approximate continuous CDF)."""
    if workload == "uniform":
        w = rng.integers(0, FAST_WEIGHT_RANGE, size=(n, n)).astype(np.float64)
    elif workload.startswith("zipf:"):
        s = float(workload.split(":", 1)[1])
        ranks = np.arange(1, FAST_WEIGHT_RANGE + 1, dtype=np.float64)
        cdf = np.cumsum(ranks ** -s)
        cdf /= cdf[-1]
        w = (np.searchsorted(cdf, rng.random((n, n)), side="right") + 1).astype(np.float64)
        w = np.minimum(w, FAST_WEIGHT_RANGE)
    else:
        raise ValueError(f"unknown workload {workload!r} (known: balanced, uniform, zipf:S, deepep_bench)")
    np.fill_diagonal(w, 0)
    return w


def traffic_matrix(row: Row, seed: int = 0) -> np.ndarray:
    """The P×P byte matrix (row = sender) of an all-to-all row, as its source made it.

    ``fast_per_gpu``: off-diagonal pairs of ``size / (P-1)`` bytes (balanced), or FAST's test's
    random/skewed weights scaled by one integer factor to the nominal mean pair and rounded up to
    512 int32 (its ``uniform_distribution2`` / ``zipf_distribution2``), diagonal 0.
    ``per_rank_buffer``: every pair, self included, ``size / P`` (balanced only).

    Args:
        row (Row): an ``all_to_all`` row.
        seed (int): seed of the random weights (the source's matrices were seeded by time).

    Returns:
        numpy.ndarray: `[P, P]` with `numpy.uint64` bytes.

    Raises:
        ValueError: the row is not an all-to-all or its workload/convention is not known.
    """
    if row.operation != "all_to_all":
        raise ValueError(f"{row.file}:{row.line}: traffic_matrix needs an all_to_all row, got {row.operation}")
    n = row.ranks
    if row.size_convention == "per_rank_buffer":
        if row.workload != "balanced":
            raise ValueError(f"{row.file}:{row.line}: per_rank_buffer rows must be balanced, got {row.workload!r}")
        return np.full((n, n), row.size_bytes // n, dtype=np.uint64)
    if row.size_convention != "fast_per_gpu":
        raise ValueError(f"{row.file}:{row.line}: size_convention {row.size_convention!r} is not an all-to-all one")
    pair = row.size_bytes // (n - 1)
    if row.workload == "balanced":
        m = np.full((n, n), pair, dtype=np.uint64)
        np.fill_diagonal(m, 0)
        return m
    mean_elems = pair // FAST_ELEM_BYTES
    w = _fast_weights(n, row.workload, np.random.default_rng(seed))
    factor = (mean_elems * (n - 1) * n) // int(w.sum())
    elems = w.astype(np.uint64) * np.uint64(factor)
    elems = (elems + np.uint64(FAST_ALIGN_ELEMS - 1)) // np.uint64(FAST_ALIGN_ELEMS) * np.uint64(FAST_ALIGN_ELEMS)
    np.fill_diagonal(elems, 0)
    return elems * np.uint64(FAST_ELEM_BYTES)


def deepep_counts(ranks: int, gpus_per_server: int, tokens: int, experts: int, topk: int, seed: int = 0):
    """Routing counts of DeepEP's benchmark (its tests' recipe: scores |N(0,1)|+1 per expert;
    with several nodes, the top-min(nodes, 4) nodes by their best expert, then the top-k experts
    inside them), in :func:`collsched.moe.sim.route_counts`' form ``(pairs, node_units, rank_units)``.

    Args:
        ranks (int): GPUs (EP size). gpus_per_server (int): GPUs per node.
        tokens (int): tokens per rank. experts (int): experts, in contiguous blocks per rank.
        topk (int): experts per token. seed (int): routing seed.

    Returns:
        tuple of numpy.ndarray: `[R, R]`, `[R, nodes]`, `[R, R]` `numpy.int64` counts.
    """
    rng = np.random.default_rng(seed)
    nodes = ranks // gpus_per_server
    per_rank = experts // ranks
    pairs = np.zeros((ranks, ranks), np.int64)
    node_units = np.zeros((ranks, nodes), np.int64)
    rank_units = np.zeros((ranks, ranks), np.int64)
    for i in range(ranks):
        s = np.abs(rng.standard_normal((tokens, experts), dtype=np.float32)) + 1
        if nodes > 1:
            best = s.reshape(tokens, nodes, -1).max(axis=2)
            groups = min(nodes, 4)
            keep = np.argpartition(-best, groups - 1, axis=1)[:, :groups]
            mask = np.zeros((tokens, nodes), bool)
            np.put_along_axis(mask, keep, True, axis=1)
            s = np.where(mask.repeat(experts // nodes, axis=1), s, 0.0)
        owner = np.argpartition(-s, topk - 1, axis=1)[:, :topk] // per_rank
        pairs[i] = np.bincount(owner.reshape(-1), minlength=ranks)
        hit = np.zeros((tokens, ranks), bool)
        np.put_along_axis(hit, owner, True, axis=1)
        rank_units[i] = hit.sum(0)
        node_units[i] = hit.reshape(tokens, nodes, gpus_per_server).any(axis=2).sum(0)
    return pairs, node_units, rank_units


def _predict_all_to_all(row: Row, cluster, model: str, seed: int) -> float:
    from collsched import plan_all_to_all

    plan = plan_all_to_all(traffic_matrix(row, seed), cluster, row.algorithm)
    return _simulate(plan, cluster, model)


def _predict_collective(row: Row, cluster, model: str) -> float:
    from collsched.collectives import plan_collective

    n = cluster.num_gpus
    if row.operation == "allgather":
        nbytes, elem = row.size_bytes // n, 1  # nccl-tests' size is the output: P shards
    else:
        nbytes, elem = row.size_bytes, 4  # float32 buffers
    algos = ("ring", "tree") if row.algorithm == "ring_tree" else (row.algorithm,)
    return min(_simulate(plan_collective(row.operation, n, nbytes, a, elem_bytes=elem, topology=cluster),
                         cluster, model) for a in algos)


def _predict_moe(row: Row, cluster, model: str, seed: int) -> float:
    return _simulate(_moe_plan(row, cluster.num_gpus, cluster.gpus_per_server, seed), cluster, model, exact=False,
                     warm_connections=row.algorithm == "deepep")


@functools.lru_cache(maxsize=32)
def _moe_plan(row: Row, ranks: int, gpn: int, seed: int):
    """The row's dispatch or combine plan (DeepEP/Fusco/NCCL-style, moe.sim's phases; DeepEP's:
    the timed kernels only, in ``DEEPEP_CHUNKS`` pieces). Its shape depends on the GPU counts
    only, not on rates, so a fit that changes rates reuses it."""
    from types import SimpleNamespace

    from collsched.moe import sim as moe_sim

    shape = SimpleNamespace(num_gpus=ranks, gpus_per_server=gpn)  # all _build reads outside "fast" phases
    counts = _deepep_counts_cached(ranks, gpn, int(row.param("tokens")), int(row.param("experts")),
                                   int(row.param("topk")), seed)
    phases = moe_sim._phases(row.algorithm, *counts, gpn, int(row.param("row_bytes")))
    chunks = MOE_CHUNKS
    if row.algorithm == "deepep":
        phases, chunks = deepep_kernel_phases(phases), DEEPEP_CHUNKS
    plan, _ = moe_sim._build(phases, shape, int(row.param("row_bytes")), f"moe_{row.algorithm}",
                             row.operation == "moe_combine", chunks)
    return plan


def deepep_kernel_phases(phases: list) -> list:
    """The phases DeepEP's benchmark times: its network phases without moe.sim's permute copy.

    ``tests/legacy/test_*.py`` time the ``dispatch`` / ``combine`` kernels alone (kineto, by
    kernel name); dispatch writes the received tokens token-major, grouped by source rank, and
    combine reads them so. The permute to expert-major that :mod:`collsched.moe.sim` adds for a
    whole MoE layer runs outside those kernels, so it is not in the measured time.

    Args:
        phases (list): :func:`collsched.moe.sim._phases` of the ``deepep`` variant.

    Returns:
        list: the same phases without the ``copy`` ones.
    """
    return [p for p in phases if p[0] != "copy"]


@functools.lru_cache(maxsize=16)
def _deepep_counts_cached(ranks, gpn, tokens, experts, topk, seed):
    return deepep_counts(ranks, gpn, tokens, experts, topk, seed)


@functools.lru_cache(maxsize=4096)
def _predict_cached(row: Row, model: str, extra_spec: str, seed: int) -> float:
    cluster = _cluster(row.cluster, extra_spec)
    if row.operation == "all_to_all":
        return _predict_all_to_all(row, cluster, model, seed)
    if row.operation in ("allgather", "allreduce"):
        return _predict_collective(row, cluster, model)
    return _predict_moe(row, cluster, model, seed)


def predict(row: Row, model: str = "hardware", extra_spec: str = "", *, seed: int = 0) -> float:
    """Simulated seconds of one published measurement's setup.

    Args:
        row (Row): a row from :func:`load_rows`.
        model (str): ``"hardware"`` (the preset's fitted terms, docs/simulator.md) or ``"fluid"``
            (the ideal model). Passed to the simulator in one place, :func:`_simulate`.
        extra_spec (str): appended to the row's cluster spec, e.g. ``",nic=95Gbps"``, so a fit
            can try constants.
        seed (int): seed of random traffic (uniform/zipf) and of MoE routing.

    Returns:
        float: predicted seconds (positive, finite).

    Raises:
        ValueError: unknown ``model``, a bad ``extra_spec`` (the cluster parser's message), or a
            row this module cannot reproduce.
    """
    if model not in MODELS:
        raise ValueError(f"model must be one of {MODELS}, got {model!r}")
    if not isinstance(extra_spec, str):
        raise ValueError(f"extra_spec must be a string such as ',nic=95Gbps', got {extra_spec!r}")
    if extra_spec and not extra_spec.startswith(","):
        raise ValueError(f"extra_spec must start with ',' (it is appended to the cluster spec), got {extra_spec!r}")
    return _predict_cached(row, model, extra_spec, int(seed))


def error(predicted_s: float, measured_s: float) -> float:
    """Relative error as the fidelity benchmark reports it: predicted / measured − 1."""
    return predicted_s / measured_s - 1.0


__all__ = ["Row", "load_rows", "predict", "traffic_matrix", "deepep_counts", "error", "DATA_DIR", "SETS", "MODELS"]
