"""The ctypes / struct mirror in leveller/agent/flow_structs.py matches bpf/flow_marker.h."""

from __future__ import annotations

import ctypes
import ipaddress
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from leveller.agent import flow_structs as fs

HEADER_DIR = Path(__file__).resolve().parents[2] / "bpf"
MIRRORS = {"flow_key": fs.FlowKeyC, "flow_stats": fs.FlowStatsC, "flow_dscp": fs.FlowDscpC,
           "flow_lease": fs.FlowLeaseC, "flow_dscp_key": fs.FlowDscpKeyC, "flow_dscp_stats": fs.FlowDscpStatsC}


def _layout_asserts() -> str:
    lines = ['#include <stddef.h>', '#include "flow_marker.h"']
    for cname, mirror in MIRRORS.items():
        lines.append(f"_Static_assert(sizeof(struct {cname}) == {ctypes.sizeof(mirror)}, \"size {cname}\");")
        for fname, _ftype in mirror._fields_:
            off = getattr(mirror, fname).offset
            lines.append(f"_Static_assert(offsetof(struct {cname}, {fname}) == {off}, \"{cname}.{fname}\");")
    lines.append(f"_Static_assert(FLOW_DSCP_SET == {fs.FLOW_DSCP_SET}, \"FLOW_DSCP_SET\");")
    lines.append(f"_Static_assert(FLOW_DSCP_MASK == {fs.FLOW_DSCP_MASK}, \"FLOW_DSCP_MASK\");")
    return "\n".join(lines) + "\n"


def test_ctypes_mirror_matches_the_c_header_compiled_by_clang() -> None:
    clang = shutil.which("clang")
    assert clang, "clang is needed to check the C header layout (Debian package clang; `make setup`)"
    r = subprocess.run([clang, "-fsyntax-only", "-x", "c", "-I", str(HEADER_DIR), "-"],
                       input=_layout_asserts(), text=True, capture_output=True)
    assert r.returncode == 0, r.stderr


def test_struct_formats_have_the_ctypes_sizes() -> None:
    assert fs.KEY_FORMAT.size == ctypes.sizeof(fs.FlowKeyC) == 40
    assert fs.STATS_FORMAT.size == ctypes.sizeof(fs.FlowStatsC) == 32
    assert fs.DSCP_FORMAT.size == ctypes.sizeof(fs.FlowDscpC) == 1
    assert fs.LEASE_FORMAT.size == ctypes.sizeof(fs.FlowLeaseC) == 8
    assert fs.DSCP_KEY_FORMAT.size == ctypes.sizeof(fs.FlowDscpKeyC) == 44
    assert fs.DSCP_STATS_FORMAT.size == ctypes.sizeof(fs.FlowDscpStatsC) == 16


def test_ipv4_key_bytes_written_by_hand() -> None:
    key = fs.FlowKey(ipaddress.ip_address("10.1.2.3"), ipaddress.ip_address("192.168.0.9"), 40000, 5201)
    little = (40000).to_bytes(2, "little") + (5201).to_bytes(2, "little")  # host order (x86)
    expected = bytes([10, 1, 2, 3]) + bytes(12) + bytes([192, 168, 0, 9]) + bytes(12) + little + bytes([6, 4, 0, 0])
    assert key.packed == expected
    c = fs.FlowKeyC.from_buffer_copy(key.packed)
    assert (c.src_port, c.dst_port, c.proto, c.ip_version) == (40000, 5201, 6, 4)
    assert bytes(c.dst_addr)[:4] == bytes([192, 168, 0, 9])


def test_ipv6_key_uses_all_address_bytes() -> None:
    key = fs.FlowKey(ipaddress.ip_address("fd00::1"), ipaddress.ip_address("fd00::2"), 1, 2, fs.IPPROTO_UDP)
    c = fs.FlowKeyC.from_buffer_copy(key.packed)
    assert bytes(c.src_addr) == bytes([0xFD]) + bytes(14) + bytes([1])
    assert (c.proto, c.ip_version) == (17, 6)


addresses4 = st.builds(ipaddress.IPv4Address, st.integers(0, 2**32 - 1))
addresses6 = st.builds(ipaddress.IPv6Address, st.integers(0, 2**128 - 1))
ports = st.integers(0, 65535)
protos = st.sampled_from([fs.IPPROTO_TCP, fs.IPPROTO_UDP])
keys = st.one_of(
    st.builds(fs.FlowKey, addresses4, addresses4, ports, ports, protos),
    st.builds(fs.FlowKey, addresses6, addresses6, ports, ports, protos),
)


