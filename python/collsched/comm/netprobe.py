"""Measure the network of a process group: per rank pair latency and bandwidth, each tier's
rate with two message sizes, and incast (``collsched calibrate --network``).

`probe_rank` runs on every rank of an initialised process group (Gloo or NCCL) and moves
only the group's own messages. Every phase is bounded: a fixed number of pairs and
repetitions, sizes capped by ``max_bytes``, and before every measurement the ranks agree
(one all-reduce) whether any of them has passed ``max_time_s``, so that all of them stop at
the same point with the same error instead of waiting on a peer that gave up.
``collsched.netshape`` turns rank 0's result into platform constants.
"""
from __future__ import annotations

import os
import socket
import statistics
import struct
import time

from collsched.comm.launch import report_progress
from collsched.netshape import ShapeError, Shape, infer_shape, tier_pairs

DEFAULT_SETTINGS = {
    "max_time_s": 110.0,  # the whole measurement, every rank
    "max_bytes": 256 * 2**20,  # largest message
    "probe_bytes": 2**20,  # the all-pairs bandwidth probe (shape only)
    "target_s": 0.25,  # a tier's large message takes about this long at its probed rate
    "latency_reps": 10,
    "reps": 3,
    "pairs_per_tier": 3,
    "incast_senders": 8,
}
MIN_LARGE_BYTES = 2**20
_SIOCGIFMTU = 0x8921


class MeasurementTimeout(TimeoutError):
    """The measurement passed ``max_time_s`` (raised on every rank at the same point; an OSError,
    so the CLI reports it as a one-line error, exit 2)."""


def interface_mtu(name: str | None) -> int | None:
    """MTU of interface ``name`` in this process's network namespace (an ioctl, not /sys:
    sysfs shows the namespace that mounted it), or None."""
    if not name:
        return None
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            import fcntl

            got = fcntl.ioctl(s.fileno(), _SIOCGIFMTU, struct.pack("16si", name.encode()[:15], 0))
        return int(struct.unpack("16si", got)[1])
    except OSError:
        return None


def check_settings(settings: dict) -> dict:
    """``DEFAULT_SETTINGS`` updated with ``settings``, each checked (ValueError naming it)."""
    out = dict(DEFAULT_SETTINGS)
    unknown = set(settings) - set(out)
    if unknown:
        raise ValueError(f"unknown network probe setting(s) {sorted(unknown)} (known: {', '.join(sorted(out))})")
    out.update(settings)
    if not 0.01 <= float(out["max_time_s"]) <= 3600.0:
        raise ValueError(f"--max-time must be between 0.01 and 3600 s, got {out['max_time_s']}")
    if not MIN_LARGE_BYTES <= int(out["max_bytes"]) <= 2**31:
        raise ValueError(f"--max-bytes must be between 1 MiB and 2 GiB, got {out['max_bytes']}")
    for k in ("latency_reps", "reps", "pairs_per_tier", "incast_senders"):
        if not 1 <= int(out[k]) <= 100:
            raise ValueError(f"{k} must be between 1 and 100, got {out[k]}")
    return out


