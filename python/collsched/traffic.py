"""Traffic matrices: P×P numpy uint64 bytes, row = sender, column = receiver.

Generators are seeded and reproducible (they run in the Rust core, so the CLI,
the runtime and the tests see the same matrices).
"""
from __future__ import annotations

import os

import numpy as np

from collsched import _core
# The validators live in collsched.matrix (imported by planning and skew too, so this module
# can import skew at the top without a cycle); re-exported here, their documented home.
from collsched.matrix import as_matrix, wire_matrix  # noqa: F401
from collsched.skew import MTM, gini, mtm  # noqa: F401


def _count(name: str, v, minimum: int = 0) -> int:
    """A whole number ≥ ``minimum`` below 2^64, or ValueError naming ``name`` (no silent truncation of 1.5)."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer, float, np.floating)):
        raise ValueError(f"{name} must be a whole number, got {v!r}")
    if isinstance(v, (float, np.floating)) and (not np.isfinite(v) or v != int(v)):
        raise ValueError(f"{name} must be a whole number of bytes (or items), got {v!r}")
    v = int(v)
    if v < minimum:
        raise ValueError(f"{name} must be non-negative, got {v}")
    if v >= 2**64:
        raise ValueError(f"{name} is too large: {v} (at most 2^64-1)")
    return v


def _real(name: str, v, minimum: float = 0.0) -> float:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer, float, np.floating)):
        raise ValueError(f"{name} must be a number, got {v!r}")
    v = float(v)
    if not np.isfinite(v) or v < minimum:
        raise ValueError(f"{name} must be a finite non-negative number, got {v!r}")
    return v


def _wrap(n: int, raw: bytes) -> np.ndarray:
    return np.frombuffer(raw, dtype="<u8").reshape(n, n).copy()


def balanced(n: int, bytes_per_pair: int) -> np.ndarray:
    """Every pair (including self) exchanges ``bytes_per_pair``."""
    return _wrap(n, _core.gen_balanced(_count("n", n), _count("bytes_per_pair", bytes_per_pair)))


def uniform(n: int, mean: int, seed: int = 0) -> np.ndarray:
    """FAST/FLASH "random": i.i.d. uniform pair sizes scaled to ``mean`` bytes."""
    return _wrap(n, _core.gen_uniform(_count("n", n), _count("mean", mean), _count("seed", seed)))


def zipf(n: int, s: float, mean: int, seed: int = 0) -> np.ndarray:
    """FAST/FLASH "skewed": i.i.d. Zipf(s) pair sizes over [1, 1000], scaled to ``mean`` bytes."""
    return _wrap(n, _core.gen_zipf(_count("n", n), _real("s", s), _count("mean", mean), _count("seed", seed)))


def hot_experts(n: int, skew: float = 1.0, tokens_per_rank: int = 4096, top_k: int = 2, experts: int = 0,
                hidden: int = 4096, dtype_bytes: int = 2, seed: int = 0) -> np.ndarray:
    """MoE dispatch: tokens × top-k with Zipf(skew) expert popularity; experts in contiguous blocks per GPU
    (``experts=0`` means 8 per GPU); each routed token carries ``hidden × dtype_bytes`` bytes."""
    return _wrap(n, _core.gen_hot_experts(_count("n", n), _count("tokens_per_rank", tokens_per_rank),
                                          _count("top_k", top_k), _count("experts", experts), _real("skew", skew),
                                          _count("hidden", hidden), _count("dtype_bytes", dtype_bytes),
                                          _count("seed", seed)))


def matrix_hash(traffic) -> str:
    """Content hash of a matrix as 16 hex digits (equal matrices, equal hashes, on any machine)."""
    m = as_matrix(traffic)
    return f"{_core.traffic_hash(m.shape[0], m.tobytes()):016x}"


def align(traffic, alignment) -> np.ndarray:
    """Round every pair size up to a multiple of ``alignment`` bytes.

    ``alignment`` is bytes (int) or a size string (``"128B"``, ``"4KiB"``): use the
    element size so no element is split, or a cache line so every block starts aligned.
    """
    from collsched.units import parse_bytes

    a = parse_bytes(alignment)
    if a <= 0:
        raise ValueError(f"alignment must be a positive number of bytes, got {alignment!r}")
    m = as_matrix(traffic)
    return _wrap(m.shape[0], _core.traffic_aligned(m.shape[0], m.tobytes(), a))


_U64_MAX = 2**64 - 1
# The one list of matrix file formats (CLI workloads, bench, traffic --out all use it).
FILE_SUFFIXES = (".npy", ".csv")


def _suffix(path) -> str:
    from pathlib import Path

    s = Path(path).suffix.lower()
    if s not in FILE_SUFFIXES:
        raise ValueError(f"traffic file {str(path)!r} must end in {' or '.join(FILE_SUFFIXES)}, got suffix {s or '(none)'!r}")
    return s


def _check_declared(path, n: int, ranks: int | None, max_memory) -> None:
    """A file's declared rank count, checked before its P×P matrix is allocated."""
    from collsched.guard import check, estimate_traffic

    if ranks is not None and n != ranks:
        raise ValueError(f"traffic file {str(path)!r} is {n}×{n} but the cluster has {ranks} GPUs")
    try:
        check(estimate_traffic(n), max_memory)
    except ValueError as e:  # ResourceLimitError kept as such, with the file named
        raise type(e)(f"{path}: {e}") from None


