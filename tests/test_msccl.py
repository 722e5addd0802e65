"""MSCCL XML: the exporter's output passes the validator and, read back, still
computes the collective; hand-broken files are rejected with the right reason."""
from __future__ import annotations

import functools
import json
import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from collsched import _core
from collsched.export import rules as R
from collsched.export.msccl import from_xml, refine_for, to_xml
from collsched.export.validate import validate_msccl_xml
from collective_reference import assert_computes, verify_if_available

KINDS = ["allgather", "reduce_scatter", "allreduce"]


def plan(kind, algo, ranks, nbytes, elem=4, chunks=1, cluster=None):
    opts = {"chunks": str(chunks)} if chunks != 1 else None
    return _core.plan_collective(kind, algo, ranks, nbytes, elem, cluster, opts)


def roundtrip(p, nbytes, elem=4, cluster=None, **kw):
    xml = to_xml(p, **kw)
    assert validate_msccl_xml(xml) == []
    back = from_xml(xml, nbytes, elem, cluster=cluster)
    assert_computes(back)
    verify_if_available(back)
    return xml, back


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("algo", ["ring", "tree"])
def test_baselines_export_validate_and_roundtrip(kind, algo):
    for ranks in (1, 2, 3, 5, 8):
        for chunks in (1, 3):
            p = plan(kind, algo, ranks, 96, 4, chunks)
            assert_computes(p)
            roundtrip(p, 96)


def test_format_details():
    xml = to_xml(plan("reduce_scatter", "ring", 4, 64), name="rs4")
    assert xml.startswith('<algo name="rs4" ')
    assert 'coll="reducescatter"' in xml and "<?xml" not in xml and "\t" not in xml
    head = re.match(r"<algo ([^>]*)>", xml).group(1)
    for attr in ("nchunksperloop", "nchannels", "ngpus", "proto", "coll", "minBytes", "maxBytes", "inplace", "outofplace"):
        assert f' {attr}="' in " " + head
    # Ring reduce-scatter: one shard per chunk, input = 4 chunks per rank.
    assert 'nchunksperloop="4"' in xml and 'i_chunks="4" o_chunks="1"' in xml
    assert 'type="rrc"' in xml  # receive-reduce-copy in place for ReduceSum transfers
    for g in re.findall(r"<gpu .*?</gpu>", xml, re.S):
        ids = [int(x) for x in re.findall(r'<tb id="(\d+)"', g)]
        assert ids == list(range(len(ids)))


def test_chunk_is_the_gcd_and_stated_in_nchunksperloop():
    # Allreduce of 96 bytes on 3 ranks: shards of 32 bytes; with chunks=2 pieces of 16 bytes.
    xml = to_xml(plan("allreduce", "ring", 3, 96, 4, chunks=2))
    assert 'nchunksperloop="6"' in xml
    back = from_xml(xml, 96 * 1000, 4)  # the XML is size-independent: scale the run up
    assert back.meta["chunk_bytes"] == str(16 * 1000)
    assert_computes(back)


def test_loop_size_follows_the_executor():
    # chunkSize of msccl_setup.cc / msccl_kernel.cu with NCCL's default buffers.
    assert R.loop_bytes("Simple") == 2 << 20  # 4 MiB / 8 steps * 4 chunk steps
    assert R.loop_bytes("LL") == 32 << 10  # 64 KiB step, half of it data
    assert R.loop_bytes("LL128") == 576000  # 614400 B step, 15/16 data
    assert R.loop_bytes("Simple", buffsize=8 << 20) == 4 << 20
    with pytest.raises(ValueError, match="proto"):
        R.loop_bytes("LL256")


def _ntransfers(p) -> int:
    return len(json.loads(p.to_json())["transfers"])


