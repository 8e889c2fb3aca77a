"""Which AF_PACKET socket of ovs-vswitchd is its send socket, and how big it must be (leveller.testbed.sndbuf)."""

from __future__ import annotations

import pytest

from leveller.testbed.sndbuf import FRAME_TRUESIZE, needed_bytes, send_socket_inodes

# /proc/PID/net/packet of a userspace switch with two ports: one receive socket per port (Proto 0003 =
# ETH_P_ALL, bound to the port's ifindex) and the one send socket (no protocol, no interface).
TABLE = """sk               RefCnt Type Proto  Iface R Rmem   User   Inode
000000006a510158 3      3    0003   3     1 0      0      42118863
000000009f4cacef 3      3    0003   4     1 0      0      42118865
0000000081c53095 2      3    0000   0     0 0      0      42123551
"""


def test_the_send_socket_is_the_one_bound_to_nothing() -> None:
    assert send_socket_inodes(TABLE) == [42123551]


def test_a_switch_that_has_sent_nothing_has_no_send_socket() -> None:
    assert send_socket_inodes("\n".join(TABLE.splitlines()[:3])) == []
    assert send_socket_inodes("") == []


def test_a_table_of_another_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="not a /proc/net/packet table"):
        send_socket_inodes("sl  local_address rem_address   st\n")


def test_the_buffer_holds_every_queued_frame_with_room_to_spare() -> None:
    # 4 ports x 3 queues x 100 packets; a full frame is charged 2,304 bytes on this kernel
    assert needed_bytes(1200) == 1200 * FRAME_TRUESIZE >= 1200 * 2304
    assert needed_bytes(0) == FRAME_TRUESIZE
