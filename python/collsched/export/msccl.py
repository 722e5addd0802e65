"""MSCCL XML export and import of Plans.

``to_xml(plan)`` writes the XML that the MSCCL executor in NCCL
(msccl-executor-nccl) and RCCL load; ``from_xml(xml, bytes)`` reads such an XML
back into a Plan, with the executor's semantics (each threadblock runs its
steps in order), so it can be verified and simulated.

How a Plan maps onto threadblocks (docs/msccl.md has the details and sources):

* One chunk = the gcd of every segment offset and length and every buffer size,
  so every segment is a whole number of chunks; ``nchunksperloop`` is the larger
  of the input and output sizes in chunks, which is what the runtime divides the
  user's buffer by.
* A transfer src→dst on channel c becomes ``s`` steps in src's threadblock
  (send=dst, chan=c) and ``r`` (copy) or ``rrc`` (reduce-sum, in place) steps in
  dst's threadblock (recv=src, chan=c), one step per segment (split at 71
  chunks). Local transfers become ``cpy``/``re`` steps in a local threadblock.
  Every threadblock lists its steps in plan transfer order, so the FIFO order of
  a (channel, peer) connection is the same on both ends and no step waits for a
  later transfer: the schedule cannot deadlock.
* A transfer that depends on an earlier one of the same (src, dst) pair continues
  its stream (a tree's next piece on that edge) on the same channel; a pair's other
  streams (other trees, other steps) get channels of their own, up to ``channels``
  (local copies and reductions: lanes, likewise); a threadblock that would exceed
  64 steps also spills to the next channel.
* Plan dependencies become ``depid``/``deps`` on the first step of the dependent
  transfer on each rank it touches (extra ones as ``nop`` steps before it), and
  ``hasdep="1"`` on the step waited for.
"""
from __future__ import annotations

import json
import math
import re
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from collsched.export import rules as R


class _LimitError(ValueError):
    """The XML would exceed one of the executor's size limits (threadblocks, nodes,
    steps): fewer channels may fit."""

_BUF_LETTER = {"input": "i", "output": "o", "scratch": "s"}
_LETTER_BUF = {v: k for k, v in _BUF_LETTER.items()}


def _plan_dict(plan) -> dict:
    if isinstance(plan, dict):
        return plan
    if hasattr(plan, "to_json"):
        return json.loads(plan.to_json())
    raise TypeError(f"expected a collsched Plan, got {type(plan).__name__}")


def _sizes(collective: dict, rank: int) -> tuple[int, int]:
    """(input bytes, output bytes) of `rank` for the plan's collective."""
    kind = collective["kind"]
    n = collective.get("ranks")
    if kind == "all_gather":
        return collective["shard_bytes"], n * collective["shard_bytes"]
    if kind == "reduce_scatter":
        return n * collective["shard_bytes"], collective["shard_bytes"]
    if kind == "all_reduce":
        return collective["bytes"], collective["bytes"]
    raise ValueError(f"MSCCL export supports allgather, reduce_scatter and allreduce plans, not {kind}")


@dataclass
class _Step:
    type: str
    srcbuf: str
    srcoff: int
    dstbuf: str
    dstoff: int
    cnt: int
    depid: object = None  # _TB or None
    deps: int = -1
    hasdep: bool = False


@dataclass
class _TB:
    rank: int
    send: int
    recv: int
    chan: int
    steps: list = field(default_factory=list)
    waited: dict = field(default_factory=dict)  # id(target tb) -> highest step index already waited for
    id: int = -1


