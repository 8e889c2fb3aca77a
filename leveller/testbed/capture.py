"""Reading captured frames (AF_PACKET, SOCK_RAW, ETH_P_IP): the IPv4 fields the live checks need and the
kernel's receive time stamp (SO_TIMESTAMPNS)."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable, Iterable, Iterator

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


Frame = tuple[tuple[int, bytes, bytes, int, int], list[tuple[int, int, bytes]]]


def frames(sock: socket.socket, stopped: Callable[[], bool] = lambda: False) -> Iterator[Frame]:
    """(ipv4_ports fields, ancillary data) of every IPv4 frame with ports read from a capture socket, until the
    socket is closed or ``stopped()`` (checked after each read or read time-out); kernel_stamp(ancillary) is left
    to the caller, which may need it only for some frames."""
    while not stopped():
        try:
            data, anc, _, _ = sock.recvmsg(64, socket.CMSG_SPACE(16))
        except TimeoutError:
            continue
        except OSError:
            return
        fields = ipv4_ports(data)
        if fields is not None:
            yield fields, anc
