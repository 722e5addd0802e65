"""Backend constants for ``collsched.choose``: load and store them (measured by
``collsched.comm.calibrate``, which needs the runtime; this module does not).

The table (format: ``crates/collsched-core/src/algo/auto/calibration.json``, the built-in
defaults) holds per backend the host cost of one call, one step, one message and one staged
MiB, how much torch's own all-to-all serialises a pair's two directions, and per planner its
cost per planned transfer. ``collsched calibrate`` measures them on the user's cluster and
stores them in ``$XDG_CACHE_HOME/collsched/calibration.json`` (``~/.cache/...``);
``COLLSCHED_CALIBRATION`` points at another file. ``load()`` returns what ``choose`` uses.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from collsched import _core

ENV = "COLLSCHED_CALIBRATION"
_cached: tuple | None = None  # (path, mtime_ns, Calibration)


def default_path() -> Path:
    """Where ``collsched calibrate`` stores its measurements by default."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "collsched" / "calibration.json"


def path_in_use() -> Path | None:
    """The calibration file ``load()`` reads: ``$COLLSCHED_CALIBRATION``, else the default
    path when it exists, else None (the built-in defaults)."""
    env = os.environ.get(ENV)
    if env:
        return Path(env)
    p = default_path()
    return p if p.is_file() else None


_where: dict = {}  # (COLLSCHED_CALIBRATION, XDG_CACHE_HOME, HOME) -> (path, from_env)


def _candidate() -> tuple[Path, bool]:
    """The file to look at, resolved once per environment (Path.home() is slow per call)."""
    env = os.environ
    key = (env.get(ENV), env.get("XDG_CACHE_HOME"), env.get("HOME"))
    got = _where.get(key)
    if got is None:
        got = _where[key] = (Path(key[0]), True) if key[0] else (default_path(), False)
    return got


def load() -> _core.Calibration:
    """The calibration ``choose`` uses (re-read when the file changes).

    Raises:
        ValueError: ``COLLSCHED_CALIBRATION`` names a missing file, or the file is not a
            valid calibration (the message names the file and the bad field).
    """
    global _cached
    path, from_env = _candidate()
    try:
        mtime = os.stat(path).st_mtime_ns
    except OSError:
        if from_env:
            raise ValueError(f"{ENV}={path}: no such calibration file (run `collsched calibrate` or unset it)") from None
        if _cached is None or _cached[0] is not None:
            _cached = (None, 0, _core.Calibration.defaults())
        return _cached[2]
    if _cached is not None and _cached[0] == path and _cached[1] == mtime:
        return _cached[2]
    from collsched.guard import JSON_FILE_COPIES, check_input_file

    try:
        check_input_file(path, "calibration file", JSON_FILE_COPIES)
        cal = _core.Calibration.from_json(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise ValueError(f"calibration file {path}: {e}") from None
    _cached = (path, mtime, cal)
    return cal


def save(table: dict, path: Path | None = None) -> Path:
    """Check ``table`` (a calibration as a dict) and write it as JSON; returns the path."""
    text = json.dumps(table, indent=2, sort_keys=True)
    _core.Calibration.from_json(text)  # raises ValueError naming a bad field
    p = Path(path) if path is not None else default_path()
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(".tmp")
    tmp.write_text(text + "\n", encoding="utf-8")
    tmp.replace(p)
    return p
