"""Read a topology from a TOML file or a preset name (the I/O edge of leveller.core.topology)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from leveller.core.topology import PRESETS, Topology, preset, topology_from_dict
from leveller.errors import UserError


def load_topology(spec: str) -> Topology:
    """`spec` is a preset name (dumbbell, leafspine) or a path to a TOML topology file."""
    if spec in PRESETS:
        return preset(spec)
    path = Path(spec)
    if not path.exists():
        raise UserError(f"--topology = {spec!r} is neither a preset ({', '.join(PRESETS)}) nor an existing file")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"topology file {spec}: not valid TOML ({exc})") from None
    return topology_from_dict(data)
