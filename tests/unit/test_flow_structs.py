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
from leveller.model.flow import FlowKey, flow_key

HEADER_DIR = Path(__file__).resolve().parents[2] / "bpf"
MIRRORS = {"flow_key": fs.FlowKeyC, "flow_stats": fs.FlowStatsC, "flow_slot": fs.FlowSlotC, "flow_dscp": fs.FlowDscpC,
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
    assert fs.SLOT_FORMAT.size == ctypes.sizeof(fs.FlowSlotC) == 4
    # an element of the mmap'd mark array: the kernel rounds array values up to 8 bytes, and the
    # struct is exactly that, so element i lies at 8 * i
    assert fs.DSCP_FORMAT.size == ctypes.sizeof(fs.FlowDscpC) == fs.DSCP_DTYPE.itemsize == 8
    assert fs.LEASE_FORMAT.size == ctypes.sizeof(fs.FlowLeaseC) == 8
    assert fs.DSCP_KEY_FORMAT.size == ctypes.sizeof(fs.FlowDscpKeyC) == 44
    assert fs.DSCP_STATS_FORMAT.size == ctypes.sizeof(fs.FlowDscpStatsC) == 16


def test_ipv4_key_bytes_written_by_hand() -> None:
    key = flow_key("10.1.2.3", "192.168.0.9", 40000, 5201)
    little = (40000).to_bytes(2, "little") + (5201).to_bytes(2, "little")  # host order (x86)
    expected = bytes([10, 1, 2, 3]) + bytes(12) + bytes([192, 168, 0, 9]) + bytes(12) + little + bytes([6, 4, 0, 0])
    assert fs.pack_key(key) == expected
    c = fs.FlowKeyC.from_buffer_copy(fs.pack_key(key))
    assert (c.src_port, c.dst_port, c.proto, c.ip_version) == (40000, 5201, 6, 4)
    assert bytes(c.dst_addr)[:4] == bytes([192, 168, 0, 9])


def test_ipv6_key_uses_all_address_bytes() -> None:
    key = flow_key("fd00::1", "fd00::2", 1, 2, fs.IPPROTO_UDP)
    c = fs.FlowKeyC.from_buffer_copy(fs.pack_key(key))
    assert bytes(c.src_addr) == bytes([0xFD]) + bytes(14) + bytes([1])
    assert (c.proto, c.ip_version) == (17, 6)


addresses4 = st.builds(ipaddress.IPv4Address, st.integers(0, 2**32 - 1))
addresses6 = st.builds(ipaddress.IPv6Address, st.integers(0, 2**128 - 1))
ports = st.integers(0, 65535)
protos = st.sampled_from([fs.IPPROTO_TCP, fs.IPPROTO_UDP])
keys = st.one_of(
    st.builds(flow_key, addresses4, addresses4, ports, ports, protos),
    st.builds(flow_key, addresses6, addresses6, ports, ports, protos),
)


@given(keys)
def test_key_round_trips_through_bytes(key: FlowKey) -> None:
    assert fs.unpack_key(fs.pack_key(key)) == key
    assert fs.key_records([key]).tobytes() == fs.pack_key(key)
    assert len(fs.pack_key(key)) == 40


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
    ("src = .* and dst", {"src": "fd00::1"}),  # mixed families
])
def test_bad_flow_keys_name_the_field(field: str, kwargs: dict[str, object]) -> None:
    """The model refuses a bad key naming the field; the map key also refuses protocols the marker
    does not track (1 = ICMP is a valid flow, not a map key)."""
    args: dict[str, object] = {"src": "10.0.0.1", "dst": "10.0.0.2", "sport": 1, "dport": 2, "proto": 6}
    args.update(kwargs)
    with pytest.raises(ValueError, match=field):
        fs.pack_key(flow_key(**args))  # type: ignore[arg-type]


def test_string_addresses_are_normalised_and_keys_hash_equal() -> None:
    a = flow_key("10.0.0.1", "10.0.0.2", 1, 2)
    b = flow_key(ipaddress.IPv4Address("10.0.0.1"), ipaddress.IPv4Address("10.0.0.2"), 1, 2)
    assert a == b and hash(a) == hash(b) and {a: 1}[b] == 1
    assert a.reversed() == flow_key(b.dst, b.src, 2, 1)
    six = flow_key("FD00:0:0::1", ipaddress.IPv6Address("fd00::2"), 1, 2)
    assert six == flow_key("fd00::1", "fd00::2", 1, 2) and six.src == "fd00::1" and six.version == 6
    assert fs.unpack_key(fs.pack_key(six)) == six


# ---- numpy records: the batch buffers, derived from the ctypes mirror ---------------------------------

def test_numpy_record_types_have_the_ctypes_layout() -> None:
    for dtype, mirror in ((fs.KEY_DTYPE, fs.FlowKeyC), (fs.SLOT_DTYPE, fs.FlowSlotC), (fs.DSCP_DTYPE, fs.FlowDscpC)):
        assert dtype.itemsize == ctypes.sizeof(mirror)
        assert [(n, dtype.fields[n][1]) for n in dtype.names] == \
            [(n, getattr(mirror, n).offset) for n, _ in mirror._fields_]


@given(st.lists(st.one_of(st.tuples(addresses4, addresses4, ports, ports, protos),
                          st.tuples(addresses6, addresses6, ports, ports, protos)), max_size=30))
def test_key_records_are_the_packed_keys(rows: list[tuple]) -> None:  # type: ignore[type-arg]
    records = fs.key_records([FlowKey(str(r[0]), str(r[1]), *r[2:]) for r in rows])
    assert records.dtype == fs.KEY_DTYPE
    assert records.tobytes() == b"".join(fs.KEY_FORMAT.pack(r[0].packed, r[1].packed, r[2], r[3], r[4], r[0].version)
                                         for r in rows)


@pytest.mark.parametrize("column,value", [("src", "10.0.0"), ("dst", "fd00::1"), ("src", "010.0.0.1"),
                                          ("sport", 65536), ("dport", -1), ("proto", 1)])
def test_key_records_refuse_bad_values(column: str, value: object) -> None:
    cols: dict[str, object] = {"src": "10.0.0.1", "dst": "10.0.0.2", "sport": 1, "dport": 2, "proto": 6}
    cols[column] = value
    with pytest.raises(ValueError):
        fs.key_records([FlowKey(**cols)])  # type: ignore[arg-type]


def test_dscp_array_encoding_matches_the_scalar_one() -> None:
    import numpy as np

    assert fs.encode_dscp_array(np.arange(64)).tolist() == [fs.encode_dscp(d) for d in range(64)]
    for bad in (np.array([64]), np.array([-1]), np.array([1.5])):
        with pytest.raises(ValueError, match="DSCP"):
            fs.encode_dscp_array(bad)


def test_records_of_mixed_versions_and_refusals() -> None:
    """One batch holds IPv4 and IPv6 keys, each packed as alone; the marker tracks only TCP and UDP."""
    both = [flow_key("10.0.0.1", "10.0.0.2", 1, 2), flow_key("fd00::a", "fd00::b", 3, 4, "udp")]
    assert fs.key_records(both).tobytes() == b"".join(fs.pack_key(k) for k in both)
    with pytest.raises(ValueError, match="protocol"):
        fs.pack_key(flow_key("10.0.0.1", "10.0.0.2", proto="icmp"))
    with pytest.raises(ValueError, match="address"):
        fs.pack_key(FlowKey("10.0.0.1", "fd00::b", 1, 2, 6))
