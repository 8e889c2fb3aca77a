"""Checks the live experiments share (`leveller experiment ...`, `leveller demo`), with errors that name
the option: lists of numbers and policies, ranges, the testbed's name and root."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

from leveller.errors import UserError
from leveller.model.limits import POLICIES
from leveller.testbed.state import check_name


def check_live(args: Any, what: str, root: bool = True) -> None:
    """The testbed --name of a live experiment, and root (namespaces, OVS, eBPF); UserError otherwise."""
    check_name(args.name)
    if root and os.geteuid() != 0:
        raise UserError(f"{what} needs root (namespaces, OVS, eBPF)")


def int_list(text: str, option: str) -> list[int]:
    """Comma-separated whole numbers (sorted, once each); UserError naming ``option``."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        values = []
    if not values:
        raise UserError(f"{option} {text!r} is invalid; comma-separated whole numbers, e.g. 2,3,4")
    return sorted(set(values))


def policy_list(text: str | None, default: Sequence[str]) -> list[str]:
    """--policies: a comma-separated subset of the policies (once each, in order), ``default`` without it."""
    if text is None:
        return list(default)
    items = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in items if x not in POLICIES]
    if bad or not items:
        raise UserError(f"--policies {text!r}: unknown policy {bad[0] if bad else '(none)'!r}; "
                        f"a comma-separated subset of {', '.join(POLICIES)}")
    return list(dict.fromkeys(items))


def check_ranges(*limits: tuple[str, float, float, float, str]) -> None:
    """(option, value, low, high, unit) each: UserError "OPTION VALUE: allowed is LOW..HIGH[ UNIT]" unless the
    value is finite and in range."""
    for option, value, lo, hi, unit in limits:
        if not (math.isfinite(value) and lo <= value <= hi):
            raise UserError(f"{option} {value:g}: allowed is {lo:g}..{hi:g}" + (f" {unit}" if unit else ""))
