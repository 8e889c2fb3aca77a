"""The testbed's state file: an intent log of everything `up` creates.

Each namespace and process is recorded *before* it is created, so `down`
can remove it even after `up` crashed half-way. The file lives in the run
directory, which `down` deletes last.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from leveller.errors import UserError

NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,23}$")
DEFAULT_BASE = Path("/run/leveller")
STATE_FILE = "state.json"


def check_name(name: str) -> str:
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise UserError(f"testbed name = {name!r} is invalid; 1-24 chars: a lowercase letter, "
                        "then lowercase letters, digits or '-'")
    return name


def default_run_dir(name: str) -> Path:
    return DEFAULT_BASE / check_name(name)


@dataclass
class State:
    name: str
    run_dir: str
    topology: dict[str, Any]
    datapath_type: str
    switch_netns: str
    host_netns: dict[str, str]
    controller: str
    phase: str = "building"
    created_netns: list[str] = field(default_factory=list)
    sdn_pid: int | None = None
    queue_floor: float = 0.0  # share of a link guaranteed to each queue below the top (0: before floors)

    @property
    def path(self) -> Path:
        return Path(self.run_dir) / STATE_FILE

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=1, sort_keys=True))
        os.replace(tmp, self.path)


def load_state(run_dir: Path) -> State | None:
    path = Path(run_dir) / STATE_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise UserError(f"state file {path} is unreadable ({exc}); remove the testbed's namespaces "
                        "and processes by hand or delete the run directory") from None
    return State(**data)
