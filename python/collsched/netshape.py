"""From network measurements to platform constants: which ranks share a server, each tier's
rate and latency, and the ``custom:`` cluster spec that ``simulate`` and ``auto`` use.

Pure functions over measurement matrices (``collsched.comm.netprobe`` takes them on a real
process group; ``collsched calibrate --network`` and ``collsched testbed calibrate`` call
these). The shape comes from the measurements, not from hostnames: rank pairs split into a
fast, short tier (scale-up, inside a server) and a slow, long one (scale-out) by the best
two-way split of log bandwidth (or of log latency, when bandwidth does not separate them);
the fast relation must then group the ranks into equal servers of consecutive ranks, as the
Cluster model numbers them. Hostnames only decide when the two tiers cannot be told apart
(one server, one GPU per server, or tiers of equal speed) and are otherwise only compared.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field

# Two tiers count as distinct when the split's class medians differ by this factor and the
# classes do not overlap. Real scale-up is 5–20× the NIC (NVLink vs 400 Gb/s); the testbed's
# unshaped veth is ≥ 10× its shaped NICs.
MIN_TIER_RATIO = 1.5


class ShapeError(ValueError):
    """The measurements do not describe S servers × G ranks numbered server by server."""


@dataclass(frozen=True)
class Shape:
    """Which ranks share a server.

    Attributes:
        servers: S.
        gpus_per_server: G.
        groups: the ranks of each server, ``[[0..G-1], [G..2G-1], ...]``.
        separated_by: ``"bandwidth"`` or ``"latency"`` (the measurement that split the tiers),
            or ``"hostnames"`` (the tiers could not be told apart).
        hosts_agree: whether the hostnames group the ranks the same way (None: no hostnames).
        tier_ratio: median near / median far of the feature that separated them (1.0 for hostnames).
    """

    servers: int
    gpus_per_server: int
    groups: list = field(default_factory=list)
    separated_by: str = "bandwidth"
    hosts_agree: bool | None = None
    tier_ratio: float = 1.0

    def server_of(self, rank: int) -> int:
        return rank // self.gpus_per_server

    def to_dict(self) -> dict:
        return asdict(self)


def best_split(values: list[float]) -> tuple[float, float]:
    """The two-means split of ``values`` (1-D; exhaustive over the sorted order, least total
    squared deviation). Returns ``(threshold, ratio)``: values above the threshold form the
    high class; ``ratio`` = exp(median high − median low) when the values are logs, or 1.0
    when there is one value or the classes overlap in the sense that no split exists."""
    xs = sorted(values)
    n = len(xs)
    if n < 2 or xs[0] == xs[-1]:
        return (xs[-1] if xs else 0.0), 1.0
    prefix = [0.0]
    prefix_sq = [0.0]
    for x in xs:
        prefix.append(prefix[-1] + x)
        prefix_sq.append(prefix_sq[-1] + x * x)

    def sse(a: int, b: int) -> float:  # squared deviation of xs[a:b] from its mean
        k = b - a
        s = prefix[b] - prefix[a]
        return (prefix_sq[b] - prefix_sq[a]) - s * s / k

    best_k, best = 1, math.inf
    for k in range(1, n):
        if xs[k] == xs[k - 1]:
            continue  # equal values stay in one class
        cost = sse(0, k) + sse(k, n)
        if cost < best:
            best_k, best = k, cost
    low, high = xs[:best_k], xs[best_k:]
    return (low[-1] + high[0]) / 2, math.exp(statistics.median(high) - statistics.median(low))


def _pairs(world: int):
    return [(i, j) for i in range(world) for j in range(i + 1, world)]


def _symmetric(matrix, world: int, name: str) -> dict:
    """``{(i, j): value}`` for i < j from a P×P matrix whose (i, j) or (j, i) entry holds the
    pair's measurement (the mean of both when both are finite and positive)."""
    if len(matrix) != world or any(len(row) != world for row in matrix):
        raise ShapeError(f"{name} must be a {world}×{world} matrix, got {len(matrix)} rows")
    out = {}
    for i, j in _pairs(world):
        got = [v for v in (matrix[i][j], matrix[j][i]) if v is not None and math.isfinite(v) and v > 0]
        if not got:
            raise ShapeError(f"{name}: no measurement for ranks {i} and {j}")
        out[(i, j)] = sum(got) / len(got)
    return out


