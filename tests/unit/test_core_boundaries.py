"""Boundaries of the pure core that mutation testing found unguarded.

Each test states what a broken implementation would let through (a duplicate job order, a zero
communication time, a NaN ideal time, a zero-length iteration, ports on ICMP) and fails on it.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from leveller.core import crux
from leveller.core.levels import Flow, assign_levels
from leveller.core.policies import CruxPolicy, FairPolicy, JobView, LevellerPolicy
from leveller.core.profiling import IdealTimeProfiler
from leveller.core.rate import progress_rate
from leveller.model.errors import UserError
from leveller.model.flow import flow_key

# Two jobs on one link: with a correct order "b" first, b's flow is on top.
FLOWS = {"fa": Flow("a", ("l1",)), "fb": Flow("b", ("l1",))}


def test_pruner_refuses_an_order_that_names_a_job_twice() -> None:
    # ["b", "a", "b"]: a rank table built from it would let the second "b" overwrite the first and put
    # "a" on top, the opposite of what the caller asked.
    with pytest.raises(ValueError, match="duplicates"):
        assign_levels(["b", "a", "b"], FLOWS, 2)
    assert assign_levels(["b", "a"], FLOWS, 2) == {"fb": 1, "fa": 0}


def test_pruner_refuses_flows_of_jobs_outside_the_order_and_k_below_one() -> None:
    with pytest.raises(ValueError, match=r"missing from the order: \['a'\]"):
        assign_levels(["b"], FLOWS, 2)
    with pytest.raises(ValueError, match="K must be >= 1"):
        assign_levels(["b", "a"], FLOWS, 0)
    assert assign_levels(["b", "a"], FLOWS, 1) == {"fa": 0, "fb": 0}


@pytest.mark.parametrize("comm", [0, 0.0, -1.0, float("nan")])
def test_crux_intensity_refuses_a_communication_time_that_is_not_positive(comm: float) -> None:
    # G*C/M with M = 0 is a division by zero (or inf/nan with floats) that would rank the job first.
    with pytest.raises(UserError, match="bottleneck_time_s must be > 0"):
        crux.gpu_intensity(1, 1.0, comm)
    with pytest.raises(UserError, match="comm_s must be > 0"):
        crux.CruxJob("a", 1, 1.0, comm)
    with pytest.raises(ValueError, match="communication time must be > 0"):
        CruxPolicy().order([JobView("a", compute=1.0, comm=comm), JobView("b", compute=1.0, comm=1.0)])


def test_crux_intensity_values() -> None:
    assert crux.gpu_intensity(4, 3, 2) == 6
    assert crux.gpu_intensity(1, 0, 2) == 0  # a job with no compute has zero intensity, it is not refused
    with pytest.raises(UserError, match="gpus must be >= 1"):
        crux.gpu_intensity(0, 1, 1)
    with pytest.raises(UserError, match="compute_s must be >= 0"):
        crux.gpu_intensity(1, -0.5, 1)


@pytest.mark.parametrize("policy", [CruxPolicy(), LevellerPolicy(), FairPolicy()])
def test_every_policy_refuses_two_jobs_with_one_name(policy) -> None:
    jobs = [JobView("a", rate=0.5, compute=1.0, comm=1.0), JobView("b", rate=0.7, compute=2.0, comm=1.0),
            JobView("a", rate=0.9, compute=3.0, comm=1.0)]
    with pytest.raises(ValueError, match="unique"):
        policy.order(jobs)


def test_crux_weights_refuse_two_jobs_with_one_name() -> None:
    jobs = [crux.CruxJob("a", 1, 1.0, 1.0), crux.CruxJob("b", 1, 2.0, 1.0), crux.CruxJob("a", 2, 1.0, 1.0)]
    with pytest.raises(UserError, match=r"repeated: \['a'\]"):
        crux.correction_factors(jobs)
    with pytest.raises(UserError, match=r"repeated: \['a'\]"):
        crux.priorities(jobs)


@pytest.mark.parametrize("ideal", [float("nan"), 0, 0.0, -1.0, Fraction(0)])
def test_rate_refuses_an_ideal_time_that_is_not_positive(ideal: float) -> None:
    # A NaN ideal time would give R = NaN, which compares false with everything: the job's place in
    # the order would then depend on the sort's luck.
    with pytest.raises(ValueError, match="ideal_time must be > 0"):
        progress_rate(3, ideal, 0.0, 10.0)


def test_rate_values_and_edges() -> None:
    assert progress_rate(3, Fraction(2), 0, 12) == Fraction(1, 2)
    assert progress_rate(0, 1.0, 5.0, 9.0) == 0.0
    assert progress_rate(3, 2, 7, 7) == 0  # at the start instant: 0, not a division by zero
    assert progress_rate(4, 0.5, 1.0, 3.0) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="iterations must be >= 0"):
        progress_rate(-1, 1.0, 0.0, 1.0)
    with pytest.raises(ValueError, match="before the job's start"):
        progress_rate(1, 1.0, 5.0, 4.999)


def test_profiler_ignores_zero_length_iterations() -> None:
    # Two log lines with the same end time are one iteration seen twice, not an iteration of 0 s:
    # counting it would pull the median (the ideal time) down and close the window early.
    p = IdealTimeProfiler(samples=3)
    p.start_window(10.0)
    assert p.iteration_end(12.0) is None
    assert p.iteration_end(12.0) is None  # duplicate: no sample
    assert p.iteration_end(14.0) is None
    assert p.profiling
    assert p.iteration_end(16.0) == 2.0
    assert p.ideal == 2.0 and not p.profiling


def test_profiler_window_measures_from_its_start_and_refuses_time_going_back() -> None:
    p = IdealTimeProfiler(samples=2)
    assert p.iteration_end(5.0) is None and p.ideal is None  # no window open: nothing measured
    p.start_window(100.0)
    assert p.iteration_end(103.0) is None  # first duration is 3, from the window start
    with pytest.raises(ValueError, match="before the previous one"):
        p.iteration_end(102.0)
    assert p.iteration_end(104.0) == 2.0  # median of (3, 1)
    with pytest.raises(ValueError, match="samples must be >= 1"):
        IdealTimeProfiler(samples=0)


@pytest.mark.parametrize("proto", ["icmp", 1, "1"])
def test_icmp_flows_carry_no_ports(proto: object) -> None:
    # ICMP has no ports: keeping them would make two packets of one ping two different flows.
    key = flow_key("10.0.0.1", "10.0.0.2", 1234, 80, proto)
    assert (key.sport, key.dport, key.proto) == (0, 0, 1)
    assert key == flow_key("10.0.0.1", "10.0.0.2", 0, 0, "icmp")


@pytest.mark.parametrize("proto,n", [("tcp", 6), ("udp", 17), (17, 17)])
def test_tcp_and_udp_flows_keep_their_ports(proto: object, n: int) -> None:
    key = flow_key("10.0.0.1", "10.0.0.2", 1234, 80, proto)
    assert (key.sport, key.dport, key.proto) == (1234, 80, n)


def test_crux_refuses_a_nan_compute_time() -> None:
    # NaN passes a "< 0" check; its intensity would be NaN and its place in the order arbitrary.
    with pytest.raises(UserError, match="compute_s must be >= 0"):
        crux.gpu_intensity(1, float("nan"), 1.0)
    with pytest.raises(UserError, match="compute_s must be >= 0"):
        crux.CruxJob("a", 1, float("nan"), 1.0)
