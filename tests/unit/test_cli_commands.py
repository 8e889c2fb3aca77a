"""The command table of the CLI: every command's module is there, and a missing one is an error."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

from leveller.cli import COMMANDS, build_parser
from leveller.commands import add_commands

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 150  # commands parse and print: what they run lives below them


def _sub() -> argparse._SubParsersAction[argparse.ArgumentParser]:
    return argparse.ArgumentParser(prog="t").add_subparsers(dest="command")


def test_a_missing_command_module_is_an_error() -> None:
    table = {"levels": ("leveller.commands.levels", "levels"),
             "ghost": ("leveller.commands.no_such_command", "a command whose module is missing")}
    with pytest.raises(ImportError, match="command 'ghost': its module leveller.commands.no_such_command is missing"):
        add_commands(_sub(), table)


def test_an_import_error_inside_a_command_module_is_not_hidden(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "broken_cmd_mod.py").write_text("import no_such_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError) as info:
        add_commands(_sub(), {"broken": ("broken_cmd_mod", "imports what is not there")})
    assert info.value.name == "no_such_dependency_xyz"
    sys.modules.pop("broken_cmd_mod", None)


def test_every_command_of_the_table_is_in_the_parser() -> None:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert list(sub.choices) == list(COMMANDS)


def test_command_modules_stay_thin() -> None:
    long = {p.name: n for p in sorted((ROOT / "leveller" / "commands").glob("*.py"))
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}, f"over {MAX_LINES} lines (move the work out of leveller.commands): {long}"
