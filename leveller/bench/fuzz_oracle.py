"""What bpf/flow_marker.c must do to one frame, decided from the frame's bytes alone. Pure.

This is the fuzz's reference, written from the program's documented contract
(the comments of bpf/flow_marker.c and bpf/flow_marker.h), not from its code:

- every frame passes (TC_ACT_OK) with its length unchanged;
- a frame is *understood* when it is Ethernet + IPv4 without options and not a
  fragment (or IPv6 with TCP/UDP right after the fixed header) and its whole
  TCP (20 bytes) or UDP (8 bytes) header is present; only understood frames are
  counted: their flow's bytes grow by the frame's length minus the Ethernet
  header (skb->len - ETH_HLEN) and its packets by the GSO segment count (1 for a
  frame that is no GSO packet);
- an understood frame of a flow whose DSCP map entry is valid (0x80 | dscp) is
  rewritten, while the lease runs, to carry that DSCP: only the six DSCP bits
  change (and, for IPv4, the header checksum); ECN, the IPv6 version and flow
  label stay; every other frame leaves byte-identical.

`check` compares what the kernel returned with this, header field by header
field and with the IPv4 checksum recomputed from scratch, and names each
broken invariant.
"""

from __future__ import annotations

from dataclasses import dataclass

ETH_HLEN = 14
ETH_P_IP = 0x0800
ETH_P_IPV6 = 0x86DD
IPV4_HLEN = 20
IPV6_HLEN = 40
L4_HLEN = {6: 20, 17: 8}  # struct tcphdr / struct udphdr: the program reads the whole header
TC_ACT_OK = 0

# Flow: (ip_version, src address bytes, dst address bytes, src port, dst port, protocol)
Flow = tuple[int, bytes, bytes, int, int, int]

# Names of the invariants `check` can report broken.
CHECKS = (
    "verdict",               # the program returned something else than TC_ACT_OK
    "length",                # the frame came back longer or shorter
    "changed_unmapped",      # an understood frame of an unmapped flow was changed
    "changed_not_understood",  # a frame the program must not understand was changed
    "changed_lease_ended",   # a mapped flow's frame was changed while the lease had ended
    "outside_dscp",          # a marked frame changed outside the DSCP bits (and IPv4 checksum)
    "ecn",                   # a marked frame's ECN bits changed
    "dscp",                  # a marked frame does not carry its flow's DSCP
    "ipv4_checksum",         # a marked IPv4 header's checksum is not the one recomputed from scratch
    "counters",              # a flow's counters did not grow by exactly its counted frames and bytes
    "dscp_counters",         # a flow's bytes per DSCP sent with did not grow by exactly its frames and bytes
    "test_run_input",        # BPF_PROG_TEST_RUN refused a frame it should take, or the reverse
)


def kernel_takes(frame: bytes) -> bool:
    """Whether BPF_PROG_TEST_RUN accepts the frame at all (measured on Linux 6.18): an Ethernet
    header, and for the IPv4 / IPv6 ethertypes the fixed IP header. Shorter frames never reach
    the program (the syscall fails with EINVAL)."""
    if len(frame) < ETH_HLEN:
        return False
    ethertype = int.from_bytes(frame[12:14], "big")
    if ethertype == ETH_P_IP:
        return len(frame) >= ETH_HLEN + IPV4_HLEN
    if ethertype == ETH_P_IPV6:
        return len(frame) >= ETH_HLEN + IPV6_HLEN
    return True


def flow_of(frame: bytes) -> Flow | None:
    """The flow of an understood frame, None for any frame the program must leave alone."""
    if len(frame) < ETH_HLEN:
        return None
    ethertype = int.from_bytes(frame[12:14], "big")
    if ethertype == ETH_P_IP:
        l3 = frame[ETH_HLEN:]
        if len(l3) < IPV4_HLEN or l3[0] != 0x45:  # version 4 and IHL 5 (no options)
            return None
        if int.from_bytes(l3[6:8], "big") & 0x3FFF:  # MF flag or a fragment offset
            return None
        proto, src, dst, l4 = l3[9], l3[12:16], l3[16:20], l3[IPV4_HLEN:]
        version = 4
    elif ethertype == ETH_P_IPV6:
        l3 = frame[ETH_HLEN:]
        if len(l3) < IPV6_HLEN or l3[0] >> 4 != 6:
            return None
        proto, src, dst, l4 = l3[6], l3[8:24], l3[24:40], l3[IPV6_HLEN:]
        version = 6
    else:
        return None
    if proto not in L4_HLEN or len(l4) < L4_HLEN[proto]:
        return None
    return version, bytes(src), bytes(dst), int.from_bytes(l4[0:2], "big"), int.from_bytes(l4[2:4], "big"), proto


