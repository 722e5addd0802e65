"""Check an MSCCL XML against the rules of the MSCCL executor's parser and
interpreter (NCCL's msccl-executor-nccl and RCCL): ``validate_msccl_xml(xml)``
returns a list of problems, empty when the file would load and run.

Three layers (docs/msccl.md cites the source of every rule):
1. lexical: what the hand-written C tokenizer accepts (no XML declaration,
   double-quoted values, single spaces between attributes, no tabs, one tag per line);
2. structural: required attributes, value ranges and integer widths, consecutive
   threadblock ids and step numbers, one threadblock per (channel, peer), buffer bounds;
3. behavioural: every send has a matching receive of the same size on its
   (channel, peer) connection, and the steps can all run (no dependency on a step
   that never completes, no cycle through dependencies and connections).
"""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import defaultdict

from collsched.export import rules as R

_TAG = re.compile(r"<[^>]*>", re.S)
_OPEN = re.compile(r'^<([A-Za-z_][\w]*)((?: [A-Za-z_][\w]*="[^"]*")*)(/?)>$')
_CLOSE = re.compile(r"^</([A-Za-z_][\w]*)>$")


def _lexical(xml: str) -> list[str]:
    problems = []
    stripped = xml.lstrip(" \r\n")
    if stripped.startswith("<?xml"):
        problems.append("XML declaration (<?xml ...?>) found: the MSCCL parser reads it as an element and fails; start with <algo>")
    pos, line = 0, 1
    for m in _TAG.finditer(xml):
        between = xml[pos : m.start()]
        line += between.count("\n")
        if "\t" in between:
            problems.append(f"line {line}: tab character between elements: the MSCCL parser only skips spaces and newlines")
        elif between.strip(" \r\n"):
            problems.append(f"line {line}: text {between.strip()[:20]!r} between elements: the MSCCL parser expects '<'")
        tag = m.group(0)
        pos = m.end()
        tag_line = line
        line += tag.count("\n")
        if tag.startswith("<!--") or tag.startswith("<?xml"):
            continue
        if not (_OPEN.match(tag) or _CLOSE.match(tag)):
            if "\n" in tag or "\r" in tag:
                why = "a tag spans several lines"
            elif "'" in tag:
                why = "attribute values must use double quotes"
            elif "\t" in tag or "  " in tag or " =" in tag or "= " in tag or " />" in tag or tag.endswith(" >"):
                why = "attributes must be separated by exactly one space, with no space around '=' or before '>' or '/>'"
            else:
                why = "not a tag of the form <name key=\"value\" ...> or </name>"
            problems.append(f"line {tag_line}: {why}: {tag[:60]!r}")
    if xml[pos:].strip(" \r\n"):
        problems.append("text after the last element")
    return problems


def _int(el, key: str, where: str, problems: list[str], lo: int | None = None, hi: int | None = None) -> int | None:
    v = el.attrib.get(key)
    if v is None:
        problems.append(f"{where}: missing required attribute '{key}'")
        return None
    if not re.fullmatch(r"-?[0-9]+", v):
        problems.append(f"{where}: attribute {key}={v!r} is not a decimal integer")
        return None
    x = int(v)
    if lo is not None and x < lo or hi is not None and x > hi:
        problems.append(f"{where}: {key}={x} is outside [{lo}, {hi}]")
        return None
    return x