def _host_groups(hosts: list[str] | None) -> list[list[int]] | None:
    if not hosts:
        return None
    order: dict[str, list[int]] = {}
    for r, h in enumerate(hosts):
        order.setdefault(h, []).append(r)
    return list(order.values())


def _check_groups(groups: list[list[int]], world: int, how: str) -> tuple[int, int]:
    """S and G of ``groups`` when they are equal servers of consecutive ranks; else ShapeError."""
    sizes = sorted({len(g) for g in groups})
    if len(sizes) != 1:
        shown = "; ".join(f"{{{', '.join(map(str, g))}}}" for g in groups[:6]) + (" ..." if len(groups) > 6 else "")
        raise ShapeError(f"mismatched groups: the {how} put the {world} ranks into servers of unequal size ({shown}); "
                         "collsched's cluster model needs the same number of GPUs on every server")
    g = sizes[0]
    for k, grp in enumerate(sorted(groups, key=min)):
        if sorted(grp) != list(range(k * g, (k + 1) * g)):
            raise ShapeError(f"mismatched groups: the {how} put ranks {sorted(grp)} on one server, but collsched numbers "
                             f"ranks server by server (ranks {k * g}..{(k + 1) * g - 1} on server {k}); start the ranks "
                             "so that each server's ranks are consecutive (torchrun does)")
    return len(groups), g


def _cliques(near: set, world: int) -> list[list[int]] | None:
    """The groups when ``near`` (pairs i < j) is an equivalence relation (disjoint cliques), else None."""
    groups, seen = [], set()
    for r in range(world):
        if r in seen:
            continue
        grp = [r] + [q for q in range(r + 1, world) if (r, q) in near]
        if any((a, b) not in near for a in grp for b in grp if a < b) or seen & set(grp):
            return None
        groups.append(grp)
        seen.update(grp)
    return groups


