"""The import graph flows one way, and the bottom layers stay pure.

    model <- core <- {sim, controller, agent, sdn, testbed, jobs, switchconfig} <- rpc <- app <- {bench, experiments}
          <- commands <- cli

ALLOWED below is the one place that says which package may import which (every import counts, also
one inside a function). Where the rest of the tree fits:
  errors       leveller.errors: the CLI's name for model.errors.UserError (imports only model)
  codec        leveller.codec: the strict JSON decoder of every message, RPC and the SDN app's REST
               API alike (imports only model)
  locking      file locks under /run/leveller (agent, experiments); imports only errors
  procs        running and stopping the processes the project starts (testbed, experiments); imports nothing
  config       TOML files for the long-running commands' flags (read by commands only); imports errors, files
  files        small regular files read at start (config, secrets, tokens, PEM); imports only errors
  jobs         the training-job side (emulator, hook, log-line and shift-file formats): the agent reads
               what jobs write, so jobs sits beside the agent and below it
  switchconfig vendor switch configurations: renders the SDN app's OVS rules (sdn.rules) and checks
               interface names like the agent (agent.names)
  testbed      emulated clusters; builds its switch queues with switchconfig.ovs. Its topology file
               loader (testbed.topofile) is read by sim and controller too
  controller   also asks the SDN app for paths (sdn.client), see controller/paths.py
  app          the composition roots leveller.controller.app and leveller.agent.app: they build a controller
               / an agent from its configuration, over rpc, for the CLI, the benchmarks and the demos alike.
               They live beside their service but count as a layer of their own above rpc
  options      leveller.options: values of options several commands share (weights, R window, switching
               rule), parsed with the controller's own checks (rpc.schema)
Inside experiments: ``shared`` imports no experiment; an experiment imports ``shared`` and the demo's
examples (``demo.scenario``), never another experiment (EXPERIMENT_ALLOWED).
Nothing under leveller/ or sdn/ imports leveller.commands (only the CLI does) or the tests.
The middle layer's few edges among peers are listed one by one; the test also checks that ALLOWED
has no cycle, so no edge can be added that makes two packages import each other.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[2]
BASE = {"model"}
FOUNDATION = BASE | {"errors", "codec"}
PURE = FOUNDATION | {"core"}
MIDDLE = PURE | {"jobs", "locking", "procs"}
SERVICES = {"sim", "controller", "agent", "sdn", "testbed", "jobs", "switchconfig"}
ALLOWED: dict[str, set[str]] = {
    "model": set(),
    "errors": {"model"},
    "codec": {"model"},
    "locking": {"errors"},
    "procs": set(),
    "files": {"errors"},
    "config": {"errors", "files"},
    "core": {"model"},
    "jobs": {"model", "errors"},
    "sim": PURE | {"testbed"},  # testbed.topofile: topology files
    "controller": PURE | {"sdn", "testbed"},  # sdn.client for paths, testbed.topofile
    "agent": MIDDLE,
    "sdn": PURE | {"files"},  # sdn.token reads its token file
    "testbed": PURE | {"procs", "switchconfig"},  # switchconfig.ovs: queue arguments
    "switchconfig": PURE | {"sdn", "agent"},  # sdn.rules, agent.names
    "rpc": PURE | {"controller", "agent", "files"},  # secrets and PEM files
    "options": MIDDLE | {"rpc"},  # rpc.schema.check_weight: the controller's rule for a weight
    "app": MIDDLE | SERVICES | {"rpc", "files", "options"},
    "bench": MIDDLE | SERVICES | {"rpc", "app", "options"},
    "experiments": MIDDLE | SERVICES | {"rpc", "bench", "app", "options"},
    "commands": MIDDLE | SERVICES | {"rpc", "bench", "experiments", "config", "files", "app", "options"},
    "cli": {"errors", "commands"},
}
NO_IO = {"os", "sys", "io", "time", "datetime", "random", "socket", "subprocess", "pathlib", "shutil",
         "logging", "json", "threading", "asyncio", "urllib", "http", "requests", "grpc", "bcc",
         "os_ken", "pyroute2", "matplotlib", "rich", "prometheus_client", "tempfile", "sqlite3"}


COMPOSITION_ROOTS = {"leveller.controller.app", "leveller.agent.app"}  # the layer "app"


def package(module: str) -> str | None:
    """The layer of a module name: the package under leveller (or ``sdn``), "app" for a composition root;
    None outside the project."""
    parts = module.split(".")
    if parts[0] == "sdn":
        return "sdn"
    if parts[0] != "leveller" or len(parts) < 2:
        return None
    if ".".join(parts[:3]) in COMPOSITION_ROOTS:
        return "app"
    return parts[1]


def imports(path: Path) -> list[str]:
    """Every absolute module name ``path`` imports, at module level or inside functions."""
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.append(node.module or "")
    return names


def edges() -> dict[tuple[str, str], list[str]]:
    """(importing layer, imported layer) -> the files with such an import."""
    out: dict[tuple[str, str], list[str]] = defaultdict(list)
    for root in ("leveller", "sdn"):
        for path in sorted((ROOT / root).rglob("*.py")):
            rel = path.relative_to(ROOT)
            src = package(".".join(rel.with_suffix("").parts))
            for mod in imports(path):
                dst = package(mod)
                if src and dst and dst != src:
                    out[(src, dst)].append(str(rel))
    return out


def violations(found: dict[tuple[str, str], list[str]]) -> list[str]:
    return [f"{a} -> {b} is not allowed ({', '.join(files)})" for (a, b), files in sorted(found.items())
            if b not in ALLOWED.get(a, set())]


def test_every_import_follows_the_allowed_graph() -> None:
    assert violations(edges()) == []


def test_the_allowed_graph_flows_one_way() -> None:
    graph = nx.DiGraph([(a, b) for a, bs in ALLOWED.items() for b in bs])
    assert nx.is_directed_acyclic_graph(graph), nx.find_cycle(graph)


def test_every_package_has_its_place() -> None:
    layers = {p.stem for p in (ROOT / "leveller").iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}
    assert layers - {"__init__"} <= set(ALLOWED), sorted(layers - {"__init__"} - set(ALLOWED))


def test_nothing_imports_the_commands_or_the_tests() -> None:
    """The commands are the CLI's (nothing else may need them); the tests are no library."""
    found = []
    for root in ("leveller", "sdn"):
        for path in sorted((ROOT / root).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if rel.parts[:2] == ("leveller", "commands") or rel == Path("leveller/cli.py"):
                continue
            found += [f"{rel} imports {mod}" for mod in imports(path)
                      if mod.split(".")[0] == "tests" or mod.startswith(("leveller.commands", "tests"))
                      or mod == "leveller" and "commands" in _imported_names(path)]
    assert found == []


def _imported_names(path: Path) -> set[str]:
    """Names of every ``from leveller import ...`` of ``path`` (``from leveller import commands``)."""
    return {a.name for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.ImportFrom)
            and node.level == 0 and node.module == "leveller" for a in node.names}


