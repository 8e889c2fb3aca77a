"""Where the eBPF C sources are: the checkout's ``bpf/``, or the copy a wheel ships as package data.

In a checkout (or an editable install) the agent compiles ``bpf/flow_marker.c`` next to ``leveller/``;
an installed wheel has no checkout, so ``setup.py`` copies ``bpf/*.c`` and ``bpf/*.h`` into the package
as ``leveller/_bpf/`` and it is found with importlib.resources.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

CHECKOUT_BPF = Path(__file__).resolve().parents[2] / "bpf"
PACKAGED = "_bpf"


def bpf_dir() -> Path:
    """The directory holding flow_marker.c and its header (the checkout's first, else the package's)."""
    if (CHECKOUT_BPF / "flow_marker.c").is_file():
        return CHECKOUT_BPF
    return Path(str(resources.files("leveller").joinpath(PACKAGED)))