def _equal_split(feat: dict, world: int) -> tuple[list[list[int]], float, float] | None:
    """The split of the pairs into near (high) and far that makes equal servers of G ranks for some
    G dividing P (1 < G < P), with the largest gap between the classes; ``(groups, gap, ratio)``
    (gap and ratio of class medians in the feature's log units), or None when no G gives cliques.
    Robust to a few outlying pairs, which a plain two-means split would put in a class of their own."""
    ranked = sorted(feat, key=feat.get, reverse=True)
    values = [feat[p] for p in ranked]
    best = None
    for g in range(2, world):
        if world % g:
            continue
        n_near = (world // g) * g * (g - 1) // 2
        groups = _cliques(set(ranked[:n_near]), world)
        if groups is None or len({len(x) for x in groups}) != 1:
            continue
        gap = values[n_near - 1] - values[n_near]
        if gap <= 0:
            continue  # a cut through tied values separates nothing
        ratio = math.exp(statistics.median(values[:n_near]) - statistics.median(values[n_near:]))
        if best is None or gap > best[1]:
            best = (groups, gap, ratio)
    return best


def _explain_failure(name: str, feat: dict, world: int) -> None:
    """Raise ShapeError naming why the two classes of ``feat``'s two-means split are not servers."""
    threshold, _ = best_split(list(feat.values()))
    near = {p for p, v in feat.items() if v > threshold}
    groups, seen = [], set()
    for r in range(world):
        if r in seen:
            continue
        grp = [r] + [q for q in range(world) if q != r and (min(r, q), max(r, q)) in near]
        for a in grp:
            for b in grp:
                if a < b and (a, b) not in near:
                    raise ShapeError(f"the measured {name} does not split the ranks into servers: ranks {a} and {b} are "
                                     f"both fast to rank {r} but slow to each other (a topology that is not two tiers, "
                                     "or a noisy run: run it again on a quiet cluster)")
        groups.append(grp)
        seen.update(grp)
    _check_groups(groups, world, f"measured {name}")


def infer_shape(bandwidth, latency, hosts: list[str] | None = None) -> Shape:
    """Which ranks share a server, from pairwise measurements.

    Args:
        bandwidth: P×P payload bytes/s between each pair (either triangle, or both: averaged);
            the diagonal is ignored.
        latency: P×P one-way seconds of a small message, the same layout.
        hosts: each rank's hostname (optional): decides only when the tiers cannot be told apart.

    Returns:
        Shape: servers, GPUs per server, the groups and how they were told apart.

    Raises:
        ShapeError: fewer than 2 ranks, a missing pair, groups of unequal size, servers whose ranks
            are not consecutive, or a fast relation that is not an equivalence (rank a fast to b and
            c but b slow to c).
    """
    world = len(bandwidth)
    if world < 2:
        raise ShapeError(f"a network calibration needs at least 2 ranks, got {world}")
    bw = _symmetric(bandwidth, world, "bandwidth")
    lat = _symmetric(latency, world, "latency")
    # Near = high log bandwidth, or low log latency (negated so that near is high in both).
    features = {"bandwidth": {p: math.log(v) for p, v in bw.items()},
                "latency": {p: -math.log(v) for p, v in lat.items()}}
    host_groups = _host_groups(hosts)
    for name, feat in features.items():  # bandwidth first: latency only where bandwidth cannot tell
        found = _equal_split(feat, world)
        if found is not None and found[2] >= MIN_TIER_RATIO:
            groups = found[0]
            servers, gpus = _check_groups(groups, world, f"measured {name}")
            agree = None if host_groups is None else sorted(map(sorted, host_groups)) == sorted(map(sorted, groups))
            return Shape(servers, gpus, groups, name, agree, found[2])
    for name, feat in features.items():  # two tiers that are not equal servers: say why
        if best_split(list(feat.values()))[1] >= MIN_TIER_RATIO * 2:
            _explain_failure(name, feat, world)
    if host_groups is None:
        host_groups = [list(range(world))]
    servers, gpus = _check_groups(host_groups, world, "hostnames (the measured tiers are indistinguishable)")
    return Shape(servers, gpus, sorted(host_groups, key=min), "hostnames", True if hosts else None, 1.0)


def tier_pairs(shape: Shape, per_tier: int = 3) -> dict[str, list[tuple[int, int]]]:
    """Up to ``per_tier`` disjoint rank pairs per tier to measure carefully: scale-out pairs
    (k, G + k) across servers 0 and 1, scale-up pairs (sG, sG + 1) inside servers."""
    g, s = shape.gpus_per_server, shape.servers
    out = [(k, g + k) for k in range(min(g, per_tier))] if s >= 2 else []
    up = [(v * g, v * g + 1) for v in range(min(s, per_tier))] if g >= 2 else []
    return {"scaleout": out, "scaleup": up}


def slope_rate(small_bytes: int, small_s: float, large_bytes: int, large_s: float) -> float:
    """Bytes/s from two transfer sizes' times: the slope, so fixed costs (latency, start-up,
    a shaper's burst, TCP's slow start) cancel. Falls back to large / time when the times do
    not grow (noise at tiny sizes)."""
    if large_bytes <= small_bytes:
        raise ValueError(f"large_bytes ({large_bytes}) must exceed small_bytes ({small_bytes})")
    if large_s > small_s > 0:
        return (large_bytes - small_bytes) / (large_s - small_s)
    return large_bytes / max(large_s, 1e-12)


def tcp_wire_efficiency(mtu: int | None) -> float | None:
    """Payload bytes per shaped wire byte of TCP over Ethernet at ``mtu`` (IPv4 and TCP headers
    with timestamps: 52 bytes; the 14-byte Ethernet header, which Linux's shapers count):
    1448 / 1514 = 0.956 at MTU 1500. None when the MTU is unknown."""
    if not mtu or mtu <= 52:
        return None
    return (mtu - 52) / (mtu + 14)


def infer_nics(gpus: int, egress_ratio: float | None) -> int:
    """NICs per server from the server's egress: the rate of one flow per rank out of the server,
    all at once, over one flow's rate. With a NIC per rank that is G; ranks sharing K NICs get K.
    The divisor of G nearest in log scale (the Cluster model shares NICs g mod K); G when not
    measured (one server, one rank per server)."""
    if egress_ratio is None or egress_ratio <= 0:
        return gpus
    divisors = [d for d in range(1, gpus + 1) if gpus % d == 0]
    return min(divisors, key=lambda d: (abs(math.log(egress_ratio / d)), -d))


def _median(xs):
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    return statistics.median(xs) if xs else None


def _fraction(measured, peak):
    return None if measured is None or not peak else measured / peak


def _format_ns(seconds: float) -> str:
    return f"{max(1, round(seconds * 1e9))}ns"


def fit(raw: dict, peaks: dict | None = None) -> dict:
    """Platform constants from one probe run (``collsched.comm.netprobe.probe_rank``'s rank 0 result).

    Args:
        raw: ``{"world", "hosts", "backend", "latency_s" (P×P least one-way seconds),
            "latency_median_s" (P×P), "probe_bps" (P×P), "shape" (the Shape dict the ranks used),
            "tiers": {tier: [{"pair", "rate_bps"}]}, "egress": {"flows", "bytes_per_flow", "seconds"}
            or None, "incast": {...} or None, "mtu" (the interface's, or None), "copy_bps", "seconds"}``.
        peaks: ``{"nic": bytes/s, "scaleup": bytes/s}`` the user states as line rates (optional):
            ``fraction_of_peak`` is the measured payload rate over each.

    Returns:
        ``{"servers", "gpus_per_server", "nics_per_server" (`infer_nics`), "egress_ratio", "groups",
        "separated_by", "hosts_agree", "nic_goodput_bps" (payload rate of one scale-out flow; what the
        spec's ``nic`` gets), "nic_bps" (the line rate:
        goodput / wire efficiency), "wire_efficiency", "scaleup_goodput_bps", "scaleup_bps",
        "latency_s": {"scaleup", "scaleout"} (median over the tier's pairs of each pair's least
        one-way time: the spec's alphas), "latency_median_s" (the same of each pair's median),
        "fraction_of_peak": {"nic", "scaleup"}, "incast": {"senders", "ratio"} or None, "copy_bps",
        "spec"}``. A tier that does not exist (one
        server, one GPU per server) gets None and the other tier's value in the spec.
    """
    shape = Shape(**raw["shape"])
    peaks = peaks or {}
    eff = tcp_wire_efficiency(raw.get("mtu")) if raw.get("backend") == "gloo" else None
    tiers = raw.get("tiers", {})
    nic = _median([p["rate_bps"] for p in tiers.get("scaleout", [])])
    up = _median([p["rate_bps"] for p in tiers.get("scaleup", [])])
    world = raw["world"]

    def per_tier(matrix, same: bool):
        if matrix is None:
            return None
        return _median([matrix[i][j] for i, j in _pairs(world) if (shape.server_of(i) == shape.server_of(j)) == same])

    lat_out, lat_up = per_tier(raw["latency_s"], False), per_tier(raw["latency_s"], True)
    typical = {"scaleup": per_tier(raw.get("latency_median_s"), True),
               "scaleout": per_tier(raw.get("latency_median_s"), False)}
    line = (lambda v: None if v is None else (v / eff if eff else v))
    egress = raw.get("egress")
    egress_ratio = None
    if egress and nic:
        egress_ratio = egress["flows"] * egress["bytes_per_flow"] / egress["seconds"] / nic
    nics = infer_nics(shape.gpus_per_server, egress_ratio)
    incast = raw.get("incast")
    inc = None
    if incast:
        inc = {"senders": incast["senders"], "ratio": incast["one_s"] / incast["many_s"]}
    spec_nic = nic if nic is not None else up
    spec_up = up if up is not None else nic
    alpha_out = lat_out if lat_out is not None else lat_up
    alpha_up = lat_up if lat_up is not None else lat_out
    spec = (f"custom:{shape.servers},gpus={shape.gpus_per_server},nics={nics},fabric=switch,"
            f"nic={int(spec_nic)}B/s,scaleup={int(spec_up)}B/s,alpha_scaleout={_format_ns(alpha_out)},"
            f"alpha_scaleup={_format_ns(alpha_up)}")
    if raw.get("copy_bps"):
        spec += f",copy={int(raw['copy_bps'])}B/s"
    return {"servers": shape.servers, "gpus_per_server": shape.gpus_per_server, "nics_per_server": nics,
            "egress_ratio": egress_ratio, "groups": shape.groups,
            "separated_by": shape.separated_by, "hosts_agree": shape.hosts_agree, "tier_ratio": shape.tier_ratio,
            "nic_goodput_bps": nic, "nic_bps": line(nic), "wire_efficiency": eff,
            "scaleup_goodput_bps": up, "scaleup_bps": line(up),
            "latency_s": {"scaleup": lat_up, "scaleout": lat_out}, "latency_median_s": typical,
            "fraction_of_peak": {"nic": _fraction(nic, peaks.get("nic")), "scaleup": _fraction(up, peaks.get("scaleup"))},
            "incast": inc, "copy_bps": raw.get("copy_bps"), "spec": spec}
