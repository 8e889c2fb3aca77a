"""The one flow identity: a 5-tuple of IPv4 or IPv6 addresses.

A ``FlowKey`` is a tuple of canonical address strings and integers, so hashing
and comparing run at C speed where a controller keeps 100,000 of them in dicts;
the same key serves the agent (leveller.agent.flow_structs packs it into the
BPF map key), the wire (leveller.rpc.schema), the controller's graph ids and
the SDN app's rules. Addresses are canonical (``ipaddress``'s text form: IPv6
compressed and lowercase), so one flow has exactly one key.
"""

from __future__ import annotations

import hashlib
import ipaddress
import numbers
import re
from typing import Any, NamedTuple

from leveller.model.errors import UserError

PROTOCOLS = {"tcp": 6, "udp": 17, "icmp": 1}  # names a user may give -> IP protocol number
PROTOCOL_NAMES = {number: name for name, number in PROTOCOLS.items()}
PORT_PROTOCOLS = (6, 17)  # protocols with ports (and the ones the eBPF marker tracks)
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
IPV4_PATTERN = re.compile(rf"{_OCTET}\.{_OCTET}\.{_OCTET}\.{_OCTET}")  # exactly what ipaddress accepts


class FlowKey(NamedTuple):
    """5-tuple of canonical IPv4 or IPv6 address strings (both the same version); ports are 0 for
    protocols without ports. Build checked keys with ``flow_key``."""

    src: str
    dst: str
    sport: int
    dport: int
    proto: int

    @property
    def version(self) -> int:
        """4 or 6."""
        return 6 if ":" in self.src else 4

    def reversed(self) -> FlowKey:
        """The same flow seen from the other end (replies)."""
        return FlowKey(self.dst, self.src, self.dport, self.sport, self.proto)

    def to_dict(self) -> dict[str, Any]:
        return {"src": self.src, "dst": self.dst, "sport": self.sport, "dport": self.dport, "proto": self.proto}

    def label(self) -> str:
        """Human-readable id (protocols without ports by number), e.g.
        ``tcp 10.0.0.1:40000>10.0.0.3:47000`` or ``udp [fd00::1]:5>[fd00::2]:6``."""
        proto = PROTOCOL_NAMES[self.proto] if self.proto in PORT_PROTOCOLS else str(self.proto)
        if ":" in self.src:
            return f"{proto} [{self.src}]:{self.sport}>[{self.dst}]:{self.dport}"
        return f"{proto} {self.src}:{self.sport}>{self.dst}:{self.dport}"

    def cookie(self) -> int:
        """Stable 63-bit id (OpenFlow cookie of the flow's rules; top bit left clear)."""
        return stable_hash(self) & (2**63 - 1)


def canonical_address(value: Any, name: str) -> tuple[str, int]:
    """(canonical text, version) of an IPv4 or IPv6 address; UserError naming ``name`` otherwise."""
    if isinstance(value, str) and IPV4_PATTERN.fullmatch(value):  # the fast path of ~100,000 flows/s
        return value, 4
    if isinstance(value, (ipaddress.IPv4Address, ipaddress.IPv6Address)):
        return str(value), value.version
    try:
        if not isinstance(value, str) or "%" in value:  # no scope ids: a flow crosses hosts
            raise ValueError
        addr = ipaddress.ip_address(value)
    except ValueError:
        raise UserError(f"flow: {name} = {value!r} is invalid; an IPv4 or IPv6 address") from None
    return str(addr), addr.version


def flow_key(src: Any, dst: Any, sport: Any = 0, dport: Any = 0, proto: Any = "tcp") -> FlowKey:
    """Build a FlowKey from loosely typed input (e.g. query strings); UserError if invalid."""
    src_text, src_version = canonical_address(src, "src")
    dst_text, dst_version = canonical_address(dst, "dst")
    if src_version != dst_version:
        raise UserError(f"flow: src = {src_text!r} and dst = {dst_text!r} are invalid together; "
                        "both IPv4 or both IPv6")
    proto_n = PROTOCOLS.get(proto.lower()) if isinstance(proto, str) else None
    if proto_n is None:
        proto_n = _integer(proto)
        if proto_n is None or not 0 <= proto_n <= 255:
            raise UserError(f"flow: proto = {proto!r} is invalid; tcp, udp, icmp or 0..255")
    ports = []
    for name, value in (("sport", sport), ("dport", dport)):
        port = _integer(value)
        if port is None or not 0 <= port <= 65535:
            raise UserError(f"flow: {name} = {value!r} is invalid; an integer 0..65535")
        ports.append(port if proto_n in PORT_PROTOCOLS else 0)
    return FlowKey(src_text, dst_text, ports[0], ports[1], proto_n)


def _integer(value: Any) -> int | None:
    """An integer, or a string of ASCII digits; None for anything else (int() would also take
    True, 1.5, " 1", "1_000" and non-ASCII digits)."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    return None


def stable_hash(flow: FlowKey) -> int:
    """64-bit hash of the 5-tuple, identical across processes (unlike hash())."""
    text = f"{flow.src}|{flow.dst}|{flow.sport}|{flow.dport}|{flow.proto}".encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big")
