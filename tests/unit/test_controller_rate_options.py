"""Controller registry: windowed / decayed R, progress kept across ideal-time changes, weights, drift."""

from __future__ import annotations

import pytest

from leveller.codec import SchemaError
from leveller.commands.options import parse_weights
from leveller.controller.decide import JobInput, job_rate
from leveller.controller.registry import MAX_SAMPLES, Registry
from leveller.core.policies import make_policy
from leveller.errors import UserError
from leveller.rpc.schema import JobReport, Report, job_from_wire, job_to_wire


def rep(host: str, *jobs: JobReport) -> Report:
    return Report(host, jobs, ())


def feed(reg: Registry, job: str, t0: float, t1: float, per_s: float, ideal: float | None = 1.0,
         dt: float = 1.0, weight: float | None = None) -> None:
    """The job runs at ``per_s`` iterations per second from t0 to t1; a report and a step every dt."""
    t = t0
    while t <= t1 + 1e-9:
        n = int(per_s * (t - 0.0) + 1e-9) if per_s else reg_iterations(reg, job)
        reg.accept(rep("h1", JobReport(job, n, 0.0, ideal, weight=weight)), now=t)
        reg.sample(t)
        t += dt


def reg_iterations(reg: Registry, job: str) -> int:
    return max(a.report.jobs[0].iterations for a in reg.agents.values())


def rate(reg: Registry, now: float) -> float:
    [j] = reg.job_inputs(now)
    r = job_rate(j, now)
    assert r is not None
    return r


def test_windowed_rate_forgets_a_stall_after_the_window() -> None:
    reg = Registry(stale_after_s=5, rate_window=20.0)
    feed(reg, "a", 1, 100, per_s=0.5)  # R 0.5 for 100 s
    n = reg_iterations(reg, "a")
    for t in range(101, 131):  # stalled for 30 s
        reg.accept(rep("h1", JobReport("a", n, 0.0, 1.0)), now=t)
        reg.sample(t)
    assert rate(reg, 130) == 0
    for t in range(131, 152):  # back to 0.5
        reg.accept(rep("h1", JobReport("a", n + int(0.5 * (t - 130)), 0.0, 1.0)), now=t)
        reg.sample(t)
    assert rate(reg, 151) == pytest.approx(0.5, abs=0.03)
    cumulative = Registry(stale_after_s=5)
    cumulative.accept(rep("h1", JobReport("a", n + 10, 0.0, 1.0)), now=151)
    assert rate(cumulative, 151) == pytest.approx((n + 10) / 151)  # still far below 0.5


def test_decayed_rate_of_a_steady_job_and_bounded_history() -> None:
    reg = Registry(stale_after_s=5, rate_half_life=5.0)
    feed(reg, "a", 1, 2000, per_s=4, dt=0.5, ideal=0.1)
    assert rate(reg, 2000) == pytest.approx(0.4, abs=0.02)
    assert len(reg.jobs["a"].history) <= MAX_SAMPLES
    assert reg.jobs["a"].history[0][0] >= 2000 - 10 * 5.0 - 1  # only the horizon kept


def test_progress_keeps_its_value_when_the_ideal_time_changes() -> None:
    reg = Registry(stale_after_s=5)
    reg.accept(rep("h1", JobReport("a", 100, 0.0, 1.0)), now=100)  # 100 iterations of ideal 1 s
    reg.sample(100)
    reg.accept(rep("h1", JobReport("a", 120, 0.0, 2.0)), now=140)  # ideal now 2 s: 20 in 40 s
    reg.sample(140)
    assert rate(reg, 140) == pytest.approx((100 * 1 + 20 * 2) / 140)  # 1.0, not 240 / 140
    [j] = reg.job_inputs(140)
    assert j.work == pytest.approx(140) and j.ideal_time == 2.0


def test_job_rate_without_registry_fields_is_the_papers() -> None:
    assert job_rate(JobInput("a", 10, 100.0, 0.5), 110.0) == pytest.approx(0.5)
    assert job_rate(JobInput("a", 10, 100.0, 0.5, history=((100.0, 0.0), (105.0, 5.0)), window=4.0),
                    110.0) == 0  # 5 ideal-seconds by 105, none since (work = 10 x 0.5 = 5)


def test_weights_operator_wins_over_agent_declaration() -> None:
    reg = Registry(stale_after_s=5, weights={"b": 3.0})
    reg.accept(rep("h1", JobReport("a", 1, 0.0, 1.0, weight=2.0), JobReport("b", 1, 0.0, 1.0, weight=0.5),
                   JobReport("c", 1, 0.0, 1.0)), now=1)
    assert {j.name: j.weight for j in reg.job_inputs(1)} == {"a": 2.0, "b": 3.0, "c": 1.0}


def test_weight_changes_the_order() -> None:
    from leveller.controller.decide import decide

    jobs = [JobInput("small", 8, 0.0, 1.0), JobInput("big", 6, 0.0, 1.0, weight=2.0)]  # R 0.8 / 0.6
    assert decide(jobs, {}, {}, make_policy("leveller"), 2, 10.0).order == ["big", "small"]
    jobs = [JobInput("small", 4, 0.0, 1.0), JobInput("big", 9, 0.0, 1.0, weight=2.0)]  # 0.4 < 0.9 / 2
    assert decide(jobs, {}, {}, make_policy("leveller"), 2, 10.0).order == ["small", "big"]


