"""Regenerate the CSV files of published hardware measurements in this folder.

    python benchmarks/data/hardware/extract.py --fast GITDIR --deepep GITDIR --vpbench GITDIR --oci GITDIR --aac GITDIR
    python benchmarks/data/hardware/extract.py --only deepep_normal.csv --deepep GITDIR   # one file

Each ``GITDIR`` is a git directory (or checkout) of the named public repository at the commit
that README.md cites; numbers are read with ``git show COMMIT:PATH`` so the commit is pinned.
Numbers quoted in papers' text are written below with their section. Only numbers are carried
over from the sources, never code. Every output row has the columns of ``COLUMNS``; README.md
explains each file's size convention and how bandwidths became seconds.
"""
from __future__ import annotations

import argparse
import csv
import math
import re
import statistics
import subprocess
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent

COLUMNS = ("source", "platform", "cluster", "operation", "algorithm", "workload", "size_bytes",
           "size_convention", "measured_s", "measured_value", "measured_unit", "samples", "min_s", "max_s",
           "set", "excluded", "params", "note")

FAST_PAPER = "FAST: An Efficient Scheduler for All-to-All GPU Communication (Lei et al., NSDI '26)"
FLASH_PAPER = "FLASH: Fast All-to-All Communication in GPU Clusters (Lei et al., preprint)"
SABRE_PAPER = ("Skew-aware Adaptive All-to-allv Algorithms for Dynamic Deep Learning Workloads "
               "(SABRE, ICS '26)")
FAST_REPO, FAST_COMMIT = "MangoBoost/FAST", "0712d29fb13a09962425c8a57b951b91d8fc33ba"
DEEPEP_REPO, DEEPEP_COMMIT = "deepseek-ai/DeepEP", "dd758caf451848bd150e1046af3d0a73e5fff38d"
VPBENCH_REPO, VPBENCH_COMMIT = "ZiyanIshani/vpbenchmarking", "b841c5b772e995a514c8c97e4fe590b72fd135ad"

# FAST's AMD testbed (FAST §5 Testbed; FLASH §6): 8 × MI300X per server on a full xGMI mesh of
# 64 GB/s links, one 100 Gb/s RoCEv2 NIC (ConnectX-6, DCQCN) per GPU: the mi300x preset.
MI300X = "mi300x:{servers}"
FAST_ELEM_BYTES = 4  # the test sizes its matrices in int32 elements (buff_size = sum × sizeof(int32))
# FAST result file columns (amd/test_alltoall.cpp, perftest_*: one line per sample):
# 0 total bytes, 1 skewness, 2-5 algbw GB/s of FLASH, fan-out, FLASH-A (ablation), SpreadOut,
# 6 FLASH ms, 7-9 its phases, 10 fan-out ms, 11-14 FLASH-A ms and phases, 15 SpreadOut ms.
FAST_TIME_COLUMNS = {"fast": 6, "fanout": 10, "spreadout": 15}
FAST_BW_COLUMNS = {"fast": 2, "fanout": 3, "spreadout": 5}
FANOUT_COLLAPSE_BYTES = 100e6  # per GPU; above it RCCL fan-out collapses (README.md, "fan-out collapse")
FANOUT_COLLAPSE = ("fan-out collapse above ~100 MB per GPU: RCCL's fan-out time jumps 5-100x and is bimodal "
                   "across samples (incast of 23-31 concurrent senders per 100 Gb/s RoCE downlink under DCQCN, "
                   "FLASH 6.1.1 / FAST 5.1.1), and at the largest sizes its times sit at ~2147 ms = 2^31 ns, "
                   "a timer ceiling; not modelled")

# (file prefix, workload, set, which per-pair sizes): every FAST AMD result file kind used.
FAST_KINDS = (
    ("fixed_sz", "balanced", "fit"),
    ("random_sz", "uniform", "validation"),
    ("skewed_sz_", "zipf:0.8", "validation"),
    ("skewness", "zipf:{s}", "validation"),
    ("random_cdf", "uniform", "validation"),
    ("skewed_cdf", "zipf:0.8", "validation"),
)


