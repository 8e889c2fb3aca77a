"""leveller/core stays pure: no imports from the rest of the package, nothing that does I/O."""

import ast
from pathlib import Path

import leveller.core

CORE = Path(leveller.core.__file__).parent
FORBIDDEN = {"os", "sys", "io", "time", "datetime", "random", "socket", "subprocess", "pathlib", "shutil",
             "logging", "json", "threading", "asyncio", "urllib", "http", "requests", "grpc", "bcc",
             "os_ken", "pyroute2", "matplotlib", "rich", "prometheus_client", "tempfile", "sqlite3"}


def imported_modules(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names.append(node.module or "")
    return names


def test_core_imports_only_core_and_pure_libraries() -> None:
    files = sorted(CORE.glob("*.py"))
    assert len(files) >= 6
    for path in files:
        for mod in imported_modules(path):
            top = mod.split(".")[0]
            assert top not in FORBIDDEN, f"{path.name} imports {mod}"
            if top == "leveller":
                assert mod.startswith(("leveller.core", "leveller.model")), f"{path.name} imports {mod}"


def test_core_has_no_open_or_print_calls() -> None:
    for path in sorted(CORE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id not in {"open", "print", "input"}, f"{path.name} calls {node.func.id}"
