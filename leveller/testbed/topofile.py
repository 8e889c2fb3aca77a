"""Read a topology from a TOML file or a preset name (the I/O edge of leveller.core.topology)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from leveller.core.topology import PRESETS, Topology, preset, topology_from_dict
from leveller.errors import UserError

MAX_FILE_BYTES = 16 << 20  # far above any real cluster's description


def load_topology(spec: str) -> Topology:
    """`spec` is a preset name (dumbbell, leafspine) or a path to a TOML topology file.

    Whatever the file holds, the outcome is a Topology or a UserError naming the problem
    (not UTF-8, too large, nested deeper than the parser copes with, not TOML, bad fields)."""
    if spec in PRESETS:
        return preset(spec)
    path = Path(spec)
    if not path.exists():
        raise UserError(f"--topology = {spec!r} is neither a preset ({', '.join(PRESETS)}) nor an existing file")
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise UserError(f"topology file {spec}: cannot read it ({exc.strerror})") from None
    if len(raw) > MAX_FILE_BYTES:
        raise UserError(f"topology file {spec}: larger than {MAX_FILE_BYTES >> 20} MiB")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"topology file {spec}: not UTF-8 text (byte {exc.start} is 0x{raw[exc.start]:02x}); "
                        "TOML files are UTF-8") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"topology file {spec}: not valid TOML ({exc})") from None
    except RecursionError:
        raise UserError(f"topology file {spec}: arrays or tables nested too deeply") from None
    return topology_from_dict(data)