def frame_dscp(frame: bytes) -> int:
    """The DSCP of an understood frame (IPv4 TOS or IPv6 traffic class, upper six bits)."""
    l3 = frame[ETH_HLEN:]
    if int.from_bytes(frame[12:14], "big") == ETH_P_IP:
        return l3[1] >> 2
    return (((l3[0] & 0x0F) << 4) | (l3[1] >> 4)) >> 2


def mark_is_valid(mark: int) -> bool:
    """flow_dscp.mark sets a DSCP only as 0x80 | dscp (bit 7 set, bit 6 clear)."""
    return mark & 0xC0 == 0x80


@dataclass(frozen=True)
class Expected:
    """The reference outcome for one frame."""

    flow: Flow | None  # counted under this flow (None: not counted)
    count_bytes: int
    count_packets: int
    dscp: int | None  # the DSCP the frame must leave with (None: it must leave byte-identical)
    mapped: bool  # its flow has a valid DSCP map entry (whatever the lease)


def expect(frame: bytes, marks: dict[Flow, int], lease_running: bool, gso_segs: int = 0) -> Expected:
    """The reference outcome of ``frame`` given the DSCP map's raw marks and the lease state."""
    flow = flow_of(frame)
    if flow is None:
        return Expected(None, 0, 0, None, False)
    mark = marks.get(flow, 0)  # 0: no entry (also an invalid mark)
    mapped = mark_is_valid(mark)
    dscp = mark & 0x3F if mapped and lease_running else None
    return Expected(flow, len(frame) - ETH_HLEN, gso_segs or 1, dscp, mapped)


def ones_complement_sum(data: bytes) -> int:
    """RFC 1071 16-bit ones' complement sum (folded)."""
    if len(data) % 2:
        data += b"\0"
    total = sum(int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total


def ipv4_checksum(header: bytes) -> int:
    """The header checksum computed from scratch (checksum field taken as zero)."""
    return 0xFFFF - ones_complement_sum(header[:10] + b"\0\0" + header[12:])


def check(frame: bytes, out: bytes, retval: int, exp: Expected, lease_running: bool) -> list[str]:
    """The invariants the kernel's result breaks for this frame (empty: all hold)."""
    broken = []
    if retval != TC_ACT_OK:
        broken.append("verdict")
    if len(out) != len(frame):
        return [*broken, "length"]
    if exp.dscp is None:
        if out != frame:
            if exp.flow is None:
                broken.append("changed_not_understood")
            elif exp.mapped and not lease_running:
                broken.append("changed_lease_ended")
            else:
                broken.append("changed_unmapped")
        return broken
    return broken + _check_marked(frame, out, exp.dscp)


def _check_marked(frame: bytes, out: bytes, dscp: int) -> list[str]:
    broken = []
    if int.from_bytes(frame[12:14], "big") == ETH_P_IP:
        allowed = {ETH_HLEN + 1, ETH_HLEN + 10, ETH_HLEN + 11}  # TOS, checksum
        old_tc, new_tc = frame[15], out[15]
    else:
        allowed = {ETH_HLEN, ETH_HLEN + 1}
        old_word, new_word = int.from_bytes(frame[14:18], "big"), int.from_bytes(out[14:18], "big")
        if (old_word ^ new_word) & 0xF00FFFFF:  # version, flow label
            broken.append("outside_dscp")
        old_tc, new_tc = (old_word >> 20) & 0xFF, (new_word >> 20) & 0xFF
    if any(a != b for i, (a, b) in enumerate(zip(frame, out)) if i not in allowed):
        if "outside_dscp" not in broken:
            broken.append("outside_dscp")
    if (old_tc ^ new_tc) & 0x03:
        broken.append("ecn")
    if new_tc >> 2 != dscp:
        broken.append("dscp")
    if int.from_bytes(frame[12:14], "big") == ETH_P_IP:
        before, after = frame[ETH_HLEN:ETH_HLEN + IPV4_HLEN], out[ETH_HLEN:ETH_HLEN + IPV4_HLEN]
        if ones_complement_sum(before) == 0xFFFF:
            # a valid header stays valid: the checksum is the one computed from scratch
            if int.from_bytes(after[10:12], "big") != ipv4_checksum(after):
                broken.append("ipv4_checksum")
        elif ones_complement_sum(after) % 0xFFFF != ones_complement_sum(before) % 0xFFFF:
            # a corrupt header stays exactly as corrupt (an incremental update must not hide it)
            broken.append("ipv4_checksum")
    return broken
