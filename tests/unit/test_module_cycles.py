"""No two modules of leveller/ or sdn/ import each other, directly or around a longer loop.

Every import counts: at module level, inside a function (where a cycle hides: it loads, then breaks
when a refactoring moves the import up), under ``if TYPE_CHECKING:``, relative or absolute. An
import names the module it loads: ``from leveller.rpc import push`` is an edge to
``leveller.rpc.push``, ``from leveller.rpc.push import WATCH`` one to ``leveller.rpc.push`` too. The
package ``__init__`` that Python runs on the way is not an edge (ours import nothing of their own).
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("leveller", "sdn")


def module_name(path: Path, base: Path) -> str:
    parts = list(path.relative_to(base).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(node: ast.Import | ast.ImportFrom, name: str, is_package: bool) -> list[str]:
    """The dotted names ``node`` (in module ``name``) may load: modules, or a module's attributes."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:
        here = name.split(".") if is_package else name.split(".")[:-1]
        here = here[:len(here) - (node.level - 1)]
        base = ".".join(here + ([base] if base else []))
    return [base] + [f"{base}.{a.name}" for a in node.names]


def module_graph(roots: list[Path], base: Path) -> nx.DiGraph[str]:
    """Module -> the project modules it imports (anywhere in its file), for the packages ``roots``."""
    files = {module_name(p, base): p for root in roots for p in sorted(root.rglob("*.py"))}
    graph: nx.DiGraph[str] = nx.DiGraph()
    graph.add_nodes_from(files)
    for name, path in files.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            targets = imported(node, name, path.name == "__init__.py")
            if isinstance(node, ast.ImportFrom):  # `from P import m`: the submodule m if there is one, else P
                base_name, names = targets[0], targets[1:]
                targets = [n for n in names if n in files] or [base_name]
            for target in targets:
                while target and target not in files:  # `import a.b.c` of a name inside a.b: the module a.b
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph.add_edge(name, target)
    return graph


def import_cycles(roots: list[Path], base: Path) -> list[list[str]]:
    """Every set of modules that import each other (one loop shown per set), shortest first."""
    graph = module_graph(roots, base)
    loops = []
    for part in nx.strongly_connected_components(graph):
        if len(part) > 1:
            loops.append(nx.find_cycle(graph.subgraph(part)))
    return sorted(([a for a, _ in loop] + [loop[0][0]] for loop in loops), key=len)


def assert_no_cycles(roots: list[Path], base: Path) -> None:
    loops = import_cycles(roots, base)
    assert loops == [], "import cycles:\n" + "\n".join(" -> ".join(loop) for loop in loops)


def test_no_module_imports_itself_back() -> None:
    assert_no_cycles([ROOT / p for p in PACKAGES], ROOT)


def test_the_graph_sees_the_project() -> None:
    graph = module_graph([ROOT / p for p in PACKAGES], ROOT)
    assert graph.has_edge("leveller.rpc.transport", "leveller.rpc.wire")
    assert graph.has_edge("leveller.rpc.push", "leveller.rpc.protowire")  # `from leveller.rpc import protowire`
    assert graph.number_of_nodes() > 100


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path / "pkg"


@pytest.mark.parametrize("files, loop", [
    ({"pkg/__init__.py": "", "pkg/a.py": "from pkg import b\n", "pkg/b.py": "import pkg.a\n"},
     ["pkg.a", "pkg.b", "pkg.a"]),
    # hidden in a function, three modules round, one relative
    ({"pkg/__init__.py": "", "pkg/a.py": "def f():\n    from pkg.b import x\n",
      "pkg/b.py": "from .c import y\nx = 1\n", "pkg/sub/__init__.py": "",
      "pkg/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import f\ny = 2\n"},
     ["pkg.a", "pkg.b", "pkg.c", "pkg.a"]),
])
def test_a_planted_cycle_is_found(tmp_path: Path, files: dict[str, str], loop: list[str]) -> None:
    with pytest.raises(AssertionError, match="import cycles:"):
        assert_no_cycles([_package(tmp_path, files)], tmp_path)
    found = import_cycles([_package(tmp_path, files)], tmp_path)
    assert len(found) == 1
    start = found[0].index(loop[0])
    assert found[0][start:-1] + found[0][:start] + [loop[0]] == loop


def test_a_package_without_cycle_passes(tmp_path: Path) -> None:
    files = {"pkg/__init__.py": "", "pkg/a.py": "from pkg import b\nfrom pkg.b import x\n", "pkg/b.py": "x = 1\n",
             "pkg/c.py": "import pkg\nfrom . import a\n"}
    assert_no_cycles([_package(tmp_path, files)], tmp_path)
