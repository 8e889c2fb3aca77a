"""ctypes wrapper of the few libbpf calls bcc 0.26 lacks or gets wrong.

- prog_test_run: BPF_PROG_TEST_RUN through libbpf's bpf_prog_test_run_opts,
  usable on a program loaded by bcc (its fd); runs the program on crafted
  packet bytes (optionally with a struct __sk_buff context, see skb_context)
  and returns the verdict and the bytes it produced.
- map_info: what the kernel holds of a map (BPF_OBJ_GET_INFO_BY_FD), whichever
  loader created it.
- map_update_batch / map_delete_batch / map_lookup_all / array_lookup_all: the
  kernel's batch map operations on raw byte buffers (bcc's wrappers build one
  Python object per entry and its lookup loop reuses one variable for count
  and cursor).

Debian's libbpf.so.1 (1.1) is the library bcc itself links.
"""

from __future__ import annotations

import ctypes
import errno
import os
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Union

if TYPE_CHECKING:
    import numpy as np


class BpfSyscallError(OSError):
    """A bpf() command failed; `done` says how many batch entries were applied first."""

    def __init__(self, what: str, err: int, done: int = 0) -> None:
        super().__init__(err, f"{what} failed: {os.strerror(err)} (after {done} entries)")
        self.done = done


class _TestRunOpts(ctypes.Structure):
    # struct bpf_test_run_opts, libbpf 1.1 (sz first: libbpf checks it).
    _fields_ = [
        ("sz", ctypes.c_size_t),
        ("data_in", ctypes.c_void_p),
        ("data_out", ctypes.c_void_p),
        ("data_size_in", ctypes.c_uint32),
        ("data_size_out", ctypes.c_uint32),
        ("ctx_in", ctypes.c_void_p),
        ("ctx_out", ctypes.c_void_p),
        ("ctx_size_in", ctypes.c_uint32),
        ("ctx_size_out", ctypes.c_uint32),
        ("retval", ctypes.c_uint32),
        ("repeat", ctypes.c_int),
        ("duration", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("cpu", ctypes.c_uint32),
        ("batch_size", ctypes.c_uint32),
    ]


class _BatchOpts(ctypes.Structure):
    # struct bpf_map_batch_opts
    _fields_ = [("sz", ctypes.c_size_t), ("elem_flags", ctypes.c_uint64), ("flags", ctypes.c_uint64)]


class _MapInfo(ctypes.Structure):
    # the head of struct bpf_map_info (uapi linux/bpf.h); the kernel fills as much as info_len asks for
    _fields_ = [("type", ctypes.c_uint32), ("id", ctypes.c_uint32), ("key_size", ctypes.c_uint32),
                ("value_size", ctypes.c_uint32), ("max_entries", ctypes.c_uint32), ("map_flags", ctypes.c_uint32),
                ("name", ctypes.c_char * 16)]


@dataclass(frozen=True)
class MapInfo:
    """A map as the kernel holds it."""

    type: int  # enum bpf_map_type (1 hash, 2 array, 9 lru_hash)
    key_size: int
    value_size: int
    max_entries: int
    map_flags: int
    name: str


@lru_cache(maxsize=1)
def _lib() -> ctypes.CDLL:
    try:
        lib = ctypes.CDLL("libbpf.so.1", use_errno=True)
    except OSError as exc:
        raise OSError(f"libbpf.so.1 not found ({exc}); install the Debian package libbpf1 (make setup)") from None
    vp, u32p = ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint32)
    lib.bpf_prog_test_run_opts.argtypes = [ctypes.c_int, ctypes.POINTER(_TestRunOpts)]
    lib.bpf_map_update_batch.argtypes = [ctypes.c_int, vp, vp, u32p, ctypes.POINTER(_BatchOpts)]
    lib.bpf_map_delete_batch.argtypes = [ctypes.c_int, vp, u32p, ctypes.POINTER(_BatchOpts)]
    lib.bpf_map_lookup_batch.argtypes = [ctypes.c_int, vp, vp, vp, vp, u32p, ctypes.POINTER(_BatchOpts)]
    lib.bpf_obj_get_info_by_fd.argtypes = [ctypes.c_int, vp, u32p]
    for name in ("bpf_prog_test_run_opts", "bpf_map_update_batch", "bpf_map_delete_batch", "bpf_map_lookup_batch",
                 "bpf_obj_get_info_by_fd"):
        getattr(lib, name).restype = ctypes.c_int
    return lib


