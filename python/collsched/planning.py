"""Turning demands into Plans (the producers' Python entry points)."""
from __future__ import annotations

from collsched import _core
from collsched.matrix import wire_matrix
from collsched.topology import as_cluster


def plan_all_to_all(traffic, cluster, algorithm: str = "auto", options: dict | None = None, **knobs) -> _core.Plan:
    """Plan an all-to-all(v) of ``traffic`` (P×P bytes, row = sender) on ``cluster``.

    ``algorithm`` defaults to ``"auto"``, as in the CLI and the runtime. ``options`` (a dict,
    as the runtime's ``options=``) and keyword ``knobs`` are algorithm knobs passed as strings
    to the producer (for example ``min_stage_bytes="4MiB"`` for FAST); a knob given both ways
    must agree.
    """
    m = wire_matrix(traffic)  # the core checks that sums fit u64 (same errors)
    c = as_cluster(cluster)
    opts = _merged_options(options, knobs)
    return _core.plan_all_to_all(m, c, algorithm, opts)  # read in place; the plan keeps one copy


def _merged_options(options, knobs: dict) -> dict[str, str]:
    if options is None:
        options = {}
    if not isinstance(options, dict):
        raise TypeError(f"options must be a dict of algorithm knobs, got {type(options).__name__}")
    out = {str(k): str(v) for k, v in options.items()}
    for k, v in knobs.items():
        if k in out and out[k] != str(v):
            raise ValueError(f"option {k!r} given twice with different values: {out[k]!r} in options=, {v!r} as a keyword")
        out[str(k)] = str(v)
    return out


def plan_for_rank(traffic, cluster, rank: int, algorithm: str = "auto", options: dict | None = None, *,
                  moving_pairs: bool = False, **knobs) -> _core.RankPlan:
    """Plan only ``rank``'s part of an all-to-all(v) of ``traffic`` on ``cluster``.

    Equal (``==``) to ``plan_all_to_all(traffic, cluster, algorithm, **options).rank_plan(rank)``:
    the rank's transfers in the whole plan's order, each with its tag (its sequence number
    among the rank's transfers with the same ordered (src, dst) pair, which both sides of a
    message compute alone), this rank's side of its segments and its dependencies on the
    rank's other transfers (as rows); its buffer sizes, and the ``digest`` of the decisions
    that the runtime's ranks compare at the call site's next exchange. fanout, spreadout and hierarchical expand the
    rank alone; fast and balanced_direct decide, then run their assembly over the rank's part
    only; the SABRE variants decide, then run their assembly keeping only the rank's
    transfers; auto chooses, then expands the winner's rank part.

    Args:
        traffic: P×P bytes, row = sender (numpy array or nested lists of non-negative integers).
        cluster: a :class:`collsched.Cluster` or a spec string such as ``"h200:4"``.
        rank (int): the rank to plan for, ``0 <= rank < P``.
        algorithm (str): one of :func:`all_to_all_algorithms`.
        options (dict), **knobs: algorithm knobs, passed as strings (as for :func:`plan_all_to_all`).
        moving_pairs (bool): also count the whole plan's distinct moving rank pairs per step
            (``RankPlan.moving_pairs``; equal to ``rank_plan_with(rank, True)``), which only the
            "alltoallv" and "hybrid" transports need. It reads every rank's part: fast,
            balanced_direct and the SABRE variants then plan the whole plan and cut it.

    Returns:
        RankPlan: the rank's part of the plan.

    Raises:
        ValueError: a bad matrix, cluster, rank, algorithm or option (the message names it).
    """
    return _plan_for_rank_timed(traffic, cluster, rank, algorithm, _merged_options(options, knobs),
                                moving_pairs=moving_pairs)[0]


def _plan_for_rank_timed(traffic, cluster, rank: int, algorithm: str, options: dict, workspace=None, *,
                         moving_pairs: bool = False):
    """``(RankPlan, decide seconds, expand seconds)``, the times measured in the core; planned in
    ``workspace`` (a ``_core.Workspace`` the caller keeps across calls) when given; with
    ``moving_pairs`` (see `plan_for_rank`)."""
    m = wire_matrix(traffic)
    c = as_cluster(cluster)
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 0:
        raise ValueError(f"rank must be a non-negative int, got {rank!r}")
    opts = {str(k): str(v) for k, v in options.items()}
    # The core reads `m` in place (no copy).
    rp, decide_ns, expand_ns = _core.plan_for_rank(m, c, rank, algorithm, opts, workspace, moving_pairs)
    return rp, decide_ns * 1e-9, expand_ns * 1e-9


def all_to_all_algorithms() -> list[tuple[str, str]]:
    """``[(name, description)]`` of every all-to-all algorithm."""
    return _core.all_to_all_algorithms()


_ALGORITHM_NAMES: frozenset[str] = frozenset()


def check_algorithm(algorithm) -> str:
    """``algorithm`` when it names an all-to-all algorithm (``"auto"`` included).

    A local check, so that a misspelt name fails on the first call, whatever its size (an
    eager or native call plans nothing and would otherwise accept it).

    Raises:
        ValueError: not a string, or no such algorithm (the message lists the known names).
    """
    global _ALGORITHM_NAMES
    if not _ALGORITHM_NAMES:
        _ALGORITHM_NAMES = frozenset(name for name, _ in all_to_all_algorithms())
    if not isinstance(algorithm, str) or algorithm not in _ALGORITHM_NAMES:
        known = ", ".join(name for name, _ in all_to_all_algorithms())
        raise ValueError(f"unknown all-to-all algorithm {algorithm!r} (known: {known})")
    return algorithm


def save_plan(plan: _core.Plan, path) -> None:
    """Write a plan: binary form for a ``.bin`` suffix, JSON otherwise."""
    from pathlib import Path

    p = Path(path)
    if p.suffix.lower() == ".bin":
        p.write_bytes(plan.to_binary())
    else:
        p.write_text(plan.to_json(), encoding="utf-8")


def load_plan(path, max_memory: str | int | None = None) -> _core.Plan:
    """Read a plan written by :func:`save_plan` (JSON or binary, told apart by content).

    Args:
        path: the plan file.
        max_memory: refuse a file whose reading would need more memory than this (a size such
            as ``"16GiB"``; None: half the free memory), checked before it is read.

    Returns:
        Plan: the plan (structurally sound; :meth:`Plan.verify` proves the rest).

    Raises:
        ValueError: missing, too large, not a plan, or damaged (the message names the file).
    """
    from pathlib import Path

    from collsched.guard import PLAN_FILE_COPIES, check_input_file

    p = Path(path)
    check_input_file(p, "plan file", PLAN_FILE_COPIES, max_memory)
    try:
        data = p.read_bytes()
    except OSError as e:  # removed or replaced since it was checked
        raise ValueError(f"plan file {str(path)!r} cannot be read ({e.strerror or e})") from None
    if not data:
        raise ValueError(f"plan file {str(path)!r} is empty")
    try:
        if data.lstrip()[:1] == b"{":
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                raise ValueError("JSON plan is not valid UTF-8") from None
            return _core.Plan.from_json(text)
        return _core.Plan.from_binary(data)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None
