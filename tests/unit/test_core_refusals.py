"""Each refusal of the scheduling core (Crux, CASSINI, the cycle bound, the profiler) with its message.

A caller that passes a bad value gets one sentence naming the parameter, the value and what is
allowed; these are pinned whole, and the value just inside every bound is shown to be accepted.
"""

from __future__ import annotations

from fractions import Fraction as F
from typing import Any, Callable

import pytest

from leveller.core import crux
from leveller.core.bound import cycle_bound, fraction_lcm
from leveller.core.cassini import CircleJob, compatibility, link_rotations, unified_period
from leveller.core.errors import UserError
from leveller.core.profiling import IdealTimeProfiler, estimate_ideal_time, next_reprofile_time

J = crux.CruxJob
A, B = J("a", 1, 2.0, 1.0), J("b", 2, 1.0, 1.0)
CA = CircleJob("a", 1.0, ((0.0, 0.5, 1.0),))


@pytest.mark.parametrize("call,exc,message", [
    (lambda: J("", 1, 1.0, 1.0), UserError, "job name must be a non-empty string"),
    (lambda: J("a", 0, 1.0, 1.0), UserError, "job 'a': gpus must be >= 1, got 0"),
    (lambda: J("a", 1, -1.0, 1.0), UserError, "job 'a': compute_s must be >= 0, got -1.0"),
    (lambda: J("a", 1, 1.0, 0.0), UserError, "job 'a': comm_s must be > 0, got 0.0"),
    (lambda: J("a", 1, 1.0, 1.0, slack_s=1.5), UserError, "job 'a': slack_s must be in [0, compute_s=1.0], got 1.5"),
    (lambda: J("a", 1, 1.0, 1.0, slack_s=-0.1), UserError, "job 'a': slack_s must be in [0, compute_s=1.0], got -0.1"),
    (lambda: J("a", 1, 1.0, 1.0, traffic=-1), UserError, "job 'a': traffic must be >= 0, got -1"),
    (lambda: crux.gpu_intensity(0, 1.0, 1.0), UserError, "gpus must be >= 1, got 0"),
    (lambda: crux.link_times(A, B, 0), UserError, "window_s must be > 0, got 0"),
    (lambda: crux.correction_factors([A, J("a", 1, 1.0, 1.0)]), UserError, "job names must be unique, repeated: ['a']"),
    (lambda: crux.correction_factors([A, B, A, B, J("c", 1, 1.0, 1.0)]), UserError,
     "job names must be unique, repeated: ['a', 'b']"),
    (lambda: crux.reference_job([]), UserError, "need at least one job"),
    (lambda: crux.correction_factors([A, B], window_iterations=0), UserError,
     "window_iterations must be >= 1, got 0"),
    (lambda: crux.correction_factors([A, B], k_max=0.5), UserError, "k_max must be >= 1, got 0.5"),
    (lambda: crux.least_congested_path([], {}, {"l": 1.0}), UserError, "need at least one candidate path"),
    (lambda: crux.least_congested_path([["l"]], {}, {"l": 1.0}, demand=-1), UserError, "demand must be >= 0, got -1"),
    (lambda: crux.least_congested_path([["m"]], {}, {"l": 1.0}), UserError, "link 'm' has no capacity"),
    (lambda: crux.least_congested_path([["l"]], {}, {"l": 0.0}), UserError,
     "capacity of link 'l' must be > 0, got 0.0"),
    (lambda: crux.assign_paths([("r", [["l"]], 1.0), ("r", [["l"]], 1.0)], {"l": 10.0}), UserError,
     "request 'r' appears twice"),
    (lambda: crux.max_k_cut_dp(["a", "b"], {}, 0), UserError, "levels k must be >= 1, got 0"),
    (lambda: crux.max_k_cut_dp(["a", "a"], {}, 1), UserError, "order repeats a node: ['a', 'a']"),
    (lambda: crux.max_k_cut_dp(["a"], {("a", "z"): 1.0}, 1), UserError, "edge ('a', 'z') has a node outside the order"),
    (lambda: crux.max_k_cut_dp(["a", "b"], {("b", "a"): 1.0}, 1), UserError,
     "edge ('b', 'a') goes backwards: the order is not topological"),
    (lambda: crux.max_k_cut_dp(["a", "b"], {("a", "b"): -1.0}, 1), UserError,
     "edge ('a', 'b') weight must be >= 0, got -1.0"),
    (lambda: crux.contention_dag({"a": 1.0}, {"a": 1.0, "b": 1.0}, [("a", "b")]), UserError,
     "contending job 'b' has no priority"),
    (lambda: crux.contention_dag({"a": 1.0, "b": 1.0}, {"a": 1.0}, [("a", "b")]), UserError,
     "contending job 'b' has no intensity"),
    (lambda: crux.compress_levels({"a": 1.0}, {"a": 1.0}, [], 0), UserError, "levels k must be >= 1, got 0"),
    (lambda: crux.compress_levels({"a": 1.0}, {"a": 1.0}, [], 1, samples=0), UserError,
     "samples must be >= 1, got 0"),
    (lambda: CircleJob("", 1.0, ()), UserError, "circle job name must be a non-empty string"),
    (lambda: CircleJob("a", 0.0, ()), UserError, "job 'a': period_s must be > 0, got 0.0"),
    (lambda: CircleJob("a", 1.0, ((0.0, 0.5),)), UserError,
     "job 'a': an arc is (start_s, duration_s, demand_fraction), got (0.0, 0.5)"),
    (lambda: CircleJob("a", 1.0, ((1.0, 0.5, 1.0),)), UserError,
     "job 'a': arc start_s must be in [0, period_s), got 1.0"),
    (lambda: CircleJob("a", 1.0, ((0.0, 0.0, 1.0),)), UserError,
     "job 'a': arc duration_s must be in (0, period_s], got 0.0"),
    (lambda: CircleJob("a", 1.0, ((0.0, 1.5, 1.0),)), UserError,
     "job 'a': arc duration_s must be in (0, period_s], got 1.5"),
    (lambda: CircleJob("a", 1.0, ((0.0, 0.5, 0.0),)), UserError,
     "job 'a': arc demand_fraction must be in (0, 1], got 0.0"),
    (lambda: CircleJob("a", 1.0, ((0.0, 0.5, 1.5),)), UserError,
     "job 'a': arc demand_fraction must be in (0, 1], got 1.5"),
    (lambda: unified_period([1.0], 0.0, 10.0), UserError, "quantum_s must be > 0, got 0.0"),
    (lambda: unified_period([1.0], 0.1, 0.0), UserError, "lcm_cap must be > 0, got 0.0"),
    (lambda: unified_period([], 0.1, 10.0), UserError, "need at least one period"),
    (lambda: unified_period([1.0, 0.0], 0.1, 10.0), UserError, "periods must be > 0, got 0.0"),
    (lambda: compatibility([], {}, 0.1, 10.0), UserError, "need at least one job on the link"),
    (lambda: compatibility([CA, CA], {}, 0.1, 10.0), UserError,
     "a job appears twice on one link (merge its arcs): ['a', 'a']"),
    (lambda: compatibility([CA], {"z": 0.1}, 0.1, 10.0), UserError, "rotations given for jobs not on the link: ['z']"),
    (lambda: link_rotations([CA], 0.1, 10.0, angles=0), UserError, "angles must be >= 1, got 0"),
    (lambda: link_rotations([CA], 0.1, 10.0, sweeps=-1), UserError, "sweeps must be >= 0, got -1"),
    (lambda: fraction_lcm([]), ValueError, "need positive values, got []"),
    (lambda: fraction_lcm([F(1), F(0)]), ValueError, "need positive values, got [Fraction(1, 1), Fraction(0, 1)]"),
    (lambda: cycle_bound([]), ValueError, "need at least one job"),
    (lambda: estimate_ideal_time([]), ValueError, "no iteration durations measured; need at least one"),
    (lambda: estimate_ideal_time([1.0, 0.0]), ValueError, "iteration durations must be > 0, got 0.0"),
    (lambda: next_reprofile_time(0, 0, 0.5), ValueError, "mean_interval must be > 0, got 0"),
    (lambda: next_reprofile_time(0, 10, 1.0), ValueError, "u must be in [0, 1), got 1.0"),
    (lambda: next_reprofile_time(0, 10, -0.1), ValueError, "u must be in [0, 1), got -0.1"),
    (lambda: IdealTimeProfiler(samples=0), ValueError, "samples must be >= 1, got 0"),
])
def test_refusal_message(call: Callable[[], Any], exc: type[Exception], message: str) -> None:
    with pytest.raises(exc) as info:
        call()
    assert str(info.value) == message