def _errno(ret: int) -> int:
    return -ret if ret < 0 else (ctypes.get_errno() or errno.EIO)


@dataclass(frozen=True)
class TestRunResult:
    """Verdict (e.g. TC_ACT_OK = 0), the packet as the program left it, run time per repeat."""

    retval: int
    data: bytes
    duration_ns: int


# struct __sk_buff (uapi linux/bpf.h): its size and the GSO fields a test run may set
# (the kernel refuses any other non-zero field but a few; tests/unit/test_libbpf_ctx.py checks
# these numbers against the installed header).
SKB_CTX_SIZE = 192
SKB_GSO_SEGS_OFFSET = 164
SKB_GSO_SIZE_OFFSET = 176


def skb_context(gso_segs: int = 0, gso_size: int = 0) -> bytes:
    """A struct __sk_buff for prog_test_run(ctx=...): all zero but the GSO segment count and size,
    so the program sees a GSO packet of ``gso_segs`` wire segments."""
    ctx = bytearray(SKB_CTX_SIZE)
    ctypes.c_uint32.from_buffer(ctx, SKB_GSO_SEGS_OFFSET).value = gso_segs
    ctypes.c_uint32.from_buffer(ctx, SKB_GSO_SIZE_OFFSET).value = gso_size
    return bytes(ctx)


def prog_test_run(prog_fd: int, packet: bytes, repeat: int = 1, ctx: bytes | None = None) -> TestRunResult:
    """Run a loaded program once (or `repeat` times) on `packet` with BPF_PROG_TEST_RUN.

    ``ctx``: the struct __sk_buff the program sees (skb_context()); None = the kernel's default."""
    data_in = ctypes.create_string_buffer(packet, len(packet))
    data_out = ctypes.create_string_buffer(len(packet) + 256)
    opts = _TestRunOpts(
        sz=ctypes.sizeof(_TestRunOpts),
        data_in=ctypes.cast(data_in, ctypes.c_void_p),
        data_out=ctypes.cast(data_out, ctypes.c_void_p),
        data_size_in=len(packet),
        data_size_out=len(data_out),
        repeat=repeat,
    )
    if ctx is not None:
        ctx_in = ctypes.create_string_buffer(ctx, len(ctx))
        opts.ctx_in = ctypes.cast(ctx_in, ctypes.c_void_p)
        opts.ctx_size_in = len(ctx)
    ret = _lib().bpf_prog_test_run_opts(prog_fd, ctypes.byref(opts))
    if ret != 0:
        raise BpfSyscallError("BPF_PROG_TEST_RUN", _errno(ret))
    return TestRunResult(opts.retval, data_out.raw[: opts.data_size_out], opts.duration)


def map_info(map_fd: int) -> MapInfo:
    """Type, key and value sizes, entries, flags and name of the map behind ``map_fd``."""
    info = _MapInfo()
    size = ctypes.c_uint32(ctypes.sizeof(info))
    ret = _lib().bpf_obj_get_info_by_fd(map_fd, ctypes.byref(info), ctypes.byref(size))
    if ret != 0:
        raise BpfSyscallError("BPF_OBJ_GET_INFO_BY_FD", _errno(ret))
    return MapInfo(info.type, info.key_size, info.value_size, info.max_entries, info.map_flags,
                   info.name.decode(errors="replace"))


def _batch_opts(elem_flags: int = 0) -> _BatchOpts:
    return _BatchOpts(sz=ctypes.sizeof(_BatchOpts), elem_flags=elem_flags, flags=0)


Buffer = Union[bytes, "np.ndarray"]


def _pointer(buf: Buffer, count: int) -> ctypes.c_void_p | bytes:
    """What the C call takes for a buffer: bytes as they are, a numpy array (C-contiguous records,
    e.g. flow_structs.KEY_DTYPE) by its address, without a copy."""
    if isinstance(buf, bytes):
        return buf
    if not buf.flags.c_contiguous or len(buf) < count:
        raise ValueError(f"batch buffer must be C-contiguous with >= {count} records")
    return ctypes.c_void_p(buf.ctypes.data)


