"""The two ways to load bpf/flow_marker.c into the kernel, and the choice between them.

- ``libbpf``: the CO-RE object built once by bpf/Makefile (leveller.agent.bpfsource.core_object),
  its maps sized at load, relocated by libbpf against the running kernel's BTF. Needs libbpf.so.1
  and /sys/kernel/btf/vmlinux; no compiler, no kernel headers.
- ``bcc``: the C source compiled at start by bcc with the map sizes as -D cflags. Needs clang's
  libraries (libbpfcc) and the running kernel's headers; what a developer who edits the C gets.
- ``auto`` (the default): libbpf when the object is there and was built from the sources next to
  it, else (or if libbpf fails for another reason than EPERM: a process refused by the kernel would be
  refused with bcc too) bcc; the log line says which one ran and why.

Both give the same program (one source, see its header comment) with the same maps; a loaded
program is a ``LoadedProgram``: its fd, its maps' fds, ``close``.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from leveller.agent import bpfsource
from leveller.agent.flow_structs import (
    DSCP_FORMAT,
    DSCP_KEY_FORMAT,
    DSCP_STATS_FORMAT,
    KEY_FORMAT,
    LEASE_FORMAT,
    LEASE_KEY_FORMAT,
    SLOT_FORMAT,
    STATS_FORMAT,
)
from leveller.errors import UserError

LOG = logging.getLogger("leveller.agent.datapath")

LOADERS = ("auto", "libbpf", "bcc")
PROGRAM_NAME = "leveller_egress"
STATS_MAP = "flow_stats_egress"
DSCP_MAP = "flow_dscp_egress"  # flow -> slot (hash)
MARK_MAP = "flow_mark_egress"  # slot -> mark (array, mmap'd)
LEASE_MAP = "flow_lease_egress"
DSCP_STATS_MAP = "flow_dscp_stats_egress"
# the -D cflag that sizes each map for bcc (the CO-RE object's maps are resized by libbpf instead)
SIZE_MACROS = {STATS_MAP: "FLOW_STATS_MAX", DSCP_MAP: "FLOW_DSCP_MAX", MARK_MAP: "FLOW_MARK_SLOTS",
               DSCP_STATS_MAP: "FLOW_DSCP_STATS_MAX"}
# (key size, value size) of every map, as leveller.agent.flow_structs packs them
MAP_STRUCTS = {
    STATS_MAP: (KEY_FORMAT.size, STATS_FORMAT.size),
    DSCP_MAP: (KEY_FORMAT.size, SLOT_FORMAT.size),
    MARK_MAP: (4, DSCP_FORMAT.size),
    LEASE_MAP: (LEASE_KEY_FORMAT.size, LEASE_FORMAT.size),
    DSCP_STATS_MAP: (DSCP_KEY_FORMAT.size, DSCP_STATS_FORMAT.size),
}


class LoadError(Exception):
    """Neither loader could load the program (the message says what each one said)."""


class LoadedProgram(Protocol):
    """flow_marker loaded into the kernel, attached nowhere yet."""

    loader: str  # "libbpf" or "bcc"
    program_fd: int

    def map_fd(self, name: str) -> int: ...

    def close(self) -> None: ...


class BccProgram:
    """The C source compiled and loaded by bcc, the maps sized with -D cflags."""

    loader = "bcc"

    def __init__(self, sizes: Mapping[str, int], source_dir: Path | None = None) -> None:
        from bcc import BPF

        src = bpfsource.bpf_dir() if source_dir is None else source_dir
        cflags = [f"-I{src}", *(f"-D{SIZE_MACROS[name]}={n}" for name, n in sizes.items())]
        self._bpf: Any = BPF(src_file=str(src / "flow_marker.c").encode(), cflags=cflags)
        try:
            self.program_fd = int(self._bpf.load_func(PROGRAM_NAME.encode(), BPF.SCHED_CLS).fd)
        except BaseException:
            self.close()
            raise

    def map_fd(self, name: str) -> int:
        return int(self._bpf.get_table(name.encode()).map_fd)

    def close(self) -> None:
        bpf, self._bpf = self._bpf, None
        if bpf is not None:
            bpf.cleanup()


class LibbpfProgram:
    """The CO-RE object loaded by libbpf, the maps sized before the load."""

    loader = "libbpf"

    def __init__(self, path: Path, sizes: Mapping[str, int]) -> None:
        from leveller.agent.libbpf_object import BpfObject

        self.path = path
        self._obj: Any = BpfObject(path, sizes, MAP_STRUCTS)
        self.program_fd = self._obj.program_fd(PROGRAM_NAME)

    def map_fd(self, name: str) -> int:
        return int(self._obj.map_fd(name))

    def close(self) -> None:
        self._obj.close()


def check_loader(loader: str, what: str = "--loader") -> str:
    if loader not in LOADERS:
        raise UserError(f"{what} {loader!r}: allowed is one of {', '.join(LOADERS)}")
    return loader


def bcc_available() -> bool:
    try:
        import bcc  # noqa: F401
    except (ImportError, OSError):  # OSError: libbcc.so or the LLVM libraries it links are missing
        return False
    return True


def load_program(loader: str, sizes: Mapping[str, int]) -> LoadedProgram:
    """flow_marker loaded with ``loader`` (auto, libbpf or bcc) and these map sizes; one INFO line on
    the log says which loader ran and why. LoadError (nothing left loaded) if it cannot be."""
    check_loader(loader)
    if loader == "bcc":
        prog: LoadedProgram = _bcc(sizes, [])
        LOG.info("eBPF datapath loaded with bcc (--loader bcc: %s compiled now)", bpfsource.bpf_dir() / "flow_marker.c")
        return prog
    obj = bpfsource.core_object()
    if loader == "libbpf":
        if obj.path is None:
            raise LoadError(f"--loader libbpf: {obj.why}")
        try:
            prog = LibbpfProgram(obj.path, sizes)
        except OSError as exc:
            raise LoadError(f"libbpf: {exc}") from exc
        LOG.info("eBPF datapath loaded with libbpf (--loader libbpf: CO-RE object %s)", obj.path)
        return prog
    # auto
    tried: list[str] = []
    if obj.path is not None:
        try:
            prog = LibbpfProgram(obj.path, sizes)
        except OSError as exc:
            if exc.errno == errno.EPERM:  # the kernel refuses this process (EACCES: the verifier, the program)
                raise LoadError(f"libbpf: {exc}") from exc
            tried.append(f"libbpf: {exc}")
        else:
            LOG.info("eBPF datapath loaded with libbpf (CO-RE object %s)", obj.path)
            return prog
    else:
        tried.append(obj.why)
    prog = _bcc(sizes, tried)
    LOG.info("eBPF datapath loaded with bcc (%s compiled now; not libbpf: %s)", bpfsource.bpf_dir() / "flow_marker.c",
             "; ".join(tried))
    return prog


def _bcc(sizes: Mapping[str, int], tried: list[str]) -> LoadedProgram:
    before = "; ".join(tried) + "; " if tried else ""
    if not bcc_available():
        raise LoadError(f"{before}bcc: not installed (Debian package python3-bpfcc)")
    try:
        return BccProgram(sizes)
    except Exception as exc:
        raise LoadError(f"{before}bcc: {exc}") from exc