def git_show(gitdir: str, commit: str, path: str) -> str:
    return subprocess.run(["git", "--git-dir", gitdir, "show", f"{commit}:{path}"], check=True,
                          capture_output=True, text=True).stdout


def git_ls(gitdir: str, commit: str, folder: str) -> list[str]:
    out = subprocess.run(["git", "--git-dir", gitdir, "ls-tree", "--name-only", f"{commit}", folder + "/"],
                         check=True, capture_output=True, text=True).stdout
    return sorted(out.split())


def row(**kw) -> dict:
    r = {c: "" for c in COLUMNS}
    r.update({k: v for k, v in kw.items() if v is not None})
    bad = set(kw) - set(COLUMNS)
    assert not bad, bad
    return r


def fmt(x: float) -> str:
    return f"{x:.6g}"


# ---------------------------------------------------------------------------------------------
# FAST's AMD result files


def fast_rows(gitdir: str) -> tuple[list[dict], list[dict]]:
    """(fit rows, validation rows): one per (servers, kind, nominal pair size or skewness, algorithm),
    the median over every sample of every file of that kind."""
    fit, val = [], []
    files = [p for p in git_ls(gitdir, FAST_COMMIT, "amd/result") if "_perf_" not in p and "_nack_" not in p]
    for prefix, workload, which in FAST_KINDS:
        for servers in (3, 4):
            mine = [p for p in files if Path(p).name.startswith(f"{servers}n_{prefix}_")]
            mine = [p for p in mine if not (prefix == "skewed_sz_" and "__" not in Path(p).name)]
            if not mine:
                continue
            p_gpus = 8 * servers
            groups: dict = {}
            for path in mine:
                for line in git_show(gitdir, FAST_COMMIT, path).splitlines():
                    v = [float(x) for x in line.split()]
                    if len(v) != 16:
                        continue
                    pair_elems = v[0] / FAST_ELEM_BYTES / (p_gpus * (p_gpus - 1))
                    # Nominal pair size 2^k elements (the test's `power`); random sizes scatter around it.
                    power = round(math.log2(pair_elems))
                    key = (power, v[1]) if prefix == "skewness" else (power, 0.0)
                    groups.setdefault(key, []).append((path, v))
            names = ", ".join(Path(p).name for p in mine)
            for (power, skew), samples in sorted(groups.items()):
                per_gpu = (2 ** power) * FAST_ELEM_BYTES * (p_gpus - 1)
                wl = workload.format(s=fmt(skew))
                for algo, col in FAST_TIME_COLUMNS.items():
                    times = [s[1][col] * 1e-3 for s in samples]
                    bws = [s[1][FAST_BW_COLUMNS[algo]] for s in samples]
                    excluded = FANOUT_COLLAPSE if algo == "fanout" and per_gpu > FANOUT_COLLAPSE_BYTES else None
                    r = row(source=f"{FAST_REPO}@{FAST_COMMIT[:12]} amd/result/{names}",
                            platform="MI300X", cluster=MI300X.format(servers=servers), operation="all_to_all",
                            algorithm=algo, workload=wl, size_bytes=per_gpu, size_convention="fast_per_gpu",
                            measured_s=fmt(statistics.median(times)), measured_value=fmt(statistics.median(bws)),
                            measured_unit="GB/s algbw", samples=len(times), min_s=fmt(min(times)),
                            max_s=fmt(max(times)), set=which, excluded=excluded,
                            params=f"pair_elems=2^{power};elem_bytes=4;diagonal=0",
                            note="median over samples; RCCL fan-out = ncclSend/Recv to all peers in one group")
                    (fit if which == "fit" else val).append(r)
    return fit, val


# ---------------------------------------------------------------------------------------------
# Papers (numbers quoted in the text)