def test_values_at_the_bounds_are_accepted() -> None:
    assert J("a", 1, 0.0, 1e-9, slack_s=0.0).intensity == 0.0  # no compute, tiny communication
    assert J("a", 1, 2.0, 1.0, slack_s=2.0).ideal_s == 2.0  # all communication hidden
    assert J("a", 1, 2.0, 3.0, slack_s=1.0).ideal_s == 4.0
    assert J("a", 1, 1.0, 1.0, traffic=0).volume == 0 and J("a", 1, 1.0, 2.0).volume == 2.0
    assert crux.correction_factors([A, B], window_iterations=1, k_max=1.0) == {"a": 1.0, "b": 1.0}
    assert CircleJob("a", 1.0, ((0.999, 1.0, 1.0),)).arcs == ((0.999, 1.0, 1.0),)
    assert next_reprofile_time(100, 10, 0.0) == 105 and next_reprofile_time(100, 10, 0.5) == 110
    assert estimate_ideal_time([3.0, 1.0, 2.0, 100.0]) == 2.5
    assert fraction_lcm([F(1, 2), F(1, 3)]) == F(1) and fraction_lcm([F(2, 3), F(3, 4)]) == F(6)
    b = cycle_bound([(F(1), F(1)), (F(1), F(2))])
    assert (b.lcm, b.iterations, b.comm_total, b.work_min, b.work_max) == (F(6), (3, 2), F(7), F(2), F(3))
    assert b.guaranteed == F(6, 9) and b.optimum_ceiling == F(6, 7)


def test_least_congested_path_prefers_the_lowest_busiest_link_then_the_lowest_sum() -> None:
    cap = {"a": 10.0, "b": 10.0, "c": 10.0, "d": 20.0}
    assert crux.least_congested_path([["a"], ["b"]], {"a": 5.0}, cap) == 1
    assert crux.least_congested_path([["a", "b"], ["c"]], {"a": 1.0, "b": 1.0, "c": 1.0}, cap) == 1  # same max, lower sum
    assert crux.least_congested_path([["a"], ["d"]], {"a": 4.0, "d": 9.0}, cap, demand=1.0) == 0  # 0.5 vs 0.5: first
    assert crux.least_congested_path([["a"]], {}, cap) == 0
    chosen, load = crux.assign_paths([("x", [["a"], ["b"]], 3.0), ("y", [["a"], ["b"]], 2.0)], cap, {"a": 1.0})
    assert chosen == {"x": 1, "y": 0} and load == {"a": 3.0, "b": 3.0}
