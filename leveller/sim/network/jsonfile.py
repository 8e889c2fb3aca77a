"""Reading the simulator's JSON inputs (jobs files, sweep grids, Philly job logs) with one kind of error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from leveller.errors import UserError


def read_json(path: str, what: str) -> Any:
    """The JSON value in file ``path``; UserError naming ``what`` (e.g. ``--grid``) and the path when the
    file is missing or not valid JSON."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"{what} {path!r}: no such file")
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise UserError(f"{what} {path!r}: not UTF-8 text ({exc.reason})") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{what} {path!r}: not valid JSON ({exc})") from None
