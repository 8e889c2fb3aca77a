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


# ---- the CO-RE object: its BTF (what libbpf and the kernel see) against the same mirror ---------------------

BPF_DIR = HEADER_DIR
# each map of the object: (BPF_MAP_TYPE_*, key struct or None for a u32 index, value struct, map_flags)
MAPS = {"flow_stats_egress": (9, "flow_key", "flow_stats", 0), "flow_dscp_egress": (1, "flow_key", "flow_slot", 0),
        "flow_mark_egress": (2, None, "flow_dscp", 1024), "flow_lease_egress": (2, None, "flow_lease", 0),
        "flow_dscp_stats_egress": (9, "flow_dscp_key", "flow_dscp_stats", 0)}


@pytest.fixture(scope="module")
def core_btf(tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict]:
    """The BTF types (id -> type) of the object bpf/Makefile builds, built afresh into a temporary
    directory (the checkout's bpf/build is left alone)."""
    for tool in ("clang", "bpftool", "make"):
        assert shutil.which(tool), f"{tool} is needed to build the CO-RE object (`make setup`)"
    build = tmp_path_factory.mktemp("bpf-build")
    r = subprocess.run(["make", "-s", "-C", str(BPF_DIR), f"BUILD={build}"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    from leveller.agent.bpfsource import source_digest

    assert (build / "flow_marker.bpf.sha256").read_text().split()[0] == source_digest(BPF_DIR)
    dump = subprocess.run(["bpftool", "-j", "btf", "dump", "file", str(build / "flow_marker.bpf.o")],
                          capture_output=True, text=True, check=True).stdout
    import json

    return {t["id"]: t for t in json.loads(dump)["types"]}


def _resolve(types: dict[int, dict], type_id: int) -> dict:
    t = types[type_id]
    while t["kind"] in ("TYPEDEF", "CONST", "VOLATILE"):
        t = types[t["type_id"]]
    return t


def test_the_core_objects_btf_has_the_mirrors_struct_layouts(core_btf: dict[int, dict]) -> None:
    structs = {t["name"]: t for t in core_btf.values() if t["kind"] == "STRUCT" and t["name"] in MIRRORS}
    assert set(structs) == set(MIRRORS)
    for cname, mirror in MIRRORS.items():
        btf = structs[cname]
        assert btf["size"] == ctypes.sizeof(mirror), cname
        members = [(m["name"], m["bits_offset"] // 8) for m in btf["members"]]
        assert members == [(f, getattr(mirror, f).offset) for f, _ in mirror._fields_], cname


def test_the_core_objects_maps_have_the_agents_types_and_flags(core_btf: dict[int, dict]) -> None:
    """The BTF-defined maps (libbpf's SEC(".maps") convention: a struct of pointers to int arrays whose
    length is the value) hold the key and value structs the agent packs."""
    found = {}
    for t in core_btf.values():
        if t["kind"] != "VAR" or t["name"] not in MAPS:
            continue
        fields = {m["name"]: _resolve(core_btf, m["type_id"]) for m in _resolve(core_btf, t["type_id"])["members"]}

        def number(field: str, fields: dict[str, dict] = fields) -> int:
            return int(_resolve(core_btf, fields[field]["type_id"])["nr_elems"]) if field in fields else 0

        key = _resolve(core_btf, fields["key"]["type_id"])
        value = _resolve(core_btf, fields["value"]["type_id"])
        found[t["name"]] = (number("type"), key["name"] if key["kind"] == "STRUCT" else None, value["name"],
                            number("map_flags"))
        if key["kind"] != "STRUCT":
            assert key["kind"] == "INT" and key["size"] == 4, (t["name"], key)
    assert found == MAPS


def test_the_bcc_and_core_builds_share_one_source() -> None:
    """One C file for both loaders: bcc's map syntax and the libbpf one are behind macros, so a change of
    the program's logic reaches both (an #ifdef outside the preamble and the bcc accessors would let
    them drift apart)."""
    text = (BPF_DIR / "flow_marker.c").read_text()
    body = text[text.index('#include "flow_marker.h"'):]
    outside = [line for line in body.splitlines() if line.startswith("#if") and "LEVELLER_CORE" in line]
    assert outside == ["#ifndef LEVELLER_CORE"], outside  # only the bcc accessor functions
    assert body.count("LV_LOOKUP(") >= 7 and ".lookup(" not in body.split("#endif", 1)[1]
