"""Shift orders (agent -> job) and communication lines (job -> agent): format, phase arithmetic,
the follower that applies each plan once, and the emulator and hook that obey them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from leveller.codec import SchemaError
from leveller.jobs.control import (
    COMM_PATTERN,
    LATE_SHARE,
    ShiftFollower,
    ShiftOrder,
    format_comm_line,
    phase_delay,
    shift_from_dict,
    shift_path,
    write_shift,
)
from leveller.jobs.hook import IterationReporter
from leveller.jobs.spec import RunConfig, WorkerPlace


def test_phase_delay_waits_for_the_next_start_instant() -> None:
    order = ShiftOrder("j", 1, start_at=100.0, period_s=2.0)
    assert phase_delay(order, 99.0) == pytest.approx(1.0)  # before the anchor: wait for it
    assert phase_delay(order, 100.5) == pytest.approx(1.5)  # next start at 102
    assert phase_delay(order, 103.9) == pytest.approx(0.1)  # next start at 104
    assert phase_delay(order, 104.1) == 0.0  # 0.1 s late (5% of a period): start now
    assert phase_delay(order, 104.0 + LATE_SHARE * 2.0 + 0.01) == pytest.approx(2.0 - LATE_SHARE * 2.0 - 0.01)


@given(st.floats(1.0, 1e9), st.floats(0.01, 100.0), st.floats(-1e4, 1e4))
def test_phase_delay_lands_on_the_phase_or_within_the_late_tolerance(start: float, period: float,
                                                                      offset: float) -> None:
    order = ShiftOrder("j", 1, start, period)
    now = start + offset
    d = phase_delay(order, now)
    assert 0.0 <= d < period
    late = (now + d - start) % period
    assert min(late, period - late) <= LATE_SHARE * period + 1e-6 * max(1.0, abs(now))


def test_shift_file_round_trip_and_refusals(tmp_path: Path) -> None:
    path = shift_path(tmp_path, "j1")
    write_shift(path, ShiftOrder("j1", 3, 1000.5, 0.75))
    assert shift_from_dict(json.loads(path.read_text())) == ShiftOrder("j1", 3, 1000.5, 0.75)
    assert [p.name for p in tmp_path.iterdir()] == ["j1.shift"]  # no temporary file left
    good = ShiftOrder("j1", 3, 1000.5, 0.75).to_dict()
    for key, value, field in (("plan", -1, "plan"), ("plan", True, "plan"), ("period_s", 0, "period_s"),
                              ("start_at", float("nan"), "start_at"), ("job", "a b", "job"), ("v", 2, "v")):
        with pytest.raises(SchemaError) as err:
            shift_from_dict(dict(good, **{key: value}))
        assert err.value.field == field
    with pytest.raises(SchemaError):
        shift_from_dict(dict(good, extra=1))
    with pytest.raises(SchemaError):
        shift_path(tmp_path, "../etc")


def test_follower_applies_each_plan_once_and_ignores_bad_files(tmp_path: Path) -> None:
    path = shift_path(tmp_path, "j1")
    follower = ShiftFollower(path, "j1")
    assert follower.pending_delay(10.0) is None  # no file yet
    write_shift(path, ShiftOrder("j1", 1, 11.0, 1.0))
    assert follower.pending_delay(10.5) == (pytest.approx(0.5), 1)
    assert follower.pending_delay(10.7) is None  # plan 1 applied already
    write_shift(path, ShiftOrder("j1", 1, 11.3, 1.0))  # same plan, rewritten: still once
    assert follower.pending_delay(12.0) is None
    path.write_text("{not json")
    assert follower.pending_delay(12.0) is None and follower.error
    write_shift(path, ShiftOrder("other", 2, 11.0, 1.0))  # another job's order is not ours
    assert follower.pending_delay(12.0) is None and "not this job" in (follower.error or "")
    write_shift(path, ShiftOrder("j1", 2, 20.0, 1.0))
    assert follower.pending_delay(12.25) == (pytest.approx(0.75), 2)


def test_comm_line_format_and_pattern() -> None:
    line = format_comm_line("bert", 2, 1234.5, 0.25)
    m = COMM_PATTERN.search(line)
    assert m and (m["job"], float(m["t"]), float(m["wait"])) == ("bert", 1234.5, 0.25)
    with pytest.raises(ValueError):
        format_comm_line("bert", 0, 1.0, -0.1)


def test_spec_slack_bounds_and_derived_times() -> None:
    loop = (WorkerPlace("127.0.0.1"), WorkerPlace("127.0.0.1"))
    spec = RunConfig("j", loop, compute_s=1.0, comm_s=0.25, rate_bps=1e8, duration_s=5, slack_s=0.75)
    assert spec.wait_s == pytest.approx(0.5) and spec.ideal_s == pytest.approx(1.0)
    spec = RunConfig("j", loop, compute_s=1.0, comm_s=0.5, rate_bps=1e8, duration_s=5, slack_s=0.25)
    assert spec.wait_s == 0.0 and spec.ideal_s == pytest.approx(1.25)
    from leveller.errors import UserError
    with pytest.raises(UserError, match="--slack"):
        RunConfig("j", loop, compute_s=1.0, comm_s=0.5, rate_bps=1e8, duration_s=5, slack_s=1.5)


def test_hook_announces_communication_and_sleeps_a_new_shift_once(tmp_path: Path) -> None:
    lines: list[str] = []
    now = [100.0]
    slept: list[float] = []
    shift = shift_path(tmp_path, "gpt")
    rep = IterationReporter("gpt", 0, lines.append, clock=lambda: now[0], start_time=99.0, shift_file=str(shift),
                            wait_s=0.3, sleep=slept.append)
    rep.communication_started()
    rep.communication_started(0.1)
    assert [float(m["wait"]) for m in map(COMM_PATTERN.search, lines[1:]) if m] == [0.3, 0.1]
    rep.iteration_done()
    assert slept == []  # no shift file: no delay
    write_shift(shift, ShiftOrder("gpt", 4, 100.4, 1.0))
    rep.iteration_done()
    assert slept == [pytest.approx(0.4)] and rep.shifted_s == pytest.approx(0.4)
    rep.iteration_done()
    assert len(slept) == 1  # once per plan
    assert re.search(r"iter=3 ", lines[-1])
