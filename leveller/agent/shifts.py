"""CASSINI shift orders from the controller's replies to the jobs' shift files.

An agent run with ``--shift-dir DIR`` writes, for each job of the host that has a
shift in the current plan, ``DIR/<job>.shift`` (leveller.jobs.control): the job
should start an iteration at ``start_at + k * period_s`` by this host's clock, where
``start_at`` = the time the reply arrived + the reply's ``start_in_s``. A file is
written once per plan (the first reply of a plan fixes it); jobs read it before an
iteration starts. The files are removed when the agent stops.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from leveller.errors import UserError
from leveller.jobs.control import ShiftOrder, shift_path, write_shift
from leveller.model.messages import JobShift


class ShiftFiles:
    """Writes each job's shift order once per plan into a directory."""

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory)
        if not self.directory.is_dir():
            raise UserError(f"--shift-dir {directory}: not a directory")
        self.written: dict[str, int] = {}  # job -> plan in its file

    def deliver(self, shifts: Sequence[JobShift], received: float) -> list[str]:
        """Write the orders of plans not written yet; returns the jobs whose file changed."""
        changed = []
        for s in shifts:
            if self.written.get(s.job) == s.plan:
                continue
            write_shift(shift_path(self.directory, s.job), ShiftOrder(s.job, s.plan, received + s.start_in_s,
                                                                       s.period_s))
            self.written[s.job] = s.plan
            changed.append(s.job)
        return changed

    def close(self) -> None:
        """Remove the files this agent wrote (a later job must not follow a dead plan)."""
        for job in self.written:
            shift_path(self.directory, job).unlink(missing_ok=True)
        self.written.clear()