def flash_rows() -> list[dict]:
    # FLASH §6.1.1: "FLASH attains 14.7 GBps for large transfer sizes" on 4 × 8 MI300X, balanced.
    # The size is not given beyond "large"; the largest of FAST's released fixed-size test
    # (2^26 int32 per pair, 8.32 GB per GPU) is used: at that size the time is bandwidth-bound.
    per_gpu = (2 ** 26) * 4 * 31
    return [row(source=f"{FLASH_PAPER}, §6.1.1 and Fig. 12a", platform="MI300X", cluster="mi300x:4",
                operation="all_to_all", algorithm="fast", workload="balanced", size_bytes=per_gpu,
                size_convention="fast_per_gpu", measured_s=fmt(per_gpu / 14.7e9), measured_value="14.7",
                measured_unit="GB/s algbw", samples=1, set="fit",
                params="pair_elems=2^26;elem_bytes=4;diagonal=0",
                note="size stated only as 'large'; taken as FAST's largest fixed-size point")]


def sabre_rows() -> list[dict]:
    # SABRE Table 1: intra-node all-to-all on one Perlmutter node (4 × A100, NVLink3 100 GB/s per
    # pair), NCCL (torch all_to_all_single = P ncclSend/Recv pairs in one group), 64-512 MB.
    # "Message size" = the per-process buffer (the paper's Fig. 9 caption: "the average data
    # volume sent per process"); MB read as MiB (powers of two buffers).
    out = []
    for mb, ms in ((64, 0.329), (128, 0.588), (256, 1.079), (512, 2.077)):
        out.append(row(source=f"{SABRE_PAPER}, §7.2, Table 1", platform="A100 (Perlmutter)",
                       cluster="perlmutter:1", operation="all_to_all", algorithm="fanout", workload="balanced",
                       size_bytes=mb * 2**20, size_convention="per_rank_buffer", measured_s=fmt(ms * 1e-3),
                       measured_value=str(ms), measured_unit="ms", samples=1, set="fit",
                       params="diagonal=1", note="NCCL time column; MB taken as MiB"))
    return out


def fast_paper_rows() -> list[dict]:
    # FAST §5.1.2: balanced all-to-all on the NVIDIA testbed (4 × 8 H200, NVSwitch 450 GB/s,
    # one 400 Gb/s IB NIC per GPU): NCCL 58 GBps, FAST 58 GBps algbw (DeepEP 60, TACCL 59 are
    # not collsched algorithms). Size: "per-GPU message sizes from 100 MB to 1 GB" (§5.1.1); the
    # balanced figure's size is not stated, 1 GB per GPU is used (bandwidth-bound).
    per_gpu = 10**9
    out = []
    for algo, bw in (("fanout", 58.0), ("fast", 58.0)):
        out.append(row(source=f"{FAST_PAPER}, §5.1.2", platform="H200", cluster="h200:4",
                       operation="all_to_all", algorithm=algo, workload="balanced", size_bytes=per_gpu,
                       size_convention="per_rank_buffer", measured_s=fmt(per_gpu / (bw * 1e9)),
                       measured_value=fmt(bw), measured_unit="GB/s algbw", samples=1, set="validation",
                       params="diagonal=1",
                       note="NCCL 2.27.3 with PXN; size not stated (100 MB-1 GB), 1 GB per GPU assumed"))
    return out


# ---------------------------------------------------------------------------------------------
# DeepEP normal kernels (docs/legacy.md, "Normal kernels with NVLink and RDMA forwarding")

DEEPEP_TABLE = ((8, 153.0, 158.0), (16, 43.0, 43.0), (32, 58.0, 57.0), (64, 51.0, 50.0))
DEEPEP_TOKENS, DEEPEP_HIDDEN, DEEPEP_TOPK, DEEPEP_EXPERTS = 4096, 7168, 8, 256
# FP8 dispatch moves hidden bytes plus one float32 scale per 128 values: the test's
# fp8_factor (1 + 4/128) / 2 of the BF16 bytes.
DEEPEP_FP8_ROW = DEEPEP_HIDDEN + DEEPEP_HIDDEN // 128 * 4
DEEPEP_BF16_ROW = DEEPEP_HIDDEN * 2


