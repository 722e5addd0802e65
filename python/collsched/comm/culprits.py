"""Which rank caused a fault: every timeout or broken connection names it, on every survivor.

Two sources, combined after a wait failed:

- **The transport's address.** Gloo reports a dead peer as "Connection closed by peer
  [IP]:port" (or "Read error [IP]:port: Connection reset by peer"), an address no one can act
  on. Every rank publishes its own TCP ports in the store (`publish_local_ports`, when
  collsched first uses a group and after it creates its own groups), so a survivor maps the
  address to the rank that owned it. Gloo prints the port in network byte order on
  little-endian hosts, so both byte orders are tried; an address two ranks own names nobody.
- **A roll call.** Every rank whose wait failed (its n-th failure on this group: present
  ranks fail in the same call) signs in on the store with what its transport told it. A rank
  that never signs in did not reach the call, or is dead or stopped inside it: those are
  named, unless a signed-in rank's address names a dead one, which is named at once. A rank
  that signed in is alive, so an address naming it (a survivor that raised and exited) is
  not believed.
- **This host's view of its peers' processes.** Each rank also publishes its host, pid and
  process start time; of the ranks that never signed in, those this host sees stopped or gone
  are named alone (a survivor one call behind signs in late, and is alive).

The roll call waits until every member signed in, or an address named a rank that did not
sign in, or ``started + timeout + GRACE_S`` (present ranks time out within the same call
timeout). It runs on a thread of its own, abandoned past that deadline (+ ``STORE_SLACK_S``),
because the store's own timeouts do not hold when its host is stopped. Nothing is added to
calls that do not fail; the ports are published once per group.
"""
from __future__ import annotations

import ipaddress
import os
import re
import socket
import sys
import threading
import time
import weakref

from collsched.comm.errors import CollschedCommError, CommTimeoutError, PeerFailureError, rank_ranges

GRACE_S = 0.5  # how long past the call's timeout a survivor waits for the others to sign in
MIN_WAIT_S = 0.3  # a rank that fails past that deadline still waits this long for the others
EVIDENCE_QUIET_S = 0.2  # once an address named a dead rank: wait this long for more sign-ins
POLL_S = 0.02
STORE_SLACK_S = 0.3  # past the deadline, how long the store may take to answer the last question

PORTS_KEY = "collsched/ports"
PROCS_KEY = "collsched/procs"  # "rank=host/pid/start;": a peer on this host can be looked at directly
_ADDRESS = re.compile(r"\[([0-9A-Fa-f.:]+)\]:(\d+)")

_LOCK = threading.Lock()
_FAULTS: dict[str, int] = {}  # failures seen per group (the roll call's round)
_PUBLISHED_FOR: "weakref.WeakSet" = weakref.WeakSet()
_published_ports: set = set()
_published_proc: list = []  # [True] once this process's identity is in the store
# The group `note_group` saw last: None (the default group) or a weak reference (a strong one
# would keep a destroyed group's Gloo threads alive; see groups.py); a sentinel at first.
_last_noted: list = [object()]


def local_tcp_ports() -> set[tuple[str, int]]:
    """``(ip, port)`` of every TCP socket this process holds (listening or connected), from
    ``/proc`` (Linux; elsewhere an empty set, and faults are named by the roll call alone)."""
    inodes = set()
    try:
        for fd in os.listdir("/proc/self/fd"):
            try:
                link = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    except OSError:
        return set()
    out = set()
    for table, family in (("/proc/self/net/tcp", socket.AF_INET), ("/proc/self/net/tcp6", socket.AF_INET6)):
        try:
            with open(table) as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[9] in inodes:
                hexip, hexport = fields[1].split(":")
                out.add((_proc_ip(hexip, family), int(hexport, 16)))
    return out


def _proc_ip(hexip: str, family: int) -> str:
    """``/proc/net/tcp*`` prints each 32-bit word of the address in host byte order."""
    raw = bytes.fromhex(hexip)
    if sys.byteorder == "little":
        raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return _normal_ip(socket.inet_ntop(family, raw))


