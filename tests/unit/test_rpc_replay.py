"""Replay guard: every genuine report is accepted, every replayed one refused; memory stays bounded."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveller.rpc.replay import ReplayError, ReplayGuard, new_run_id


@settings(max_examples=200)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 10_000), st.floats(0.001, 5.0)), min_size=1, max_size=60))
def test_genuine_reports_pass_and_replays_never_do(steps: list[tuple[bool, int, float]]) -> None:
    """An agent that restarts now and then (new run, numbering from 1, its clock moving on) interleaved
    with an attacker replaying any report seen before, byte for byte (same run, seq, signed time)."""
    guard = ReplayGuard(window_s=1e9)
    run, seq, now = new_run_id(), 0, 1000.0
    sent: list[tuple[str, int, float]] = []
    for restart, pick, gap in steps:
        now += gap
        if restart:
            run, seq = new_run_id(), 0
        seq += 1
        guard.admit("h1", run, seq, now, now)  # genuine: must never raise
        sent.append((run, seq, now))
        old_run, old_seq, old_sent = sent[pick % len(sent)]
        with pytest.raises(ReplayError):
            guard.admit("h1", old_run, old_seq, old_sent, now + 0.0005)
    assert len(guard) == 1


def test_refusal_names_the_case_and_records_nothing() -> None:
    guard = ReplayGuard()
    guard.admit("h1", "a" * 16, 5, 100.0, 100.0)
    with pytest.raises(ReplayError, match="not newer than report 5"):
        guard.admit("h1", "a" * 16, 5, 101.0, 101.0)
    with pytest.raises(ReplayError, match="clock went back"):
        guard.admit("h1", "b" * 16, 1, 99.0, 101.0)
    guard.admit("h1", "a" * 16, 6, 102.0, 102.0)  # the refusals did not move the host's state
    guard.admit("h2", "a" * 16, 1, 50.0, 102.0)  # hosts are independent


def test_entries_expire_after_the_signature_window_and_are_capped() -> None:
    guard = ReplayGuard(window_s=300.0, max_hosts=50)
    for i in range(200):  # a flood of distinct host names
        guard.admit(f"h{i}", new_run_id(), 1, 1000.0 + i, 1000.0 + i)
    assert len(guard) == 50
    guard.admit("steady", new_run_id(), 1, 1600.0, 1600.0)  # 300 s later every flooded entry is past the window
    assert len(guard) == 1
