"""Policies: literal job snapshots in, priority orders out."""

import pytest

from leveller.core.policies import CruxPolicy, FairPolicy, JobView, LevellerPolicy, gpu_intensity, make_policy


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
