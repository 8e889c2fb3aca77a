"""Progress rate, ideal-time profiling and the overlap rule (pure core)."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from leveller.core.overlap import effective_level
from leveller.core.profiling import IdealTimeProfiler, drifted, estimate_ideal_time, next_reprofile_time
from leveller.core.rate import Number, history_horizon, progress_rate, trim_history


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


def test_a_closed_window_leaves_the_profiler_as_a_new_one_holding_the_estimate() -> None:
    """Closing a window resets its state: the profiler is then a fresh one with ``ideal`` set."""
    p = IdealTimeProfiler(samples=2)
    p.start_window(10)
    p.iteration_end(13)
    assert p.iteration_end(17) == 3.5  # the median of 3 and 4
    assert p == IdealTimeProfiler(samples=2, ideal=3.5)
    assert not p.profiling and p.iteration_end(20) is None


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


# =============================================================================================
# Edges of the arithmetic: windowed and decayed R, history checks, drift, overlap. Every expected value
# below is computed by hand from the definitions in the module docstrings (R = iterations x ideal time /
# elapsed; a window's base sample; weights 2^-(age / h)), not from the implementation.

# ---------------------------------------------------------------------------------------------
# Cumulative R: exact in, exact out; any float in, a float out


def test_cumulative_rate_is_a_float_as_soon_as_one_input_is() -> None:
    """R = 3 x 1 / 2 s: a Fraction for exact inputs, a float (same value) when iterations are a float."""
    exact = progress_rate(3, 1, 0, Fraction(2))
    assert exact == Fraction(3, 2) and isinstance(exact, Fraction)
    mixed = progress_rate(1.5, 1, 0, Fraction(1))  # float iterations, exact elapsed time
    assert mixed == 1.5 and isinstance(mixed, float)


def test_both_a_window_and_a_half_life_is_refused_with_its_message() -> None:
    """The two forgetting options exclude each other; the error says so."""
    with pytest.raises(ValueError, match=r"^give a window or a half-life, not both$"):
        progress_rate(1, 1, 0, 2, window=1, half_life=1)


# ---------------------------------------------------------------------------------------------
# Windowed R: (N(now) - N(b)) x T / (now - b), b the latest sample at or before now - S

# 2 iterations in the first 10 s, 6 in the next 10 s, 4 in the last 10 s (now = 30, N = 12)
BURSTY = [(0, 0), (10, 2), (20, 8)]


def test_window_base_is_the_sample_exactly_at_now_minus_window() -> None:
    """S = 20 at now = 30: the sample at t = 10 is the base: (12 - 2) x 3 / 20 = 3/2 (exact)."""
    r = progress_rate(12, 3, 0, 30, history=BURSTY, window=20)
    assert r == Fraction(3, 2) and isinstance(r, Fraction)
    assert progress_rate(12, 3, 0, 30, history=BURSTY) == Fraction(6, 5)  # cumulative: 12 x 3 / 30


def test_window_base_is_the_latest_sample_before_the_window() -> None:
    """S = 15 at now = 30: latest sample at or before t = 15 is (10, 2): 10 x 3 / 20; S = 5: (20, 8): 4 x 3 / 10."""
    assert progress_rate(12, 3, 0, 30, history=BURSTY, window=15) == Fraction(3, 2)
    assert progress_rate(12, 3, 0, 30, history=BURSTY, window=5) == Fraction(6, 5)
    assert progress_rate(12, 3, 0, 30, history=BURSTY, window=Fraction(1, 2)) == Fraction(6, 5)


def test_window_with_a_late_start_measures_from_the_base_sample_time() -> None:
    """Job started at t = 100 with samples (100, 0), (110, 4); now 120, N = 10, S = 10: 6 x 2 / 10."""
    r = progress_rate(10, 2, 100, 120, history=[(100, 0), (110, 4)], window=10)
    assert r == Fraction(6, 5)
    # S longer than the job's age: the first sample is the base: 10 x 2 / 20
    assert progress_rate(10, 2, 100, 120, history=[(100, 0), (110, 4)], window=50) == 1


def test_window_of_a_job_without_history_starts_at_its_start() -> None:
    """No samples = only (start, 0): 6 iterations x 2 s in the 8 s since t = 2."""
    assert progress_rate(6, 2, 2, 10, window=5) == Fraction(3, 2)


def test_window_with_float_inputs_gives_the_same_value_as_a_float() -> None:
    """Float ideal time 0.5: (12 - 2) x 0.5 / 20 = 0.25, a float."""
    r = progress_rate(12, 0.5, 0, 30, history=BURSTY, window=20)
    assert isinstance(r, float) and r == pytest.approx(0.25)
    r = progress_rate(12.0, 3, 0, 30.0, history=BURSTY, window=20)
    assert isinstance(r, float) and r == pytest.approx(1.5)


def test_window_must_be_positive_and_may_be_below_one_second() -> None:
    """S = 0 and S < 0 are refused naming the value; S = 0.5 is a valid window."""
    for bad in (0, -1):
        with pytest.raises(ValueError, match=rf"^window must be > 0 seconds, got {bad}$"):
            progress_rate(12, 3, 0, 30, history=BURSTY, window=bad)
    assert progress_rate(12, 3, 0, 30, history=BURSTY, window=0.5) == Fraction(6, 5)


def test_window_at_the_base_time_is_zero() -> None:
    """now = the base sample's time: 0/0 gives 0, an exact 0 for an exact ideal time."""
    r = progress_rate(0, 2, 5, 5, window=3)
    assert r == 0 and isinstance(r, Fraction)