def deepep_expected_units(ep: int, tokens: int = 200_000, seed: int = 0) -> float:
    """Bottleneck units per token of DeepEP's benchmark routing (tests/legacy/test_*.py: scores
    |N(0,1)|+1 per expert; internode: top-min(nodes,4) nodes by their best expert, then top-8
    experts inside them). Intranode (EP8): ranks a token reaches (NVLink receive count);
    internode: distinct nodes a token reaches, its own included (the RDMA count). Monte Carlo."""
    rng = np.random.default_rng(seed)
    nodes = max(1, ep // 8)
    total = 0
    for start in range(0, tokens, 20_000):
        n = min(20_000, tokens - start)
        s = np.abs(rng.standard_normal((n, DEEPEP_EXPERTS), dtype=np.float32)) + 1
        if ep == 8:
            top = np.argpartition(-s, DEEPEP_TOPK - 1, axis=1)[:, :DEEPEP_TOPK]
            owner = top // (DEEPEP_EXPERTS // 8)
        else:
            g = s.reshape(n, nodes, -1).max(axis=2)
            keep = np.argpartition(-g, min(nodes, 4) - 1, axis=1)[:, :min(nodes, 4)]
            mask = np.zeros((n, nodes), bool)
            np.put_along_axis(mask, keep, True, axis=1)
            s = np.where(mask.repeat(DEEPEP_EXPERTS // nodes, axis=1), s, 0.0)
            top = np.argpartition(-s, DEEPEP_TOPK - 1, axis=1)[:, :DEEPEP_TOPK]
            owner = top // (DEEPEP_EXPERTS // nodes)
        hit = np.zeros((n, 8 if ep == 8 else nodes), bool)
        np.put_along_axis(hit, owner, True, axis=1)
        total += int(hit.sum())
    return total / tokens


def deepep_rows(gitdir: str | None) -> list[dict]:
    if gitdir is not None:  # check that the table still says what is written here
        text = git_show(gitdir, DEEPEP_COMMIT, "docs/legacy.md")
        for ep, d, c in DEEPEP_TABLE:
            assert f"{d:g} GB/s" in text and f"{c:g} GB/s" in text, (ep, d, c)
    out = []
    for ep, dispatch_bw, combine_bw in DEEPEP_TABLE:
        units = deepep_expected_units(ep)
        tier = "NVLink" if ep == 8 else "RDMA"
        # Per rank: RDMA sends tokens × nodes reached; NVLink receives, by symmetry, tokens × ranks reached.
        per_rank_units = units * DEEPEP_TOKENS
        cluster = f"h800:{max(1, ep // 8)}"  # the h800 preset: NVSwitch 200 GB/s per GPU, 8 × 400 Gb/s CX7
        phases = (("moe_dispatch", dispatch_bw, DEEPEP_FP8_ROW), ("moe_combine", combine_bw, DEEPEP_BF16_ROW))
        for op, bw, rowb in phases:
            nbytes = per_rank_units * rowb
            out.append(row(source=f"{DEEPEP_REPO}@{DEEPEP_COMMIT[:12]} docs/legacy.md, normal kernels table",
                           platform="H800", cluster=cluster, operation=op, algorithm="deepep",
                           workload="deepep_bench", size_bytes=int(round(nbytes)),
                           size_convention=f"deepep_{tier.lower()}_bytes", measured_s=fmt(nbytes / (bw * 1e9)),
                           measured_value=fmt(bw), measured_unit=f"GB/s ({tier} bottleneck)", samples=1, set="fit",
                           params=(f"ep={ep};tokens={DEEPEP_TOKENS};hidden={DEEPEP_HIDDEN};topk={DEEPEP_TOPK};"
                                   f"experts={DEEPEP_EXPERTS};topk_groups={min(max(1, ep // 8), 4)};"
                                   f"row_bytes={rowb};units_per_token={units:.4f}"),
                           note=("H800 NVLink 200 GB/s per direction (DeepEP quotes ~160 GB/s achievable), "
                                 "CX7 400 Gb/s IB per GPU; FP8 dispatch, BF16 combine; "
                                 "bytes = the benchmark's own count, expected over its routing")))
    return out


# ---------------------------------------------------------------------------------------------
# nccl-tests logs (ZiyanIshani/vpbenchmarking)

VPBENCH_FILES = (
    ("results/nccl/nccl_multinode/nccl_allgather_20260224_225706.txt", "allgather", "h100:4", "fit"),
    ("results/nccl/nccl_multinode/nccl_allreduce_20260224_225706.txt", "allreduce", "h100:4", "fit"),
    ("results/nccl/nccl_singlenode/nccl_allgather_.txt", "allgather", "h100:1", "validation"),
    ("results/nccl/nccl_singlenode/nccl_allreduce_.txt", "allreduce", "h100:1", "validation"),
)
# A log whose times are not monotone in size is kept for the record but not judged.
VPBENCH_ERRATIC = {
    "results/nccl/nccl_singlenode/nccl_allgather_.txt":
        "erratic log: out-of-place times jump up and down with size (2 MiB 51 us, 4 MiB 886 us; 4 GiB 32 ms, "
        "8 GiB 178 ms; first size 4.2 ms) with one process driving 8 GPUs (-g 8); not a steady-state measurement",
}
# NCCL's tuner picks ring or tree per size (and NVLS on one node); the log does not say which.
VPBENCH_ALGORITHM = {"allgather": "ring", "allreduce": "ring_tree"}


def nccl_tests_rows(gitdir: str) -> list[dict]:
    out = []
    for path, op, cluster, which in VPBENCH_FILES:
        text = git_show(gitdir, VPBENCH_COMMIT, path)
        gpus = 8 * int(cluster.split(":")[1])
        single_process = "nGpus 8" in text
        for line in text.splitlines():
            f = line.split()
            if line.startswith("#") or len(f) < 13 or not f[0].isdigit() or int(f[0]) == 0:
                continue
            size, t_us, algbw = int(f[0]), float(f[5]), float(f[6])
            out.append(row(source=f"{VPBENCH_REPO}@{VPBENCH_COMMIT[:12]} {path}", platform="H100",
                           cluster=cluster, operation=op, algorithm=VPBENCH_ALGORITHM[op], workload="balanced",
                           size_bytes=size, size_convention="nccl_tests_size", measured_s=fmt(t_us * 1e-6),
                           measured_value=fmt(t_us), measured_unit="us (out-of-place)", samples=20, set=which,
                           excluded=VPBENCH_ERRATIC.get(path),
                           params=f"ranks={gpus};dtype=float32",
                           note=("NCCL 2.24.3, nccl-tests 2.17.9; 8 x 400 Gb/s IB per node (README: 3.2 Tbps)"
                                 + ("; one process drives 8 GPUs (-g 8)" if single_process else ""))))
    return out


# ---------------------------------------------------------------------------------------------
# nccl-tests / rccl-tests logs quoted in Oracle's OCI GPU quick-start guides

OCI_REPO, OCI_COMMIT = "oracle-quickstart/oci-gpu-quickstarts", "6a0abdc78b574b28eb10926387615c8414ed8c1d"
# Each platform has its own preset, which states the hardware with its sources (topology/presets.rs):
# b300 (DGX/HGX B300: NVLink5 switch 900 GB/s per GPU, 8 x 800 Gb/s per node = OCI's 8 x 2 x 400
# Gb/s RoCE), gb200 / gb300 (one NVL72 rack = one collsched server of 72 GPUs on one NVLink domain;
# a log of H hosts of 4 GPUs inside one rack is `gpus=4H`), mi355x (7 xGMI links of 76.8 GB/s per
# direction on a full mesh, one 400 Gb/s NIC per GPU).
# (file, heading pattern, cluster spec, excluded reason or None). A log whose busbw/algbw ratio
# names a different rank count than its setup is excluded by _oci_block (NCCL_TESTS_BUSBW_FACTOR).
OCI_SETUPS = (
    ("nvidia/B300/README-B300.md", r"Single Node", "b300:1", None),
    ("nvidia/B300/README-B300.md", r"2 Nodes", "b300:2", None),
    ("nvidia/GB300/README-GB300.md", r"Single Node", "gb300:1,gpus=4", None),
    ("nvidia/GB300/README-GB300.md", r"2 (Nodes|Hosts) (on a )?Single Rack", "gb300:1,gpus=8", None),
    ("nvidia/GB300/README-GB300.md", r"1 Rack - 16 nodes|16 Hosts 1 Rack", "gb300:1,gpus=64", None),
    ("nvidia/GB300/README-GB300.md", r"2 Racks", "gb300:2,gpus=64", None),
    ("nvidia/GB200/README-GB200.md", r"Single Node", "gb200:1,gpus=4", None),
    ("nvidia/GB200/README-GB200.md", r"2 (Nodes|Hosts) (on a )?Single Rack", "gb200:1,gpus=8", None),
    ("nvidia/GB200/README-GB200.md", r"16 Hosts 1 Rack", "gb200:1,gpus=64", None),
    # GB200 racks join over 4 x 400 Gb/s InfiniBand or 8 x 400 Gb/s RoCE per host depending on the
    # shape variant, and the guide does not say which one ran: not fully stated, not judged.
    ("nvidia/GB200/README-GB200.md", r"2 Racks", "gb200:2,gpus=64",
     "network not stated: the GB200 shape family has 4 x 400 Gb/s IB or 8 x 400 Gb/s RoCE per host"),
    ("nvidia/GB200/README-GB200.md", r"3 Racks", "gb200:3,gpus=64",
     "network not stated: the GB200 shape family has 4 x 400 Gb/s IB or 8 x 400 Gb/s RoCE per host"),
    ("amd/MI355X/README-MI355X.md", r"All Reduce|All 2 All", "mi355x:1", None),
    ("amd/MI355X/README-MI355X-Pollara.md", r"Single Node", "mi355x:1", None),
    ("amd/MI355X/README-MI355X-Pollara.md", r"2 Nodes", "mi355x:2", None),
    ("amd/MI355X/README-MI355X-Pollara.md", r"4 Nodes", "mi355x:4", None),
)
OCI_PLATFORM = {"B300": "B300", "GB300": "GB300", "GB200": "GB200", "MI355X": "MI355X"}
NCCL_TESTS_LINE = re.compile(r"^\s*(\d+)\s+(\d+)\s+\w+\s+\w+\s+-?\d+\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)")
# nccl-tests' busbw = algbw x this factor of the rank count n (its doc/PERFORMANCE.md): the ratio a
# log prints tells how many ranks ran, whatever its heading says.
NCCL_TESTS_BUSBW_FACTOR = {"all_to_all": lambda n: (n - 1) / n, "allreduce": lambda n: 2 * (n - 1) / n,
                           "allgather": lambda n: (n - 1) / n}


def busbw_agrees(op: str, ranks: int, algbw: float, busbw: float) -> bool:
    """Whether a log's busbw / algbw is the busbw factor of ``ranks`` (both printed to 0.01 GB/s)."""
    tol = 0.011 / algbw + 0.011 / busbw + 1e-9
    return abs(NCCL_TESTS_BUSBW_FACTOR[op](ranks) * algbw / busbw - 1) <= tol


def ranks_from_busbw(op: str, algbw: float, busbw: float, most: int = 1024) -> int | None:
    """The rank count whose busbw factor is nearest the log's busbw / algbw, if any agrees."""
    fits = [n for n in range(2, most + 1) if busbw_agrees(op, n, algbw, busbw)]
    return min(fits, key=lambda n: abs(NCCL_TESTS_BUSBW_FACTOR[op](n) - busbw / algbw)) if fits else None


def _oci_op(heading: str, block: str) -> str | None:
    m = re.search(r"Collective test starting: (\w+)", block)
    name = m.group(1) if m else heading
    if "alltoall" in name or re.search(r"All[- ]?(to|2)[- ]?All", name, re.I):
        return "all_to_all"
    if "all_reduce" in name or re.search(r"All Reduce", name, re.I):
        return "allreduce"
    return None


def oci_rows(gitdir: str) -> list[dict]:
    """One row per data line of every nccl-tests/rccl-tests log in the guides (their logs keep only
    the largest sizes), with the cluster of OCI_SETUPS for the log's heading."""
    out = []
    for path in sorted({f for f, *_ in OCI_SETUPS}):
        text = git_show(gitdir, OCI_COMMIT, path)
        platform = next(v for k, v in OCI_PLATFORM.items() if f"/{k}/" in path)
        heading, fence, block = "", False, []
        for line in text.splitlines() + ["```"]:
            if line.strip().startswith("```"):
                if fence:
                    out += _oci_block(path, platform, heading, "\n".join(block))
                fence, block = not fence, []
                continue
            if fence:
                block.append(line)
            elif re.match(r"#{2,6} ", line):
                heading = line.lstrip("#").strip()
    return out


def _oci_block(path: str, platform: str, heading: str, block: str) -> list[dict]:
    op = _oci_op(heading, block)
    if op is None:
        return []
    setup = [s for s in OCI_SETUPS if s[0] == path and re.search(s[1], heading)]
    if not setup:
        return []
    _, _, cluster, excluded = setup[0]
    single_process = re.search(r"nGpus (\d+)", block)
    rows = []
    for line in block.splitlines():
        m = NCCL_TESTS_LINE.match(line)
        if not m:
            continue
        size, t_us = int(m.group(1)), float(m.group(3))
        ranks = cluster_ranks(cluster)
        algbw, busbw, why = float(m.group(4)), float(m.group(5)), excluded
        # nccl-tests' algbw is size / time (alltoall: size = each rank's send buffer, allreduce:
        # the buffer): the row's conversion must give back the log's own algbw.
        if abs(size / (t_us * 1e-6) / 1e9 / algbw - 1) > 0.005:
            raise ValueError(f"{path} '{heading}': size {size} / time {t_us} us is not the log's algbw {algbw} GB/s")
        if why is None and not busbw_agrees(op, ranks, algbw, busbw):
            # The GB200 guide's "2 Nodes on a Single Rack" allreduce runs `--np 8`, but its log's
            # busbw / algbw = 2 x 63/64: it is a 64-rank log; which setup ran is not stated.
            why = (f"log and setup disagree: busbw/algbw = {busbw / algbw:.4f} is the factor of "
                   f"{ranks_from_busbw(op, algbw, busbw)} ranks, the setup has {ranks}")
        rows.append(row(source=f"{OCI_REPO}@{OCI_COMMIT[:12]} {path}, '{heading}'", platform=platform, cluster=cluster,
                        operation=op, algorithm="fanout" if op == "all_to_all" else "ring_tree", workload="balanced",
                        size_bytes=size, size_convention="per_rank_buffer" if op == "all_to_all" else "nccl_tests_size",
                        measured_s=fmt(t_us * 1e-6), measured_value=fmt(t_us), measured_unit="us (out-of-place)",
                        samples=int(re.search(r"iters: (\d+) agg", block).group(1)) if "iters:" in block else 1,
                        set="validation", excluded=why,
                        params=f"ranks={ranks};dtype=float32" + (";diagonal=1" if op == "all_to_all" else ""),
                        note=("nccl-tests/rccl-tests log quoted in the guide; hardware as the preset states it"
                              + ("; one process drives all GPUs (-g N)"
                                 if single_process and single_process.group(1) != "1" else ""))))
    return rows


PRESET_GPUS = {"gb200": 72, "gb300": 72, "perlmutter": 4}  # GPUs per server of presets with other than 8


def cluster_ranks(spec: str) -> int:
    """GPUs of a spec, read from its own text (servers × gpus=, else the preset's GPUs per server)."""
    name, rest = spec.split(":", 1)
    servers = int(rest.split(",")[0])
    m = re.search(r"gpus=(\d+)", spec)
    return servers * (int(m.group(1)) if m else PRESET_GPUS.get(name, 8))


# ---------------------------------------------------------------------------------------------
# rccl-tests all_reduce_perf on one 8 × MI300X node (hisohara/ai-scripts)

AAC_REPO, AAC_COMMIT = "hisohara/ai-scripts", "7b8b1ec290a6af05b685dfb6ce8caae999ea884d"
AAC_PATH = "training/01_rccl-smoketest/README.md"
AAC_SECTION = ("## RCCL Tests with MPI (AAC8 Kubernetes)", "## RCCL Tests with MPI (AAC10")


def aac_rows(gitdir: str) -> list[dict]:
    """The single-node log of that section: 8 ranks (mpirun -np 8, -g 1), all_reduce_perf, float32."""
    text = git_show(gitdir, AAC_COMMIT, AAC_PATH)
    start, end = text.index(AAC_SECTION[0]), text.index(AAC_SECTION[1])
    out = []
    for line in text[start:end].splitlines():
        m = NCCL_TESTS_LINE.match(line)
        if not m:
            continue
        size, t_us = int(m.group(1)), float(m.group(3))
        out.append(row(source=f"{AAC_REPO}@{AAC_COMMIT[:12]} {AAC_PATH}, 'RCCL Tests with MPI (AAC8 Kubernetes)'",
                       platform="MI300X", cluster="mi300x:1", operation="allreduce", algorithm="ring_tree",
                       workload="balanced", size_bytes=size, size_convention="nccl_tests_size",
                       measured_s=fmt(t_us * 1e-6), measured_value=fmt(t_us), measured_unit="us (out-of-place)",
                       samples=20, set="validation", params="ranks=8;dtype=float32",
                       note="rccl-tests develop:a7809b3, one process per GPU (mpirun -np 8, -g 1), one node"))
    return out


def write(name: str, rows: list[dict]) -> None:
    with open(HERE / name, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    print(f"{name}: {len(rows)} rows")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fast", help="git dir of MangoBoost/FAST")
    ap.add_argument("--deepep", help="git dir of deepseek-ai/DeepEP (only to check the table)")
    ap.add_argument("--vpbench", help="git dir of ZiyanIshani/vpbenchmarking")
    ap.add_argument("--oci", help="git dir of oracle-quickstart/oci-gpu-quickstarts")
    ap.add_argument("--aac", help="git dir of hisohara/ai-scripts")
    ap.add_argument("--only", action="append", metavar="FILE",
                    help="write only this output file (repeatable); then only its sources' git dirs are needed")
    a = ap.parse_args()
    # output file -> (git dir options it needs, rows); rows are made only for the files written.
    outputs = {
        "fast_amd_fixed.csv": (("fast",), lambda: fast_rows(a.fast)[0]),
        "fast_amd_random_skewed.csv": (("fast",), lambda: fast_rows(a.fast)[1]),
        "flash_paper.csv": ((), flash_rows),
        "sabre_table1.csv": ((), sabre_rows),
        "fast_paper_nvidia.csv": ((), fast_paper_rows),
        "deepep_normal.csv": ((), lambda: deepep_rows(a.deepep)),
        "vpbench_nccl_multinode.csv": (("vpbench",), lambda: [r for r in nccl_tests_rows(a.vpbench) if r["set"] == "fit"]),
        "vpbench_nccl_singlenode.csv": (("vpbench",),
                                        lambda: [r for r in nccl_tests_rows(a.vpbench) if r["set"] == "validation"]),
        "oci_quickstart_nccl_tests.csv": (("oci",), lambda: oci_rows(a.oci)),
        "aac_mi300x_rccl_tests.csv": (("aac",), lambda: aac_rows(a.aac)),
    }
    names = a.only or list(outputs)
    unknown = [n for n in names if n not in outputs]
    if unknown:
        ap.error(f"--only: unknown file(s) {', '.join(unknown)} (known: {', '.join(outputs)})")
    missing = sorted({g for n in names for g in outputs[n][0] if getattr(a, g) is None})
    if missing:
        ap.error(f"the files to write need --{' --'.join(missing)} (git dirs of their sources)")
    for name in names:
        write(name, outputs[name][1]())


if __name__ == "__main__":
    main()