def _normal_ip(ip: str) -> str:
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return ip
    if addr.version == 6 and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return str(addr)


def _store_and_rank():
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    return c10d._get_default_store(), dist.get_rank()


def publish_local_ports() -> None:
    """Append this process's new TCP ports to the store, under its global rank (after a group
    is created, so its connections are among them). Best effort: a failure only means later
    faults are named by the roll call alone."""
    try:
        store, me = _store_and_rank()
        with _LOCK:
            new = local_tcp_ports() - _published_ports
            if not new:
                return
            _published_ports.update(new)
            first = not _published_proc
            _published_proc.append(True)
        if first:
            store.append(PROCS_KEY, f"{me}={socket.gethostname()}/{os.getpid()}/{process_start(os.getpid())};")
        store.append(PORTS_KEY, f"{me}=" + ",".join(f"{ip}|{port}" for ip, port in sorted(new)) + ";")
    except Exception:  # no default group or store: nothing to publish to
        return


def process_start(pid: int) -> int | None:
    """The start time of process `pid` in clock ticks since boot (``/proc``), which tells a
    process from a later one that got its pid; None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def process_state(pid: int, start: int | None) -> str:
    """"gone" (no such process, a zombie, or another process that got its pid), "stopped"
    (SIGSTOP or a debugger), "alive", or "" where it cannot be told (no ``/proc``)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return "gone" if os.path.isdir("/proc/self") else ""
    except OSError:
        return ""
    if fields[0] in ("Z", "X") or (start is not None and int(fields[19]) != start):
        return "gone"
    return "stopped" if fields[0] in ("T", "t") else "alive"


def local_states(table: str, members: list[int]) -> dict[int, str]:
    """{group rank: `process_state`} of the members on this host, from `table` (the store's
    ``PROCS_KEY``)."""
    host, out = socket.gethostname(), {}
    for entry in filter(None, table.split(";")):
        rank, _, ident = entry.partition("=")
        parts = ident.split("/")
        if len(parts) != 3 or parts[0] != host or not rank.isdigit() or int(rank) not in members:
            continue
        start = int(parts[2]) if parts[2].isdigit() else None
        state = process_state(int(parts[1]), start) if parts[1].isdigit() else ""
        if state:
            out[members.index(int(rank))] = state
    return out


def note_group(group) -> None:
    """Publish this process's ports the first time collsched uses `group` (its Gloo
    connections exist by then); a set look-up on every later call."""
    last = _last_noted[0]  # a training loop calls on one group: no look-up at all
    if (last is None) if group is None else (type(last) is weakref.ref and last() is group):
        return
    import torch.distributed as dist

    g = dist.GroupMember.WORLD if group is None else group
    try:
        if g in _PUBLISHED_FOR:
            _last_noted[0] = None if group is None else weakref.ref(group)
            return
        _PUBLISHED_FOR.add(g)
        _last_noted[0] = None if group is None else weakref.ref(group)
    except TypeError:  # not weak-referenceable: publish every time (cheap when nothing is new)
        pass
    publish_local_ports()


def peer_address(text: str) -> tuple[str, int] | None:
    """The ``[IP]:port`` a transport error names, if any."""
    m = _ADDRESS.search(text or "")
    if not m:
        return None
    return _normal_ip(m.group(1)), int(m.group(2))


def _swap16(port: int) -> int:
    return ((port & 0xFF) << 8) | (port >> 8)


def owner_of(address: tuple[str, int], table: str) -> int | None:
    """The global rank whose published ports (`table`, the store's ``PORTS_KEY``) hold
    `address`, in either byte order of the port; None when no rank or several do."""
    ip, port = address
    ports = {port, _swap16(port)}
    owners = set()
    for entry in table.split(";"):
        rank, _, items = entry.partition("=")
        if not items:
            continue
        for item in items.split(","):
            pip, _, pport = item.rpartition("|")
            if pport.isdigit() and int(pport) in ports and (pip == ip or pip in ("0.0.0.0", "::")):
                owners.add(int(rank))
    return owners.pop() if len(owners) == 1 else None


