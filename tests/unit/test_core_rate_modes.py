"""Windowed and decayed progress rate (leveller.core.rate.progress_rate), and history trimming."""

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveller.core.rate import DECAY_HORIZON, history_horizon, progress_rate, trim_history


def test_window_counts_only_the_last_seconds() -> None:
    # 10 iterations of 1 s in the first 10 s, then nothing for 10 s: cumulative 0.5, window 0 over the idle part
    hist = [(0, 0), (5, 5), (10, 10), (15, 10)]
    assert progress_rate(10, 1, 0, 20) == Fraction(1, 2)
    assert progress_rate(10, 1, 0, 20, history=hist, window=10) == 0
    # window 15: base is the latest sample at or before t = 5 -> (5, 5): 5 iterations in 15 s
    assert progress_rate(10, 1, 0, 20, history=hist, window=15) == Fraction(5, 15)
    # window 4 with samples 5 s apart: base (15, 10), the window is 5 s long (>= S, exact counts)
    assert progress_rate(12, 1, 0, 20, history=hist, window=4) == Fraction(2, 5)


def test_window_of_a_young_job_starts_at_its_start() -> None:
    assert progress_rate(3, 2, 10, 16, history=[(10, 0)], window=60) == 1
    assert progress_rate(3, 2, 10, 16, window=60) == 1  # empty history = (start, 0)


def test_window_uses_a_trimmed_histories_first_sample_as_base() -> None:
    # the caller kept samples from t = 100 on (iterations 50 then): 10 more in 10 s at ideal 1
    assert progress_rate(60, 1, 0, 110, history=[(100, 50)], window=30) == 1


def test_decayed_rate_of_a_steady_job_is_its_rate() -> None:
    # one iteration per 2 s, ideal 1 s: R = 0.5 whatever the half-life and sample spacing
    hist = [(t, t / 2) for t in range(0, 100, 4)]
    for h in (1.0, 5.0, 30.0):
        assert progress_rate(50, 1, 0, 100, history=hist, half_life=h) == pytest.approx(0.5, rel=1e-9)


def test_decayed_rate_forgets_with_the_half_life() -> None:
    # full speed for 100 s, then nothing for 10 s; h = 10 s: the last 10 s weigh 1/2 of everything
    hist = [(0, 0), (100, 100)]
    r = progress_rate(100, 1, 0, 110, history=hist, half_life=10)
    cumulative = progress_rate(100, 1, 0, 110)
    assert r == pytest.approx((2 ** -1 - 2 ** -11) / (1 - 2 ** -11), rel=1e-9)
    assert r < float(cumulative) - 0.3  # forgets faster than the cumulative R (0.909)
    # and recovers: 10 s at full speed again after the stall bring it back half way to 1
    hist2 = hist + [(110, 100)]
    assert progress_rate(110, 1, 0, 120, history=hist2, half_life=10) == pytest.approx(0.75, abs=1e-3)
    assert progress_rate(110, 1, 0, 120, history=hist2, window=10) == 1


def test_modes_reject_bad_options() -> None:
    with pytest.raises(ValueError, match="not both"):
        progress_rate(1, 1, 0, 2, window=1, half_life=1)
    with pytest.raises(ValueError, match="window"):
        progress_rate(1, 1, 0, 2, window=0)
    with pytest.raises(ValueError, match="half_life"):
        progress_rate(1, 1, 0, 2, half_life=-1)
    with pytest.raises(ValueError, match="history"):
        progress_rate(5, 1, 0, 10, history=[(0, 0), (5, 3), (4, 4)], window=2)
    with pytest.raises(ValueError, match="history"):
        progress_rate(5, 1, 0, 10, history=[(0, 0), (5, 6)], window=2)  # more than the current count
    with pytest.raises(ValueError, match="history"):
        progress_rate(5, 1, 0, 10, history=[(0, 0), (11, 1)], half_life=2)  # after now


def test_rates_at_the_base_time_are_zero() -> None:
    assert progress_rate(0, 1, 5, 5, window=3) == 0
    assert progress_rate(0, 1.0, 5, 5, half_life=3) == 0.0


def test_trim_keeps_the_base_sample_and_later_ones() -> None:
    hist = [(0, 0), (10, 5), (20, 10), (30, 15)]
    assert trim_history(hist, 35, 20) == [(10, 5), (20, 10), (30, 15)]
    assert trim_history(hist, 35, 100) == hist
    assert trim_history(hist, 35, None) == []
    assert history_horizon(window=7) == 7 and history_horizon(half_life=3) == 3 * DECAY_HORIZON
    assert history_horizon() is None


samples = st.lists(st.tuples(st.integers(1, 50), st.integers(0, 5)), min_size=1, max_size=40)


def _history(steps: list[tuple[int, int]]) -> list[tuple[int, int]]:
    t, n, out = 0, 0, [(0, 0)]
    for dt, dn in steps:
        t, n = t + dt, n + dn
        out.append((t, n))
    return out


@settings(max_examples=200)
@given(samples, st.integers(1, 400), st.integers(1, 5))
def test_trimming_never_changes_a_windowed_rate(steps: list[tuple[int, int]], window: int, ideal: int) -> None:
    hist = _history(steps)
    now, n = hist[-1][0] + 1, hist[-1][1]
    full = progress_rate(n, ideal, 0, now, history=hist, window=window)
    assert progress_rate(n, ideal, 0, now, history=trim_history(hist, now, window), window=window) == full
    assert 0 <= full  # and never above the fastest stretch the window covers
    assert full <= max(Fraction(dn * ideal, dt) for dt, dn in steps + [(1, 0)])


@settings(max_examples=200)
@given(samples, st.floats(0.5, 100))
def test_decayed_rate_lies_between_the_slowest_and_fastest_stretch(steps: list[tuple[int, int]], h: float) -> None:
    hist = _history(steps)
    now, n = hist[-1][0], hist[-1][1]
    r = progress_rate(n, 1, 0, now, history=hist[:-1], half_life=h)
    speeds = [dn / dt for dt, dn in steps]
    assert min(speeds) - 1e-9 <= r <= max(speeds) + 1e-9
    trimmed = trim_history(hist[:-1], now, history_horizon(half_life=h))
    # the dropped tail weighs at most 2^-DECAY_HORIZON of the rest
    bound = 2e-3 * max(speeds) + 1e-9
    assert abs(progress_rate(n, 1, 0, now, history=trimmed, half_life=h) - r) <= bound
