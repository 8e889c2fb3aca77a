"""Small files the commands read at start (--config, secrets, tokens, PEM files), read safely.

Only a regular file is read, and at most a bound: ``--config /dev/zero`` or ``secret_file = "/dev/zero"``
read until memory ran out (2.4 GB), and a FIFO made the start hang. A secret others can read is
accepted with a warning (the operator may have reasons; the log says so). Imports only errors, so
the config, rpc and sdn layers all use it.
"""

from __future__ import annotations

import os
import stat
import sys

from leveller.errors import UserError

MAX_FILE_BYTES = 1 << 20  # a config or PEM file is a few KiB; /dev/zero or a huge file is refused, not read to the end
MAX_SECRET_FILE_BYTES = 64 << 10  # a secret or token file
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def read_small_file(path: str | os.PathLike[str], what: str, max_bytes: int = MAX_FILE_BYTES,
                    private: bool = False) -> bytes:
    """The bytes of the regular file ``path``, at most ``max_bytes``; UserError naming ``what`` (the option)
    otherwise. A FIFO, device or socket is refused without blocking or reading it (``--config /dev/zero``
    would read until memory runs out, a FIFO hang). ``private`` (a secret): warn on stderr when group or
    others may read it."""
    try:  # O_NONBLOCK: opening a FIFO does not wait for a writer (a regular file ignores the flag)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise UserError(f"{what} {str(path)!r}: cannot read it ({exc.strerror})") from None
    with open(fd, "rb", closefd=True) as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
            raise UserError(f"{what} {str(path)!r}: is {kind}; allowed: a regular file")
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise UserError(f"{what} {str(path)!r}: larger than {max_bytes} bytes; allowed: at most {max_bytes}")
    if private and st.st_mode & 0o077:
        print(f"leveller: warning: {what} {str(path)!r} has mode {stat.S_IMODE(st.st_mode):04o}: group or others "
              f"can read the secret; `chmod 600 {path}`", file=sys.stderr, flush=True)
    return data
