"""Sub-commands of the `leveller` CLI, one module each.

Each module defines ``configure(parser: argparse.ArgumentParser) -> None``,
which adds its options and sets ``func`` (a callable taking the parsed
namespace and returning an exit code) with ``parser.set_defaults``.
Modules must not import heavy or privileged dependencies (bcc, os_ken,
pyroute2, matplotlib) at module level: import them inside the handler, so
``leveller --help`` and pure commands work everywhere. A command module only parses
and prints (at most 150 lines, tests/unit/test_cli_commands.py): what it runs lives
below it (leveller.controller.app, leveller.agent.app, leveller.experiments, leveller.sim,
leveller.bench), and nothing there imports leveller.commands. A module named in a
command table that is missing is an error, not a command left out.
"""

import argparse
import importlib
from pathlib import Path

from leveller.errors import UserError


def output_dir(text: str, option: str = "--out") -> Path:
    """The directory ``text`` (created if needed) for a command's results; UserError naming ``option``."""
    out = Path(text)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{option} {text}: cannot create it ({exc.strerror})") from None
    return out


def add_commands(sub: "argparse._SubParsersAction[argparse.ArgumentParser]",
                 table: dict[str, tuple[str, str]]) -> None:
    """Add one sub-parser per table entry, configured by its module. A module that is missing is an
    error (ImportError naming the command), not a command silently left out of the CLI."""
    for name, (module_name, help_text) in table.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                raise ImportError(f"command {name!r}: its module {module_name} is missing",
                                  name=module_name) from exc
            raise
        p = sub.add_parser(name, help=help_text, description=(module.__doc__ or help_text).strip(),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        module.configure(p)
