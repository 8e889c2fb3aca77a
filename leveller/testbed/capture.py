"""Reading captured frames (AF_PACKET, SOCK_RAW, ETH_P_IP): the IPv4 fields the live checks need and the
kernel's receive time stamp (SO_TIMESTAMPNS)."""

from __future__ import annotations

import socket
import struct
import time
from typing import Iterable

ETH_P_IP = 0x0800
SO_TIMESTAMPNS = 35


def ipv4_ports(data: bytes) -> tuple[int, bytes, bytes, int, int] | None:
    """(protocol, source, destination, destination port, DSCP) of an Ethernet + IPv4 frame whose first
    4 bytes of transport header are present (ports of TCP and UDP); None for anything shorter."""
    if len(data) < 38:
        return None
    ihl = (data[14] & 0x0F) * 4
    if len(data) < 14 + ihl + 4:
        return None
    return data[23], data[26:30], data[30:34], struct.unpack_from("!H", data, 14 + ihl + 2)[0], data[15] >> 2


def kernel_stamp(ancillary: Iterable[tuple[int, int, bytes]]) -> float:
    """The SO_TIMESTAMPNS time of a received frame (wall clock), or now if the kernel gave none."""
    for level, kind, value in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
            sec, nsec = struct.unpack("qq", value[:16])
            return float(sec + nsec * 1e-9)
    return time.time()
