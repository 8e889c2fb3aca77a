"""Operator weights: leveller ranks by R / weight (leveller.core.policies), levels via assign_levels."""

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveller.core.levels import Flow, assign_levels
from leveller.core.policies import JobView, LevellerPolicy

rates = st.fractions(min_value=0, max_value=2, max_denominator=12)
weights = st.fractions(min_value=Fraction(1, 8), max_value=8, max_denominator=8)


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[JobView], dict[str, Flow], int]:
    """Jobs with rates and weights, flows over a handful of links, K levels."""
    n = draw(st.integers(1, 6))
    jobs = [JobView(f"j{i}", rate=draw(rates), weight=draw(weights), profiling=draw(st.booleans()) and i == 0)
            for i in range(n)]
    links = [f"l{i}" for i in range(draw(st.integers(1, 5)))]
    flows = {}
    for i in range(draw(st.integers(1, 12))):
        job = draw(st.sampled_from(jobs)).name
        path = tuple(sorted(set(draw(st.lists(st.sampled_from(links), min_size=1, max_size=3)))))
        flows[f"f{i}"] = Flow(job, path)
    return jobs, flows, draw(st.integers(1, 4))


def _with(jobs: list[JobView], **weight_of: Fraction) -> list[JobView]:
    return [JobView(j.name, rate=j.rate, profiling=j.profiling, weight=weight_of.get(j.name, j.weight))
            for j in jobs]


def test_a_heavier_job_keeps_priority_until_its_rate_is_that_many_times_higher() -> None:
    policy = LevellerPolicy()
    jobs = [JobView("small", rate=Fraction(1, 2)), JobView("big", rate=Fraction(3, 4), weight=2)]
    assert policy.order(jobs) == ["big", "small"]  # 3/8 < 1/2
    jobs = [JobView("small", rate=Fraction(1, 3)), JobView("big", rate=Fraction(3, 4), weight=2)]
    assert policy.order(jobs) == ["small", "big"]  # 1/3 < 3/8
    with pytest.raises(ValueError, match="weight"):
        JobView("x", rate=1, weight=0)


@settings(max_examples=300)
@given(clusters(), weights)
def test_equal_weights_leave_the_order_unchanged(cluster: tuple, w: Fraction) -> None:
    jobs, _, _ = cluster
    policy = LevellerPolicy()
    paper = policy.order([JobView(j.name, rate=j.rate, profiling=j.profiling) for j in jobs])
    assert policy.order(_with(jobs, **{j.name: w for j in jobs})) == paper


@settings(max_examples=500)
@given(clusters(), st.data())
def test_doubling_a_weight_never_lowers_that_jobs_levels(cluster: tuple, data: st.DataObject) -> None:
    jobs, flows, k = cluster
    job = data.draw(st.sampled_from(jobs))
    policy = LevellerPolicy()
    before = assign_levels(policy.order(jobs), flows, k)
    after = assign_levels(policy.order(_with(jobs, **{job.name: job.weight * 2})), flows, k)
    for name, flow in flows.items():
        if flow.job == job.name:
            assert after[name] >= before[name], (name, before, after)