def test_weight_on_the_wire_is_validated() -> None:
    j = JobReport("a", 1, 1.0, weight=2.5)
    assert job_from_wire(job_to_wire(j), "jobs[0]") == j
    for bad in (0, -1, 1e9, "2", True, float("nan")):
        raw = job_to_wire(j) | {"weight": bad}
        with pytest.raises(SchemaError) as info:
            job_from_wire(raw, "jobs[0]")
        assert info.value.field == "jobs[0].weight"


def test_weight_option_parsing() -> None:
    assert parse_weights(["a=2", "b=0.5"]) == {"a": 2.0, "b": 0.5}
    for bad in ("a", "a=x", "a=0", "a=1e6", "=2", "a=2,b=3"):
        with pytest.raises(UserError, match="--job-weight"):
            parse_weights([bad])


def _iterations(reg: Registry, job: str, ends: list[float], now: float, ideal: float | None = None) -> None:
    recent = tuple((i + 1, t) for i, t in enumerate(ends))[-200:]
    reg.accept(rep("h1", JobReport(job, len(ends), 0.0, ideal, recent)), now=now)


def test_drift_slower_at_the_top_reopens_profiling() -> None:
    reg = Registry(stale_after_s=100, profile_samples=3, drift_tolerance=0.25)
    _iterations(reg, "a", [], 0.5)
    reg.update_profiling(0.5)
    ends = [1.0, 2.0, 3.0, 4.0]  # profiled at 1 s per iteration
    _iterations(reg, "a", ends, 4.1)
    assert reg.jobs["a"].profiler.ideal == pytest.approx(1.0) and not reg.jobs["a"].profiler.profiling
    reg.note_order(["a"], 4.2)  # first in the order from now on
    ends += [5.0, 6.0]
    _iterations(reg, "a", ends, 6.1)
    reg.update_profiling(6.1)
    assert not reg.jobs["a"].profiler.profiling  # still 1 s
    ends += [7.6, 9.1, 10.6]  # compute time grew: 1.5 s per iteration at the top
    _iterations(reg, "a", ends, 10.7)
    reg.update_profiling(10.7)
    assert reg.jobs["a"].profiler.profiling and reg.jobs["a"].drift == "slower"
    ends += [12.1, 13.6, 15.1]
    _iterations(reg, "a", ends, 15.2)
    assert reg.jobs["a"].profiler.ideal == pytest.approx(1.5)


def test_slow_iterations_below_the_top_are_not_drift_but_fast_ones_are() -> None:
    reg = Registry(stale_after_s=100, profile_samples=3, drift_tolerance=0.25)
    _iterations(reg, "a", [], 0.5)
    reg.update_profiling(0.5)
    ends = [1.0, 2.0, 3.0, 4.0]
    _iterations(reg, "a", ends, 4.1)
    reg.note_order(["b", "a"], 4.2)  # another job holds the top: contention makes a slow
    ends += [6.0, 8.0, 10.0, 12.0]
    _iterations(reg, "a", ends, 12.1)
    reg.update_profiling(12.1)
    assert not reg.jobs["a"].profiler.profiling
    ends += [12.5, 13.0, 13.5]  # faster than its time alone can be: the ideal time is stale
    _iterations(reg, "a", ends, 13.6)
    reg.update_profiling(13.6)
    assert reg.jobs["a"].profiler.profiling and reg.jobs["a"].drift == "faster"


def test_no_drift_detection_without_a_tolerance_or_for_reported_ideal_times() -> None:
    for reg, ideal in ((Registry(stale_after_s=100, profile_samples=3), None),
                       (Registry(stale_after_s=100, profile_samples=3, drift_tolerance=0.25), 1.0)):
        _iterations(reg, "a", [], 0.5, ideal)
        reg.update_profiling(0.5)
        ends = [1.0, 2.0, 3.0, 4.0]
        _iterations(reg, "a", ends, 4.1, ideal)
        ends += [4.2, 4.4, 4.6, 4.8]
        _iterations(reg, "a", ends, 4.9, ideal)
        reg.update_profiling(4.9)
        assert not reg.jobs["a"].profiler.profiling


def test_a_lone_job_that_drifts_keeps_r_near_one() -> None:
    """Iterations of 1 s, then of 2.5 s from t = 30 on: re-profiled on drift, R stays ~1 (the paper's R with
    the first ideal time would sink towards 0.4; re-valuing everything at the new one would jump above 1)."""
    reg = Registry(stale_after_s=100, profile_samples=3, drift_tolerance=0.25)
    ends: list[float] = []
    now, next_end = 0.0, 1.0
    rates = []
    while now < 120:
        now += 0.5
        while next_end <= now:
            ends.append(next_end)
            next_end += 1.0 if next_end < 30 else 2.5
        recent = tuple((i + 1, e) for i, e in enumerate(ends))[-50:]
        reg.accept(rep("h1", JobReport("a", len(ends), 0.0, None, recent)), now=now)
        reg.update_profiling(now)
        reg.sample(now)
        [j] = reg.job_inputs(now)
        if j.ideal_time is not None and not j.profiling:
            r = job_rate(j, now)
            reg.note_order(["a"], now)
            rates.append((now, r, j.ideal_time))
    late = [(t, r, i) for t, r, i in rates if t > 60]
    assert late and all(i == pytest.approx(2.5) for _, _, i in late)
    assert all(0.85 <= r <= 1.05 for _, r, _ in late), late[:3]
    assert rates[-1][1] == pytest.approx(1.0, abs=0.08)
