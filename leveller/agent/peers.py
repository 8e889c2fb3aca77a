"""What the kernel says about a local client of the agent: its credentials, its cgroup, what it may read.

The registration socket (leveller.agent.regserver) trusts nothing a client writes about itself: the
pid and uid come from SO_PEERCRED, the cgroup from /proc/PID/cgroup (the cgroup v2 line), and the
cgroup id the eBPF datapath counts flows by is the inode number of that cgroup's directory under the
cgroup2 mount (found in /proc/self/mountinfo, never assumed at /sys/fs/cgroup). A log path a client
names is opened here as that client's uid could open it: each directory on the way must be
searchable by it, no component may be a symbolic link (O_NOFOLLOW on every step, as
fs.protected_symlinks may be 0), and the file must be readable by it and be a regular file or FIFO.
"""

from __future__ import annotations

import os
import socket
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

from leveller.model.errors import FieldError

_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


@dataclass(frozen=True)
class Peer:
    """A connected client as the kernel knows it."""

    pid: int
    uid: int
    gid: int


def peer_of(sock: socket.socket) -> Peer:
    """SO_PEERCRED of a connected AF_UNIX socket (the credentials at connect time)."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    pid, uid, gid = _UCRED.unpack(raw)
    return Peer(pid, uid, gid)


def cgroup2_mount(mountinfo: str = "/proc/self/mountinfo") -> str:
    """The mount point of the cgroup v2 hierarchy (``/sys/fs/cgroup`` or, on a hybrid layout,
    ``/sys/fs/cgroup/unified``); OSError if there is none."""
    with open(mountinfo) as f:
        for line in f:
            left, _, right = line.partition(" - ")
            if right.split(" ", 1)[0] == "cgroup2":
                return _unescape(left.split()[4])
    raise OSError("no cgroup2 file system is mounted (see /proc/self/mountinfo)")


def _unescape(path: str) -> str:
    """mountinfo's octal escapes (\\040 for a space) decoded."""
    return path.encode().decode("unicode_escape") if "\\" in path else path


def cgroup_of(pid: int, proc: str = "/proc") -> str:
    """The cgroup v2 path of process ``pid`` (``/user.slice/...``, relative to the cgroup2 mount);
    OSError if the process is gone or has no v2 line."""
    with open(f"{proc}/{pid}/cgroup") as f:
        for line in f:
            hier, _, rest = line.rstrip("\n").partition(":")
            controllers, _, path = rest.partition(":")
            if hier == "0" and controllers == "":
                return path
    raise OSError(f"process {pid} has no cgroup v2 entry in {proc}/{pid}/cgroup")


def uid_of(pid: int, proc: str = "/proc") -> int:
    """The real uid of process ``pid`` (OSError if it is gone)."""
    with open(f"{proc}/{pid}/status") as f:
        for line in f:
            if line.startswith("Uid:"):
                return int(line.split()[1])
    raise OSError(f"process {pid}: no Uid line")


def cgroup_procs(directory: str) -> list[int]:
    """The pids in one cgroup (not its descendants); [] once the cgroup is gone."""
    try:
        text = Path(directory, "cgroup.procs").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def populated(directory: str) -> bool:
    """True while the cgroup or one of its descendants holds a process (cgroup.events)."""
    try:
        text = Path(directory, "cgroup.events").read_text()
    except OSError:
        return False
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "populated":
            return value.strip() == "1"
    return bool(cgroup_procs(directory))


def foreign_processes(directory: str, uid: int, proc: str = "/proc") -> list[int]:
    """Pids in the cgroup (and its descendants) that run as another uid than ``uid``: a client may
    register only a cgroup every process of which is its own."""
    out = []
    for root, _dirs, _files in os.walk(directory):
        for pid in cgroup_procs(root):
            try:
                if uid_of(pid, proc) != uid:
                    out.append(pid)
            except (OSError, ValueError):
                continue  # exited meanwhile
    return out


def cgroup_ids(directory: str) -> list[int]:
    """The cgroup ids (directory inodes) of a cgroup and every descendant: a socket carries the id of
    the cgroup its process was in when it was created, a leaf of the job's tree."""
    out = []
    for root, _dirs, _files in os.walk(directory):
        try:
            out.append(os.stat(root).st_ino)
        except OSError:
            continue
    return out


def groups_of(uid: int, gid: int) -> set[int]:
    """The gids a user has (primary + supplementary), for a permission check made on its behalf."""
    import pwd

    gids = {gid}
    try:
        name = pwd.getpwuid(uid).pw_name
        gids |= set(os.getgrouplist(name, gid))
    except (KeyError, OSError):
        pass
    return gids


def _may(st: os.stat_result, uid: int, gids: set[int], bits: int) -> bool:
    """Would ``uid`` (in ``gids``) have the ``bits`` (an rwx triple, 4/2/1) of this mode? Root: yes."""
    if uid == 0:
        return True
    if st.st_uid == uid:
        return bool((st.st_mode >> 6) & bits == bits)
    if st.st_gid in gids:
        return bool((st.st_mode >> 3) & bits == bits)
    return bool(st.st_mode & bits == bits)


def open_as(path: str, peer: Peer, field: str = "log") -> int:
    """Open ``path`` for reading as ``peer`` could: an absolute path, no symbolic link on the way,
    every directory searchable and the file readable by the peer's uid, a regular file or FIFO.
    Returns a descriptor (O_RDONLY | O_NONBLOCK); FieldError naming ``field`` says why not."""
    if not path.startswith("/") or "\0" in path or len(path) > 4096:
        raise FieldError(field, f"{path[:80]!r} is invalid; an absolute path (at most 4096 bytes)")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        raise FieldError(field, f"{path!r}: a path to a file, without '..'")
    gids = groups_of(peer.uid, peer.gid)
    flags = os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | flags)
    try:
        for i, name in enumerate(parts):
            st = os.fstat(fd)
            if not _may(st, peer.uid, gids, 1):
                raise FieldError(field, f"{path!r}: uid {peer.uid} may not enter {'/' + '/'.join(parts[:i])}")
            last = i == len(parts) - 1
            mode = (os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY) if last else (os.O_RDONLY | os.O_DIRECTORY)
            try:
                st_next = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if stat.S_ISLNK(st_next.st_mode):
                    raise FieldError(field, f"{path!r}: {'/' + '/'.join(parts[:i + 1])} is a symbolic link; "
                                     "give the real path")
                if last and not (stat.S_ISREG(st_next.st_mode) or stat.S_ISFIFO(st_next.st_mode)):
                    raise FieldError(field, f"{path!r}: not a regular file or FIFO")
                nxt = os.open(name, mode | flags, dir_fd=fd)
            except FileNotFoundError:
                raise FieldError(field, f"{path!r}: no such file") from None
            except FieldError:
                raise
            except OSError as exc:
                raise FieldError(field, f"{path!r}: cannot be opened ({exc.strerror})") from None
            os.close(fd)
            fd = nxt
        st = os.fstat(fd)
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
            raise FieldError(field, f"{path!r}: not a regular file or FIFO")
        if not _may(st, peer.uid, gids, 4):
            raise FieldError(field, f"{path!r}: uid {peer.uid} may not read it")
        out, fd = fd, -1
        return out
    finally:
        if fd >= 0:
            os.close(fd)