class _Probe:
    """One rank's side of the measurements (see the module docstring)."""

    def __init__(self, settings: dict):
        import torch
        import torch.distributed as dist

        self.dist, self.torch = dist, torch
        self.s = settings
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.backend = "nccl" if "nccl" in str(dist.get_backend()).lower() else "gloo"
        nccl = self.backend == "nccl"
        self.dev = torch.device("cuda", torch.cuda.current_device()) if nccl else torch.device("cpu")
        self.sync = torch.cuda.synchronize if nccl else (lambda: None)
        self.deadline = time.monotonic() + float(settings["max_time_s"])
        self.flag = torch.zeros(1, dtype=torch.int32, device=self.dev)
        self.tiny = torch.zeros(1, dtype=torch.float32, device=self.dev)
        self.phase = "start"

    def agree(self, phase: str) -> None:
        """All ranks meet; all raise MeasurementTimeout if any of them passed the deadline."""
        self.phase = phase
        self.flag.fill_(1 if time.monotonic() > self.deadline else 0)
        self.dist.all_reduce(self.flag, op=self.dist.ReduceOp.MAX)
        if int(self.flag.item()):
            raise MeasurementTimeout(f"the network measurement exceeded --max-time {self.s['max_time_s']:g} s "
                                     f"(during {phase}); nothing was written: raise --max-time or lower --max-bytes")

    def ping(self, peer: int, initiator: bool) -> tuple[float, float] | None:
        """One-way seconds of a 4-byte message, ``(least, median)`` round trip / 2 (None on the
        responder). The least is the network's latency: on a busy host the median also holds the
        time the scheduler kept a rank waiting."""
        dist, buf = self.dist, self.tiny
        times = []
        for k in range(int(self.s["latency_reps"]) + 1):  # the first is untimed (connection set-up)
            if initiator:
                t0 = time.perf_counter()
                dist.send(buf, peer)
                dist.recv(buf, peer)
                self.sync()
                if k:
                    times.append(time.perf_counter() - t0)
            else:
                dist.recv(buf, peer)
                dist.send(buf, peer)
                self.sync()
        return (min(times) / 2, statistics.median(times) / 2) if initiator else None

    def one_way(self, src: int, dst: int, data) -> float | None:
        """Seconds, measured at ``src``, to send ``data`` to ``dst`` and get a 4-byte ack back."""
        dist = self.dist
        if self.rank == src:
            t0 = time.perf_counter()
            dist.send(data, dst)
            dist.recv(self.tiny, dst)
            self.sync()
            return time.perf_counter() - t0
        if self.rank == dst:
            dist.recv(data, src)
            dist.send(self.tiny, src)
            self.sync()
        return None

    def buffer(self, nbytes: int):
        return self.torch.zeros(nbytes, dtype=self.torch.uint8, device=self.dev)

    def pairs_phase(self) -> tuple[list, list, list]:
        """Every pair in turn: latency (least and median) and a ``probe_bytes`` transfer (for the
        shape only); P×P matrices, this rank's row filled for higher ranks."""
        P = self.world
        lat = [[None] * P for _ in range(P)]
        lat_median = [[None] * P for _ in range(P)]
        bw = [[None] * P for _ in range(P)]
        data = self.buffer(int(self.s["probe_bytes"]))
        n = P * (P - 1) // 2
        k = 0
        for i in range(P):
            for j in range(i + 1, P):
                k += 1
                self.agree(f"pair {k}/{n}")
                if self.rank == 0 and (k == 1 or k % 16 == 0):
                    report_progress(f"pairs: {k}/{n}")
                if self.rank not in (i, j):
                    continue
                one = self.ping(j if self.rank == i else i, self.rank == i)
                times = [self.one_way(i, j, data) for _ in range(2)]
                if self.rank == i:
                    lat[i][j], lat_median[i][j] = one
                    # Not less the latency: on a loaded host a ping can outlast a fast transfer.
                    bw[i][j] = data.numel() / max(min(times), 1e-9)
        return lat, lat_median, bw

    def gather_rows(self, *matrices) -> list[list]:
        """Each P×P matrix whole on every rank (rank r filled row r)."""
        rows = [None] * self.world
        self.dist.all_gather_object(rows, [m[self.rank] for m in matrices])
        return [[r[k] for r in rows] for k in range(len(matrices))]

    def tier_phase(self, shape: Shape, sizes: dict) -> dict:
        """Each tier's rate on a few pairs, one at a time: slope of two sizes' median times."""
        from collsched.netshape import slope_rate

        out = {}
        for tier, pairs in tier_pairs(shape, int(self.s["pairs_per_tier"])).items():
            large = sizes[tier]
            small = max(large // 4, 4096)
            big, little = self.buffer(large), self.buffer(small)
            rows = []
            for p, (a, b) in enumerate(pairs):
                if self.rank == 0:
                    report_progress(f"{tier}: pair {p + 1}/{len(pairs)}, {large >> 10} KiB")
                t_small, t_large = [], []
                for rep in range(int(self.s["reps"])):
                    self.agree(f"{tier} pair {a}-{b}")
                    t_small.append(self.one_way(a, b, little))
                    self.agree(f"{tier} pair {a}-{b}")
                    t_large.append(self.one_way(a, b, big))
                if self.rank == a:
                    rows.append({"pair": [a, b], "small_bytes": small, "large_bytes": large,
                                 "small_s": statistics.median(t_small), "large_s": statistics.median(t_large),
                                 "rate_bps": slope_rate(small, statistics.median(t_small), large,
                                                        statistics.median(t_large))})
            gathered = [None] * self.world
            self.dist.all_gather_object(gathered, rows)
            out[tier] = [r for part in gathered for r in part]
        return out

    def egress_phase(self, shape: Shape, nbytes: int) -> dict | None:
        """Every rank k of server 0 sends ``nbytes`` to rank G + k at once (one flow per rank out of
        the server): how many NICs' worth of rate the server's ranks get together. Seconds = the
        slowest sender's (send + ack), median over the rounds."""
        G = shape.gpus_per_server
        if shape.servers < 2 or G < 2:
            return None
        data = self.buffer(nbytes)
        rounds = []
        for rep in range(int(self.s["reps"])):
            if self.rank == 0:
                report_progress(f"server egress: {G} flows, round {rep + 1}")
            self.agree("server egress")
            mine = None
            if self.rank < G:
                mine = self.one_way(self.rank, self.rank + G, data)
            elif self.rank < 2 * G:
                self.one_way(self.rank - G, self.rank, data)
            took = [None] * self.world
            self.dist.all_gather_object(took, mine)
            rounds.append(max(t for t in took if t is not None))
        return {"flows": G, "bytes_per_flow": nbytes, "seconds": statistics.median(rounds)}

    def incast_phase(self, shape: Shape, nbytes: int) -> dict | None:
        """``nbytes`` into rank 0 from one remote sender, then split over up to ``incast_senders``
        remote senders at once; seconds measured at rank 0 (medians)."""
        G = shape.gpus_per_server
        senders = list(range(G, self.world))[: int(self.s["incast_senders"])]
        if not senders:
            return None
        dist = self.dist
        share = max(nbytes // len(senders), 4096)
        one_buf, share_buf = self.buffer(share * len(senders)), self.buffer(share)
        recv_bufs = [self.buffer(share) for _ in senders] if self.rank == 0 else []
        one_s, many_s = [], []
        for rep in range(int(self.s["reps"])):
            if self.rank == 0:
                report_progress(f"incast: {len(senders)} senders, round {rep + 1}")
            self.agree("incast, one sender")
            t0 = time.perf_counter()
            if self.rank == 0:
                dist.recv(one_buf, senders[0])
                self.sync()
                one_s.append(time.perf_counter() - t0)
            elif self.rank == senders[0]:
                dist.send(one_buf, 0)
                self.sync()
            self.agree("incast, many senders")
            t0 = time.perf_counter()
            if self.rank == 0:
                works = [dist.irecv(buf, s) for buf, s in zip(recv_bufs, senders)]
                for w in works:
                    w.wait()
                self.sync()
                many_s.append(time.perf_counter() - t0)
            elif self.rank in senders:
                dist.send(share_buf, 0)
                self.sync()
        if self.rank != 0:
            return None
        return {"senders": len(senders), "bytes": share * len(senders), "one_s": statistics.median(one_s),
                "many_s": statistics.median(many_s)}

    def copy_rate(self) -> float:
        """This rank's device copy rate (bytes/s): the spec's ``copy``."""
        n = min(64 * 2**20, int(self.s["max_bytes"]))
        src, dst = self.buffer(n), self.buffer(n)
        dst.copy_(src)
        self.sync()
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            dst.copy_(src)
            self.sync()
            times.append(time.perf_counter() - t0)
        return n / max(statistics.median(times), 1e-9)


def _tier_sizes(shape: Shape, bw, settings: dict) -> dict:
    """Large message per tier: what the probe says takes ``target_s``, within [1 MiB, max_bytes]."""
    rates = {"scaleout": [], "scaleup": []}
    for i in range(len(bw)):
        for j in range(i + 1, len(bw)):
            v = bw[i][j]
            if v:
                rates["scaleup" if shape.server_of(i) == shape.server_of(j) else "scaleout"].append(v)
    out = {}
    for tier, rs in rates.items():
        want = statistics.median(rs) * float(settings["target_s"]) if rs else MIN_LARGE_BYTES
        out[tier] = int(min(max(want, MIN_LARGE_BYTES), int(settings["max_bytes"]))) // 4096 * 4096
    return out


def probe_rank(settings: dict | None = None) -> dict | None:
    """Run on every rank of an initialised process group; rank 0 returns the measurements
    (``collsched.netshape.fit``'s input), the others None.

    Args:
        settings: overrides of ``DEFAULT_SETTINGS`` (the same on every rank: checked).

    Returns:
        dict | None: on rank 0 ``{"world", "backend", "hosts", "mtu", "latency_s" (P×P, least one-way
        seconds; row i filled for j > i), "latency_median_s", "probe_bps",
        "shape", "sizes", "tiers", "incast", "copy_bps", "seconds"}``.

    Raises:
        ValueError: one rank, ranks started with different settings, or a shape the measurements
            cannot give (``ShapeError``: mismatched groups) — on every rank alike.
        MeasurementTimeout: the run passed ``max_time_s`` (every rank alike).
    """
    import torch.distributed as dist

    t_start = time.perf_counter()
    settings = check_settings(settings or {})
    world = dist.get_world_size()
    if world < 2:
        raise ValueError("collsched calibrate --network needs at least 2 ranks (a single rank has no network "
                         f"to measure), got a group of {world}")
    pr = _Probe(settings)
    me = {"settings": settings, "host": socket.gethostname(),
          "mtu": interface_mtu(os.environ.get("GLOO_SOCKET_IFNAME") or os.environ.get("NCCL_SOCKET_IFNAME"))}
    everyone = [None] * world
    dist.all_gather_object(everyone, me)
    for r, other in enumerate(everyone):
        if other["settings"] != settings:
            diff = sorted(k for k in settings if other["settings"].get(k) != settings[k])
            theirs = ", ".join(f"{k}={other['settings'].get(k)}" for k in diff)
            mine = ", ".join(f"{k}={settings[k]}" for k in diff)
            raise ValueError(f"mismatched settings: rank {r} was started with {theirs} but rank {pr.rank} with {mine}; "
                             "start every rank with the same options")
    lat_rows, lat_median_rows, bw_rows = pr.gather_rows(*pr.pairs_phase())
    # Rank 0 decides the shape and everyone uses its answer (or raises its error).
    decided = [None]
    if pr.rank == 0:
        try:
            shape = infer_shape(bw_rows, lat_rows, [e["host"] for e in everyone])
            decided = [("ok", shape.to_dict(), _tier_sizes(shape, bw_rows, settings))]
        except ShapeError as e:
            decided = [("error", str(e), None)]
    dist.broadcast_object_list(decided, src=0)
    status, what, sizes = decided[0]
    if status == "error":
        raise ShapeError(what)
    shape = Shape(**what)
    tiers = pr.tier_phase(shape, sizes)
    egress = pr.egress_phase(shape, sizes["scaleout"])
    incast = pr.incast_phase(shape, sizes["scaleout"]) if shape.servers >= 2 else None
    copy_bps = pr.copy_rate()
    pr.agree("the end")
    if pr.rank != 0:
        return None
    return {"world": world, "backend": pr.backend, "hosts": [e["host"] for e in everyone],
            "mtu": everyone[0]["mtu"], "latency_s": lat_rows, "latency_median_s": lat_median_rows,
            "probe_bps": bw_rows, "shape": shape.to_dict(),
            "sizes": sizes, "tiers": tiers, "egress": egress, "incast": incast, "copy_bps": copy_bps,
            "settings": settings, "seconds": time.perf_counter() - t_start}