@given(keys)
def test_key_round_trips_through_bytes(key: fs.FlowKey) -> None:
    assert fs.FlowKey.unpack(key.packed) == key
    assert len(key.packed) == 40


@given(st.tuples(*[st.integers(0, 2**64 - 1)] * 4))
def test_stats_decode_field_order(values: tuple[int, int, int, int]) -> None:
    c = fs.FlowStatsC(*values)
    assert fs.FlowStats.unpack(bytes(c)) == fs.FlowStats(*values)


@given(st.integers(0, 63))
def test_dscp_encoding_round_trips_and_is_never_zero(dscp: int) -> None:
    mark = fs.encode_dscp(dscp)
    assert mark != 0 and 0 <= mark <= 255
    assert fs.decode_dscp(mark) == dscp


@pytest.mark.parametrize("mark", [0x00, 0x2E, 0x40, 0x7F, 0xC0 | 5, 0xFF])
def test_marks_that_mean_leave_alone(mark: int) -> None:
    assert fs.decode_dscp(mark) is None


@pytest.mark.parametrize("bad", [-1, 64, 255, 4.0, True, "46"])
def test_dscp_out_of_range_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="dscp"):
        fs.encode_dscp(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("field,kwargs", [
    ("sport", {"sport": 70000}),
    ("dport", {"dport": -1}),
    ("proto", {"proto": 1}),
    ("src", {"src": "not-an-ip"}),
    ("src=", {"src": "fd00::1"}),  # mixed families
])
def test_bad_flow_keys_name_the_field(field: str, kwargs: dict[str, object]) -> None:
    args: dict[str, object] = {"src": "10.0.0.1", "dst": "10.0.0.2", "sport": 1, "dport": 2, "proto": 6}
    args.update(kwargs)
    with pytest.raises(ValueError, match=field):
        fs.FlowKey(**args)  # type: ignore[arg-type]


def test_string_addresses_are_normalised_and_keys_hash_equal() -> None:
    a = fs.FlowKey("10.0.0.1", "10.0.0.2", 1, 2)  # type: ignore[arg-type]
    b = fs.FlowKey(ipaddress.IPv4Address("10.0.0.1"), ipaddress.IPv4Address("10.0.0.2"), 1, 2)
    assert a == b and hash(a) == hash(b) and {a: 1}[b] == 1
    assert a.reversed() == fs.FlowKey(b.dst, b.src, 2, 1)


# ---- numpy records: the batch buffers, derived from the ctypes mirror ---------------------------------

def test_numpy_record_types_have_the_ctypes_layout() -> None:
    for dtype, mirror in ((fs.KEY_DTYPE, fs.FlowKeyC), (fs.DSCP_DTYPE, fs.FlowDscpC)):
        assert dtype.itemsize == ctypes.sizeof(mirror)
        assert [(n, dtype.fields[n][1]) for n in dtype.names] == \
            [(n, getattr(mirror, n).offset) for n, _ in mirror._fields_]


@given(st.lists(st.tuples(addresses4, addresses4, ports, ports, protos), max_size=30))
def test_ipv4_key_records_are_the_packed_keys(rows: list[tuple]) -> None:  # type: ignore[type-arg]
    records = fs.ipv4_key_records([str(r[0]) for r in rows], [str(r[1]) for r in rows], [r[2] for r in rows],
                                  [r[3] for r in rows], [r[4] for r in rows])
    assert records.dtype == fs.KEY_DTYPE
    assert records.tobytes() == b"".join(fs.FlowKey(*r).packed for r in rows)


@pytest.mark.parametrize("column,value", [("src", "10.0.0"), ("dst", "fd00::1"), ("src", "010.0.0.1"),
                                          ("sport", 65536), ("dport", -1), ("proto", 1)])
def test_ipv4_key_records_refuse_bad_values(column: str, value: object) -> None:
    cols: dict[str, list[object]] = {"src": ["10.0.0.1"], "dst": ["10.0.0.2"], "sport": [1], "dport": [2],
                                     "proto": [6]}
    cols[column] = [value]
    with pytest.raises(ValueError):
        fs.ipv4_key_records(**cols)  # type: ignore[arg-type]


def test_dscp_array_encoding_matches_the_scalar_one() -> None:
    import numpy as np

    assert fs.encode_dscp_array(np.arange(64)).tolist() == [fs.encode_dscp(d) for d in range(64)]
    for bad in (np.array([64]), np.array([-1]), np.array([1.5])):
        with pytest.raises(ValueError, match="DSCP"):
            fs.encode_dscp_array(bad)