@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 5)), max_size=10), st.integers(1, 4),
       st.integers(1, 5), st.integers(1, 10))
def test_a_window_longer_than_the_jobs_age_is_the_cumulative_rate(steps: list[tuple[int, int]], ideal: int,
                                                                   tail: int, extra: int) -> None:
    """With S > now - start and a history from (start, 0), the windowed R is the paper's cumulative R."""
    t, n, hist = 0, 0, [(0, 0)]
    for dt, dn in steps:
        t, n = t + dt, n + dn
        hist.append((t, n))
    now = t + tail
    cumulative = Fraction(n * ideal, now)
    assert progress_rate(n, ideal, 0, now, history=hist, window=now + extra) == cumulative
    if all(dt > 0 for dt, _ in steps[:1]):  # nothing at t = 0 itself: S = the age reaches back to (0, 0)
        assert progress_rate(n, ideal, 0, now, history=hist, window=now) == cumulative


# ---------------------------------------------------------------------------------------------
# History checks (both modes read the history)


def test_history_accepts_stalls_bursts_and_a_last_sample_at_now() -> None:
    """Equal times (a burst), equal counts (a stall) and a last sample (now, N) are all valid."""
    hist = [(0, 0), (4, 2), (4, 3), (8, 3), (10, 5)]
    assert progress_rate(5, 2, 0, 10, history=hist, window=2) == 2  # base (8, 3): 2 x 2 / 2
    assert progress_rate(5, 2, 0, 10, history=hist, window=6) == Fraction(2 * 2, 6)  # base (4, 3)


@pytest.mark.parametrize(("history", "message"), [
    ([(0, 0), (5, 3), (4, 4)], r"^history must grow in time and iterations; \(5, 3\) then \(4, 4\)$"),
    ([(0, 0), (5, 3), (6, 2)], r"^history must grow in time and iterations; \(5, 3\) then \(6, 2\)$"),
])
def test_history_going_back_is_refused_naming_the_two_samples(history: list[tuple[int, int]], message: str) -> None:
    """Time or iterations going back between any two consecutive samples (not only the first two)."""
    for mode in ({"window": 2}, {"half_life": 2}):
        with pytest.raises(ValueError, match=message):
            progress_rate(5, 1, 0, 10, history=history, **mode)


def _outside(first: str, last: str) -> str:
    return rf"^history {first}\.\.{last} must lie within \[start=0, now=10\] with at most 5 iterations$"


@pytest.mark.parametrize(("history", "message"), [
    ([(-1, 0), (5, 2)], _outside(r"\(-1, 0\)", r"\(5, 2\)")),  # starts before the start
    ([(0, 0), (5, 1), (11, 2)], _outside(r"\(0, 0\)", r"\(11, 2\)")),  # ends after now
    ([(0, 0), (11, 1)], _outside(r"\(0, 0\)", r"\(11, 1\)")),
    ([(0, 0), (5, 1), (8, 6)], _outside(r"\(0, 0\)", r"\(8, 6\)")),  # more iterations than now
])
def test_history_outside_start_now_or_count_is_refused(history: list[tuple[int, int]], message: str) -> None:
    """A first sample before the start, a last one after now, or more iterations than now: refused."""
    for mode in ({"window": 2}, {"half_life": 2}):
        with pytest.raises(ValueError, match=message):
            progress_rate(5, 1, 0, 10, history=history, **mode)


