"""Run locks: one holder at a time, no file left behind, stale files of dead holders swept."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from leveller.errors import UserError
from leveller.locking import exclusive, sweep_stale


def test_second_holder_is_refused_with_the_first_holders_pid(tmp_path: Path) -> None:
    path = tmp_path / "run" / "x.lock"
    with exclusive(path, lambda holder: f"busy, held by {holder}"):
        assert path.read_text().strip() == str(os.getpid())
        with pytest.raises(UserError, match=f"busy, held by {os.getpid()}"):
            with exclusive(path, lambda holder: f"busy, held by {holder}"):
                pass
    assert not path.exists()  # released: the file is gone
    with exclusive(path, lambda holder: "busy"):  # and the next holder gets it
        pass


def test_sweep_removes_unheld_locks_and_keeps_held_ones(tmp_path: Path) -> None:
    stale = tmp_path / "agent-lvk-dead-a-eth0.lock"
    stale.write_text("12345\n")
    live = tmp_path / "agent-lvk-live-a-eth0.lock"
    live.write_text("1\n")
    mine = tmp_path / "agent-host-eth0.lock"
    mine.write_text("2\n")
    other = tmp_path / "unrelated.txt"
    other.write_text("x")
    holder = os.open(live, os.O_RDWR)  # a live process holds its lock (another open file description)
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        assert sweep_stale(tmp_path, "agent-*.lock", keep=mine) == 1
    finally:
        os.close(holder)
    assert not stale.exists()
    assert live.exists() and mine.exists() and other.exists()