def test_large_runs_loop_over_the_xml():
    """A chunk larger than the loop size runs as L passes of the XML, each moving the next
    slice of every chunk; the result still computes the collective and verifies."""
    p = _two_trees_plan()  # 8-byte shards, 4-byte chunks; the local copy is one cnt=2 step
    xml = to_xml(p)
    assert 'type="cpy"' in xml and 'cnt="2"' in xml
    one = from_xml(xml, 8 * 12, 1, loop_bytes=0)  # chunk = 48 bytes in one pass
    assert one.meta["loops"] == "1" and one.meta["chunk_bytes"] == "48"
    for loop, loops in ((16, 3), (20, 3), (48, 1), (1 << 20, 1)):
        back = from_xml(xml, 8 * 12, 1, loop_bytes=loop)
        assert back.meta["loops"] == str(loops)
        assert _ntransfers(back) == loops * _ntransfers(one)
        assert_computes(back)
        back.verify()
        if loops > 1:  # a cnt=2 step moves one slice of each of its chunks: two segments
            d = json.loads(back.to_json())
            local = [t for t in d["transfers"] if t["src"] == t["dst"]]
            assert all(t["seg_end"] - t["seg_begin"] == 2 for t in local)
    # Refined 3x, the same run fits one pass of 16-byte chunks and still computes.
    fine = to_xml(p, refine=3)
    assert validate_msccl_xml(fine) == [] and 'nchunksperloop="12"' in fine and 'cnt="6"' in fine
    assert refine_for(4, 8 * 12 * 2, "Simple") == 1 and refine_for(4, 3 << 23) == 3
    back = from_xml(fine, 8 * 12, 1, loop_bytes=16)
    assert back.meta["loops"] == "1" and _ntransfers(back) == _ntransfers(one)
    assert_computes(back)
    back.verify()
    with pytest.raises(ValueError, match="refine"):
        to_xml(p, refine=0)
    # Default: the Simple protocol's 2 MiB; a 6 MiB chunk takes three iterations.
    assert from_xml(xml, 12 << 20, 1).meta["loops"] == "3"
    with pytest.raises(ValueError, match="loop_bytes"):
        from_xml(xml, 96, 1, loop_bytes=-1)


def test_import_names_malformed_xml_ids_and_peers():
    """Reading back a broken file says what is wrong (a ValueError), never an IndexError."""
    xml = to_xml(plan("allgather", "ring", 4, 64, 1))
    with pytest.raises(ValueError, match="not well-formed XML"):
        from_xml("", 64, 1)
    with pytest.raises(ValueError, match=r"ids must be distinct and in 0\.\.3"):
        from_xml(xml.replace('<gpu id="3"', '<gpu id="7"', 1), 64, 1)
    with pytest.raises(ValueError, match=r"ids must be distinct"):
        from_xml(xml.replace('<gpu id="3"', '<gpu id="2"', 1), 64, 1)
    bad_peer = re.sub(r'send="([0-3])"', 'send="9"', xml, count=1)
    with pytest.raises(ValueError, match=r"send=9 is not a rank in 0\.\.3 or -1"):
        from_xml(bad_peer, 64, 1)
    gpu0 = xml[xml.index('<gpu id="0"'):xml.index('</gpu>')]
    assert '<tb id="1"' in gpu0
    with pytest.raises(ValueError, match="two threadblocks with id 0"):
        from_xml(xml.replace(gpu0, gpu0.replace('<tb id="1"', '<tb id="0"', 1), 1), 64, 1)
    assert from_xml(xml, 64, 1).verify()["transfers"] == 16  # the intact file still reads back


@settings(max_examples=25, deadline=None)
@given(kind=st.sampled_from(KINDS), algo=st.sampled_from(["ring", "tree"]), ranks=st.integers(1, 6),
       chunks=st.integers(1, 3), scale=st.integers(1, 5), loop_elems=st.integers(1, 7))
def test_random_loop_imports_compute_the_collective(kind, algo, ranks, chunks, scale, loop_elems):
    nbytes = 4 * ranks * chunks * 2
    xml = to_xml(plan(kind, algo, ranks, nbytes, 4, chunks))
    back = from_xml(xml, nbytes * scale, 4, loop_bytes=4 * loop_elems)
    assert_computes(back)
    verify_if_available(back)