def test_the_composition_roots_are_a_layer_above_rpc() -> None:
    assert package("leveller.controller.app") == package("leveller.agent.app") == "app"
    assert package("leveller.controller.service") == "controller"
    assert violations({("controller", "app"): ["leveller/controller/ha.py"]}) == [
        "controller -> app is not allowed (leveller/controller/ha.py)"]
    assert violations({("app", "rpc"): ["leveller/controller/app.py"]}) == []


def test_a_backward_import_is_named() -> None:
    found = {("model", "rpc"): ["leveller/model/flow.py"], ("core", "model"): ["leveller/core/paths.py"],
             ("agent", "rpc"): ["leveller/agent/service.py"]}
    assert violations(found) == ["agent -> rpc is not allowed (leveller/agent/service.py)",
                                 "model -> rpc is not allowed (leveller/model/flow.py)"]


def test_model_and_core_stay_pure() -> None:
    """No I/O, clock or randomness in model and core; model imports nothing else of leveller."""
    for layer in ("model", "core"):
        files = sorted((ROOT / "leveller" / layer).glob("*.py"))
        assert len(files) >= 5
        for path in files:
            for mod in imports(path):
                assert mod.split(".")[0] not in NO_IO, f"{path.name} imports {mod}"
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                    assert node.func.id not in {"open", "print", "input"}, f"{path.name} calls {node.func.id}"


EXPERIMENTS = ROOT / "leveller" / "experiments"


def experiment_edges(base: Path = EXPERIMENTS) -> list[tuple[str, str, str]]:
    """(importing subpackage, imported module, file) for every import between two subpackages of
    leveller.experiments."""
    out = []
    for path in sorted(base.rglob("*.py")):
        rel = path.relative_to(base)
        if len(rel.parts) < 2:
            continue
        for mod in imports(path):
            parts = mod.split(".")
            if parts[:2] == ["leveller", "experiments"] and len(parts) > 2 and parts[2] != rel.parts[0]:
                out.append((rel.parts[0], ".".join(parts[2:]), str(rel)))
    return out


def experiment_violations(found: list[tuple[str, str, str]]) -> list[str]:
    """Imports between experiments' subpackages that the structure forbids."""
    def allowed(src: str, dst: str) -> bool:
        top = dst.split(".")[0]
        return src != "shared" and (top == "shared" or dst == "demo.scenario")
    return [f"{src} imports {dst} ({file})" for src, dst, file in found if not allowed(src, dst)]


def test_experiments_import_only_the_shared_parts_and_the_demos_examples() -> None:
    found = experiment_edges()
    assert any(src == "tenants" and dst.startswith("shared.") for src, dst, _ in found)  # the walk sees them
    assert experiment_violations(found) == []


def test_an_import_between_experiments_is_named() -> None:
    found = [("chaos", "soak.run", "chaos/run.py"), ("shared", "demo.scenario", "shared/cluster.py"),
             ("soak", "demo.scenario", "soak/run.py"), ("tenants", "shared.jobs", "tenants/plan.py"),
             ("recovery", "demo.orchestrate", "recovery/run.py")]
    assert experiment_violations(found) == ["chaos imports soak.run (chaos/run.py)",
                                            "shared imports demo.scenario (shared/cluster.py)",
                                            "recovery imports demo.orchestrate (recovery/run.py)"]


def test_every_experiment_is_a_package_of_modules() -> None:
    """No module sits beside the subpackages: a new piece goes into shared or its experiment."""
    loose = [p.name for p in EXPERIMENTS.glob("*.py") if p.name != "__init__.py"]
    subs = [p for p in EXPERIMENTS.iterdir() if p.is_dir() and p.name != "__pycache__"]
    assert loose == []
    assert {"shared", "demo", "tenants"} <= {p.name for p in subs}
    assert [p.name for p in subs if not (p / "__init__.py").exists()] == []