def _read_csv(path, ranks: int | None, max_memory) -> np.ndarray:
    """One row per sender, read a line at a time into a matrix allocated once the first row
    says its size (so the memory is the matrix's, never a list of Python ints per entry)."""
    m = None
    filled = 0
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if m is None:
                n = line.count(",") + 1  # counted before splitting: a huge row is refused unsplit
                _check_declared(path, n, ranks, max_memory)
                m = np.empty((n, n), dtype=np.uint64)
            elif filled == m.shape[0]:
                raise ValueError(f"{path}: traffic matrix must be square P×P, but line {lineno} is row "
                                 f"{filled + 1} of a matrix with {m.shape[1]} columns")
            cells = line.split(",")
            if len(cells) != m.shape[1]:
                raise ValueError(f"{path}: line {lineno} has {len(cells)} entries, the first row has {m.shape[1]}")
            for col, cell in enumerate(cells):
                cell = cell.strip()
                try:
                    v = int(cell)
                except ValueError:
                    raise ValueError(f"{path}: line {lineno}, column {col + 1}: {cell!r} is not an integer byte count") from None
                if v < 0:
                    raise ValueError(f"{path}: line {lineno}, column {col + 1}: negative byte count {v}")
                if v > _U64_MAX:
                    raise ValueError(f"{path}: line {lineno}, column {col + 1}: {v} does not fit in 64 bits")
                m[filled, col] = v
            filled += 1
    if m is None:
        raise ValueError(f"{path}: no rows (empty traffic matrix)")
    if filled != m.shape[0]:
        raise ValueError(f"{path}: traffic matrix must be square P×P, got {filled} rows of {m.shape[1]} entries")
    return m