def _two_trees_plan():
    """Allgather on 2 ranks where each shard goes over two parallel transfers in one step
    (two trees sharing an edge), as a ForestColl plan with multiplicity 2 does."""
    t, s = [], []

    def add(src, dst, segs, step):
        t.append({"src": src, "dst": dst, "op": "copy", "tier": "local" if src == dst else "scale_up", "step": step,
                  "seg_begin": len(s), "seg_end": len(s) + len(segs), "dep_begin": 0, "dep_end": 0})
        s.extend({"src_buf": a, "src_off": b, "dst_buf": c, "dst_off": d, "len": e} for a, b, c, d, e in segs)

    for r in range(2):
        add(r, r, [("input", 0, "output", 8 * r, 8)], 0)
    for r in range(2):
        for half in range(2):
            add(r, 1 - r, [("input", 4 * half, "output", 8 * r + 4 * half, 4)], 1)
    d = {"algorithm": "two_trees", "collective": {"kind": "all_gather", "ranks": 2, "shard_bytes": 8}, "gpus_per_server": 2,
         "scratch_bytes": [0, 0], "transfers": t, "segments": s, "deps": [], "input_hash": 0, "meta": {}}
    return _core.Plan.from_json(json.dumps(d))


def test_parallel_transfers_of_one_pair_use_separate_channels():
    p = _two_trees_plan()
    assert_computes(p)
    xml, _ = roundtrip(p, 8, 1)
    assert 'nchannels="2"' in xml
    assert len(re.findall(r'<tb id="\d+" send="1" recv="-1" chan="\d+"', xml)) == 2
    one, _ = roundtrip(p, 8, 1, channels=1)
    assert 'nchannels="1"' in one and len(re.findall(r'send="1" recv="-1"', one)) == 1


def _chained_trees_plan():
    """Allgather on 2 ranks, each shard over two trees sharing the edge, each tree in two
    pieces: a tree's second piece depends on its first (one stream per tree)."""
    t, s, deps = [], [], []

    def add(src, dst, seg, step, dep=None):
        t.append({"src": src, "dst": dst, "op": "copy", "tier": "local" if src == dst else "scale_up", "step": step,
                  "seg_begin": len(s), "seg_end": len(s) + 1, "dep_begin": len(deps), "dep_end": len(deps) + (dep is not None)})
        s.append(dict(zip(("src_buf", "src_off", "dst_buf", "dst_off", "len"), seg)))
        deps.extend([] if dep is None else [dep])
        return len(t) - 1

    for r in range(2):
        add(r, r, ("input", 0, "output", 8 * r, 8), 0)
    for r in range(2):
        first = [add(r, 1 - r, ("input", 4 * tree, "output", 8 * r + 4 * tree, 2), 1) for tree in range(2)]
        for tree in range(2):
            add(r, 1 - r, ("input", 4 * tree + 2, "output", 8 * r + 4 * tree + 2, 2), 2, first[tree])
    d = {"algorithm": "chained_trees", "collective": {"kind": "all_gather", "ranks": 2, "shard_bytes": 8}, "gpus_per_server": 2,
         "scratch_bytes": [0, 0], "transfers": t, "segments": s, "deps": deps, "input_hash": 0, "meta": {}}
    return _core.Plan.from_json(json.dumps(d))


def test_each_stream_keeps_its_channel():
    """A tree's pieces on an edge stay on one connection, in order, and the two trees get
    two: a threadblock never carries two streams that could wait for each other."""
    p = _chained_trees_plan()
    assert_computes(p)
    xml, _ = roundtrip(p, 8, 1)
    g0 = xml[xml.index('<gpu id="0"'):xml.index('<gpu id="1"')]
    sends = re.findall(r'<tb id="\d+" send="1" recv="-1" chan="(\d+)">(.*?)</tb>', g0, re.S)
    assert len(sends) == 2
    offsets = sorted(tuple(int(o) for o in re.findall(r'type="s" srcbuf="i" srcoff="(\d+)"', body)) for _, body in sends)
    assert offsets == [(0, 1), (2, 3)], offsets  # 2-byte chunks: tree 0 = chunks 0-1, tree 1 = chunks 2-3


def test_long_threadblocks_spill_to_another_channel():
    p = plan("allgather", "ring", 3, 80, 1, chunks=40)  # 80 sends per rank to its successor
    xml, _ = roundtrip(p, 80, 1, channels=1)
    steps = [len(re.findall(r"<step ", tb)) for tb in re.findall(r"<tb .*?</tb>", xml, re.S)]
    assert max(steps) <= 64 and 'nchannels="2"' in xml


