"""Check a --config TOML file of `leveller controller`, `agent` or `sdn` without starting anything.

Every key must be one of the command's flags (``--metrics-port`` is ``metrics_port``; a nested
table joins its name: ``[tls]`` ``cert`` is ``tls_cert``) with a value of the flag's type; on/off
flags take true/false, repeatable flags a list. The values then pass the checks the command runs at
start on its options (ranges such as tau > 0, combinations such as lease > tau). Without --for
the command is the one (of controller, agent, sdn) the file is valid for; a file valid for
several is reported as such.
Exit status 0 when valid, 2 with the first error (file, key, value, what is allowed) otherwise.

examples:
  leveller config check examples/config/controller.toml --for controller
  leveller config check /etc/leveller/agent.toml
  leveller config check site.toml --for sdn --json
"""

from __future__ import annotations

import argparse
import json

from leveller.errors import UserError

TARGETS = ("controller", "agent", "sdn")


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    p = sub.add_parser("check", help="validate a config file (keys, types) without starting anything",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", metavar="FILE", help="the TOML file, e.g. examples/config/agent.toml")
    p.add_argument("--for", dest="target", choices=TARGETS,
                   help="the command the file is for (default: the one it is valid for), e.g. --for agent")
    p.add_argument("--json", action="store_true", help="print {\"file\", \"for\", \"values\"} on success")
    p.set_defaults(func=run)


def _parser(command: str) -> argparse.ArgumentParser:
    import importlib

    p = argparse.ArgumentParser(prog=f"leveller {command}")
    importlib.import_module(f"leveller.commands.{command}").configure(p)
    return p


def check(path: str, command: str) -> dict[str, object]:
    """The values of the file ``path`` for ``command``, after the checks the command itself runs at start on
    its options (its ``check_args``: ranges, combinations), so a file `config check` calls valid is one the
    command starts with; UserError naming the file, key or option, the value and what is allowed."""
    import importlib

    from leveller.config import load

    parser = _parser(command)
    values = load(path, parser, command)
    checker = getattr(importlib.import_module(f"leveller.commands.{command}"), "check_args", None)
    if checker is not None:
        args = parser.parse_args([])  # the defaults, as the command would run without flags
        for dest, value in values.items():
            setattr(args, dest, value)
        try:
            checker(args)
        except UserError as exc:
            raise UserError(f"{path}: {exc}") from None
    return values


def run(args: argparse.Namespace) -> int:
    targets = (args.target,) if args.target else TARGETS
    valid: dict[str, dict[str, object]] = {}
    errors: dict[str, str] = {}
    for command in targets:
        try:
            valid[command] = check(args.file, command)
        except UserError as exc:
            errors[command] = str(exc)
    if not valid:
        if len(errors) == 1:
            raise UserError(next(iter(errors.values())))
        raise UserError("valid for none of controller, agent, sdn (give --for to see one command's error): "
                        + " | ".join(f"{c}: {e}" for c, e in errors.items()))
    if args.json:
        print(json.dumps({"file": args.file, "for": sorted(valid), "values": valid[next(iter(valid))]},
                         default=str))
    else:
        for command, values in valid.items():
            print(f"{args.file}: valid for `leveller {command}` ({len(values)} keys)")
    return 0
