"""Agent interface locks: stale lock files of dead agents are swept, live ones are left alone."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from leveller.agent import claim


@pytest.fixture()
def lock_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(claim, "LOCK_DIR", tmp_path)
    return tmp_path


def test_sweep_removes_unheld_locks_and_keeps_held_ones(lock_dir: Path) -> None:
    stale = lock_dir / "agent-lvk-dead-a-eth0.lock"
    stale.write_text("12345\n")
    live = lock_dir / "agent-lvk-live-a-eth0.lock"
    live.write_text("1\n")
    mine = lock_dir / "agent-host-eth0.lock"
    mine.write_text("2\n")
    other = lock_dir / "unrelated.txt"
    other.write_text("x")
    holder = os.open(live, os.O_RDWR)  # a live agent holds its lock (another open file description)
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        assert claim.sweep_stale_locks(keep=mine) == 1
    finally:
        os.close(holder)
    assert not stale.exists()
    assert live.exists() and mine.exists() and other.exists()


def test_second_claim_on_a_held_interface_is_refused(lock_dir: Path) -> None:
    path = claim.lock_path("eth0", "ns1")
    fd = claim._lock(path, "eth0", "ns1")
    try:
        with pytest.raises(claim.UserError, match="another leveller agent"):
            claim._lock(path, "eth0", "ns1")
    finally:
        os.close(fd)
    # released by the holder's exit: the next claim gets it
    os.close(claim._lock(path, "eth0", "ns1"))
