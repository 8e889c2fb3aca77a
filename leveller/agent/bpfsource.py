"""Where the eBPF program is: its C source and its CO-RE object, in the checkout or in the wheel.

In a checkout (or an editable install) they are ``bpf/flow_marker.c`` and the object ``make -C bpf``
builds, ``bpf/build/flow_marker.bpf.o``; an installed wheel has no checkout, so ``setup.py`` copies
the sources, the object and its digest file into the package as ``leveller/_bpf/``, found with
importlib.resources. The digest file holds the sha256 of flow_marker.c followed by flow_marker.h as
the object was built from them: ``core_object`` hands out the object only when it matches the
sources next to it, so an edited C file is never run as an old object.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

CHECKOUT_BPF = Path(__file__).resolve().parents[2] / "bpf"
PACKAGED = "_bpf"
SOURCES = ("flow_marker.c", "flow_marker.h")  # the digest covers these, in this order
OBJECT = "flow_marker.bpf.o"
DIGEST = "flow_marker.bpf.sha256"
CHECKOUT_BUILD = "build"  # bpf/Makefile's output directory


def bpf_dir() -> Path:
    """The directory holding flow_marker.c and its header (the checkout's first, else the package's)."""
    if (CHECKOUT_BPF / "flow_marker.c").is_file():
        return CHECKOUT_BPF
    return Path(str(resources.files("leveller").joinpath(PACKAGED)))


def object_dir(source_dir: Path) -> Path:
    """Where the object built from ``source_dir`` lies: bpf/build/ in a checkout, beside the sources
    in the package."""
    return source_dir / CHECKOUT_BUILD if source_dir == CHECKOUT_BPF else source_dir


def source_digest(source_dir: Path) -> str:
    """sha256 (hex) of flow_marker.c followed by flow_marker.h in ``source_dir``."""
    h = hashlib.sha256()
    for name in SOURCES:
        h.update((source_dir / name).read_bytes())
    return h.hexdigest()


@dataclass(frozen=True)
class CoreObject:
    """The CO-RE object if it can be loaded (``path``), else None and ``why`` not."""

    path: Path | None
    why: str


def core_object(source_dir: Path | None = None) -> CoreObject:
    """The object built from the sources in ``source_dir`` (default: bpf_dir()), if present and built
    from exactly those sources."""
    src = bpf_dir() if source_dir is None else source_dir
    where = object_dir(src)
    obj, digest = where / OBJECT, where / DIGEST
    if not obj.is_file():
        return CoreObject(None, f"no CO-RE object {obj} (build it with `make -C bpf`)")
    try:
        built_from = digest.read_text().split()[0]
    except (OSError, IndexError):
        return CoreObject(None, f"{digest} is missing or empty (rebuild with `make -C bpf`)")
    try:
        now = source_digest(src)
    except OSError as exc:
        return CoreObject(None, f"cannot read the sources in {src}: {exc}")
    if built_from != now:
        return CoreObject(None, f"{obj} was built from other sources than {src / SOURCES[0]} "
                          "(edited since; rebuild with `make -C bpf`)")
    return CoreObject(obj, "")
