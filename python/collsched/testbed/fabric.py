"""A two-tier fabric from network namespaces on one Linux machine (needs root and iproute2).

Wiring (S servers × G ranks; one network namespace per rank, one for the core switch)::

    rank ns  <prefix>-r<r>                        switch ns  <prefix>-sw
    ┌──────────────────────────┐                 ┌──────────────────────────┐
    │ nic 10.99.0.<r+1>/24 ────┼── veth (NIC) ───┼── n<r> ── br0 (bridge) ─ │
    │   htb: uplink at --nic   │                 │   htb: downlink at --nic │
    │ u<p> ── veth (scale-up) ─┼── to rank p of the same server (/32 route) │
    └──────────────────────────┘                 └──────────────────────────┘

Every rank owns one emulated NIC (a veth into the bridge that plays a non-blocking core
switch; with ``nics`` < ``gpus``, ranks g ≡ k mod nics share NIC k of their server instead,
through a namespace of its own that bridges them to one shaped veth into the core), shaped to the NIC rate in both directions (the rank's egress = uplink, the
bridge's egress towards the rank = downlink) by htb with a bounded bfifo queue, so
incast really queues and drops and TCP backs off. Ranks of one server are joined pairwise
by scale-up veths (unshaped, or shaped to ``--scaleup``) with a /32 route to the peer's
NIC address, so Gloo, bound to ``nic`` (``GLOO_SOCKET_IFNAME``), reaches same-server
peers over the scale-up path and everyone else through its own NIC. Addresses exist only
inside these namespaces (10.99.0.0/24 in each run's own namespaces; nothing routes
outside them), and every name carries the run's prefix ``collsched-<pid>-<hex>`` so
concurrent runs never collide and ``clean`` can tell a live run's leftovers from a dead one's.
"""
from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass

from collsched.units import parse_bandwidth, parse_bytes

NS_PREFIX = "collsched-"
NETNS_DIR = "/var/run/netns"
SUBNET = "10.99.0"  # inside the run's namespaces only
STORE_PORT = 29500  # rank 0's rendezvous store; every run has its own namespaces, so no clash

# What this host can emulate. A rank is a Python process moving bytes through TCP over
# veth; on a 2-core host the CPU, not the shaper, binds beyond these (docs/testbed.md).
MIN_NIC_BPS = 125_000  # 1 Mbit/s: below this htb's rate accounting and TCP timers dominate
MAX_NIC_BPS = 125_000_000  # 1 Gbit/s per emulated NIC
MAX_RANKS_PER_CORE = 8
# Shaped traffic in all (ranks × NIC rate) per CPU core: above WARN the 2-core host measured
# CPU-bound (executed / bound grew from 1.2 to 2×, docs/results/2026-11-26-testbed.md); above MAX it is refused.
WARN_AGGREGATE_BPS_PER_CORE = 200_000_000  # 1.6 Gbit/s
MAX_AGGREGATE_BPS_PER_CORE = 500_000_000  # 4 Gbit/s
MIN_QUEUE = 16 * 1024  # a few full frames plus one GSO burst
MAX_QUEUE = 64 * 2**20
GOODPUT = 0.95  # TCP payload per shaped byte on 1500-byte frames (1448/1514 ≈ 0.956), measured 0.95


class TestbedError(RuntimeError):
    """The testbed cannot run here or with these knobs; the message is one line naming the limit."""

    __test__ = False  # not a pytest test class