def test_unexportable_plans_are_named():
    a2a = _core.plan_all_to_all(np.full((2, 2), 8, dtype=np.uint64), _core.Cluster.parse("h100:1,gpus=2"), "fanout")
    with pytest.raises(ValueError, match="allgather, reduce_scatter and allreduce"):
        to_xml(a2a)
    d = json.loads(plan("allreduce", "ring", 1, 40000, 1).to_json())
    d["segments"] = [{"src_buf": "input", "src_off": 1, "dst_buf": "output", "dst_off": 1, "len": 39999},
                     {"src_buf": "input", "src_off": 0, "dst_buf": "output", "dst_off": 0, "len": 1}]
    d["transfers"][0]["seg_end"] = 2
    with pytest.raises(ValueError, match=r"transfer 0 .*32767"):
        to_xml(_core.Plan.from_json(json.dumps(d)))
    with pytest.raises(ValueError, match="proto"):
        to_xml(plan("allgather", "ring", 2, 8), proto="LL256")
    with pytest.raises(ValueError, match="name"):
        to_xml(plan("allgather", "ring", 2, 8), name='a"b')


# ---------------------------------------------------------------------------
# Hand-broken files

BASE = to_xml(plan("allgather", "ring", 3, 4, 1), channels=1)


def gpu0_tb(xml: str, tb: int) -> tuple[int, int]:
    g0 = xml.index('<gpu id="0"')
    start = xml.index(f'<tb id="{tb}"', g0)
    return start, xml.index("</tb>", start)


def edit_tb(xml: str, tb: int, old: str, new: str) -> str:
    a, b = gpu0_tb(xml, tb)
    assert old in xml[a:b], old
    return xml[:a] + xml[a:b].replace(old, new, 1) + xml[b:]