def test_history_may_end_at_the_current_count() -> None:
    """Last sample (5, 5) with N = 5 at now = 10: a stall since t = 5, R over the last 5 s is 0."""
    assert progress_rate(5, 1, 0, 10, history=[(0, 0), (5, 5)], window=5) == 0
    assert progress_rate(5, 1, 0, 10, history=[(0, 0), (5, 5)], window=10) == Fraction(1, 2)


# ---------------------------------------------------------------------------------------------
# Decayed R: T x sum_k dN_k x mean weight_k / integral of w, w(t) = 2^-((now - t) / h)
#
# Two stretches of 2 s at h = 2 s ending at now = 4: the weight integral over [2, 4] is
# (h / ln 2)(1 - 1/2) and over [0, 2] (h / ln 2)(1/2 - 1/4), so with a iterations in the first
# stretch and b in the second R = T (a/4 + b/2) / (3/4) / 2 = T (a + 2b) / 6.


def _two_stretches(a: Number, b: Number, ideal: Number, start: Number = 0) -> float:
    hist = [(start, 0), (start + 2, a)]
    return float(progress_rate(a + b, ideal, start, start + 4, history=hist, half_life=2))


def test_decayed_rate_weighs_the_recent_stretch_twice_the_older_one() -> None:
    """a + 2b over 6, times the ideal time: recent progress counts more than old progress."""
    assert _two_stretches(6, 0, 1) == pytest.approx(1.0, rel=1e-12)
    assert _two_stretches(0, 6, 1) == pytest.approx(2.0, rel=1e-12)
    assert _two_stretches(3, 6, 3) == pytest.approx(3 * 15 / 6, rel=1e-12)
    assert _two_stretches(3, 6, 3, start=7) == pytest.approx(3 * 15 / 6, rel=1e-12)  # only ages matter


def test_decayed_rate_with_a_base_after_the_start_and_nonzero_counts() -> None:
    """A trimmed history starting at (10, 40): only what follows counts, with the same weights."""
    hist = [(10, 40), (12, 43)]
    r = progress_rate(49, 0.5, 0, 14, history=hist, half_life=2)
    assert r == pytest.approx(0.5 * (3 + 2 * 6) / 6, rel=1e-12)


def test_decayed_rate_of_three_unequal_stretches() -> None:
    """h = 1 at now = 3: stretches [0, 1], [1, 2], [2, 3] weigh 1/8 : 1/4 : 1/2 (times 1/ln 2),
    total 7/8: R = T (a/8 + b/4 + c/2) / (7/8) = T (a + 2b + 4c) / 7."""
    hist = [(0, 0), (1, 1), (2, 3)]
    r = progress_rate(7, 2, 0, 3, history=hist, half_life=1)
    assert r == pytest.approx(2 * (1 + 2 * 2 + 4 * 4) / 7, rel=1e-12)


def test_decayed_rate_of_a_short_young_job() -> None:
    """One second of history at h = 1 (weight integral below 1): a steady 3 iter/s at T = 1 is R = 3."""
    assert progress_rate(3, 1, 0, 1, half_life=1) == pytest.approx(3.0, rel=1e-12)
    assert progress_rate(3, 1, 0, 0.25, half_life=1) == pytest.approx(12.0, rel=1e-12)


