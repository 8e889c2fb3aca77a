"""Progress rate, ideal-time profiling and the overlap rule (pure core)."""

from fractions import Fraction

import pytest

from leveller.core.overlap import effective_level
from leveller.core.profiling import IdealTimeProfiler, estimate_ideal_time, next_reprofile_time
from leveller.core.rate import progress_rate


def test_rate_is_iterations_times_ideal_over_elapsed() -> None:
    # Digest section 3.1: a 2 s delay per 1 s iteration -> 1/3 of ideal speed; 100 s -> 100/102.
    assert progress_rate(10, 1, 0, 30) == Fraction(1, 3)
    assert progress_rate(1, 100, 0, 102) == Fraction(100, 102)
    assert progress_rate(3, Fraction(2), Fraction(5), Fraction(13)) == Fraction(3, 4)


def test_rate_with_floats_and_start_offset() -> None:
    assert progress_rate(4, 0.5, 10.0, 14.0) == pytest.approx(0.5)


def test_rate_at_start_is_zero_not_an_error() -> None:
    assert progress_rate(0, 3, 7, 7) == 0


@pytest.mark.parametrize("args", [(-1, 1, 0, 1), (1, 0, 0, 1), (1, -2, 0, 1), (1, 1, 5, 4)])
def test_rate_rejects_bad_input(args: tuple) -> None:
    with pytest.raises(ValueError):
        progress_rate(*args)


def test_ideal_time_is_robust_to_outliers() -> None:
    assert estimate_ideal_time([1.0, 1.1, 0.9, 1.0, 25.0]) == 1.0
    with pytest.raises(ValueError):
        estimate_ideal_time([])
    with pytest.raises(ValueError):
        estimate_ideal_time([1.0, 0.0])


def test_profiler_window_and_reprofiling() -> None:
    p = IdealTimeProfiler(samples=3)
    assert not p.profiling and p.ideal is None
    assert p.iteration_end(5) is None  # no window open: ignored
    p.start_window(10)
    assert p.profiling
    assert p.iteration_end(12) is None
    assert p.iteration_end(14) is None
    assert p.iteration_end(30) == 2  # durations 2, 2, 16 -> median 2
    assert not p.profiling and p.ideal == 2
    p.start_window(100)  # re-profile: old estimate stays until the window closes
    assert p.ideal == 2
    for t in (103, 106):
        p.iteration_end(t)
    assert p.ideal == 2
    assert p.iteration_end(109) == 3 and p.ideal == 3
    with pytest.raises(ValueError):
        p.start_window(0)
        p.iteration_end(5)
        p.iteration_end(4)


def test_reprofile_time_is_jittered_around_the_interval() -> None:
    assert next_reprofile_time(100, 60, 0.0) == 130
    assert next_reprofile_time(100, 60, 0.5) == 160
    with pytest.raises(ValueError):
        next_reprofile_time(0, 60, 1.0)


def test_overlap_demotes_inside_slack_window_only() -> None:
    assert effective_level(5, comm_start=10, slack=2, now=9) == 5
    assert effective_level(5, comm_start=10, slack=2, now=10) == 0
    assert effective_level(5, comm_start=10, slack=2, now=11.99) == 0
    assert effective_level(5, comm_start=10, slack=2, now=12) == 5
    assert effective_level(5, comm_start=10, slack=0, now=10) == 5
    assert effective_level(5, comm_start=10, slack=2, now=11, lowest=1) == 1
    with pytest.raises(ValueError):
        effective_level(5, 10, -1, 10)
