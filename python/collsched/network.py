"""The user's measured cluster: store it, load it, and resolve the ``calibrated`` cluster spec.

``collsched calibrate --network`` measures the network of the user's ranks and stores the
result beside the backend constants (``collsched.calibration``), in
``$XDG_CACHE_HOME/collsched/network.json`` (``~/.cache/...``); ``COLLSCHED_NETWORK`` points at
another file. Wherever a cluster spec is taken (``-c`` in the CLI, ``cluster=`` in Python and
in the runtime, ``COLLSCHED_CLUSTER``), ``calibrated[:SERVERS][,key=value...]`` stands for the
stored spec: ``SERVERS`` replaces the measured server count (size a larger cluster of the same
servers), and overrides apply on top of the measured values.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

ENV = "COLLSCHED_NETWORK"
NAME = "calibrated"
VERSION = 1


def default_path() -> Path:
    """Where ``collsched calibrate --network`` stores its result by default."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "collsched" / "network.json"


def path_in_use() -> Path | None:
    """``$COLLSCHED_NETWORK``, else the default path when it exists, else None."""
    env = os.environ.get(ENV)
    if env:
        return Path(env)
    p = default_path()
    return p if p.is_file() else None


def load(path: Path | str | None = None) -> dict:
    """The stored calibration (``{"version", "spec", "measured", "source"}``).

    Raises:
        ValueError: no calibration is stored (the message says how to make one), or the file is
            not one (it names the file and the problem).
    """
    p = Path(path) if path is not None else path_in_use()
    if p is None:
        raise ValueError(f"no network calibration stored (looked for {default_path()}): run `collsched calibrate "
                         f"--network` on your cluster first, or set {ENV} to a file it wrote")
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{ENV}={p}: no such network calibration file (run `collsched calibrate --network`)") from None
    except (OSError, ValueError) as e:
        raise ValueError(f"network calibration file {p}: not readable JSON ({e})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("spec"), str) or doc.get("version") != VERSION:
        raise ValueError(f"network calibration file {p}: expected a JSON object with \"version\": {VERSION} and a "
                         "\"spec\" string (written by `collsched calibrate --network`)")
    return doc


def save(doc: dict, path: Path | str | None = None) -> Path:
    """Check ``doc`` (its spec must parse) and write it atomically; returns the path."""
    from collsched import _core

    doc = dict(doc, version=VERSION)
    _core.Cluster.parse(doc["spec"])  # raises ValueError naming the bad field
    p = Path(path) if path is not None else default_path()
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(p)
    return p


def document(raw: dict, peaks: dict, how: str) -> dict:
    """What ``calibrate --network`` stores: the spec, the fitted constants (``collsched.netshape.fit``),
    the raw measurements and where they come from (``how``: the ranks, with a UTC time added)."""
    import datetime

    from collsched.netshape import fit

    fitted = fit(raw, peaks)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return {"version": VERSION, "spec": fitted["spec"], "measured": fitted, "measurements": raw,
            "source": f"measured by `collsched calibrate --network` on {how}, {stamp}"}


def is_calibrated(spec: str) -> bool:
    """Whether ``spec`` names the stored calibration (``calibrated``, ``calibrated:4``, ``calibrated,nic=...``)."""
    head = spec.strip().split(",", 1)[0]
    return head.split(":", 1)[0].strip() == NAME


def resolve(spec: str, path: Path | str | None = None) -> str:
    """``spec`` itself, or for ``calibrated[:SERVERS][,key=value...]`` the stored ``custom:`` spec
    with the server count and overrides applied (later keys win, as in any spec).

    Raises:
        ValueError: no calibration stored, or a server count that is not a positive integer.
    """
    if not is_calibrated(spec):
        return spec
    head, _, overrides = spec.strip().partition(",")
    stored = load(path)["spec"]
    stored_head, _, stored_rest = stored.partition(",")
    servers = stored_head.split(":", 1)[1]
    if ":" in head:
        servers = head.split(":", 1)[1].strip()
        if not servers.isdigit() or int(servers) < 1:
            raise ValueError(f"cluster spec '{spec}': server count '{servers}' must be a positive integer")
    from collsched.topology import with_overrides

    return with_overrides(f"custom:{servers},{stored_rest}", overrides)
