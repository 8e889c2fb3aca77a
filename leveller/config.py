"""TOML configuration files for long-running commands (`--config FILE.toml`), keyed by their flags.

The keys are derived from the command's argparse parser, so a file and the flags cannot diverge:
every option ``--metrics-port`` has the key ``metrics_port`` (``metrics-port`` works too), and a
nested table joins its name to its keys (``[tls]`` ``cert = ...`` is ``tls_cert``). Values are
checked like the flags (types, choices, the options' own parsers); on/off flags take ``true`` /
``false``; repeatable flags take a list. Flags given on the command line override the file.
Unknown keys and wrong types are errors naming the file, the key, the value and what is allowed.
"""

from __future__ import annotations

import argparse
import difflib
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from leveller.errors import UserError
from leveller.files import read_small_file

SKIP_DESTS = frozenset({"help", "config", "version"})
def add_config_option(parser: argparse.ArgumentParser, command: str) -> None:
    """--config FILE.toml (see module docstring); applied by ``apply_config`` in leveller.cli."""
    parser.add_argument("--config", metavar="FILE.toml",
                        help=f"read options from a TOML file: one key per flag (--metrics-port -> metrics_port), "
                        f"flags given here win; check it with `leveller config check FILE --for {command}`; "
                        f"e.g. --config examples/config/{command}.toml")


def option_actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """key -> action for every option of ``parser`` that a file may set."""
    out = {}
    for action in parser._actions:  # argparse has no public list of a parser's actions
        if action.option_strings and action.dest not in SKIP_DESTS and action.dest != argparse.SUPPRESS:
            out[action.dest] = action
    return out


def _flatten(table: Mapping[str, Any], where: str, prefix: str = "",
             spelled: dict[str, str] | None = None) -> dict[str, Any]:
    """Key -> value with tables joined and dashes as underscores; UserError when two spellings name one key
    (``metrics_port`` and ``metrics-port``: which one wins would be silent)."""
    out: dict[str, Any] = {}
    spelled = {} if spelled is None else spelled
    for key, value in table.items():
        name = prefix + key.replace("-", "_")
        if isinstance(value, dict):
            out.update(_flatten(value, where, name + "_", spelled))
            continue
        full = f"{prefix.rstrip('_')}.{key}" if prefix else key
        if name in spelled:
            raise UserError(f"{where}: {spelled[name]!r} and {full!r} are the same key {name!r}; allowed: "
                            "one of them")
        spelled[name] = full
        out[name] = value
    return out


def _kind(action: argparse.Action) -> str:
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse.BooleanOptionalAction)):
        return "true or false"
    t = action.type
    base = {int: "an integer", float: "a number"}.get(t, "a string")  # type: ignore[call-overload]
    if action.choices is not None:
        base = "one of " + ", ".join(repr(c) for c in action.choices)
    if isinstance(action, argparse._AppendAction) or action.nargs in ("*", "+"):
        return f"a list of {base.removeprefix('a ').removeprefix('an ')}s" if action.choices is None \
            else f"a list, each {base}"
    return base


def _one(key: str, value: Any, action: argparse.Action, where: str) -> Any:
    """One scalar value converted as the flag's parser would; UserError naming key, value, allowed."""
    def bad(why: str = "") -> UserError:
        return UserError(f"{where}: {key} = {value!r}: expected {_kind(action)}{why} "
                         f"(the flag {action.option_strings[-1]})")

    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise bad()
    t = action.type
    if t is int:
        if not isinstance(value, int):
            raise bad()
        out: Any = value
    elif t is float:
        if isinstance(value, str):
            raise bad()
        out = float(value)
    elif t is None or t is str:
        out = str(value)  # options parsed later by their command (numbers written bare are fine)
    else:
        try:
            out = t(str(value))  # type: ignore[operator]
        except (ValueError, TypeError, argparse.ArgumentTypeError, UserError) as exc:
            raise bad(f"; {exc}") from None
    if action.choices is not None and out not in action.choices:
        raise bad()
    return out


def convert(key: str, value: Any, action: argparse.Action, where: str) -> Any:
    """The value of ``key`` in the file as the command's ``args`` would hold it."""
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse.BooleanOptionalAction)):
        if not isinstance(value, bool):
            raise UserError(f"{where}: {key} = {value!r}: expected true or false (the flag "
                            f"{action.option_strings[0]})")
        return value if not isinstance(action, argparse._StoreFalseAction) else not value
    if isinstance(action, argparse._AppendAction) or action.nargs in ("*", "+"):
        items = value if isinstance(value, list) else [value]
        return [_one(f"{key}[{i}]", v, action, where) for i, v in enumerate(items)]
    return _one(key, value, action, where)


def load(path: str | Path, parser: argparse.ArgumentParser, command: str) -> dict[str, Any]:
    """dest -> value of every key in the TOML file ``path``, checked against ``parser``'s options."""
    where = str(path)
    data = read_small_file(path, "--config")
    try:
        raw = tomllib.loads(data.decode())
    except UnicodeDecodeError as exc:
        raise UserError(f"--config {where!r}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"--config {where!r}: not valid TOML ({exc})") from None
    actions = option_actions(parser)
    out = {}
    for key, value in _flatten(raw, where).items():
        action = actions.get(key)
        if action is None:
            near = difflib.get_close_matches(key, actions, n=1)
            raise UserError(f"{where}: unknown key {key!r} for `leveller {command}`"
                            + (f" (did you mean {near[0]!r}?)" if near else "")
                            + f"; allowed: {', '.join(sorted(actions))}")
        out[action.dest] = convert(key, value, action, where)
    return out


def explicit_dests(parser: argparse.ArgumentParser, argv: Sequence[str]) -> set[str]:
    """The dests that ``argv`` (the command's own arguments) sets on the command line."""
    saved = [(a, a.default) for a in parser._actions]
    saved_defaults = dict(parser._defaults)
    try:
        for a, _ in saved:
            a.default = argparse.SUPPRESS
        parser._defaults.clear()
        return set(vars(parser.parse_known_args(list(argv))[0]))
    finally:
        for a, default in saved:
            a.default = default
        parser._defaults.update(saved_defaults)


def apply(args: argparse.Namespace, parser: argparse.ArgumentParser, argv: Sequence[str],
          command: str) -> argparse.Namespace:
    """``args`` with the values of ``args.config`` filled in wherever the command line gave none."""
    values = load(args.config, parser, command)
    given = explicit_dests(parser, argv)
    for dest, value in values.items():
        if dest not in given:
            setattr(args, dest, value)
    return args