class _Exporter:
    def __init__(self, p: dict, channels: int | None, refine: int = 1, pieces: list[list[tuple]] | None = None):
        self.p = p
        self.n = p["collective"]["ranks"]
        self.transfers = p["transfers"]
        self.segments = p["segments"]
        self.deps = p["deps"]
        self.tbs: dict[tuple, _TB] = {}
        # where[t][rank] = [(tb, index of t's last step in tb)]: a transfer may span several channels
        self.where: list[dict[int, list[tuple[_TB, int]]]] = []
        self.channels = channels
        self.chunk = self._chunk_size()
        self.refine = refine  # XML chunks per plan chunk unit (see to_xml)
        self._pieces_of = pieces  # shared by exporters of one plan that differ only in channels

    def _chunk_size(self) -> int:
        g = 0
        for r in range(self.n):
            i, o = _sizes(self.p["collective"], r)
            g = math.gcd(g, i, o, self.p["scratch_bytes"][r])
        for s in self.segments:
            g = math.gcd(g, s["src_off"], s["dst_off"], s["len"])
        if g == 0:
            raise ValueError("the plan moves no data: nothing to export")
        return g

    def pieces_of(self) -> list[list[tuple]]:
        """Every transfer's XML pieces, computed once (channel choice and emission both need them)."""
        if self._pieces_of is None:
            self._pieces_of = [self._pieces(t, tid) for tid, t in enumerate(self.transfers)]
        return self._pieces_of

    def _pieces(self, t: dict, tid: int) -> list[tuple]:
        out = []
        for s in self.segments[t["seg_begin"] : t["seg_end"]]:
            so, do, ln = (s[k] // self.chunk * self.refine for k in ("src_off", "dst_off", "len"))
            done = 0
            while done < ln:
                c = min(R.MAX_COUNT - 1, ln - done)
                if so + done > R.MAX_OFFSET or do + done > R.MAX_OFFSET:
                    raise ValueError(
                        f"transfer {tid} ({t['src']}->{t['dst']}): chunk offset {max(so, do) + done} exceeds the MSCCL limit "
                        f"{R.MAX_OFFSET} (chunk = {self.chunk} bytes); plan with fewer, larger pieces"
                    )
                piece = (_BUF_LETTER[s["src_buf"]], so + done, _BUF_LETTER[s["dst_buf"]], do + done, c)
                prev = out[-1] if out else None
                if prev and prev[0] == piece[0] and prev[2] == piece[2] and prev[1] + prev[4] == piece[1] \
                        and prev[3] + prev[4] == piece[3] and prev[4] + c < R.MAX_COUNT:
                    out[-1] = prev[:4] + (prev[4] + c,)  # contiguous on both sides: one step
                else:
                    out.append(piece)
                done += c
        return out

    def _tb(self, rank: int, send: int, recv: int, chan: int) -> _TB:
        key = (rank, send, recv, chan)
        tb = self.tbs.get(key)
        if tb is None:
            tb = self.tbs[key] = _TB(rank, send, recv, chan)
        return tb

    def _targets(self, tid: int, rank: int, tb: _TB) -> list[tuple[_TB, int]]:
        """Steps on `rank` that transfer `tid` must wait for, minus what `tb`'s order already implies."""
        t = self.transfers[tid]
        best: dict[int, tuple[_TB, int]] = {}
        for d in self.deps[t["dep_begin"] : t["dep_end"]]:
            for w in self.where[d].get(rank, ()):
                if w[0] is tb:
                    continue
                k = id(w[0])
                if tb.waited.get(k, -1) >= w[1]:
                    continue
                if k not in best or best[k][1] < w[1]:
                    best[k] = w
        return sorted(best.values(), key=lambda w: (w[0].send, w[0].recv, w[0].chan, w[1]))

    def _room(self, tb: _TB, tid: int, rank: int, nsteps: int) -> bool:
        extra = max(0, len(self._targets(tid, rank, tb)) - 1)
        return len(tb.steps) + extra + nsteps <= R.MAX_STEPS_PER_TB

    def _append(self, tb: _TB, tid: int, rank: int, steps: list[_Step]) -> None:
        targets = self._targets(tid, rank, tb)
        for i, (ttb, idx) in enumerate(targets):
            ttb.steps[idx].hasdep = True
            tb.waited[id(ttb)] = idx
            if i < len(targets) - 1:
                tb.steps.append(_Step("nop", "i", -1, "o", -1, 0, ttb, idx))
            else:
                steps[0].depid, steps[0].deps = ttb, idx
        tb.steps.extend(steps)
        self.where[tid].setdefault(rank, []).append((tb, len(tb.steps) - 1))

    def _check_fusion(self, tb: _TB, step: _Step, tid: int) -> None:
        # The parser fuses consecutive `re` steps with the same destination into one
        # reduction that uses the first step's count; unequal counts would be wrong.
        if step.type != "re" or not tb.steps or step.depid is not None:
            return
        prev = tb.steps[-1]
        if prev.type == "re" and not prev.hasdep and (prev.dstbuf, prev.dstoff, prev.srcbuf) == (step.dstbuf, step.dstoff, step.srcbuf) and prev.cnt != step.cnt:
            raise ValueError(f"transfer {tid}: two local reductions into the same chunk with different sizes would be fused by MSCCL")

    def _stream_channels(self, limit: int) -> tuple[list[int], int]:
        """First channel of every transfer (a local one: its lane), and the most channels
        any (src, dst) pair would use without wrapping. A transfer that depends on an
        earlier one of the same pair continues that stream (the next piece of a tree on
        that edge) and keeps its channel, so a connection carries its stream in order.
        Every other transfer starts a stream of its own (another tree, another step), and
        a pair's streams take channels in order of first appearance (``width``
        consecutive ones for a multi-piece transfer), wrapping at ``limit``: a
        threadblock runs its steps in order, in every pass of the executor's loop, so two
        streams on one threadblock wait for each other, and a tree's piece would queue
        behind another tree's piece that waits for deeper data."""
        chan = [0] * len(self.transfers)
        used: dict[tuple, int] = defaultdict(int)  # pair -> channels handed out so far
        for tid, t in enumerate(self.transfers):
            pair = (t["src"], t["dst"])  # (r, r): rank r's local copies and reductions
            cont = next((d for d in self.deps[t["dep_begin"] : t["dep_end"]]
                         if d < tid and (self.transfers[d]["src"], self.transfers[d]["dst"]) == pair), None)
            if cont is not None:
                chan[tid] = chan[cont]
                continue
            chan[tid] = used[pair] % limit
            used[pair] += min(limit, len(self.pieces_of()[tid]) or 1)
        return chan, max(used.values(), default=1)

    def run(self) -> None:
        first_chan, _ = self._stream_channels(self.channels)
        for tid, t in enumerate(self.transfers):
            self.where.append({})
            pieces = self.pieces_of()[tid]
            if not pieces:
                continue
            src, dst, reduce = t["src"], t["dst"], t["op"] == "reduce_sum"
            if src == dst:
                # Local copies and reductions: a stream per lane like the network's.
                lanes = [(first_chan[tid] + i) % self.channels for i in range(self.channels)] + list(range(self.channels, R.EXPORT_CHANNELS))
                lane = next((x for x in lanes if self._room(self._tb(src, -1, -1, x), tid, src, len(pieces))), None)
                if lane is None:
                    raise _LimitError(f"transfer {tid}: rank {src} needs more than {R.EXPORT_CHANNELS} local threadblocks")
                tb = self._tb(src, -1, -1, lane)
                steps = [_Step("re" if reduce else "cpy", sb, so, db, do, c) for sb, so, db, do, c in pieces]
                self._check_fusion(tb, steps[0], tid)
                self._append(tb, tid, src, steps)
                continue
            # From the stream's channel on, spread the pieces over parallel channels
            # (several trees' data in one merged message run side by side).
            limit = self.channels
            width = min(limit, len(pieces))
            groups = [pieces[g::width] for g in range(width)]
            first = first_chan[tid]
            rtype = "rrc" if reduce else "r"
            for g, group in enumerate(groups):
                start = (first + g) % limit
                # Preferred channels first (cyclically), then spill to the rest.
                for chan in [(start + i) % limit for i in range(limit)] + list(range(limit, R.EXPORT_CHANNELS)):
                    stb, rtb = self._tb(src, dst, -1, chan), self._tb(dst, -1, src, chan)
                    if self._room(stb, tid, src, len(group)) and self._room(rtb, tid, dst, len(group)):
                        break
                else:
                    raise _LimitError(
                        f"transfer {tid} ({src}->{dst}): every channel's threadblock for this pair already has "
                        f"{R.MAX_STEPS_PER_TB} steps; plan with fewer pieces (chunks) to export to MSCCL"
                    )
                # A send carries the receiver's destination for readability; the parser ignores it.
                self._append(stb, tid, src, [_Step("s", sb, so, db, do, c) for sb, so, db, do, c in group])
                self._append(rtb, tid, dst, [_Step(rtype, db, do, db, do, c) for sb, so, db, do, c in group])
        # Drop threadblocks probed for room but never used, then number them per GPU.
        self.tbs = {k: v for k, v in self.tbs.items() if v.steps}
        for r in range(self.n):
            mine = sorted((tb for tb in self.tbs.values() if tb.rank == r), key=lambda tb: (tb.send, tb.recv, tb.chan))
            for i, tb in enumerate(mine):
                tb.id = i

    def check_limits(self) -> None:
        for tb in self.tbs.values():
            for st in tb.steps:
                if st.depid is not None and st.depid.id > R.MAX_DEP_BID:
                    raise _LimitError(f"rank {tb.rank}: a step depends on threadblock {st.depid.id}, but MSCCL stores depid in 8 bits (max {R.MAX_DEP_BID})")
        per_rank = defaultdict(int)
        for tb in self.tbs.values():
            per_rank[tb.rank] += 1 + len(tb.steps)
        for r, nodes in per_rank.items():
            if 1 + self.n + nodes > R.MAX_NODES:
                raise _LimitError(f"rank {r}: {1 + self.n + nodes} XML nodes exceed the parser's limit of {R.MAX_NODES}")
            if sum(1 for tb in self.tbs.values() if tb.rank == r) > R.MAX_SUBS:
                raise _LimitError(f"rank {r}: more than {R.MAX_SUBS} threadblocks")

    def xml(self, name: str, proto: str) -> str:
        coll = R.COLL_NAME[self.p["collective"]["kind"]]
        nchunks = 0
        gpu_chunks = []
        for r in range(self.n):
            i, o = _sizes(self.p["collective"], r)
            s = self.p["scratch_bytes"][r]
            ic, oc, sc = (x // self.chunk * self.refine for x in (i, o, s))
            gpu_chunks.append((ic, oc, sc))
            nchunks = max(nchunks, ic, oc)
        nchannels = 1 + max((tb.chan for tb in self.tbs.values()), default=0)
        lines = [
            f'<algo name="{name}" proto="{proto}" nchannels="{nchannels}" nchunksperloop="{nchunks}" ngpus="{self.n}" '
            f'coll="{coll}" inplace="0" outofplace="1" minBytes="0" maxBytes="0">'
        ]
        for r in range(self.n):
            ic, oc, sc = gpu_chunks[r]
            lines.append(f'  <gpu id="{r}" i_chunks="{ic}" o_chunks="{oc}" s_chunks="{sc}">')
            for tb in sorted((tb for tb in self.tbs.values() if tb.rank == r), key=lambda tb: tb.id):
                lines.append(f'    <tb id="{tb.id}" send="{tb.send}" recv="{tb.recv}" chan="{tb.chan}">')
                for k, st in enumerate(tb.steps):
                    depid = st.depid.id if st.depid is not None else -1
                    deps = st.deps if st.depid is not None else -1
                    lines.append(
                        f'      <step s="{k}" type="{st.type}" srcbuf="{st.srcbuf}" srcoff="{st.srcoff}" dstbuf="{st.dstbuf}" '
                        f'dstoff="{st.dstoff}" cnt="{st.cnt}" depid="{depid}" deps="{deps}" hasdep="{int(st.hasdep)}"/>'
                    )
                lines.append("    </tb>")
            lines.append("  </gpu>")
        lines.append("</algo>")
        return "\n".join(lines) + "\n"


def to_xml(plan, name: str | None = None, channels: int | None = None, proto: str = "Simple", refine: int = 1) -> str:
    """MSCCL XML for an allgather / reduce_scatter / allreduce Plan.

    ``channels`` caps how many channels the streams of one (src, dst) pair are
    spread over (a tree's pieces on an edge are one stream); None gives every
    stream its own channel (up to 32), a quarter fewer while the file would exceed
    the executor's limits or ``rules.AUTO_MAX_THREADBLOCKS`` threadblocks on a
    rank. A threadblock that would exceed MSCCL's 64 steps spills to the next
    channel regardless.
    ``refine`` writes every chunk as that many XML chunks (offsets and counts
    scale, steps split at 71 chunks): the executor loops over the XML in passes
    of ``rules.loop_bytes(proto)`` per XML chunk (2 MiB for Simple), so for a
    run where the plan's pieces are larger than that, ``refine_for`` gives the
    refinement that keeps the whole run in one pass with the plan's own pieces.
    Raises ValueError
    naming the transfer when the plan cannot be expressed (a segment that is not
    whole chunks is impossible by construction: the chunk is their gcd).
    """
    p = _plan_dict(plan)
    if proto not in R.PROTOCOLS:
        raise ValueError(f"proto must be one of {', '.join(R.PROTOCOLS)}, got {proto!r}")
    if channels is not None and not 1 <= channels <= R.EXPORT_CHANNELS:
        raise ValueError(f"channels must be between 1 and {R.EXPORT_CHANNELS}, got {channels}")
    _sizes(p["collective"], 0)  # rejects unsupported collectives early
    name = name or f"collsched_{p['algorithm']}_{R.COLL_NAME.get(p['collective']['kind'], 'x')}_{p['collective']['ranks']}"
    if not re.fullmatch(r"[A-Za-z0-9_.:+-]{1,%d}" % R.MAX_STR_LEN, name):
        raise ValueError(f"algorithm name {name!r} must be 1-{R.MAX_STR_LEN} characters of letters, digits and _.:+-")
    if not isinstance(refine, int) or refine < 1:
        raise ValueError(f"refine must be a positive integer, got {refine!r}")
    if channels is None:
        # As many channels as the busiest pair has streams, a quarter fewer while the
        # executor's limits (127 threadblocks per dependency, 4096 nodes, 64 steps) or
        # the resident-threadblock budget are exceeded.
        probe = _Exporter(p, R.EXPORT_CHANNELS, refine)
        _, most = probe._stream_channels(R.EXPORT_CHANNELS)
        pieces = probe.pieces_of()
        tries = [min(R.EXPORT_CHANNELS, most)]
        while tries[-1] > 1:
            tries.append(min(tries[-1] - 1, tries[-1] * 3 // 4))
        for c in tries[:-1]:
            try:
                return _export(p, c, refine, name, proto, R.AUTO_MAX_THREADBLOCKS, pieces)
            except _LimitError:
                continue
        return _export(p, 1, refine, name, proto, None, pieces)
    return _export(p, channels, refine, name, proto)


def _export(p: dict, channels: int, refine: int, name: str, proto: str, max_tbs: int | None = None,
            pieces: list[list[tuple]] | None = None) -> str:
    ex = _Exporter(p, channels, refine, pieces)
    ex.run()
    ex.check_limits()
    if max_tbs is not None:
        most = max(Counter(tb.rank for tb in ex.tbs.values()).values(), default=0)
        if most > max_tbs:
            raise _LimitError(f"{most} threadblocks on one rank (budget {max_tbs})")
    return ex.xml(name, proto)


def refine_for(xml_chunks: int, run_bytes: int, proto: str = "Simple") -> int:
    """Smallest ``refine`` with which an XML of ``xml_chunks`` chunks per loop runs
    ``run_bytes`` (the executor's count x sizeMultiplier, in bytes) in a single pass
    of the interpreter: run_bytes / (xml_chunks * refine) <= rules.loop_bytes(proto)."""
    if xml_chunks < 1 or run_bytes < 0:
        raise ValueError(f"need xml_chunks >= 1 and run_bytes >= 0, got {xml_chunks}, {run_bytes}")
    return max(1, -(-run_bytes // (xml_chunks * R.loop_bytes(proto))))


# ---------------------------------------------------------------------------
# Import


def _int(el, key: str) -> int:
    try:
        return int(el.attrib[key], 0)
    except KeyError:
        raise ValueError(f"<{el.tag}> is missing attribute {key!r}") from None
    except ValueError:
        raise ValueError(f"<{el.tag}> attribute {key}={el.attrib[key]!r} is not an integer") from None


def from_xml(xml: str, bytes: int, elem_bytes: int = 1, cluster=None, algorithm: str = "msccl",
             loop_bytes: int | None = None):
    """Read an MSCCL XML back into a Plan for a run of ``bytes`` (the per-rank
    shard for allgather/reduce_scatter, the buffer for allreduce).

    The Plan follows the executor (msccl_kernel.cu ``mscclRunInterpreter``): the
    run is split into L = ceil(chunk / loop_bytes) iterations of the XML, each
    moving the next ``loop_bytes`` of every XML chunk (``loop_bytes`` defaults to
    the executor's chunkSize for the file's protocol, 2 MiB for Simple:
    ``rules.loop_bytes``; 0 = the whole run in one pass). In every iteration
    every matched send/receive pair (or local step) is one transfer, which
    depends on the previous step of both threadblocks involved (the last step
    of the previous iteration for a threadblock's first step) and on the steps
    named by ``depid``/``deps`` (and the ``nop`` steps before it) in the same
    iteration, as the kernel's (iteration, step) flags order them. A step of
    ``cnt`` chunks moves ``cnt`` slices (one per chunk) when L > 1, as the
    executor's maxAllowedCount = 1 makes it. ``cluster`` (a Cluster or spec)
    gives the tiers. Supports the step types the exporter writes: s, r, rrc,
    cpy, re, nop.
    """
    from collsched import _core

    try:
        root = ET.fromstring(xml)
    except ET.ParseError as e:
        raise ValueError(f"not well-formed XML: {e}") from None
    if root.tag != "algo":
        raise ValueError(f"root element must be <algo>, got <{root.tag}>")
    n = _int(root, "ngpus")
    nchunks = _int(root, "nchunksperloop")
    coll = root.attrib.get("coll")
    kinds = {v: k for k, v in R.COLL_NAME.items()}
    if coll not in kinds:
        raise ValueError(f"from_xml supports coll allgather, reducescatter, allreduce; got {coll!r}")
    kind = kinds[coll]
    total = bytes * n if kind in ("all_gather", "reduce_scatter") else bytes
    if nchunks <= 0 or total % nchunks:
        raise ValueError(f"{total} bytes do not divide into nchunksperloop={nchunks} chunks")
    chunk = total // nchunks
    if kind != "all_gather" and chunk % elem_bytes:
        raise ValueError(f"chunk of {chunk} bytes is not a multiple of elem_bytes={elem_bytes}")
    if loop_bytes is None:
        loop_bytes = R.loop_bytes(root.attrib.get("proto", "Simple"))
    if loop_bytes < 0 or loop_bytes % elem_bytes:
        raise ValueError(f"loop_bytes={loop_bytes} must be 0 (one pass) or a positive multiple of elem_bytes={elem_bytes}")
    loops = -(-chunk // loop_bytes) if loop_bytes and chunk else 1
    # maxAllowedCount (msccl_setup.cc): how many chunks one primitive call may span.
    max_count = min(R.MAX_COUNT - 1, max(1, loop_bytes // chunk)) if loop_bytes and chunk else R.MAX_COUNT - 1

    # Flatten: real steps as nodes with their pending cross-tb deps.
    tbs: dict[tuple[int, int], dict] = {}
    scratch = [0] * n
    seen_gpus: set[int] = set()
    for g in root.findall("gpu"):
        r = _int(g, "id")
        if not 0 <= r < n or r in seen_gpus:
            raise ValueError(f"<gpu id={r}>: ids must be distinct and in 0..{n - 1} (ngpus={n})")
        seen_gpus.add(r)
        scratch[r] = _int(g, "s_chunks") * chunk
        for tb in g.findall("tb"):
            b = _int(tb, "id")
            send, recv = _int(tb, "send"), _int(tb, "recv")
            for what, peer in (("send", send), ("recv", recv)):
                if not -1 <= peer < n:
                    raise ValueError(f"gpu {r} tb {b}: {what}={peer} is not a rank in 0..{n - 1} or -1")
            if (r, b) in tbs:
                raise ValueError(f"gpu {r}: two threadblocks with id {b}")
            tbs[(r, b)] = {"send": send, "recv": recv, "chan": _int(tb, "chan"), "steps": tb.findall("step")}
    node_of: dict[tuple[int, int, int], int] = {}  # (rank, tb, s) -> node
    nodes: list[dict] = []
    last_of_tb: dict[tuple[int, int], int] = {}
    for (r, b), tb in sorted(tbs.items()):
        pending: list[tuple[int, int, int]] = []
        prev = None
        for st in tb["steps"]:
            s, typ = _int(st, "s"), st.attrib.get("type")
            depid = _int(st, "depid")
            if depid >= 0:
                pending.append((r, depid, _int(st, "deps")))
            if typ == "nop":
                continue
            if typ not in ("s", "r", "rrc", "cpy", "re"):
                raise ValueError(f"from_xml does not support step type {typ!r} (gpu {r}, tb {b}, step {s})")
            node = {
                "rank": r, "tb": b, "s": s, "type": typ, "chan": tb["chan"], "send": tb["send"], "recv": tb["recv"],
                "srcbuf": st.attrib["srcbuf"], "srcoff": _int(st, "srcoff"), "dstbuf": st.attrib["dstbuf"],
                "dstoff": _int(st, "dstoff"), "cnt": _int(st, "cnt"), "waits": pending, "prev": prev,
            }
            pending = []
            prev = len(nodes)
            node_of[(r, b, s)] = prev
            nodes.append(node)
        if prev is not None:
            last_of_tb[(r, b)] = prev
    # Match sends with receives per (src, dst, channel) connection, in order.
    sends, recvs = defaultdict(list), defaultdict(list)
    for i, nd in enumerate(nodes):
        if nd["type"] == "s":
            sends[(nd["rank"], nd["send"], nd["chan"])].append(i)
        elif nd["type"] in ("r", "rrc"):
            recvs[(nd["recv"], nd["rank"], nd["chan"])].append(i)
    transfer_of = [-1] * len(nodes)
    items: list[tuple] = []  # (nodes of the transfer, src, dst, op, segment)
    for conn in sorted(set(sends) | set(recvs)):
        a, b = sends.get(conn, []), recvs.get(conn, [])
        if len(a) != len(b):
            raise ValueError(f"connection {conn[0]}->{conn[1]} on channel {conn[2]}: {len(a)} sends but {len(b)} receives")
        for x, y in zip(a, b):
            sn, rn = nodes[x], nodes[y]
            if sn["cnt"] != rn["cnt"]:
                raise ValueError(f"connection {conn[0]}->{conn[1]} channel {conn[2]}: send of {sn['cnt']} chunks matched with receive of {rn['cnt']}")
            seg = (sn["srcbuf"], sn["srcoff"], rn["dstbuf"], rn["dstoff"], sn["cnt"])
            items.append(((x, y), conn[0], conn[1], "reduce_sum" if rn["type"] == "rrc" else "copy", seg))
    for i, nd in enumerate(nodes):
        if nd["type"] in ("cpy", "re"):
            items.append(((i,), nd["rank"], nd["rank"], "reduce_sum" if nd["type"] == "re" else "copy", (nd["srcbuf"], nd["srcoff"], nd["dstbuf"], nd["dstoff"], nd["cnt"])))
    for k, it in enumerate(items):
        for x in it[0]:
            transfer_of[x] = k
    # One pass of the XML: same-iteration predecessors, and the items whose last step in a
    # threadblock precedes this item's first step there in the next iteration.
    same: list[set[int]] = []
    carried: list[set[int]] = []
    for it in items:
        ps, cs = set(), set()
        for x in it[0]:
            nd = nodes[x]
            if nd["prev"] is not None:
                ps.add(transfer_of[nd["prev"]])
            else:
                cs.add(transfer_of[last_of_tb[(nd["rank"], nd["tb"])]])
            for r, b, s in nd["waits"]:
                target = node_of.get((r, b, s))
                if target is None:
                    raise ValueError(f"gpu {r}: a step depends on tb {b} step {s}, which is not a data step")
                ps.add(transfer_of[target])
        same.append(ps)
        carried.append(cs)
    K = len(items)
    preds: list[set[int]] = []
    for l in range(loops):
        for k in range(K):
            ps = {l * K + p for p in same[k]}
            if l:
                ps |= {(l - 1) * K + p for p in carried[k]}
            preds.append(ps)
    def key(t):
        nd = nodes[items[t % K][0][0]]
        return (t // K, nd["rank"], nd["tb"], nd["s"], t)

    def where(t):
        nd = nodes[items[t % K][0][0]]
        return f"gpu {nd['rank']} tb {nd['tb']} step {nd['s']}"

    order, level = _topo(preds, key, where)
    new_id = {old: i for i, old in enumerate(order)}
    gps = n
    if cluster is not None:
        if isinstance(cluster, str):
            cluster = _core.Cluster.parse(cluster)
        gps = cluster.gpus_per_server
    transfers, segments, deps = [], [], []
    for old in order:
        l = old // K
        _, src, dst, op, (sb, so, db, do, c) = items[old % K]
        nelem = min(loop_bytes, chunk - l * loop_bytes) if loops > 1 else chunk
        tier = "local" if src == dst else ("scale_up" if src // gps == dst // gps else "scale_out")
        d = sorted(new_id[x] for x in preds[old])
        segs = []
        for j in range(0, c, max_count):
            m = min(max_count, c - j)  # one primitive call: m whole chunks (L = 1) or m = 1 slice
            seg = {"src_buf": _LETTER_BUF[sb], "src_off": (so + j) * chunk + l * loop_bytes,
                   "dst_buf": _LETTER_BUF[db], "dst_off": (do + j) * chunk + l * loop_bytes, "len": m * nelem}
            prev = segs[-1] if segs else None
            if prev and prev["src_off"] + prev["len"] == seg["src_off"] and prev["dst_off"] + prev["len"] == seg["dst_off"]:
                prev["len"] += seg["len"]
            else:
                segs.append(seg)
        transfers.append({"src": src, "dst": dst, "op": op, "tier": tier, "step": level[old], "seg_begin": len(segments), "seg_end": len(segments) + len(segs), "dep_begin": len(deps), "dep_end": len(deps) + len(d)})
        segments.extend(segs)
        deps.extend(d)
    if kind == "all_gather":
        collective = {"kind": kind, "ranks": n, "shard_bytes": bytes}
    elif kind == "reduce_scatter":
        collective = {"kind": kind, "ranks": n, "shard_bytes": bytes, "elem_bytes": elem_bytes}
    else:
        collective = {"kind": kind, "ranks": n, "bytes": bytes, "elem_bytes": elem_bytes}
    plan = {
        "algorithm": algorithm, "collective": collective, "gpus_per_server": gps, "scratch_bytes": scratch,
        "transfers": transfers, "segments": segments, "deps": deps, "input_hash": 0,
        "meta": {"source": "msccl_xml", "name": root.attrib.get("name", ""), "chunk_bytes": str(chunk),
                 "loops": str(loops), "loop_bytes": str(loop_bytes)},
    }
    return _core.Plan.from_json(json.dumps(plan))


def _topo(preds: list[set[int]], key, where) -> tuple[list[int], list[int]]:
    """Deterministic topological order (ties by `key`) and longest-path levels."""
    import heapq

    succ = [[] for _ in preds]
    indeg = [len(p) for p in preds]
    for k, ps in enumerate(preds):
        for p in ps:
            succ[p].append(k)

    heap = [key(k) for k in range(len(preds)) if indeg[k] == 0]
    heapq.heapify(heap)
    order, level = [], [0] * len(preds)
    while heap:
        k = heapq.heappop(heap)[-1]
        order.append(k)
        for s in succ[k]:
            level[s] = max(level[s], level[k] + 1)
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(heap, key(s))
    if len(order) != len(preds):
        stuck = [k for k in range(len(preds)) if indeg[k] > 0][:3]
        raise ValueError(f"the XML's steps wait on each other in a cycle (deadlock), e.g. at {', '.join(where(k) for k in stuck)}")
    return order, level
