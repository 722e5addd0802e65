"""Units at the edges: sizes (``64MiB``), bandwidths (``400Gbps``, ``450GB/s``)."""
from __future__ import annotations

import re

_SIZE = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
         "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_BW = {"": 1, "b/s": 1, "kb/s": 10**3, "mb/s": 10**6, "gb/s": 10**9, "tb/s": 10**12,
       "kbps": 10**3 / 8, "mbps": 10**6 / 8, "gbps": 10**9 / 8, "tbps": 10**12 / 8}
# As users should write them (the tables are matched case-insensitively, then a lowercase b is refused).
_KNOWN = {id(_SIZE): "B, KB, MB, GB, TB, KiB, MiB, GiB, TiB", id(_BW): "B/s, KB/s, MB/s, GB/s, TB/s, Kbps, Mbps, Gbps, Tbps"}
_NUM = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([A-Za-z/]*)\s*$")


def _parse(text: str | int, table: dict, what: str) -> int:
    if isinstance(text, bool):
        raise ValueError(f"{what} must be a number with a unit, got {text!r}")
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"{what} must be non-negative, got {text}")
        return text
    if str(text).strip().startswith("-"):
        raise ValueError(f"{what} {text!r} is negative; it must be non-negative")
    example = "4096, 64KiB or 1.5GB" if table is _SIZE else "400Gbps or 450GB/s"
    m = _NUM.match(str(text))
    if not m:
        raise ValueError(f"cannot parse {what} {text!r} (expected a number with an optional unit, e.g. {example})")
    unit = m.group(2).lower()
    if unit not in table:
        units = _KNOWN[id(table)]
        raise ValueError(f"unknown unit {m.group(2)!r} in {what} {text!r} (known: {units})")
    # A lowercase b means bits by convention (64Mb = 8 MB); reading it as bytes would be off 8×.
    raw = m.group(2)
    if table is _SIZE and raw.endswith("b"):
        prefix = raw[:-1].rstrip("iI")
        raise ValueError(f"{what} {text!r}: a lowercase b means bits, and sizes are in bytes: write "
                         + (f"{m.group(1)}{prefix.upper()}B (10^3 steps) or {m.group(1)}{prefix.upper()}iB (2^10 steps)"
                            if prefix else f"{m.group(1)}B or {m.group(1)}"))
    if table is _BW and raw.endswith("b/s"):
        raise ValueError(f"{what} {text!r}: a lowercase b means bits: write {m.group(1)}{raw[:-3].upper()}bps "
                         f"for bits or {m.group(1)}{raw[:-3].upper()}B/s for bytes per second")
    from fractions import Fraction

    value = Fraction(m.group(1)) * Fraction(table[unit])
    if table is _SIZE and value.denominator != 1:
        raise ValueError(f"{what} {text!r} is not a whole number of bytes ({float(value):g} B)")
    return int(value)


def parse_bytes(text: str | int) -> int:
    """``'64MiB'`` → 67108864. Plain numbers are bytes."""
    return _parse(text, _SIZE, "size")


def parse_bandwidth(text: str | int) -> int:
    """``'400Gbps'`` → 50e9 bytes/s; ``'450GB/s'`` → 450e9. Plain numbers are bytes/s."""
    v = _parse(text, _BW, "bandwidth")
    if v <= 0:
        raise ValueError(f"bandwidth must be positive, got {text!r}")
    return v


def format_bytes(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.2f}{unit}"
    return f"{n}B"