def _suspect(exc: BaseException, store, members: list[int]) -> int | None:
    """The group rank that the transport's address in `exc` belongs to, if one does."""
    address = peer_address(getattr(exc, "transport_text", "") or str(exc))
    if address is None or not store.check([PORTS_KEY]):
        return None
    owner = owner_of(address, store.get(PORTS_KEY).decode(errors="replace"))
    return members.index(owner) if owner in members else None


def _membership(group) -> tuple:
    """(the default store, the global rank of each member of `group`, this rank in `group`)."""
    import torch.distributed as dist

    from collsched.comm.groups import global_ranks

    return _store_and_rank()[0], global_ranks(group), dist.get_rank(group)


def _group_id(members: list[int]) -> str:
    return "-".join(map(str, members)) if len(members) <= 16 else f"{members[0]}-{members[-1]}x{len(members)}"


def _roll_call(store, key: str, world: int, deadline: float, into: dict) -> None:
    """Sign-ins under `key` (``"rank:suspect,"`` appended by each failed rank) until every
    member came, an address named a rank that did not come (and none came for
    ``EVIDENCE_QUIET_S``), or `deadline`. Keeps {group rank: the rank its address named} in
    ``into["present"]`` as they come, and sets ``into["done"]`` at the end."""
    present: dict[int, int | None] = {}
    changed = time.monotonic()
    seen = ""
    while True:
        text = store.get(key).decode()
        if text != seen:
            seen, changed = text, time.monotonic()
            for item in filter(None, text.split(",")):
                r, _, s = item.partition(":")
                present[int(r)] = int(s) if s else None
            into["present"] = dict(present)
        now = time.monotonic()
        named = {s for s in present.values() if s is not None} - set(present)
        if len(present) >= world or (named and now - changed >= EVIDENCE_QUIET_S) or now >= deadline:
            into["done"] = True
            return
        time.sleep(POLL_S)


def verdict(present: dict, world: int, states: dict | None = None) -> tuple[str, list[int]]:
    """Who the roll call names: ``("dead", ranks)`` that an address named and that never
    signed in; else ``("missing", ranks)`` that never signed in, only those whose process is
    gone or stopped when this host can see some (a survivor that signed in late, one call
    behind, is alive); else ``("", [])``.

    Args:
        present: {group rank that signed in: the group rank its transport's address named, or None}.
        world: the group's size.
        states: {group rank: "gone" / "stopped" / "alive"} of the members on this host.
    """
    dead = sorted({s for s in present.values() if s is not None} - set(present))
    if dead:
        return "dead", dead
    missing = [r for r in range(world) if r not in present]
    down = [r for r in missing if (states or {}).get(r) in ("gone", "stopped")]
    if down:
        return "missing", down
    return ("missing", missing) if missing else ("", [])