def map_update_batch(map_fd: int, keys: Buffer, values: Buffer, count: int) -> None:
    """BPF_MAP_UPDATE_BATCH of `count` packed keys and values (BPF_ANY), in one bpf() call."""
    if count == 0:
        return
    cnt = ctypes.c_uint32(count)
    ret = _lib().bpf_map_update_batch(map_fd, _pointer(keys, count), _pointer(values, count), ctypes.byref(cnt),
                                      ctypes.byref(_batch_opts()))
    if ret != 0:
        raise BpfSyscallError("BPF_MAP_UPDATE_BATCH", _errno(ret), cnt.value)


def map_delete_batch(map_fd: int, keys: Buffer, count: int) -> None:
    """BPF_MAP_DELETE_BATCH of `count` packed keys (all must exist), in one bpf() call."""
    if count == 0:
        return
    cnt = ctypes.c_uint32(count)
    ret = _lib().bpf_map_delete_batch(map_fd, _pointer(keys, count), ctypes.byref(cnt), ctypes.byref(_batch_opts()))
    if ret != 0:
        raise BpfSyscallError("BPF_MAP_DELETE_BATCH", _errno(ret), cnt.value)


LOOKUP_CHUNK = 1024  # entries per BPF_MAP_LOOKUP_BATCH call of map_lookup_all


def map_lookup_all(map_fd: int, key_size: int, value_size: int, max_entries: int,
                   chunk: int = LOOKUP_CHUNK) -> list[tuple[bytes, bytes]]:
    """Every (key, value) of a hash map, read with BPF_MAP_LOOKUP_BATCH, ``chunk`` entries a call.

    The buffers hold one chunk, not the whole map: an agent reads its 65,536-entry maps 20 times a
    second while they hold a few hundred flows, and zeroing and copying buffers sized for the whole
    map cost it a tenth of a core. A hash bucket that does not fit a chunk (ENOSPC) doubles it.
    Entries the kernel adds or removes meanwhile may or may not be seen.
    """
    chunk = max(1, min(chunk, max_entries))
    keys = ctypes.create_string_buffer(key_size * chunk)
    values = ctypes.create_string_buffer(value_size * chunk)
    cursor_in, cursor_out = ctypes.c_uint64(0), ctypes.c_uint64(0)
    rows: list[tuple[bytes, bytes]] = []
    first = True
    lib = _lib()
    while len(rows) < max_entries:
        cnt = ctypes.c_uint32(min(chunk, max_entries - len(rows)))
        ret = lib.bpf_map_lookup_batch(map_fd, None if first else ctypes.byref(cursor_in), ctypes.byref(cursor_out),
                                       keys, values, ctypes.byref(cnt), ctypes.byref(_batch_opts()))
        err = _errno(ret) if ret != 0 else 0
        if err == errno.ENOSPC and cnt.value == 0 and chunk < max_entries:
            chunk = min(2 * chunk, max_entries)  # one bucket holds more than a chunk: retry bigger
            keys = ctypes.create_string_buffer(key_size * chunk)
            values = ctypes.create_string_buffer(value_size * chunk)
            continue
        n = cnt.value
        kraw = ctypes.string_at(keys, key_size * n)
        vraw = ctypes.string_at(values, value_size * n)
        rows += [(kraw[i * key_size:(i + 1) * key_size], vraw[i * value_size:(i + 1) * value_size]) for i in range(n)]
        if err == errno.ENOENT:
            break
        if err:
            raise BpfSyscallError("BPF_MAP_LOOKUP_BATCH", err, len(rows))
        first = False
        cursor_in.value = cursor_out.value
    return rows


def array_lookup_all(map_fd: int, value_size: int, max_entries: int) -> bytes:
    """The values of every element of an array map, in index order (element i at i * value_size), read
    through the bpf() syscall in one BPF_MAP_LOOKUP_BATCH (not through any mmap of the map)."""
    keys = ctypes.create_string_buffer(4 * max_entries)
    values = ctypes.create_string_buffer(value_size * max_entries)
    cursor_out = ctypes.c_uint64(0)
    cnt = ctypes.c_uint32(max_entries)
    ret = _lib().bpf_map_lookup_batch(map_fd, None, ctypes.byref(cursor_out), keys, values, ctypes.byref(cnt),
                                      ctypes.byref(_batch_opts()))
    err = _errno(ret) if ret != 0 else 0
    if (err and err != errno.ENOENT) or cnt.value != max_entries:
        raise BpfSyscallError("BPF_MAP_LOOKUP_BATCH", err or errno.EIO, cnt.value)
    return values.raw