def test_decayed_rate_counts_progress_at_one_instant_with_its_own_weight() -> None:
    """c iterations reported at one instant t = 2 (two samples at the same time) weigh 2^-((4 - 2) / 2) = 1/2:
    R = T ((a/4 + b/2) / ln 2 + c / 2) / (3 / (2 ln 2)) = T (a + 2b) / 6 + T c ln 2 / 3."""
    a, c, b, ideal = 2, 3, 4, 2
    hist = [(0, 0), (2, a), (2, a + c)]
    r = progress_rate(a + c + b, ideal, 0, 4, history=hist, half_life=2)
    assert r == pytest.approx(ideal * (a + 2 * b) / 6 + ideal * c * math.log(2) / 3, rel=1e-12)
    # 2 iterations at the very start weigh 1/4: R = 2 x 1/4 / (3 / (2 ln 2)) = ln 2 / 3
    assert progress_rate(2, 1, 0, 4, history=[(0, 0), (0, 2)], half_life=2) == pytest.approx(math.log(2) / 3)
    # 3 iterations reported at now itself weigh 1: R = 3 / (3 / (2 ln 2)) = 2 ln 2
    assert progress_rate(3, 1, 0, 4, history=[(0, 0), (4, 0)], half_life=2) == pytest.approx(2 * math.log(2))


def test_decayed_rate_at_the_base_time_is_zero() -> None:
    """now = the first sample's time: the weight integral is 0 and R is 0, not 1 nor an error."""
    assert progress_rate(0, 1.0, 5, 5, half_life=3) == 0.0
    assert progress_rate(4, 1.0, 5, 5, history=[(5, 0), (5, 4)], half_life=3) == 0.0


def test_decayed_rate_is_a_float_even_for_exact_inputs() -> None:
    """A steady 1 iteration / 2 s at T = 3: R = 1.5, returned as a float."""
    r = progress_rate(5, 3, 0, 10, history=[(0, 0), (4, 2), (8, 4)], half_life=Fraction(5))
    assert isinstance(r, float) and r == pytest.approx(1.5, rel=1e-12)


def test_half_life_must_be_positive_and_may_be_below_one_second() -> None:
    """h = 0 and h < 0 are refused naming the value; h = 0.5 is valid (3 steady iterations of 1 s: R = 1)."""
    for bad in (0, -1):
        with pytest.raises(ValueError, match=rf"^half_life must be > 0 seconds, got {bad}$"):
            progress_rate(3, 1, 0, 3, half_life=bad)
    assert progress_rate(3, 1, 0, 3, history=[(0, 0), (1, 1), (2, 2)], half_life=0.5) == pytest.approx(1.0)


@given(st.floats(0.1, 50), st.integers(1, 6), st.lists(st.integers(1, 9), min_size=1, max_size=8),
       st.sampled_from([1, 2, 0.25]))
def test_a_steady_job_has_its_own_rate_under_any_half_life(h: float, per_step: int, gaps: list[int],
                                                             ideal: Number) -> None:
    """Samples of a job doing ``per_step`` iterations per second, unevenly spaced: decayed R = per_step x T."""
    t, hist = 0, [(0, 0)]
    for g in gaps:
        t += g
        hist.append((t, per_step * t))
    now = t + 1
    r = progress_rate(per_step * now, ideal, 0, now, history=hist, half_life=h)
    assert r == pytest.approx(per_step * float(ideal), rel=1e-9)


# ---------------------------------------------------------------------------------------------
# How much history a caller keeps


def test_history_horizon_is_the_window_or_ten_half_lives() -> None:
    """A window reads S seconds back; a half-life h reads 10 h (older weight below 0.1 %)."""
    assert history_horizon(window=7) == 7
    assert history_horizon(half_life=3) == 30
    assert history_horizon(half_life=Fraction(1, 2)) == 5
    assert history_horizon() is None


def test_trim_keeps_the_sample_exactly_at_the_horizon_as_base() -> None:
    """now 30, horizon 20: (10, 2) is the base, (0, 0) goes; a windowed R is unchanged by the trim."""
    assert trim_history(BURSTY, 30, 20) == [(10, 2), (20, 8)]
    assert trim_history(BURSTY, 30, 15) == [(10, 2), (20, 8)]
    assert trim_history(BURSTY, 30, 5) == [(20, 8)]
    trimmed = trim_history(BURSTY, 30, 20)
    assert progress_rate(12, 3, 0, 30, history=trimmed, window=20) == Fraction(3, 2)


def test_trim_keeps_everything_while_no_sample_is_old_enough() -> None:
    """A job younger than the horizon keeps all its samples; cumulative R needs none."""
    assert trim_history([(0, 0), (5, 2)], 6, 10) == [(0, 0), (5, 2)]
    assert trim_history([], 6, 10) == []
    assert trim_history(BURSTY, 30, None) == []