def name_culprits(exc: CollschedCommError, group, started: float, timeout_s: float) -> CollschedCommError:
    """After a wait of a call on `group` failed: the same error with the rank(s) behind it
    named (``exc`` unchanged when they cannot be told).

    Args:
        exc: the ``CommTimeoutError`` or ``PeerFailureError`` the wait raised.
        group: the caller's process group (None: the default group).
        started: ``time.monotonic()`` when the failed stage began on this rank.
        timeout_s: the stage's timeout in seconds.

    Returns:
        ``PeerFailureError`` when an address named a rank that never signed in ("rank 2
        failed: its connection closed"), ``CommTimeoutError`` when ranks never came to the
        call ("rank 2 never reached this call or stopped doing its part"); ``ranks`` holds the
        named group ranks.
    """
    if getattr(exc, "ranks", None) is not None:
        return exc
    try:
        store, members, me = _membership(group)
    except Exception:  # no default group or store: keep the transport's own error
        return exc
    gid = _group_id(members)
    with _LOCK:
        n = _FAULTS[gid] = _FAULTS.get(gid, 0) + 1
    deadline = max(started + timeout_s + GRACE_S, time.monotonic() + MIN_WAIT_S)
    found: dict = {}

    def sign_in_and_wait() -> None:
        try:
            key = f"collsched/fault/{gid}/{n}"
            suspect = _suspect(exc, store, members)
            store.append(key, f"{me}:{'' if suspect is None or suspect == me else suspect},")
            if store.check([PROCS_KEY]):
                found["procs"] = store.get(PROCS_KEY).decode(errors="replace")
            _roll_call(store, key, len(members), deadline, found)
        except Exception:  # the store went away: keep the transport's own error
            pass

    # The store's own timeouts do not hold when its host is stopped (SIGSTOP: the connection
    # stays open, the reply never comes), so the roll call runs on a thread of its own and is
    # abandoned past the deadline; it then stays blocked in the store, which is no longer used.
    helper = threading.Thread(target=sign_in_and_wait, name="collsched-roll-call", daemon=True)
    helper.start()
    helper.join(max(0.0, deadline - time.monotonic()) + STORE_SLACK_S)
    present = found.get("present")
    if present is None:
        return exc
    states = local_states(found.get("procs", ""), members) if len(present) < len(members) else {}
    kind, ranks = verdict(present, len(members), states)
    if kind == "missing" and not found.get("done") and any(states.get(r) not in ("gone", "stopped") for r in ranks):
        # The roll call did not end in time (an overloaded host, a slow store): ranks not yet
        # signed in may only be late, so only those seen stopped or gone here are named.
        return exc
    if kind == "dead":
        seen_by = sorted(r for r, s in present.items() if s in ranks)
        its = "its connection" if len(ranks) == 1 else "their connections"
        out = PeerFailureError(f"{exc}; {rank_ranges(ranks)} failed: {its} closed (seen by "
                               f"{rank_ranges(seen_by)}), the process probably died")
    elif kind == "missing":
        # Gloo closes a pair whose wait timed out: the peer that sees it closed reads of a
        # healthy rank that gave up first, not of the culprit.
        gave_up = present.get(me)
        why = (f" (rank {gave_up} closed the connection when its own wait timed out or failed)"
               if gave_up is not None else "")
        seen = sorted({states[r] for r in ranks if r in states})
        host = f" (on this host: {' / '.join(seen)})" if seen else ""
        out = CommTimeoutError(f"{exc}{why}; {rank_ranges(ranks)} never reached this call or stopped doing its part"
                               f"{host} ({rank_ranges(sorted(present))} waited): dead, stopped, stuck, or making "
                               "other collective calls")
    else:
        return exc
    out.ranks = ranks
    out.transport_text = getattr(exc, "transport_text", "")
    return out


class culprits_named:
    """``with culprits_named(group, timeout_s):`` runs a stage whose waits are bounded by
    `timeout_s` (counted from `started`, a ``time.monotonic()``; default: entering the block);
    a ``CommTimeoutError`` or ``PeerFailureError`` leaving it names the rank(s) behind it
    (`name_culprits`). A class, not a generator: it wraps every call's wait."""

    __slots__ = ("group", "timeout_s", "started")

    def __init__(self, group, timeout_s: float, started: float | None = None):
        self.group, self.timeout_s, self.started = group, timeout_s, started

    def __enter__(self):
        if self.started is None:
            self.started = time.monotonic()
        return self

    def __exit__(self, kind, exc, tb):
        if isinstance(exc, (CommTimeoutError, PeerFailureError)):
            raise name_culprits(exc, self.group, self.started, self.timeout_s) from None
        return False


__all__ = ["name_culprits", "verdict", "culprits_named", "note_group", "publish_local_ports", "peer_address",
           "owner_of", "local_tcp_ports", "process_state", "local_states"]
