"""The shim's C units call each other one way (wrap -> registry <- resurrect <- control), read from the
compiled objects themselves: unit A depends on unit B when an undefined symbol of A.o is defined in B.o."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from leveller.bench.shim import SHIM_DIR

# Every allowed edge; alloc.c and real.c are the bottom, anyone may call them.
ALLOWED = {
    "verbs_wrap": {"registry", "real"},
    "registry": {"alloc", "real"},
    "resurrect": {"registry"},
    "control": {"resurrect", "registry", "alloc", "json", "agentreg"},
    "agentreg": {"registry"},
    "json": {"alloc"},
    "real": set(),
    "alloc": set(),
}


def symbols(obj: Path) -> tuple[set[str], set[str]]:
    """(defined global symbols, undefined symbols) of one object file."""
    out = subprocess.run(["nm", "--extern-only", str(obj)], capture_output=True, text=True, check=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "U":
            undefined.add(parts[1])
        elif len(parts) == 3 and parts[1] in "TDBRVWi":
            defined.add(parts[2])
    return defined, undefined


def unit_graph(objects: list[Path]) -> dict[str, set[str]]:
    """unit -> the units whose symbols it uses."""
    syms = {o.stem: symbols(o) for o in objects}
    owner = {s: unit for unit, (defined, _) in syms.items() for s in defined}
    return {unit: {owner[s] for s in undefined if s in owner and owner[s] != unit}
            for unit, (_, undefined) in syms.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of graph as a list of units, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(u: str) -> list[str] | None:
        state[u] = 1
        stack.append(u)
        for v in sorted(graph.get(u, ())):
            if state.get(v) == 1:
                return stack[stack.index(v):] + [v]
            if v not in state and (found := visit(v)):
                return found
        state[u] = 2
        stack.pop()
        return None

    for u in sorted(graph):
        if u not in state and (found := visit(u)):
            return found
    return None


@pytest.fixture(scope="module")
def objects(shim_build: Path) -> list[Path]:
    if shutil.which("nm") is None:
        pytest.fail("nm (binutils) is needed to read the shim's objects")
    return sorted((SHIM_DIR / "build").glob("*.o"))


def test_every_unit_is_known_and_calls_only_downwards(objects: list[Path]) -> None:
    graph = unit_graph(objects)
    assert set(graph) <= set(ALLOWED), f"new unit(s) {set(graph) - set(ALLOWED)}: place them in ALLOWED"
    for unit, deps in graph.items():
        assert deps <= ALLOWED[unit], f"{unit}.c calls {sorted(deps - ALLOWED[unit])}, against the layering"
    assert find_cycle(graph) is None
    # the layering is used, not vacuous: the expected edges are there
    assert {"registry", "real"} <= graph["verbs_wrap"] and "registry" in graph["resurrect"]
    assert {"resurrect", "registry"} <= graph["control"]


def test_the_cycle_finder_finds_cycles() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_only_the_registry_knows_the_qp_struct() -> None:
    definition = re.compile(r"struct\s+shim_qp\s*\{")
    owners = [p.name for p in sorted(SHIM_DIR.glob("*.[ch]")) if definition.search(p.read_text())]
    assert owners == ["registry.c"]