def htb_burst(bps: int) -> int:
    """Bytes htb may send at line speed: at least 2 ms at the rate (kernel timer slack)."""
    return max(16 * 1024, bps // 500)


def _bits(bps: int) -> str:
    return f"{bps * 8}bit"


@dataclass(frozen=True)
class FabricSpec:
    """The knobs of one fabric.

    Args:
        servers: emulated servers S (≥ 1).
        gpus: ranks per server G (≥ 1); one emulated NIC each.
        nic_bps: NIC rate per direction, bytes/s of shaped wire (htb rate).
        queue_bytes: bfifo limit of every shaped queue (bytes).
        scaleup_bps: scale-up rate per direction between two ranks of a server, or None (unshaped).
        rto_min_ms: TCP's minimum retransmission timeout on every route (``ip route ... rto_min``),
            or None for the kernel's 200 ms.
        nics: NICs per server (None = one per rank); rank g of a server uses NIC g mod nics, as in
            the Cluster model.
    """

    servers: int
    gpus: int
    nic_bps: int
    queue_bytes: int = 2**20
    scaleup_bps: int | None = None
    rto_min_ms: int | None = None
    nics: int | None = None

    @property
    def ranks(self) -> int:
        return self.servers * self.gpus

    @property
    def nics_per_server(self) -> int:
        return self.gpus if self.nics is None else self.nics

    @property
    def shared(self) -> bool:
        """Whether ranks share NICs (fewer NICs than ranks per server)."""
        return self.nics_per_server < self.gpus

    def cpu_warning(self) -> str | None:
        """A line saying the host, not the shaper, may bind at these knobs (None when it should not)."""
        cores = os.cpu_count() or 1
        agg = self.servers * self.nics_per_server * self.nic_bps
        if agg <= WARN_AGGREGATE_BPS_PER_CORE * cores:
            return None
        return (f"warning: {agg * 8 / 1e9:g} Gbit/s of shaped traffic on {cores} cores: above "
                f"{WARN_AGGREGATE_BPS_PER_CORE * cores * 8 / 1e9:g} Gbit/s this host measured CPU-bound, so times "
                "say more about the host than the fabric (docs/testbed.md)")

    @classmethod
    def from_knobs(cls, servers: int, gpus: int, nic: str | int, queue: str | int = "1MiB",
                   scaleup: str | int | None = "unshaped", latency: str | None = None,
                   rto_min: str | None = None, nics: int | None = None) -> "FabricSpec":
        """Parse and check CLI-style knobs; raise TestbedError naming the limit that is exceeded."""
        if latency:
            raise TestbedError(f"--latency {latency!r}: this kernel has no netem qdisc, so latency cannot be emulated; "
                               "per-transfer latency is measured (calibration), not set")
        if isinstance(servers, bool) or not isinstance(servers, int) or servers < 1:
            raise TestbedError(f"--servers must be a positive integer, got {servers!r}")
        if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
            raise TestbedError(f"--gpus must be a positive integer, got {gpus!r}")
        cores = os.cpu_count() or 1
        max_ranks = min(64, MAX_RANKS_PER_CORE * cores)
        if servers * gpus > max_ranks:
            raise TestbedError(f"{servers}×{gpus} = {servers * gpus} ranks is too many for this host: at most {max_ranks} "
                               f"({MAX_RANKS_PER_CORE} per CPU core × {cores} cores, 64 addresses)")
        try:
            nic_bps = parse_bandwidth(nic)
        except ValueError as e:
            raise TestbedError(f"--nic: {e}") from None
        if not MIN_NIC_BPS <= nic_bps <= MAX_NIC_BPS:
            raise TestbedError(f"--nic {nic}: this host emulates NIC rates from {MIN_NIC_BPS * 8 // 10**6} Mbit/s to "
                               f"{MAX_NIC_BPS * 8 // 10**6} Mbit/s per NIC (beyond that the CPU, not the shaper, binds)")
        if nics is not None and (isinstance(nics, bool) or not isinstance(nics, int) or not 1 <= nics <= gpus):
            raise TestbedError(f"--nics must be an integer from 1 to --gpus ({gpus}), got {nics!r}")
        n_nics = servers * (gpus if nics is None else nics)
        agg, cap = n_nics * nic_bps, MAX_AGGREGATE_BPS_PER_CORE * cores
        if agg > cap:
            raise TestbedError(f"--nic {nic} on {n_nics} NICs is {agg * 8 / 1e9:g} Gbit/s of shaped traffic; this "
                               f"host ({cores} cores) emulates at most {cap * 8 / 1e9:g} Gbit/s in all (beyond that the CPU, "
                               "not the shaper, binds)")
        try:
            q = parse_bytes(queue)
        except ValueError as e:
            raise TestbedError(f"--queue: {e}") from None
        if not MIN_QUEUE <= q <= MAX_QUEUE:
            raise TestbedError(f"--queue {queue}: must be between {MIN_QUEUE // 1024} KiB and {MAX_QUEUE >> 20} MiB")
        up = None
        if scaleup not in (None, "", "unshaped", "none"):
            try:
                up = parse_bandwidth(scaleup)
            except ValueError as e:
                raise TestbedError(f"--scaleup: {e} (or 'unshaped')") from None
            if up < nic_bps:
                raise TestbedError(f"--scaleup {scaleup}: the scale-up path must be at least the NIC rate ({nic})")
            if up > 4 * MAX_NIC_BPS:
                raise TestbedError(f"--scaleup {scaleup}: at most {4 * MAX_NIC_BPS * 8 // 10**9} Gbit/s can be shaped "
                                   "here; use 'unshaped' for a faster path")
        rto = None
        if rto_min not in (None, "", "default"):
            m = re.fullmatch(r"\s*(\d+)\s*ms\s*", str(rto_min))
            if not m or not 1 <= int(m.group(1)) <= 200:
                raise TestbedError(f"--rto-min {rto_min!r}: expected 1ms to 200ms, or 'default' (the kernel's 200 ms)")
            rto = int(m.group(1))
        return cls(servers, gpus, nic_bps, q, up, rto, None if nics in (None, gpus) else nics)


def _run(cmd: list[str], stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=60)
    if check and p.returncode != 0:
        err = (p.stderr or p.stdout).strip().splitlines()
        raise TestbedError(f"{' '.join(cmd[:4])} failed: {err[-1] if err else 'exit ' + str(p.returncode)}")
    return p


def check_available() -> None:
    """Raise TestbedError (one line) unless this process can build a fabric: root, iproute2, tc, namespaces."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        raise TestbedError("the testbed needs root (network namespaces, veths and tc); run as root or use "
                           "`collsched demo`/`bench` on plain local Gloo ranks")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            raise TestbedError(f"the testbed needs iproute2's `{tool}`, which is not on PATH")
    name = f"{NS_PREFIX}{os.getpid()}-probe{secrets.token_hex(2)}"
    with signals_deferred():  # a Ctrl-C between add and del would leave the probe behind
        p = _run(["ip", "netns", "add", name], check=False)
        if p.returncode == 0:
            _run(["ip", "netns", "del", name], check=False)
    if p.returncode != 0:
        raise TestbedError(f"network namespaces are unavailable here: {(p.stderr or '').strip() or 'ip netns add failed'}")


DEFERRED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def signals_deferred():
    """Hold SIGINT, SIGTERM and SIGHUP until the block is done, then deliver them as usual.

    Blocking them in this thread is not enough: a signal sent to the process goes to any thread
    that does not block it (rich's refresh thread, torch's pools), and CPython then runs the
    Python handler in the main thread anyway, raising KeyboardInterrupt inside the block. So
    the handlers only record the signal while the block runs; afterwards the previous handlers
    are back and each recorded signal is raised again. The mask stays blocked too, so processes
    forked or spawned inside the block (ranks, `ip`) start with these signals held.
    Off the main thread (handlers cannot be set there) only the mask is used.
    """
    got: list[int] = []
    old_handlers = {}
    try:
        # Recorders first, then the mask: no KeyboardInterrupt can come between the two.
        try:
            for s in DEFERRED_SIGNALS:
                old_handlers[s] = signal.signal(s, lambda signum, _frame: got.append(signum))
        except ValueError:  # not the main thread
            pass
        old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, DEFERRED_SIGNALS)
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)  # pending ones reach the recorders now
    finally:
        for s, h in old_handlers.items():
            signal.signal(s, signal.SIG_DFL if h is None else h)  # None: set outside Python
        for s in dict.fromkeys(got):
            signal.raise_signal(s)  # to this thread: the restored handler runs (KeyboardInterrupt, ...)


def new_prefix() -> str:
    """A run prefix: the owner's pid (so `clean` knows whether it is alive) and a random tag."""
    return f"{NS_PREFIX}{os.getpid()}-{secrets.token_hex(3)}"


def rank_addr(rank: int) -> str:
    return f"{SUBNET}.{rank + 1}"


class Fabric:
    """A built fabric; ``with Fabric(spec) as f:`` builds it and always tears it down.

    Attributes:
        spec: the knobs.
        prefix: every namespace name starts with it.
    """

    def __init__(self, spec: FabricSpec, prefix: str | None = None):
        self.spec = spec
        self.prefix = prefix or new_prefix()
        self.created: list[str] = []

    def rank_ns(self, rank: int) -> str:
        return f"{self.prefix}-r{rank}"

    @property
    def switch_ns(self) -> str:
        return f"{self.prefix}-sw"

    def nic_ns(self, server: int, nic: int) -> str:
        """Namespace of a shared NIC (only when ranks share NICs): a bridge between its ranks and the core."""
        return f"{self.prefix}-s{server}n{nic}"

    def namespaces(self) -> list[str]:
        s = self.spec
        shared = [self.nic_ns(v, k) for v in range(s.servers) for k in range(s.nics_per_server)] if s.shared else []
        return [self.switch_ns] + [self.rank_ns(r) for r in range(s.ranks)] + shared

    def _shape(self, dev: str, bps: int) -> list[str]:
        # htb, not tbf: htb accounts veth's GSO super-packets by bytes instead of dropping them.
        burst = htb_burst(bps)
        return [f"qdisc add dev {dev} root handle 1: htb default 1",
                f"class add dev {dev} parent 1: classid 1:1 htb rate {_bits(bps)} ceil {_bits(bps)} "
                f"burst {burst} cburst {burst} quantum 1514",
                f"qdisc add dev {dev} parent 1:1 handle 10: bfifo limit {self.spec.queue_bytes}"]

    def build(self) -> "Fabric":
        s = self.spec
        G = s.gpus
        root = []
        for ns in self.namespaces():
            root.append(f"netns add {ns}")
        K = s.nics_per_server
        for r in range(s.ranks):
            if s.shared:  # rank → its server's NIC namespace (unshaped); that NIC → the core (shaped)
                root.append(f"link add nic netns {self.rank_ns(r)} type veth peer name r{r} "
                            f"netns {self.nic_ns(r // G, (r % G) % K)}")
            else:
                root.append(f"link add nic netns {self.rank_ns(r)} type veth peer name n{r} netns {self.switch_ns}")
        for v in range(s.servers if s.shared else 0):
            for k in range(K):
                root.append(f"link add wire netns {self.nic_ns(v, k)} type veth peer name n{v * K + k} "
                            f"netns {self.switch_ns}")
        for r in range(s.ranks):
            for p in range(r + 1, (r // G + 1) * G):
                root.append(f"link add u{p} netns {self.rank_ns(r)} type veth peer name u{r} netns {self.rank_ns(p)}")
        # Record the names before creating anything, so a half-built fabric is torn down too.
        self.created = self.namespaces()
        _run(["ip", "-batch", "-"], "\n".join(root) + "\n")
        sw_ip = ["link add br0 type bridge", "link set br0 up"]
        sw_tc = []
        for n in range(s.servers * K if s.shared else s.ranks):
            sw_ip += [f"link set n{n} master br0", f"link set n{n} up"]
            sw_tc += self._shape(f"n{n}", s.nic_bps)
        _run(["ip", "-n", self.switch_ns, "-batch", "-"], "\n".join(sw_ip) + "\n")
        _run(["tc", "-n", self.switch_ns, "-batch", "-"], "\n".join(sw_tc) + "\n")
        for v in range(s.servers if s.shared else 0):
            for k in range(K):
                ports = [r for r in range(v * G, (v + 1) * G) if (r % G) % K == k]
                ip = ["link add br0 type bridge", "link set br0 up", "link set dev wire master br0", "link set dev wire up"]
                for r in ports:
                    ip += [f"link set r{r} master br0", f"link set r{r} up"]
                _run(["ip", "-n", self.nic_ns(v, k), "-batch", "-"], "\n".join(ip) + "\n")
                _run(["tc", "-n", self.nic_ns(v, k), "-batch", "-"], "\n".join(self._shape("wire", s.nic_bps)) + "\n")
        for r in range(s.ranks):
            ns = self.rank_ns(r)
            rto = f" rto_min {s.rto_min_ms}ms" if s.rto_min_ms is not None else ""
            ip = ["link set lo up", f"addr add {rank_addr(r)}/24 dev nic", "link set nic up"]
            if rto:
                ip.append(f"route replace {SUBNET}.0/24 dev nic proto kernel scope link src {rank_addr(r)}{rto}")
            tc = [] if s.shared else self._shape("nic", s.nic_bps)
            for p in range((r // G) * G, (r // G + 1) * G):
                if p == r:
                    continue
                ip += [f"link set u{p} up", f"route add {rank_addr(p)}/32 dev u{p}{rto}"]
                if s.scaleup_bps is not None:
                    tc += self._shape(f"u{p}", s.scaleup_bps)
            _run(["ip", "-n", ns, "-batch", "-"], "\n".join(ip) + "\n")
            if tc:
                _run(["tc", "-n", ns, "-batch", "-"], "\n".join(tc) + "\n")
        return self

    def teardown(self) -> None:
        """Delete every namespace of this run (their veths, bridge and qdiscs go with them). Idempotent."""
        if self.created:
            # A (second) Ctrl-C must not cut the teardown short: it would kill `ip` half-way and
            # leave namespaces behind. It waits until the namespaces are gone, then is raised.
            with signals_deferred():
                delete_namespaces(self.created)
                self.created = []

    def __enter__(self) -> "Fabric":
        try:
            return self.build()
        except BaseException:
            self.teardown()
            raise

    def __exit__(self, *exc) -> None:
        self.teardown()


def list_namespaces() -> list[str]:
    """Names of every network namespace whose name starts with ``collsched-``."""
    try:
        names = os.listdir(NETNS_DIR)
    except OSError:
        return []
    return sorted(n for n in names if n.startswith(NS_PREFIX))


def delete_namespaces(names: list[str]) -> None:
    existing = set(list_namespaces())
    todo = [n for n in names if n in existing]
    if todo:
        # -force: go on past a name another cleaner already removed.
        _run(["ip", "-force", "-batch", "-"], "".join(f"netns del {n}\n" for n in todo), check=False)


_OWNER = re.compile(rf"^{re.escape(NS_PREFIX)}(\d+)-")


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a running process. A zombie (state Z in /proc/PID/stat: it died and
    its parent has not reaped it yet, as right after ``timeout -s KILL``) counts as dead: it
    will never tear its fabric down."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
    except FileNotFoundError:
        return False
    except OSError:  # no /proc here: fall back to the signal probe, which sees zombies as alive
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    # "PID (comm) S ...": comm may hold spaces and parentheses, so the state follows the last ')'.
    state = stat[stat.rfind(")") + 1:].split()[:1]
    return state not in (["Z"], ["X"])


def _command(pid: int) -> str:
    """The process's command name (for telling the user who keeps a fabric), or '?'."""
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as f:
            return f.read().strip() or "?"
    except OSError:
        return "?"


# The ranks' scratch folders (testbed/launch.py): the owner's pid after the prefix, like a namespace.
TMP_PREFIX = "collsched-testbed-"
_TMP_OWNER = re.compile(rf"^{re.escape(TMP_PREFIX)}(\d+)-")


def new_jobdir() -> str:
    """A fresh scratch folder for one run's ranks, named with this process's pid so that
    ``clean`` can remove it once this process is dead (a SIGKILL skips every ``finally``)."""
    return tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{os.getpid()}-")


@dataclass
class CleanReport:
    """What :func:`clean` did.

    Attributes:
        removed: namespace names removed (their owners were dead, or ``all_runs``).
        kept: ``{run prefix: why}`` for runs left alone (their owner is alive).
        removed_dirs: scratch folders removed from the temp directory.
        kept_dirs: ``{folder: why}`` for scratch folders left alone.
    """

    removed: list[str]
    kept: dict[str, str]
    removed_dirs: list[str]
    kept_dirs: dict[str, str]


def _why_kept(pid: int) -> str:
    return f"its owner, pid {pid} ({_command(pid)}), is still running"


def clean(all_runs: bool = False, tmpdir: str | None = None) -> CleanReport:
    """Remove leftover namespaces and scratch folders of earlier runs.

    Without ``all_runs`` a run whose owning process is still alive is left alone (a
    concurrent run keeps its fabric); a zombie owner counts as dead. Namespaces without an
    owner pid are removed; scratch folders without one are kept (a run of an older version
    may still be using them) unless ``all_runs``.

    Args:
        all_runs: also remove the fabrics and folders of live runs.
        tmpdir: where the scratch folders are (default: ``tempfile.gettempdir()``).

    Returns:
        CleanReport: what was removed and what was kept, with the reason.
    """
    report = CleanReport([], {}, [], {})
    for n in list_namespaces():
        m = _OWNER.match(n)
        if all_runs or m is None or not _alive(int(m.group(1))):
            report.removed.append(n)
        else:
            prefix = n[:n.index("-", m.end())] if "-" in n[m.end():] else n
            report.kept[prefix] = _why_kept(int(m.group(1)))
    delete_namespaces(report.removed)
    tmpdir = tmpdir or tempfile.gettempdir()
    try:
        names = sorted(os.listdir(tmpdir))
    except OSError:
        names = []
    for n in names:
        if not n.startswith(TMP_PREFIX):
            continue
        path = os.path.join(tmpdir, n)
        m = _TMP_OWNER.match(n)
        if m is None and not all_runs:
            # Named by an older collsched, without the owner's pid: it may belong to a run going on now.
            report.kept_dirs[path] = "no owner pid in its name (an older collsched made it)"
            continue
        if all_runs or not _alive(int(m.group(1))):
            shutil.rmtree(path, ignore_errors=True)
            if not os.path.exists(path):
                report.removed_dirs.append(path)
            else:
                report.kept_dirs[path] = "could not be removed (permissions?)"
        else:
            report.kept_dirs[path] = _why_kept(int(m.group(1)))
    return report
