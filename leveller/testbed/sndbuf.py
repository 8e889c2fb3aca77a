"""Room in the userspace switch's send socket for every packet its port queues can hold.

With the userspace datapath (no openvswitch kernel module), ovs-vswitchd transmits on every
switch port through one AF_PACKET socket, and each packet sitting in a port's qdisc is charged
to that socket until the qdisc sends it. The socket keeps the machine's default send buffer
(net.core.wmem_default, 212,992 bytes: about 92 frames of 1,514 bytes at 2,304 bytes each), so
once all ports together hold about 92 packets, ovs-vswitchd's send fails (EAGAIN), and it drops the
packet before any queue sees it. That ignores its priority, and neither OVS nor tc counts the drop.
Two 64 KB TCP windows into one port are enough to reach that.

The socket cannot be configured through OVS, and net.core.wmem_default is not per network
namespace. So after the switch starts, :func:`widen` takes a duplicate of the socket from
ovs-vswitchd (pidfd_getfd, root only) and sets SO_SNDBUFFORCE on it. This changes nothing on the
machine outside the testbed.
"""

from __future__ import annotations

import ctypes
import os
import socket
from pathlib import Path

SO_SNDBUFFORCE = 32  # socket(7); not exported by Python's socket module
SYS_PIDFD_GETFD = 438  # the same number on every architecture Linux has (syscall(2) table)
FRAME_TRUESIZE = 4096  # kernel memory a queued 1,514-byte frame is charged (2,304 here); an upper bound


def send_socket_inodes(packet_table: str) -> list[int]:
    """Inodes of the AF_PACKET sockets in ``packet_table`` (/proc/PID/net/packet) bound to no
    interface and no protocol: how ovs-vswitchd's send socket looks. Its per-port receive sockets
    are each bound to one interface."""
    lines = packet_table.splitlines()
    if not lines:
        return []
    cols = lines[0].split()
    try:
        proto, iface, inode = cols.index("Proto"), cols.index("Iface"), cols.index("Inode")
    except ValueError:
        raise ValueError(f"not a /proc/net/packet table: header {lines[0]!r}") from None
    out = []
    for line in lines[1:]:
        f = line.split()
        if len(f) > inode and int(f[proto], 16) == 0 and int(f[iface]) == 0:
            out.append(int(f[inode]))
    return out


def needed_bytes(queued_packets: int) -> int:
    """Send buffer that holds ``queued_packets`` frames at once (the sum of every port's queue limits)."""
    return max(queued_packets, 1) * FRAME_TRUESIZE


def _fd_of_inode(pid: int, inode: int) -> int | None:
    want = f"socket:[{inode}]"
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            if os.readlink(fd) == want:
                return int(fd.name)
        except OSError:
            continue
    return None


def _getfd(pid: int, target: int) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(pid)
    try:
        fd = int(libc.syscall(SYS_PIDFD_GETFD, pidfd, target, 0))
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"pidfd_getfd(pid {pid}, fd {target}): {os.strerror(err)}")
        return fd
    finally:
        os.close(pidfd)


def widen(pid: int, nbytes: int) -> list[int]:
    """Give every send socket of ovs-vswitchd ``pid`` at least ``nbytes`` of send buffer; returns the
    buffers as the kernel reports them afterwards ([] when the process has no send socket yet: it
    opens it at its first transmission)."""
    out = []
    for inode in send_socket_inodes(Path(f"/proc/{pid}/net/packet").read_text()):
        target = _fd_of_inode(pid, inode)
        if target is None:
            continue
        with socket.socket(fileno=_getfd(pid, target)) as s:  # closing the duplicate leaves the original
            if s.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) < nbytes:
                s.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, (nbytes + 1) // 2)  # the kernel doubles it
            out.append(s.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF))
    return out
