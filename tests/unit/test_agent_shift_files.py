"""Root must not follow a user's symlink when it writes a shift file (issue 26, High 3).

With ``--shift-dir`` writable by the jobs' users (the README's example is /tmp/shifts), a symlink
planted at the agent's temporary name made the root agent overwrite the link's target (a root-owned
0600 file). The agent now opens the directory once and creates its files there with
O_CREAT|O_EXCL|O_NOFOLLOW, then renames within that directory: no name in it is ever followed, and
the directory itself is the one it opened, whatever is put at its path later.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from leveller.agent.shifts import ShiftFiles
from leveller.errors import UserError
from leveller.jobs.control import ShiftFollower, shift_path
from leveller.model.messages import JobShift

SECRET = "root's secret\n"


def victim(tmp_path: Path) -> Path:
    """A file the agent must never write: outside the shift directory, mode 0600."""
    path = tmp_path / "victim"
    path.write_text(SECRET)
    path.chmod(0o600)
    return path


def assert_untouched(path: Path) -> None:
    assert path.read_text() == SECRET and stat.S_IMODE(path.stat().st_mode) == 0o600


def assert_order(path: Path, job: str, plan: int) -> None:
    st = os.lstat(path)
    assert stat.S_ISREG(st.st_mode), f"{path} is not a regular file"
    raw = json.loads(path.read_text())
    assert raw["job"] == job and raw["plan"] == plan


def shifts_dir(tmp_path: Path) -> Path:
    d = tmp_path / "shifts"
    d.mkdir()
    d.chmod(0o1777)  # as /tmp/shifts would be: every job's user may write there
    return d


def test_a_symlink_planted_at_the_temporary_name_is_not_followed(tmp_path: Path) -> None:
    target = victim(tmp_path)
    d = shifts_dir(tmp_path)
    (d / f".gpt.shift.{os.getpid()}.tmp").symlink_to(target)  # the name the agent used to write through
    files = ShiftFiles(d)
    assert files.deliver([JobShift("gpt", 1, 0.5, 1.0)], 1000.0) == ["gpt"]
    assert_untouched(target)
    assert_order(d / "gpt.shift", "gpt", 1)
    assert not [p for p in d.iterdir() if p.name.endswith(".tmp")]  # nothing left behind
    files.close()


def test_a_symlink_planted_at_the_final_name_is_replaced_not_followed(tmp_path: Path) -> None:
    target = victim(tmp_path)
    d = shifts_dir(tmp_path)
    (d / "gpt.shift").symlink_to(target)
    files = ShiftFiles(d)
    files.deliver([JobShift("gpt", 1, 0.5, 1.0)], 1000.0)
    assert_untouched(target)
    assert_order(d / "gpt.shift", "gpt", 1)
    (d / "gpt.shift").unlink()
    (d / "gpt.shift").symlink_to(target)  # planted again before the agent stops
    files.close()  # removes the name, never what it points to
    assert_untouched(target)
    assert not (d / "gpt.shift").is_symlink()


def test_the_directory_swapped_for_a_symlink_after_the_start_is_not_followed(tmp_path: Path) -> None:
    """A user who may rename the shift directory puts a symlink to a root directory at its path: the
    agent keeps writing into the directory it opened."""
    d = shifts_dir(tmp_path)
    protected = tmp_path / "protected"
    protected.mkdir(mode=0o700)
    files = ShiftFiles(d)
    files.deliver([JobShift("gpt", 1, 0.5, 1.0)], 1000.0)
    moved = tmp_path / "moved"
    d.rename(moved)
    d.symlink_to(protected)
    files.deliver([JobShift("gpt", 2, 0.5, 1.0)], 1001.0)
    assert list(protected.iterdir()) == []
    assert_order(moved / "gpt.shift", "gpt", 2)
    files.close()
    assert list(moved.iterdir()) == []


def test_a_shift_dir_given_as_a_symlink_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(UserError, match="symbolic link"):
        ShiftFiles(link)
    with pytest.raises(UserError, match="not a directory"):
        ShiftFiles(tmp_path / "missing")


def test_jobs_can_read_the_file_whatever_the_agents_umask(tmp_path: Path) -> None:
    d = shifts_dir(tmp_path)
    old = os.umask(0o077)
    try:
        files = ShiftFiles(d)
        files.deliver([JobShift("gpt", 3, 0.5, 1.0)], 1000.0)
    finally:
        os.umask(old)
    path = shift_path(d, "gpt")
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    order = ShiftFollower(path, "gpt")._read()
    assert order is not None and order.plan == 3 and order.start_at == pytest.approx(1000.5)
    files.close()
