"""CASSINI shift orders from the controller's replies to the jobs' shift files.

An agent run with ``--shift-dir DIR`` writes, for each job of the host that has a
shift in the current plan, ``DIR/<job>.shift`` (leveller.jobs.control): the job
should start an iteration at ``start_at + k * period_s`` by this host's clock, where
``start_at`` = the time the reply arrived + the reply's ``start_in_s``. A file is
written once per plan (the first reply of a plan fixes it); jobs read it before an
iteration starts. The files are removed when the agent stops.

The agent is root and DIR may be writable by the jobs' users (/tmp/shifts), so it
never follows a name there: DIR is opened once (not through a symlink), and every
file is created, renamed and removed relative to that open directory, with
O_EXCL|O_NOFOLLOW (leveller.jobs.control.write_shift_at). Files are mode 0644 so
every job can read its own.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from pathlib import Path

from leveller.errors import UserError
from leveller.jobs.control import ShiftOrder, shift_name, write_shift_at
from leveller.model.messages import JobShift


def open_shift_dir(directory: Path) -> int:
    """The directory's fd (O_DIRECTORY|O_NOFOLLOW); UserError when it is missing, not a directory, or a
    symlink (give the directory itself: a symlink's target can be changed under the agent)."""
    try:
        return os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        try:
            is_link = stat.S_ISLNK(os.lstat(directory).st_mode)
        except OSError:
            is_link = False
        if is_link:
            raise UserError(f"--shift-dir {directory}: a symbolic link (to {os.readlink(directory)}); give the "
                            "directory itself") from None
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            raise UserError(f"--shift-dir {directory}: not a directory") from None
        raise UserError(f"--shift-dir {directory}: {exc.strerror}") from None


class ShiftFiles:
    """Writes each job's shift order once per plan into a directory (opened once, see the module doc)."""

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory)
        self._dir_fd: int | None = open_shift_dir(self.directory)
        self.written: dict[str, int] = {}  # job -> plan in its file

    def _fd(self) -> int:
        if self._dir_fd is None:  # used again after close()
            self._dir_fd = open_shift_dir(self.directory)
        return self._dir_fd

    def deliver(self, shifts: Sequence[JobShift], received: float) -> list[str]:
        """Write the orders of plans not written yet; returns the jobs whose file changed."""
        changed = []
        for s in shifts:
            if self.written.get(s.job) == s.plan:
                continue
            write_shift_at(self._fd(), shift_name(s.job),
                           ShiftOrder(s.job, s.plan, received + s.start_in_s, s.period_s))
            self.written[s.job] = s.plan
            changed.append(s.job)
        return changed

    def close(self) -> None:
        """Remove the files this agent wrote (a later job must not follow a dead plan)."""
        if self._dir_fd is not None:
            for job in self.written:
                try:
                    os.unlink(shift_name(job), dir_fd=self._dir_fd)  # the name only, never followed
                except FileNotFoundError:
                    pass
            os.close(self._dir_fd)
            self._dir_fd = None
        self.written.clear()