def validate_msccl_xml(xml: str) -> list[str]:
    """Problems that would make NCCL's or RCCL's MSCCL executor reject or hang on ``xml``; [] if none."""
    problems = _lexical(xml)
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as e:
        return problems + [f"not well-formed XML: {e}"]
    if root.tag != "algo":
        return problems + [f"root element is <{root.tag}>, expected <algo>"]
    for el in root.iter():
        if len(el.attrib) > R.MAX_ATTRS:
            problems.append(f"<{el.tag}> has {len(el.attrib)} attributes; the parser keeps at most {R.MAX_ATTRS}")
        for k, v in el.attrib.items():
            if len(v) > R.MAX_STR_LEN or len(k) > R.MAX_STR_LEN:
                problems.append(f"<{el.tag}> attribute {k} is longer than {R.MAX_STR_LEN} characters")
        if len(el) > R.MAX_SUBS:
            problems.append(f"<{el.tag}> has {len(el)} children; the parser keeps at most {R.MAX_SUBS}")

    # --- <algo>
    for a in R.ALGO_ATTRS:
        if a not in root.attrib:
            problems.append(f"<algo>: missing required attribute '{a}'")
    ngpus = _int(root, "ngpus", "<algo>", [], 1) if "ngpus" in root.attrib else None
    if "ngpus" in root.attrib and ngpus is None:
        problems.append(f"<algo>: ngpus={root.attrib['ngpus']!r} must be a positive integer")
    nchunks = _int(root, "nchunksperloop", "<algo>", problems, 1) if "nchunksperloop" in root.attrib else None
    nchannels = _int(root, "nchannels", "<algo>", problems, 1, R.MAX_CHANNEL) if "nchannels" in root.attrib else None
    for a in ("inplace", "outofplace"):
        if a in root.attrib:
            _int(root, a, "<algo>", problems, 0, 1)
    for a in ("minBytes", "maxBytes"):
        if a in root.attrib:
            _int(root, a, "<algo>", problems, 0)
    if "proto" in root.attrib and root.attrib["proto"] not in R.PROTOCOLS:
        problems.append(f"<algo>: proto={root.attrib['proto']!r} is not one of {', '.join(R.PROTOCOLS)}")
    coll = root.attrib.get("coll")
    if coll is not None and coll not in R.COLLECTIVES:
        hint = " (MSCCL spells it 'reducescatter')" if coll.replace("_", "").replace("-", "") == "reducescatter" else ""
        problems.append(f"<algo>: coll={coll!r} is not an MSCCL collective{hint}")

    # --- <gpu> / <tb> / <step>
    gpus = {}
    for g in root:
        if g.tag != "gpu":
            continue
        gid = _int(g, "id", "<gpu>", problems, 0)
        if gid is None:
            continue
        if ngpus is not None and gid >= ngpus:
            problems.append(f"<gpu id={gid}>: id must be below ngpus={ngpus}")
        if gid in gpus:
            problems.append(f"<gpu id={gid}>: appears twice")
        where = f"gpu {gid}"
        sizes = {}
        for a, b in (("i_chunks", "i"), ("o_chunks", "o"), ("s_chunks", "s")):
            sizes[b] = _int(g, a, where, problems, 0)
        gpus[gid] = (g, sizes)
    if ngpus is not None and len(gpus) != ngpus:
        missing = sorted(set(range(ngpus)) - set(gpus))
        problems.append(f"<algo> declares ngpus={ngpus} but has {len(gpus)} <gpu> elements" + (f" (missing {missing[:8]})" if missing else ""))
    if nchunks is not None:
        for gid, (_, sizes) in gpus.items():
            if all(sizes.get(b) is not None for b in "io") and max(sizes["i"], sizes["o"]) > nchunks:
                problems.append(f"gpu {gid}: buffers of {max(sizes['i'], sizes['o'])} chunks exceed nchunksperloop={nchunks}")

    tbs = {}  # (gpu, tbid) -> dict
    for gid, (g, sizes) in sorted(gpus.items()):
        ids = []
        per_chan_send, per_chan_recv = defaultdict(list), defaultdict(list)
        for tb in g:
            if tb.tag != "tb":
                continue
            tid = _int(tb, "id", f"gpu {gid} <tb>", problems, 0)
            if tid is None:
                continue
            where = f"gpu {gid} tb {tid}"
            send = _int(tb, "send", where, problems, -1, (ngpus or 1 << 30) - 1)
            recv = _int(tb, "recv", where, problems, -1, (ngpus or 1 << 30) - 1)
            chan = _int(tb, "chan", where, problems, 0, R.MAX_CHANNEL)
            if tid in ids:
                problems.append(f"{where}: duplicate threadblock id")
                continue
            ids.append(tid)
            if send == gid or recv == gid:
                problems.append(f"{where}: send/recv peer is the GPU itself")
            if nchannels is not None and chan is not None and chan >= nchannels:
                problems.append(f"{where}: channel {chan} but nchannels={nchannels}")
            if chan is not None:
                if send is not None and send >= 0:
                    per_chan_send[(chan, send)].append(tid)
                if recv is not None and recv >= 0:
                    per_chan_recv[(chan, recv)].append(tid)
            tbs[(gid, tid)] = {"send": send, "recv": recv, "chan": chan, "el": tb, "steps": []}
        for want, got in enumerate(sorted(ids)):
            if want != got:
                problems.append(f"gpu {gid}: threadblock ids must be consecutive from 0; tb {want} is missing")
                break
        for (chan, peer), l in sorted(per_chan_send.items()):
            if len(l) > 1:
                problems.append(f"gpu {gid}: threadblocks {l} both send to peer {peer} on channel {chan}; one threadblock per (channel, send peer)")
        for (chan, peer), l in sorted(per_chan_recv.items()):
            if len(l) > 1:
                problems.append(f"gpu {gid}: threadblocks {l} both receive from peer {peer} on channel {chan}; one threadblock per (channel, recv peer)")
        for side, d in (("send", per_chan_send), ("recv", per_chan_recv)):
            count = defaultdict(int)
            for (chan, _), l in d.items():
                count[chan] += len(l)
            for chan, c in count.items():
                if c > R.MAX_TBS_PER_CHANNEL:
                    problems.append(f"gpu {gid}: {c} threadblocks {side} on channel {chan}; at most {R.MAX_TBS_PER_CHANNEL}")
        nodes = 1 + len(gpus) + sum(1 + len(t["el"]) for (g2, _), t in tbs.items() if g2 == gid)
        if nodes > R.MAX_NODES:
            problems.append(f"gpu {gid}: {nodes} XML nodes to load; the parser holds at most {R.MAX_NODES}")
        # steps
        for (g2, tid), t in sorted(tbs.items()):
            if g2 != gid:
                continue
            _steps(gid, tid, t, sizes, problems)
    _dependencies(tbs, problems)
    _connections(tbs, problems)
    if not problems:
        _deadlock(tbs, problems)
    return problems