BROKEN = {
    "missing attribute": (BASE.replace(' hasdep="0"/>', "/>", 1), "missing required attribute 'hasdep'"),
    "xml declaration": ('<?xml version="1.0"?>\n' + BASE, "XML declaration"),
    "tb ids not consecutive": (edit_tb(BASE, 2, '<tb id="2"', '<tb id="3"'), "tb 2 is missing"),
    "duplicate tb id": (edit_tb(BASE, 2, '<tb id="2"', '<tb id="1"'), "duplicate threadblock id"),
    "two tbs on one (channel, recv peer)": (edit_tb(BASE, 2, 'send="1" recv="-1"', 'send="1" recv="2"'), "both receive from peer 2 on channel 0"),
    "two tbs on one (channel, send peer)": (edit_tb(BASE, 1, 'send="-1" recv="2"', 'send="1" recv="2"'), "both send to peer 1 on channel 0"),
    "channel 33": (edit_tb(BASE, 1, 'chan="0"', 'chan="33"'), "chan=33 is outside [0, 32]"),
    "dependency on a later step": (
        edit_tb(edit_tb(BASE, 1, 'depid="-1" deps="-1" hasdep="1"', 'depid="2" deps="1" hasdep="1"'), 2, 'deps="0" hasdep="0"', 'deps="0" hasdep="1"'),
        "deadlock",
    ),
    "dependency on a step that never signals": (edit_tb(BASE, 2, 'depid="1" deps="0"', 'depid="1" deps="1"'), "never signals"),
    "dependency past the end": (edit_tb(BASE, 2, 'depid="1" deps="0"', 'depid="1" deps="7"'), "which has 2 steps"),
    "coll spelling": (BASE.replace('coll="allgather"', 'coll="reduce_scatter"'), "'reducescatter'"),
    "steps out of order": (edit_tb(BASE, 2, 's="1"', 's="5"'), "s=5 but steps must be numbered"),
    "count mismatch": (edit_tb(BASE, 2, 'srcoff="2" dstbuf="o" dstoff="2" cnt="1"', 'srcoff="1" dstbuf="o" dstoff="1" cnt="2"'), "sent with cnt=2 but received with cnt=1"),
    "count too large": (BASE.replace('cnt="1"', 'cnt="72"', 1), "cnt=72 is outside [0, 71]"),
    "offset past buffer": (edit_tb(BASE, 0, 'dstoff="0"', 'dstoff="3"'), "runs outside the buffer of 3 chunks"),
    "tab indentation": (BASE.replace("  <gpu", "\t<gpu", 1), "tab character"),
    "single quotes": (BASE.replace('proto="Simple"', "proto='Simple'"), "double quotes"),
    "tag over two lines": (BASE.replace(' proto="Simple"', '\n proto="Simple"'), "spans several lines"),
    "unknown step type": (BASE.replace('type="cpy"', 'type="copy"', 1), "unknown step type 'copy'"),
    "unknown protocol": (BASE.replace('proto="Simple"', 'proto="simple"'), "proto='simple'"),
    "missing gpu": (re.sub(r'  <gpu id="2".*?</gpu>\n', "", BASE, flags=re.S), "ngpus=3 but has 2"),
    "unmatched send": (edit_tb(BASE, 2, '      <step s="1"', '      <step s="1" type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>\n      <step s="2"').replace('s="2" type="s" srcbuf="o"', 's="2" type="s" srcbuf="o"'), "3 sends but 2 receives"),
    "nop without dependency": (edit_tb(BASE, 2, 'type="s" srcbuf="i"', 'type="nop" srcbuf="i"'), "nop without a dependency"),
    "peer is itself": (edit_tb(BASE, 1, 'recv="2"', 'recv="0"'), "peer is the GPU itself"),
    "dep id beyond int8": (edit_tb(BASE, 2, 'depid="1"', 'depid="200"'), "depid=200 is outside [-1, 127]"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_xml_is_rejected(case):
    xml, message = BROKEN[case]
    problems = validate_msccl_xml(xml)
    assert any(message in p for p in problems), f"{case}: expected {message!r} in {problems}"


def test_too_many_steps_in_a_threadblock():
    p = plan("allgather", "ring", 2, 70, 1, chunks=70)
    xml = to_xml(p, channels=1)
    # Force every send into one threadblock on channel 0.
    merged = re.sub(r'chan="1"', 'chan="0"', xml)
    problems = validate_msccl_xml(merged)
    assert any("more than 64 steps" in p or "both send to peer" in p for p in problems)


def test_well_formed_but_foreign_root():
    assert validate_msccl_xml("<gpu/>") == ["root element is <gpu>, expected <algo>"]
    assert any("not well-formed" in p for p in validate_msccl_xml("<algo>"))


@settings(max_examples=30, deadline=None)
@given(kind=st.sampled_from(KINDS), algo=st.sampled_from(["ring", "tree"]), ranks=st.integers(1, 12),
       elems=st.integers(1, 6), chunks=st.integers(1, 4), channels=st.sampled_from([None, 1, 2]))
def test_random_baselines_roundtrip(kind, algo, ranks, elems, chunks, channels):
    nbytes = elems * ranks * 4
    p = plan(kind, algo, ranks, nbytes, 4, chunks)
    roundtrip(p, nbytes, 4, channels=channels)


# ---------------------------------------------------------------------------
# ForestColl plans (once collsched.forest lands)


def _forest():
    forest = pytest.importorskip("collsched.forest")
    if not hasattr(forest, "schedule"):
        pytest.skip("collsched.forest.schedule not available yet")
    return forest


@pytest.mark.parametrize("kind,topology", [(k, "a100:2") for k in KINDS] + [("allgather", "mi250:2")])
def test_forest_plans_export(kind, topology):
    forest = _forest()
    from collsched.collectives import plan_collective

    n = forest.as_graph(topology).num_compute
    elem = 1 if kind == "allgather" else 4
    nbytes = 64 * elem * (n if kind == "allreduce" else 1)
    p = plan_collective(kind, n, nbytes, "forest", elem_bytes=elem, topology=topology, chunks=2)
    xml, back = roundtrip(p, nbytes, elem)
    assert f'ngpus="{n}"' in xml


@settings(max_examples=20, deadline=None)
@given(kind=st.sampled_from(KINDS), servers=st.integers(1, 3), gpus=st.sampled_from([2, 4, 8]), nic_div=st.sampled_from([1, 2, 4]),
       fabric=st.sampled_from(["switch", "mesh", "ring"]), chunks=st.integers(1, 3), merge=st.booleans(),
       loop_elems=st.sampled_from([None, 1, 3]))
def test_random_cluster_forest_plans_export(kind, servers, gpus, nic_div, fabric, chunks, merge, loop_elems):
    """ForestColl plans on random clusters (shared NICs, mesh and ring fabrics), merged or
    not, export with one stream per threadblock to XML that validates and, read back in one
    pass or in the executor's loops, computes the collective and verifies."""
    forest = _forest()
    from collsched.collectives import plan_collective

    cluster = _core.Cluster.parse(f"custom:{servers},gpus={gpus},nics={max(1, gpus // nic_div)},fabric={fabric}")
    n = cluster.num_gpus
    elem = 1 if kind == "allgather" else 4
    nbytes = 16 * elem * (n if kind == "allreduce" else 1)
    p = plan_collective(kind, n, nbytes, "forest", elem_bytes=elem, topology=cluster, chunks=chunks, merge=merge)
    xml = to_xml(p)
    assert validate_msccl_xml(xml) == []
    run = nbytes * 3
    back = from_xml(xml, run, elem, loop_bytes=None if loop_elems is None else loop_elems * elem)
    assert_computes(back)
    verify_if_available(back)


@functools.lru_cache(maxsize=8)
def _exported_and_read_back(topology: str, chunks: int, loop_bytes, one_pass: bool, split: bool):
    """The file part of `_simulated_export` (export, validate, read back, verify): most of its
    time (seconds for a 7 MB XML), and the same for the warm and the cold run of one file, so
    computed once per file. Returns (cluster, schedule, optimum GB/s, the read-back plan, shard bytes)."""
    forest = _forest()
    cluster = _core.Cluster.parse(topology)
    g = forest.Graph.from_cluster(cluster)
    opt = forest.optimal(g)["algbw_gbps"]
    sch = forest.schedule(g)
    n = cluster.num_gpus
    symbolic = forest.plan_allgather(sch, sch.k * chunks * 16, chunks, merge=False, split_multiplicity=split)
    xml = to_xml(symbolic)
    per_rank_chunks = int(re.search(r'nchunksperloop="(\d+)"', xml).group(1)) // n
    shard = (1 << 30) // n // per_rank_chunks * per_rank_chunks
    if one_pass:
        xml = to_xml(symbolic, refine=refine_for(per_rank_chunks * n, shard * n))
    assert validate_msccl_xml(xml) == []
    back = from_xml(xml, shard, 1, cluster=cluster, loop_bytes=loop_bytes)
    back.verify()
    return cluster, sch, opt, back, shard


def _simulated_export(topology: str, chunks: int = 16, loop_bytes=None, one_pass: bool = False, split: bool = False,
                      warm: bool = False, original: bool = False):
    """ForestColl allgather on a Cluster-derived graph, exported to MSCCL XML for a
    small symbolic shard, read back for 1 GB in total (with the executor's loops, or
    `loop_bytes=0` for one pass; `one_pass` refines the XML so the executor needs one
    pass) and simulated (`warm`: with warm connections, as NCCL's run). `split` sends
    trees of multiplicity m as m streams. Returns (algbw of the XML run, algbw of the
    original plan with `chunks` pieces per tree at the same size where `original`, else
    None, optimum), GB/s."""
    sim = pytest.importorskip("collsched.sim")
    cluster, sch, opt, back, shard = _exported_and_read_back(topology, chunks, loop_bytes, one_pass, split)
    n = cluster.num_gpus
    # The fluid model: ForestColl's optimum is a fluid rate (the hardware model's NCCL
    # collective constants, `h100`'s, would move both sides of the comparison).
    xml_algbw = n * shard / sim.simulate(back, cluster, warm_connections=warm, model="fluid").time_s / 1e9
    if not original:
        return xml_algbw, None, opt
    # Plans made from a Graph carry gpus_per_server = 0; give the original the cluster's tiers to simulate it.
    d = json.loads(_forest().plan_allgather(sch, shard, chunks, merge=False, split_multiplicity=split).to_json())
    gps = d["gpus_per_server"] = cluster.gpus_per_server
    for t in d["transfers"]:
        t["tier"] = "local" if t["src"] == t["dst"] else ("scale_up" if t["src"] // gps == t["dst"] // gps else "scale_out")
    orig_algbw = n * shard / sim.simulate(_core.Plan.from_json(json.dumps(d)), cluster, warm_connections=warm,
                                          model="fluid").time_s / 1e9
    return xml_algbw, orig_algbw, opt


@pytest.mark.parametrize("topology", ["h100:2", "mi250:2"])
def test_exported_forest_allgather_loses_nothing_in_simulation(topology):
    """The XML exported for the run size (refined so the executor needs one pass) keeps the
    plan's pieces; run with MSCCL semantics (each threadblock in order) it is as fast as the
    original plan in the same simulator, at 1 GB."""
    xml_algbw, orig_algbw, _ = _simulated_export(topology, chunks=8, one_pass=True, original=True)
    assert xml_algbw >= 0.99 * orig_algbw, (xml_algbw, orig_algbw)


def test_the_executors_loops_pipeline_a_coarse_xml():
    """An XML with 1 piece per tree has 32 MiB chunks at 1 GB: the executor runs it as 16
    passes of 2 MiB, pipelined across passes (0.957 of the optimum); one pass of 32 MiB
    pieces is far slower (0.791)."""
    looped, _, opt = _simulated_export("h100:2", chunks=1)
    single, _, _ = _simulated_export("h100:2", chunks=1, loop_bytes=0)
    assert looped >= 1.15 * single, (looped, single)
    assert looped >= 0.85 * opt, (looped, opt)


@pytest.mark.parametrize("topology,floor", [("h100:2", 0.94), ("a100:2", 0.93), ("mi250:2", 0.88)])
def test_one_piece_xml_pipelines_every_tree_in_the_executors_loops(topology, floor):
    """The CLI's XML (one piece per tree, size-independent) run at 1 GB: the executor's
    2 MiB passes pipeline it, and with one stream per threadblock no tree waits behind
    another's deeper data. Before streams had channels of their own: h100:2 0.79 of the
    optimum, mi250:2 0.74 (and 0.53 before shared NICs were lowered per GPU)."""
    xml_algbw, _, opt = _simulated_export(topology, chunks=1)
    assert xml_algbw >= floor * opt, (xml_algbw, opt)


@pytest.mark.parametrize("topology", ["h100:1", "a100:1"])
def test_exported_forest_allgather_in_one_box_reaches_the_optimum(topology):
    """In one box nothing is relayed: the XML refined for the run (one piece per tree, one
    pass) reaches ForestColl's optimum within 1% at 1 GB (0.999 measured)."""
    xml_algbw, _, opt = _simulated_export(topology, chunks=1, one_pass=True)
    assert xml_algbw >= 0.99 * opt, (xml_algbw, opt)


@pytest.mark.parametrize("topology,chunks,cold_ratio", [("h100:2", 64, 0.85), ("a100:2", 32, 0.96)])
def test_exported_forest_allgather_reaches_the_optimum_in_simulation(topology, chunks, cold_ratio):
    """A simulated run of the exported plan reaches ForestColl's optimum within 1% at 1 GB:
    the XML with 64 (h100:2) or 32 (a100:2) pieces per tree of the interleaved (shallow)
    schedule runs its 512 KiB / 1 MiB pieces in one pass of the executor, on warm
    connections (a stream's next piece hides its alpha behind the previous one, as NCCL's
    FIFO lets a sender run ahead): 0.991 / 0.993 measured. Paying alpha once per piece
    instead (every step waits for the previous one, then starts cold) the same files reach
    0.84 / 0.946: the per-piece latency is what the warm connection hides."""
    warm, _, opt = _simulated_export(topology, chunks=chunks, warm=True)
    cold, _, _ = _simulated_export(topology, chunks=chunks)
    assert warm >= 0.99 * opt, (warm, opt)
    assert cold <= cold_ratio * warm, (cold, warm)


def test_dropping_the_exporters_dependencies_is_caught_by_the_verifier():
    """The depid/deps the exporter writes carry real data dependencies: without
    them the XML still loads, but read back the plan forwards data before it arrives."""
    p = plan("allgather", "ring", 4, 64, 1)
    xml = to_xml(p)
    assert 'depid="-1" deps="-1"' in xml and re.search(r'depid="[0-9]+"', xml)
    stripped = re.sub(r'depid="[0-9]+" deps="[0-9]+"', 'depid="-1" deps="-1"', xml)
    assert validate_msccl_xml(stripped) == []  # structurally fine...
    back = from_xml(stripped, 64, 1)
    with pytest.raises(ValueError, match="reads bytes of output.*never written"):
        back.verify()  # ...but a send reads a shard before its receive
