"""``collsched forest`` with typer's CliRunner: once against a stand-in
ForestColl module (so the command's own logic is tested whatever the state of
collsched.forest) and once against the real one when it is available."""
from __future__ import annotations

import json
import re
import sys
import types

import pytest
import typer
from typer.testing import CliRunner

from collsched import _core
from collsched.cli import forest as cli_forest
from collsched.export.validate import validate_msccl_xml

# A fresh app with a group callback, so `forest` is a subcommand whatever else is registered.
app = typer.Typer(pretty_exceptions_enable=False)


@app.callback()
def _group() -> None:
    pass


cli_forest.register(app)
runner = CliRunner()


def _fake_forest():
    """Stand-in with collsched.forest's interface: a Cluster-shaped graph (full mesh
    in each box, one switch joining the boxes), ring 'trees' (one chain per root),
    and the ring baselines as plans."""
    m = types.ModuleType("collsched.forest")

    class Graph:
        def __init__(self, cluster):
            self.cluster = cluster
            n, g = cluster.num_gpus, cluster.gpus_per_server
            self.num_compute = n
            self.compute_nodes = [f"b{r // g}.gpu{r % g}" for r in range(n)]
            self.nodes = [{"name": x, "kind": "compute", "box": r // g, "multicast": False} for r, x in enumerate(self.compute_nodes)]
            self.nodes += [{"name": f"b{b}.nvs", "kind": "switch", "box": b, "multicast": False} for b in range(cluster.servers)]
            self.nodes.append({"name": "ib", "kind": "switch", "box": None, "multicast": False})
            self.links = [(x, f"b{r // g}.nvs", 1) for r, x in enumerate(self.compute_nodes)] + [(x, "ib", 1) for x in self.compute_nodes]

        @staticmethod
        def from_cluster(c):
            return Graph(c)

    class Schedule:
        def __init__(self, g, k):
            n = g.num_compute
            self.k, self.generation_s, self.ranks = k, 0.0123, n
            self.tree_bandwidth, self.algbw_gbps = 3.5e9, 3.5
            self.trees = [
                {"root": r, "multiplicity": k, "edges": [((r + i) % n, (r + i + 1) % n, []) for i in range(n - 1)]}
                for r in range(n)
            ]

    def as_graph(x):
        if isinstance(x, Graph):
            return x
        return Graph(x if isinstance(x, _core.Cluster) else _core.Cluster.parse(x))

    def optimal(g):
        return {"algbw_exact": "7000000000/2", "algbw_gbps": 3.5, "k": 1, "tree_bandwidth": 3.5e9, "bottleneck_cut": ["b0.gpu0", "b0.gpu1"]}

    def schedule(g, k=None, optimal=False):
        return Schedule(g, k or 1)

    def plan_allgather(sch, shard_bytes, chunks=8, merge=True, split_multiplicity=False):
        return _core.plan_collective("allgather", "ring", sch.ranks, shard_bytes, 1, None, {"chunks": str(chunks)})

    def plan_reduce_scatter(sch, shard_bytes, elem_bytes=4, chunks=8, merge=True, split_multiplicity=False):
        return _core.plan_collective("reduce_scatter", "ring", sch.ranks, shard_bytes, elem_bytes, None, {"chunks": str(chunks)})

    def plan_allreduce(sch, nbytes, elem_bytes=4, chunks=8, merge=True, split_multiplicity=False):
        return _core.plan_collective("allreduce", "ring", sch.ranks, nbytes, elem_bytes, None, {"chunks": str(chunks)})

    m.Graph, m.as_graph, m.optimal, m.schedule = Graph, as_graph, optimal, schedule
    m.plan_allgather, m.plan_reduce_scatter, m.plan_allreduce = plan_allgather, plan_reduce_scatter, plan_allreduce
    return m


@pytest.fixture
def fake(monkeypatch):
    import collsched

    m = _fake_forest()
    monkeypatch.setitem(sys.modules, "collsched.forest", m)
    monkeypatch.setattr(collsched, "forest", m, raising=False)
    return m


def test_json_summary(fake):
    r = runner.invoke(app, ["forest", "--topology", "mi250:2", "--json"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.output)
    assert s["algbw_exact"] == "7/2" and isinstance(s["algbw_gbps"], float) and s["algbw_gbps"] == 3.5
    assert s["k"] == 1 and s["tree_bandwidth_gbps"] == 3.5
    assert s["algbw_exact_bytes_per_s"] == "3500000000" and s["gpus"] == 16
    assert s["bottleneck_cut"] == ["b0.gpu0", "b0.gpu1"]
    assert len(s["trees"]) == 16 and s["trees"][3]["root"] == 3 and len(s["trees"][3]["edges"]) == 15
    assert s["generation_s"] == pytest.approx(0.0123)


def test_rich_summary_and_fixed_k(fake):
    r = runner.invoke(app, ["forest", "--topology", "mi250:2", "--k", "2"])
    assert r.exit_code == 0, r.output
    assert "3.500 GB/s" in r.output and "7/2" in r.output and "k = 2" in r.output and "16 trees" in r.output


@pytest.mark.parametrize("collective", ["allgather", "reduce_scatter", "allreduce"])
def test_xml_export(fake, tmp_path, collective):
    out = tmp_path / "f.xml"
    r = runner.invoke(app, ["forest", "-t", "mi250:2", "--collective", collective, "--xml", str(out), "--json"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.output)
    assert s["xml"]["problems"] == []
    xml = out.read_text()
    assert s["xml"]["channels"] == int(re.search(r'nchannels="(\d+)"', xml).group(1)) >= 1
    assert 1 <= s["xml"]["threadblocks"] == max(g.count("<tb ") for g in xml.split("<gpu ")[1:])
    assert validate_msccl_xml(xml) == []
    assert f'coll="{ {"allgather": "allgather", "reduce_scatter": "reducescatter", "allreduce": "allreduce"}[collective] }"' in xml


def test_draw(fake, tmp_path):
    png = tmp_path / "tree.png"
    r = runner.invoke(app, ["forest", "-t", "mi250:2", "--draw", str(png), "--tree", "5"])
    assert r.exit_code == 0, r.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_bad_arguments(fake):
    r = runner.invoke(app, ["forest", "-t", "mi250:2", "--collective", "alltoall"])
    assert r.exit_code != 0 and "alltoall" in r.output
    r = runner.invoke(app, ["forest", "-t", "nope:2"])
    assert r.exit_code == 2
    r = runner.invoke(app, ["forest", "-t", "mi250:2", "--draw", "x.png", "--tree", "99"])
    assert r.exit_code == 2


def test_real_forest(tmp_path):
    forest = pytest.importorskip("collsched.forest")
    if not hasattr(forest, "schedule"):
        pytest.skip("collsched.forest.schedule not available yet")
    out = tmp_path / "ag.xml"
    r = runner.invoke(app, ["forest", "--topology", "mi250:2", "--json", "--xml", str(out)])
    assert r.exit_code == 0, r.output
    s = json.loads(r.output)
    num, den = (int(x) for x in (s["algbw_exact"] + "/1").split("/")[:2])
    assert s["algbw_gbps"] == pytest.approx(num / den, rel=1e-9)
    assert s["k"] >= 1 and s["trees"] and s["bottleneck_cut"]
    assert validate_msccl_xml(out.read_text()) == []


def test_real_forest_xml_with_pieces_and_split_streams(tmp_path):
    """--pieces cuts each tree's data into that many pieces (more steps, the same chunk
    layout per piece); --split-multiplicity sends a tree of multiplicity m as m streams:
    a100:2's schedule has trees of multiplicity up to 6, so the split file has more steps
    (one per stream and piece; 976 / 3 856 / 13 456 measured)."""
    pytest.importorskip("collsched.forest")
    shapes = {}
    for flags in ([], ["--pieces", "4"], ["--pieces", "4", "--split-multiplicity"]):
        out = tmp_path / f"ag{len(flags)}.xml"
        r = runner.invoke(app, ["forest", "-t", "a100:2", "--json", "--xml", str(out), *flags])
        assert r.exit_code == 0, r.output
        s = json.loads(r.output)
        xml = out.read_text()
        assert s["xml"]["problems"] == [] and validate_msccl_xml(xml) == []
        assert s["xml"]["pieces"] == (4 if flags else 1) and s["xml"]["split_multiplicity"] == ("--split-multiplicity" in flags)
        shapes[len(flags)] = (xml.count("<step "), s["xml"]["threadblocks"])
    assert shapes[2][0] >= 4 * shapes[0][0] * 0.9, shapes
    assert shapes[3][0] > 2 * shapes[2][0], shapes
