"""Policies: literal job snapshots in, priority orders out."""

from __future__ import annotations

from fractions import Fraction

import pytest

from leveller.core.policies import (
    CassiniPolicy,
    CruxPolicy,
    FairPolicy,
    JobView,
    LevellerPolicy,
    gpu_intensity,
    make_policy,
    weighted_rate,
)


def test_leveller_ranks_lowest_rate_first() -> None:
    jobs = [JobView("a", rate=0.9), JobView("b", rate=0.4), JobView("c", rate=0.7)]
    assert LevellerPolicy().order(jobs) == ["b", "c", "a"]


def test_leveller_ties_keep_given_order() -> None:
    jobs = [JobView("z", rate=0.5), JobView("a", rate=0.5), JobView("m", rate=0.2)]
    assert LevellerPolicy().order(jobs) == ["m", "z", "a"]


def test_profiling_job_gets_unique_top_priority() -> None:
    jobs = [JobView("a", rate=0.1), JobView("new", profiling=True), JobView("b", rate=0.3)]
    assert LevellerPolicy().order(jobs) == ["new", "a", "b"]
    crux = [JobView("a", compute=1, comm=1), JobView("new", profiling=True)]
    assert CruxPolicy().order(crux) == ["new", "a"]


def test_leveller_needs_rates() -> None:
    with pytest.raises(ValueError, match="missing"):
        LevellerPolicy().order([JobView("a")])
    with pytest.raises(ValueError):
        LevellerPolicy(tau=-1)


def test_crux_ranks_by_gpu_intensity() -> None:
    # Paper Figure 3 pair: intensity 1*1/1 = 1 beats 1*1/2 = 0.5 -> Job 1 first.
    pair = [JobView("2", compute=1, comm=2), JobView("1", compute=1, comm=1)]
    assert CruxPolicy().order(pair) == ["1", "2"]
    # GPUs weigh in: 8 GPUs x 1/2 = 4 beats 1 x 3/1 = 3.
    jobs = [JobView("small", gpus=1, compute=3, comm=1), JobView("big", gpus=8, compute=1, comm=2)]
    assert CruxPolicy().order(jobs) == ["big", "small"]
    assert gpu_intensity(JobView("x", gpus=4, compute=3, comm=2)) == 6


def test_crux_ties_and_unknown_profiles() -> None:
    jobs = [JobView("p", compute=1, comm=2), JobView("q", compute=1, comm=2), JobView("u"),
            JobView("r", compute=2, comm=1)]
    assert CruxPolicy().order(jobs) == ["r", "p", "q", "u"]


def test_crux_is_static_and_ignores_rates() -> None:
    jobs = [JobView("1", rate=1.0, compute=1, comm=1), JobView("2", rate=0.0, compute=1, comm=2)]
    assert CruxPolicy().order(jobs) == ["1", "2"]
    assert CruxPolicy().tau is None


def test_fair_has_no_priority() -> None:
    assert FairPolicy().order([JobView("a", rate=0.1), JobView("b", rate=0.9)]) is None


def test_duplicate_names_rejected() -> None:
    with pytest.raises(ValueError, match="unique"):
        LevellerPolicy().order([JobView("a", rate=0.1), JobView("a", rate=0.2)])


def test_make_policy() -> None:
    assert make_policy("leveller", 4).tau == 4
    assert make_policy("crux").name == "crux"
    assert make_policy("fair").name == "fair"
    with pytest.raises(ValueError, match="allowed: fair, crux, leveller"):
        make_policy("fifo")


@pytest.mark.parametrize("policy", [CruxPolicy(), LevellerPolicy(), FairPolicy()])
def test_every_policy_refuses_two_jobs_with_one_name(policy) -> None:
    jobs = [JobView("a", rate=0.5, compute=1.0, comm=1.0), JobView("b", rate=0.7, compute=2.0, comm=1.0),
            JobView("a", rate=0.9, compute=3.0, comm=1.0)]
    with pytest.raises(ValueError, match="unique"):
        policy.order(jobs)


# --- weights and the policies (from the edges of the core arithmetic) ---------------------------------


def test_weighted_rate_divides_by_the_weight() -> None:
    """R / weight: exact for exact inputs, float for a float rate; weight 1 is R itself."""
    assert weighted_rate(JobView("a", rate=Fraction(1, 2), weight=2)) == Fraction(1, 4)
    assert weighted_rate(JobView("a", rate=3, weight=2)) == Fraction(3, 2)
    r = weighted_rate(JobView("a", rate=0.1, weight=3))
    assert isinstance(r, float) and r == 0.1 / 3
    assert weighted_rate(JobView("a", rate=0.6, weight=1.5)) == pytest.approx(0.4)
    assert weighted_rate(JobView("a", rate=Fraction(2, 3))) == Fraction(2, 3)


def test_leveller_ranks_by_rate_over_weight() -> None:
    """A job of weight 2 at R = 0.8 (0.4 weighted) goes before a weight-1 job at R = 0.5."""
    jobs = [JobView("light", rate=0.5), JobView("heavy", rate=0.8, weight=2)]
    assert LevellerPolicy().order(jobs) == ["heavy", "light"]
    jobs = [JobView("light", rate=0.5), JobView("heavy", rate=1.2, weight=2)]
    assert LevellerPolicy().order(jobs) == ["light", "heavy"]


def test_job_weight_must_be_positive_with_a_message_naming_the_job() -> None:
    """Weight 0 and negative weights are refused; tiny positive ones are fine."""
    for bad in (0, -1):
        with pytest.raises(ValueError, match=rf"^job 'j': weight must be > 0, got {bad}$"):
            JobView("j", rate=1, weight=bad)
    assert JobView("j", rate=1, weight=1e-9).weight == 1e-9


def test_leveller_tau_must_not_be_negative() -> None:
    """tau < 0 is refused with its value."""
    with pytest.raises(ValueError, match=r"^tau must be >= 0, got -1$"):
        LevellerPolicy(tau=-1)


def test_make_policy_defaults_and_cassini() -> None:
    """make_policy('leveller') decides at every iteration end (tau 0); 'cassini' gives CASSINI."""
    leveller = make_policy("leveller")
    assert isinstance(leveller, LevellerPolicy) and leveller.tau == 0
    cassini = make_policy("cassini")
    assert isinstance(cassini, CassiniPolicy) and cassini.name == "cassini"


def test_cassini_gives_no_order_but_refuses_duplicate_names() -> None:
    """No priority at all; two jobs with one name are an error, as for every policy."""
    assert CassiniPolicy().order([JobView("a"), JobView("b")]) is None
    with pytest.raises(ValueError, match="unique"):
        CassiniPolicy().order([JobView("a"), JobView("a")])


def test_crux_ranks_a_job_with_only_its_compute_known_as_unknown() -> None:
    """Compute profiled, communication not yet: no intensity, ranked after the known ones."""
    jobs = [JobView("half", compute=2), JobView("known", compute=1, comm=1)]
    assert CruxPolicy().order(jobs) == ["known", "half"]
    jobs = [JobView("half", comm=2), JobView("known", compute=1, comm=1)]
    assert CruxPolicy().order(jobs) == ["known", "half"]