def _steps(gid: int, tid: int, t: dict, sizes: dict, problems: list[str]) -> None:
    where_tb = f"gpu {gid} tb {tid}"
    prev_re = None
    pending_nops = 0
    ndeps = 0
    for k, st in enumerate(t["el"]):
        if st.tag != "step":
            continue
        where = f"{where_tb} step {k}"
        for a in R.STEP_ATTRS:
            if a not in st.attrib:
                problems.append(f"{where}: missing required attribute '{a}'")
        s = _int(st, "s", where, [], None)
        if s is not None and s != k:
            problems.append(f"{where}: s={s} but steps must be numbered 0, 1, 2, ... in order (the interpreter counts positions)")
        if k >= R.MAX_STEPS_PER_TB:
            problems.append(f"{where}: more than {R.MAX_STEPS_PER_TB} steps in one threadblock")
        typ = st.attrib.get("type")
        if typ not in R.STEP_TYPES:
            problems.append(f"{where}: unknown step type {typ!r}")
            typ = None
        cnt = _int(st, "cnt", where, problems, 0, R.MAX_COUNT - 1) if "cnt" in st.attrib else None
        depid = _int(st, "depid", where, problems, -1, R.MAX_DEP_BID) if "depid" in st.attrib else None
        deps = _int(st, "deps", where, problems, -1, R.MAX_STEPS_PER_TB - 1) if "deps" in st.attrib else None
        hasdep = _int(st, "hasdep", where, problems, 0, 1) if "hasdep" in st.attrib else None
        offs = {}
        for a in ("srcoff", "dstoff"):
            offs[a] = _int(st, a, where, problems, -1, R.MAX_OFFSET) if a in st.attrib else None
        bufs = {}
        for a in ("srcbuf", "dstbuf"):
            v = st.attrib.get(a)
            if v is not None and v not in R.BUFFERS:
                problems.append(f"{where}: {a}={v!r} must be one of i, o, s")
                v = None
            bufs[a] = v
        info = {"k": k, "type": typ, "cnt": cnt, "depid": depid, "deps": deps, "hasdep": hasdep}
        t["steps"].append(info)
        if depid is not None and depid >= 0:
            ndeps += 1
        if typ is None:
            continue
        sends, recvs, check_src, check_dst = R.STEP_TYPES[typ]
        if sends and (t["send"] is None or t["send"] < 0):
            problems.append(f"{where}: '{typ}' sends but threadblock {tid} has no send peer")
        if recvs and (t["recv"] is None or t["recv"] < 0):
            problems.append(f"{where}: '{typ}' receives but threadblock {tid} has no recv peer")
        for check, b, o in ((check_src, "srcbuf", "srcoff"), (check_dst, "dstbuf", "dstoff")):
            if typ == "rrc":  # reads srcbuf and writes dstbuf although the parser checks neither
                check = True
            if check and bufs[b] and offs[o] is not None and sizes.get(bufs[b]) is not None and cnt is not None:
                size = sizes[bufs[b]]
                if offs[o] < 0 or offs[o] + cnt > size:
                    problems.append(f"{where}: {b}={bufs[b]} {o}={offs[o]} cnt={cnt} runs outside the buffer of {size} chunks")
        if typ == "nop":
            if depid is None or depid < 0:
                problems.append(f"{where}: a nop without a dependency desynchronises the interpreter's step counter")
            else:
                pending_nops += 1
            continue
        if pending_nops and (depid is None or depid < 0):
            problems.append(f"{where}: follows nop dependencies, so it must carry a dependency itself (the parser rejects the chain)")
        pending_nops = 0
        if typ == "re" and prev_re is not None and depid == -1:
            pb, po, psrc, pcnt, phas = prev_re
            if (pb, po, psrc) == (bufs["dstbuf"], offs["dstoff"], bufs["srcbuf"]) and not phas and pcnt != cnt:
                problems.append(f"{where}: fused with the previous 're' (same destination) but cnt {cnt} != {pcnt}")
        prev_re = (bufs["dstbuf"], offs["dstoff"], bufs["srcbuf"], cnt, hasdep) if typ == "re" else None
    if pending_nops:
        problems.append(f"{where_tb}: ends with nop steps whose dependencies no step waits on")
    if ndeps > R.MAX_DEPS_PER_TB:
        problems.append(f"{where_tb}: {ndeps} dependencies; at most {R.MAX_DEPS_PER_TB} per threadblock")


