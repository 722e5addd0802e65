"""Package layout: the command line lives in one package, and the planning modules import
one another without a cycle (issue 43, "Layout")."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "python" / "collsched"
CLI_MODULES = ("core", "runtime", "forest", "testbed", "moe", "calibrate", "demo", "bench")


def _collsched_imports(path: Path) -> set[str]:
    """Every ``collsched.<module>`` a file imports, at the top or inside a function (a lazy
    import still closes a cycle: it only moves the failure to the first call)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            parts = node.module.split(".")
            if parts[0] != "collsched":
                continue
            if len(parts) > 1:
                out.add(parts[1])
            else:  # from collsched import traffic, skew
                out.update(a.name for a in node.names)
        elif isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                if parts[0] == "collsched" and len(parts) > 1:
                    out.add(parts[1])
    return out


def test_planning_modules_have_no_import_cycle():
    names = ("planning", "skew", "traffic", "matrix", "topology", "sim", "fast")
    graph = {n: _collsched_imports(PKG / f"{n}.py") & set(names) - {n} for n in names}
    # Depth-first search for a back edge; the path names the cycle if one appears.
    state: dict[str, int] = {}

    def visit(n, path):
        state[n] = 1
        for m in sorted(graph[n]):
            assert state.get(m) != 1, f"import cycle: {' -> '.join(path + [m])}"
            if m not in state:
                visit(m, path + [m])
        state[n] = 2

    for n in names:
        if n not in state:
            visit(n, [n])
    assert "skew" in graph["traffic"] and "planning" not in graph["skew"]  # the edges the fix chose


def test_public_names_unchanged():
    import collsched
    from collsched import skew, traffic

    for name in collsched.__all__:
        assert getattr(collsched, name) is not None
    m = traffic.uniform(8, 4096)
    assert traffic.mtm(m, "h200:2,gpus=4") == skew.mtm(m, "h200:2,gpus=4")
    assert traffic.gini(m) == skew.gini(m)
    assert traffic.as_matrix(m).dtype.str == "<u8"


def test_cli_modules_live_in_the_cli_package():
    assert (PKG / "cli" / "__init__.py").is_file()
    for name in CLI_MODULES:
        assert (PKG / "cli" / f"{name}.py").is_file(), name
    leftovers = sorted(p.name for p in PKG.glob("cli_*.py")) + [n for n in ("cli.py", "demo.py", "bench.py")
                                                                  if (PKG / n).exists()]
    assert leftovers == []


def test_python_dash_m_collsched_cli_runs():
    # torchrun's `-m collsched.cli bench` form (docs/runtime.md) needs cli/__main__.py.
    out = subprocess.run([sys.executable, "-m", "collsched.cli", "--version"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert "collsched" in out.stdout