def _read_npy(path, ranks: int | None, max_memory) -> np.ndarray:
    """``numpy.load``, after its header (dtype, shape, data size) is checked: a header can declare
    any shape, and numpy allocates what it declares before reading the data."""
    fmt = np.lib.format
    try:
        with open(path, "rb") as f:
            version = fmt.read_magic(f)
            if version == (1, 0):
                shape, _fortran, dtype = fmt.read_array_header_1_0(f)
            elif version == (2, 0):
                shape, _fortran, dtype = fmt.read_array_header_2_0(f)
            else:
                raise ValueError(f".npy format version {version}")
            data_at = f.tell()
    except (ValueError, EOFError, SyntaxError, TypeError):
        # numpy's own text talks about allow_pickle, which would be the wrong fix here.
        raise ValueError(f"{path}: not a .npy file holding a numeric P×P array (save one with numpy.save "
                         "or collsched traffic --out m.npy; a text matrix goes in a .csv file)") from None
    if dtype.hasobject or dtype.kind not in "iuf":
        raise ValueError(f"{path}: traffic matrix must hold integer byte counts, got dtype {dtype}")
    if len(shape) != 2 or shape[0] != shape[1] or shape[0] == 0:
        raise ValueError(f"{path}: traffic matrix must be square P×P with P ≥ 1, the file declares shape {shape}")
    _check_declared(path, shape[0], ranks, max_memory)
    size = os.stat(path).st_size
    if size - data_at != shape[0] * shape[1] * dtype.itemsize:
        raise ValueError(f"{path}: declares a {shape[0]}×{shape[1]} {dtype} matrix ({shape[0] * shape[1] * dtype.itemsize} "
                         f"bytes) but holds {size - data_at} bytes of data: the file is truncated or damaged")
    return np.load(path, allow_pickle=False)


def load(path, *, ranks: int | None = None, max_memory: str | int | None = None) -> np.ndarray:
    """Load a traffic matrix from ``.npy`` or ``.csv`` (integers, one row per sender) and validate it.

    Bounded before anything large is allocated: the file's size, and the matrix size its
    header (``.npy``) or first row (``.csv``) declares, against ``max_memory``.

    Args:
        path: a ``.npy`` or ``.csv`` file.
        ranks (int, optional): the rank count the matrix must have (checked from the header).
        max_memory: a size (``"16GiB"``, bytes) or None for half the free memory.

    Returns:
        np.ndarray: `[P, P]` `uint64` bytes, row = sender.

    Raises:
        ValueError: missing, too large for the limit, not a matrix, or a bad entry (named).
    """
    from collsched.guard import CSV_FILE_COPIES, check_input_file

    suffix = _suffix(path)
    # An .npy file is read into memory by numpy only after its header is checked (below).
    check_input_file(path, "traffic file", 1 if suffix == ".npy" else CSV_FILE_COPIES, max_memory)
    try:
        if suffix == ".npy":
            try:
                raw = _read_npy(path, ranks, max_memory)  # an .npz archive fails its magic check
            except (EOFError, OSError) as e:
                if isinstance(e, (FileNotFoundError, IsADirectoryError)):
                    raise
                raise ValueError(f"{path}: not a .npy file holding a numeric P×P array (truncated or damaged)") from None
        else:
            raw = _read_csv(path, ranks, max_memory)
    except FileNotFoundError:
        raise ValueError(f"traffic file {str(path)!r} does not exist") from None
    except IsADirectoryError:
        raise ValueError(f"traffic file {str(path)!r} is a directory") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not a text CSV file") from None
    try:
        return as_matrix(raw)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None


def save(path, traffic) -> None:
    """Save a traffic matrix as ``.npy`` (uint64) or ``.csv`` (integers, one row per sender)."""
    suffix = _suffix(path)
    m = as_matrix(traffic)
    if suffix == ".npy":
        np.save(path, m, allow_pickle=False)
    else:
        with open(path, "w", encoding="utf-8") as f:
            for row in m.tolist():
                f.write(",".join(str(v) for v in row) + "\n")


def summary(traffic) -> dict:
    """Shape and size facts of a matrix (bytes): ranks, total, max pair, mean pair, max row/column sums."""
    m = as_matrix(traffic)
    rows = [int(x) for x in m.sum(axis=1, dtype=np.uint64)]
    cols = [int(x) for x in m.sum(axis=0, dtype=np.uint64)]
    n = m.shape[0]
    total = sum(rows)
    return {
        "ranks": n,
        "total_bytes": total,
        "max_pair_bytes": int(m.max()),
        "mean_pair_bytes": total / (n * n),
        "max_send_bytes": max(rows),
        "max_recv_bytes": max(cols),
        "hash": matrix_hash(m),
    }
