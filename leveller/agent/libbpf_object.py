"""Load a BPF object file (the CO-RE flow marker) with libbpf 1.1 through ctypes.

libbpf reads the ELF object, sizes its BTF-defined maps as told (bpf_map__set_max_entries, before
the load), creates them, relocates the programs against the running kernel's BTF
(/sys/kernel/btf/vmlinux) and loads them; the caller takes the program's and the maps' fds and
attaches the program itself (pyroute2, as with bcc). No compiler and no kernel headers are needed.

libbpf's own messages are collected while the object opens and loads, not printed: its warnings (the
verifier's log of a refused program among them) go into the error raised, the last few on its one
line, all of them in its ``log``. Debian's libbpf.so.1 (package
libbpf1) is the library; the structs behind the pointers are libbpf's own and never touched here.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from types import TracebackType

from leveller.agent import libbpf

_PRINT_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
LOG_TAIL = 3  # libbpf warnings on the error's line (the last ones: the verdict comes at the end)
LIBBPF_WARN = 0  # enum libbpf_print_level: WARN, INFO, DEBUG
_print_lock = threading.Lock()  # libbpf's print callback is process-wide: one load at a time


class LibbpfError(OSError):
    """libbpf refused to open or load the object; the message ends with libbpf's last warnings, ``log``
    holds all of them."""

    log: tuple[str, ...] = ()


@lru_cache(maxsize=1)
def _lib() -> ctypes.CDLL:
    lib = libbpf._lib()
    vp, cp = ctypes.c_void_p, ctypes.c_char_p
    for name, res, args in (
        ("bpf_object__open_file", vp, [cp, vp]),
        ("bpf_object__load", ctypes.c_int, [vp]),
        ("bpf_object__close", None, [vp]),
        ("bpf_object__find_map_by_name", vp, [vp, cp]),
        ("bpf_object__find_program_by_name", vp, [vp, cp]),
        ("bpf_map__set_max_entries", ctypes.c_int, [vp, ctypes.c_uint32]),
        ("bpf_map__max_entries", ctypes.c_uint32, [vp]),
        ("bpf_map__key_size", ctypes.c_uint32, [vp]),
        ("bpf_map__value_size", ctypes.c_uint32, [vp]),
        ("bpf_map__fd", ctypes.c_int, [vp]),
        ("bpf_program__fd", ctypes.c_int, [vp]),
        ("libbpf_set_print", vp, [vp]),
    ):
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib


@contextmanager
def _captured_log() -> Iterator[list[str]]:
    """libbpf's messages while the block runs, formatted with vsnprintf (on x86-64 and arm64 a
    va_list argument arrives as a pointer, which vsnprintf takes as it is)."""
    lines: list[str] = []
    if platform.machine() not in ("x86_64", "aarch64"):
        yield lines
        return
    libc = ctypes.CDLL(None)
    vsnprintf = libc.vsnprintf
    vsnprintf.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_void_p]

    def collect(level: int, fmt: bytes, args: int) -> int:
        if level == LIBBPF_WARN:
            buf = ctypes.create_string_buffer(1 << 20)  # a verifier log comes as one message
            vsnprintf(buf, len(buf), fmt, args)
            lines.extend(line for line in buf.value.decode(errors="replace").splitlines() if line.strip())
        return 0

    callback = _PRINT_FN(collect)
    lib = _lib()
    with _print_lock:
        old = lib.libbpf_set_print(ctypes.cast(callback, ctypes.c_void_p))
        try:
            yield lines
        finally:
            lib.libbpf_set_print(old)


def _err(ret: int) -> int:
    return -ret if ret < 0 else (ctypes.get_errno() or errno.EIO)


def _with_log(what: str, err: int, log: list[str]) -> LibbpfError:
    tail = [line.strip() for line in log[-LOG_TAIL:]]
    detail = (" (libbpf: " + " / ".join(line.removeprefix("libbpf: ") for line in tail) + ")") if tail else ""
    exc = LibbpfError(err, f"{what}: {os.strerror(err)}{detail}")
    exc.log = tuple(log)
    return exc


class BpfObject:
    """An opened and loaded BPF object: its programs' and maps' fds live until ``close``."""

    def __init__(self, path: Path, max_entries: Mapping[str, int], map_sizes: Mapping[str, tuple[int, int]]):
        """Open ``path``, set each named map's max_entries, load, and check each map of ``map_sizes``
        has that (key size, value size). LibbpfError (nothing left loaded) if any step fails."""
        self.path = path
        lib = _lib()
        self._obj: int | None = None
        with _captured_log() as log:
            obj = lib.bpf_object__open_file(str(path).encode(), None)
            if not obj:
                raise _with_log(f"opening {path}", ctypes.get_errno() or errno.EINVAL, log)
            self._obj = obj
            try:
                for name, entries in max_entries.items():
                    if (rc := lib.bpf_map__set_max_entries(self._map(name), entries)) != 0:
                        raise _with_log(f"sizing map {name} to {entries} entries", _err(rc), log)
                if (rc := lib.bpf_object__load(obj)) != 0:
                    raise _with_log(f"loading {path.name}", _err(rc), log)
                for name, (key, value) in map_sizes.items():
                    have = (lib.bpf_map__key_size(self._map(name)), lib.bpf_map__value_size(self._map(name)))
                    if have != (key, value):
                        raise LibbpfError(errno.EINVAL, f"{path.name}: map {name} has key/value sizes {have}, "
                                          f"this agent's structs {(key, value)} (leveller/agent/flow_structs.py): "
                                          "an object of another version")
            except BaseException:
                self.close()
                raise

    def _map(self, name: str) -> int:
        if self._obj is None:
            raise LibbpfError(errno.EBADF, f"{self.path.name} is closed")
        ptr = _lib().bpf_object__find_map_by_name(self._obj, name.encode())
        if not ptr:
            raise LibbpfError(errno.ENOENT, f"{self.path.name} has no map {name}")
        return int(ptr)

    def map_fd(self, name: str) -> int:
        return int(_lib().bpf_map__fd(self._map(name)))

    def max_entries(self, name: str) -> int:
        return int(_lib().bpf_map__max_entries(self._map(name)))

    def program_fd(self, name: str) -> int:
        if self._obj is None:
            raise LibbpfError(errno.EBADF, f"{self.path.name} is closed")
        prog = _lib().bpf_object__find_program_by_name(self._obj, name.encode())
        if not prog:
            raise LibbpfError(errno.ENOENT, f"{self.path.name} has no program {name}")
        return int(_lib().bpf_program__fd(prog))

    def close(self) -> None:
        """Close every fd of the object (a program still attached to tc stays there: the kernel holds it)."""
        obj, self._obj = self._obj, None
        if obj is not None:
            _lib().bpf_object__close(obj)

    def __enter__(self) -> BpfObject:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
