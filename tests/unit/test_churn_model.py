"""The churn experiment's fluid model (leveller.experiments.churn.model): the live controller's
profiling windows in the simulator's LEVELLER, and the figures of the jobs that finish in the run."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from leveller.core.policies import LevellerPolicy
from leveller.experiments.churn.model import PROFILE_SAMPLES, ProfiledFirst, finished_rates, model_summary
from leveller.experiments.churn.plan import Arrival, ChurnSettings


class _Job(SimpleNamespace):
    """What ProfiledFirst reads of a simulator job: name, start, iterations, R, GPUs, shape."""

    def iterations_at(self, now: float) -> int:
        return int(self.done)

    def policy_rate(self, now: float, window: float | None, half_life: float | None) -> float:
        return float(self.r)


def _job(name: str, start: float, done: int, r: float) -> _Job:
    return _Job(name=name, start=start, done=done, r=r, gpus=1, spec=SimpleNamespace(compute=0.5), comm_alone=0.5)


def test_windows_open_one_at_a_time_earliest_first_for_the_samples_iterations() -> None:
    policy = ProfiledFirst(LevellerPolicy(tau=0.2), overlap=True, period=0.2)
    old = _job("old", 0.0, 100, 0.3)
    a, b = _job("a", 5.0, 0, 0.9), _job("b", 6.0, 0, 0.8)
    policy.profiled.add("old")  # profiled long ago
    assert policy.order(10.0, [old, b, a]) == ["a", "b", "old"]  # a's window; b waits at R = 0
    a.done = PROFILE_SAMPLES - 1
    assert policy.order(11.0, [old, b, a]) == ["a", "b", "old"]
    a.done = PROFILE_SAMPLES  # a's window closes: a ranks by its R (0.9), b's window opens
    assert policy.order(12.0, [old, b, a]) == ["b", "old", "a"]
    assert policy.opened == {"b": 0}
    b.done = 2
    assert policy.order(13.0, [old, a]) == ["old", "a"]  # b left during its window
    assert policy.opened == {} and policy.profiled == {"old", "a", "b"}


def test_a_window_counts_iterations_from_its_opening() -> None:
    policy = ProfiledFirst(LevellerPolicy(tau=0.2), overlap=True, period=0.2)
    busy, late = _job("busy", 0.0, 0, 0.5), _job("late", 1.0, 7, 0.2)
    policy.order(2.0, [busy, late])  # busy's window
    busy.done = PROFILE_SAMPLES
    assert policy.order(3.0, [busy, late])[0] == "late"  # opened with 7 iterations done
    late.done = 7 + PROFILE_SAMPLES - 1
    assert policy.order(4.0, [busy, late])[0] == "late"
    late.done = 7 + PROFILE_SAMPLES
    assert policy.order(5.0, [busy, late]) == ["late", "busy"]  # by R now: 0.2 < 0.5


def _arrival(name: str, at: float, hosts: tuple[str, ...], iterations: int) -> Arrival:
    return Arrival(name, at, hosts, "m", 0.3, 0.6, 0.0, iterations, 23000)


def test_a_job_alone_runs_at_its_ideal_time_and_unfinished_jobs_do_not_count() -> None:
    settings = ChurnSettings(duration_s=60.0)
    alone = [_arrival("a", 1.0, ("h1", "h5"), 20)]
    for policy in ("fair", "leveller"):
        m = model_summary(alone, settings, [policy])[policy]
        assert m["jobs_finished"] == 1 and m["min"] == pytest.approx(1.0, abs=0.02)
    too_long = [_arrival("a", 1.0, ("h1", "h5"), 1000)]  # 1000 x 0.9 s does not fit in 60 s
    assert model_summary(too_long, settings, ["fair"])["fair"] == {"jobs_finished": 0, "min": None, "p10": None,
                                                                  "mean": None}
    assert finished_rates([SimpleNamespace(rate=0.5, finish=61.0), SimpleNamespace(rate=0.4, finish=59.0),
                           SimpleNamespace(rate=None, finish=None)], 60.0) == [0.4]