# ---------------------------------------------------------------------------------------------
# Drift of the time alone


def test_drift_faster_needs_five_recent_samples_below_ideal_over_one_plus_tolerance() -> None:
    """Default samples = 5: five fast iterations are enough, four are not."""
    assert drifted([0.5] * 5, [], 1.0, 0.1) == "faster"
    assert drifted([0.5] * 4, [], 1.0, 0.1) is None
    assert drifted([0.5] * 4, [], 1.0, 0.1, samples=4) == "faster"


def test_drift_slower_needs_five_recent_top_priority_samples_above_ideal_times_one_plus_tolerance() -> None:
    """Five slow iterations at the top priority are enough, four are not."""
    assert drifted([], [1.5] * 5, 1.0, 0.1) == "slower"
    assert drifted([], [1.5] * 4, 1.0, 0.1) is None
    assert drifted([1.2] * 5, [1.5] * 6, 1.0, 0.1) == "slower"


def test_drift_inside_the_tolerance_band_is_none() -> None:
    """Medians 0.95 (fast side) and 1.05 (slow side) at tolerance 0.1 stay inside: nothing drifted."""
    assert drifted([0.95] * 5, [1.05] * 5, 1.0, 0.1) is None
    assert drifted([1.0] * 5, [1.0] * 5, 1.0, 0.1) is None


def test_drift_exactly_on_a_threshold_is_none() -> None:
    """Tolerance 1: median 0.5 (0.5 x 2 = ideal) and median 2 (= ideal x 2) are not past the thresholds."""
    assert drifted([0.5] * 5, [2.0] * 5, 1.0, 1.0) is None
    assert drifted([0.49] * 5, [], 1.0, 1.0) == "faster"
    assert drifted([], [2.01] * 5, 1.0, 1.0) == "slower"


def test_drift_reads_only_the_last_samples() -> None:
    """Seven durations, samples = 5: the median of the last five decides (older ones are ignored)."""
    assert drifted([1, 1, 0.5, 0.5, 0.5, 1, 1], [], 1.0, 0.1) == "faster"
    assert drifted([0.5, 0.5, 1, 1, 1, 0.5, 0.5], [], 1.0, 0.1) is None
    assert drifted([], [1, 1, 1.5, 1.5, 1.5, 1, 1], 1.0, 0.1) == "slower"
    assert drifted([], [1.5, 1.5, 1, 1, 1, 1.5, 1.5], 1.0, 0.1) is None


def test_drift_with_a_small_ideal_time_and_tolerance() -> None:
    """Ideal 0.5 s and tolerance 0.5 are valid: 0.3 x 1.5 < 0.5 is faster, 0.8 > 0.75 slower."""
    assert drifted([0.3] * 5, [], 0.5, 0.5) == "faster"
    assert drifted([], [0.8] * 5, 0.5, 0.5) == "slower"


@pytest.mark.parametrize(("ideal", "tolerance", "message"), [
    (1.0, 0, r"^tolerance must be > 0, got 0$"),
    (1.0, -0.5, r"^tolerance must be > 0, got -0\.5$"),
    (0, 0.1, r"^ideal must be > 0, got 0$"),
    (-2, 0.1, r"^ideal must be > 0, got -2$"),
])
def test_drift_refuses_a_bad_tolerance_or_ideal(ideal: Number, tolerance: float, message: str) -> None:
    """Tolerance and ideal time must be > 0; the error names the field and the value."""
    with pytest.raises(ValueError, match=message):
        drifted([1.0] * 5, [1.0] * 5, ideal, tolerance)


def test_reprofile_interval_may_be_below_one() -> None:
    """mean_interval 0.5: last + 0.5 x (0.5 + u); 0 is refused."""
    assert next_reprofile_time(10, 0.5, 0.5) == 10.5
    with pytest.raises(ValueError, match=r"^mean_interval must be > 0, got 0$"):
        next_reprofile_time(10, 0, 0.5)


# ---------------------------------------------------------------------------------------------
# Overlap


def test_negative_slack_is_refused_with_its_value() -> None:
    """slack < 0 makes no window: refused, naming the value."""
    with pytest.raises(ValueError, match=r"^slack must be >= 0, got -1$"):
        effective_level(3, 0, -1, 0)