def _dependencies(tbs: dict, problems: list[str]) -> None:
    for (gid, tid), t in sorted(tbs.items()):
        for st in t["steps"]:
            depid, deps = st["depid"], st["deps"]
            if depid is None or depid < 0:
                continue
            where = f"gpu {gid} tb {tid} step {st['k']}"
            if depid == tid:
                problems.append(f"{where}: depends on its own threadblock (program order already covers it)")
                continue
            target = tbs.get((gid, depid))
            if target is None:
                problems.append(f"{where}: depends on threadblock {depid}, which does not exist on gpu {gid}")
                continue
            if deps is None or deps < 0 or deps >= len(target["steps"]):
                problems.append(f"{where}: depends on step {deps} of tb {depid}, which has {len(target['steps'])} steps")
                continue
            ts = target["steps"][deps]
            if ts["type"] == "nop":
                problems.append(f"{where}: depends on tb {depid} step {deps}, a nop, which never signals")
            elif ts["hasdep"] != 1:
                problems.append(f"{where}: depends on tb {depid} step {deps}, which has hasdep=\"0\" and never signals")


def _is(typ, i):
    return typ is not None and R.STEP_TYPES[typ][i]


def _connections(tbs: dict, problems: list[str]) -> None:
    sends, recvs = defaultdict(list), defaultdict(list)
    for (gid, tid), t in sorted(tbs.items()):
        for st in t["steps"]:
            if _is(st["type"], 0):
                sends[(gid, t["send"], t["chan"])].append(st["cnt"])
            if _is(st["type"], 1):
                recvs[(t["recv"], gid, t["chan"])].append(st["cnt"])
    for conn in sorted(set(sends) | set(recvs), key=str):
        a, b = sends.get(conn, []), recvs.get(conn, [])
        src, dst, chan = conn
        if len(a) != len(b):
            problems.append(f"connection {src}->{dst} channel {chan}: {len(a)} sends but {len(b)} receives")
        else:
            for i, (x, y) in enumerate(zip(a, b)):
                if x != y:
                    problems.append(f"connection {src}->{dst} channel {chan}: message {i} is sent with cnt={x} but received with cnt={y}")
                    break


def _deadlock(tbs: dict, problems: list[str]) -> None:
    """Run the threadblocks abstractly (sends never block, receives wait for their
    matching send, steps wait for their dependencies) and report what is stuck."""
    pc = {k: 0 for k in tbs}
    sent, received = defaultdict(int), defaultdict(int)
    waits = {}
    for key, t in tbs.items():
        acc = []
        lst = []
        for st in t["steps"]:
            if st["depid"] is not None and st["depid"] >= 0:
                acc.append((key[0], st["depid"], st["deps"]))
            lst.append(acc)
            if st["type"] != "nop":
                acc = []
        waits[key] = lst
    progress = True
    while progress:
        progress = False
        for key in sorted(tbs):
            t = tbs[key]
            while pc[key] < len(t["steps"]):
                st = t["steps"][pc[key]]
                if st["type"] == "nop":
                    pc[key] += 1
                    progress = True
                    continue
                if any(pc[(g, b)] <= s for g, b, s in waits[key][pc[key]]):
                    break
                if _is(st["type"], 1):
                    conn = (t["recv"], key[0], t["chan"])
                    if sent[conn] <= received[conn]:
                        break
                    received[conn] += 1
                if _is(st["type"], 0):
                    sent[(key[0], t["send"], t["chan"])] += 1
                pc[key] += 1
                progress = True
    stuck = [k for k in sorted(tbs) if pc[k] < len(tbs[k]["steps"])]
    if stuck:
        desc = ", ".join(f"gpu {g} tb {b} at step {pc[(g, b)]}" for g, b in stuck[:4])
        problems.append(f"deadlock: {len(stuck)} threadblocks can never finish ({desc}); a step waits for a step that runs after it")
