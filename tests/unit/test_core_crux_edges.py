"""leveller.core.crux, past what test_core_crux.py pins: P = k * I with the documented defaults, k clamped to
[1/k_max, k_max], paths chosen with the flow's own demand, separate contention parts compressed independently,
nothing demoted without gain; the intensity's and the weights' refusals (a communication time that is not positive,
a NaN compute time, two jobs with one name).
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from leveller.core import crux
from leveller.core.crux import CruxJob
from leveller.core.policies import CruxPolicy, JobView
from leveller.model.errors import UserError

F = Fraction
JOBS_1 = [CruxJob("a", 1, F(4), F(1)), CruxJob("b", 7, F(1, 2), F(1)), CruxJob("c", 6, F(4), F(4))]
JOBS_2 = [CruxJob("a", 6, F(8), F(2), F(4)), CruxJob("b", 6, F(7), F(2), F(2)), CruxJob("c", 7, F(4), F(3))]


def test_priorities_are_k_times_intensity_with_the_documented_defaults() -> None:
    """Defaults: a 100-iteration window, k clamped to 10 (JOBS_2's a is at the clamp)."""
    for jobs in (JOBS_1, JOBS_2):
        k = crux.correction_factors(jobs, 100, 10.0)
        want = {j.name: k[j.name] * j.intensity for j in jobs}
        assert crux.priorities(jobs) == pytest.approx(want)
    assert crux.priorities(JOBS_1) == pytest.approx({"a": 6.777777777777778, "b": 4.368, "c": 6.0})
    assert crux.priorities(JOBS_2) == pytest.approx({"a": 2.4, "b": 14.0, "c": 9.333333333333334})
    for window, k_max in ((3, 2.0), (7, 1.0), (1, 10.0)):
        k = crux.correction_factors(JOBS_2, window, k_max)
        assert crux.priorities(JOBS_2, window, k_max) == pytest.approx({j.name: k[j.name] * j.intensity
                                                                          for j in JOBS_2})
    assert crux.priorities(JOBS_2, 100, 1.0) != crux.priorities(JOBS_2)


def test_k_is_clamped_below_at_one_over_k_max() -> None:
    jobs = [CruxJob("a", 6, F(2), F(3, 2), F(3, 2)), CruxJob("b", 6, F(7), F(1, 2))]
    assert crux.correction_factors(jobs) == {"a": 1.0, "b": 0.1}
    assert crux.correction_factors(jobs, k_max=4.0) == {"a": 1.0, "b": 0.25}


def test_link_times_take_a_window_shorter_than_a_second() -> None:
    job = CruxJob("a", 1, F(0), F(1))
    assert crux.link_times(job, job, F(1, 2)) == (F(1, 2), 0)


def test_a_path_crossing_no_link_is_the_least_congested() -> None:
    assert crux.least_congested_path([["l1"], []], {"l1": 0.5}, {"l1": 1.0}) == 1
    assert crux.least_congested_path([[], ["l1"]], {}, {"l1": 1.0}) == 0


def test_capacities_below_one_are_accepted() -> None:
    # (0.2 + 0.1) / 0.5 = 0.6 on l1, 0.1 / 0.25 = 0.4 on l2
    assert crux.least_congested_path([["l1"], ["l2"]], {"l1": 0.2}, {"l1": 0.5, "l2": 0.25}, 0.1) == 1


def test_paths_are_chosen_with_the_flows_own_demand() -> None:
    """A thin empty link loses to a wide busy one once the flow's own demand is counted."""
    capacity, load = {"thin": 1.0, "wide": 10.0}, {"wide": 0.5}
    assert crux.least_congested_path([["thin"], ["wide"]], load, capacity) == 0  # demand 0 by default
    assert crux.least_congested_path([["thin"], ["wide"]], load, capacity, 1.0) == 1
    chosen, acc = crux.assign_paths([("f", [["thin"], ["wide"]], 1.0)], capacity, load)
    assert chosen == {"f": 1} and acc == {"wide": 1.5}


def test_a_self_pair_does_not_hide_the_pairs_after_it() -> None:
    edges = crux.contention_dag({"a": 2.0, "b": 1.0}, {"a": 3, "b": 1}, [("a", "a"), ("b", "a")])
    assert edges == {("a", "b"): 3.0}


def test_nothing_is_demoted_without_gain_whatever_the_weights() -> None:
    value, levels = crux.max_k_cut_dp(["a", "b", "c"], {("a", "b"): 5.0}, 3)
    assert value == 5.0 and levels == {"a": 2, "b": 1, "c": 1}


def test_separate_contention_parts_are_compressed_independently() -> None:
    """Two pairs that never meet: each gets its own cut, although one cut of the joint priority
    order (a, b, c, d) could only separate one pair."""
    priority = {"a": 4.0, "b": 3.0, "c": 2.0, "d": 1.0}
    intensity = dict.fromkeys(priority, 1.0)
    want = {"a": 1, "b": 0, "c": 1, "d": 0}
    assert crux.compress_levels(priority, intensity, [("a", "b"), ("c", "d")], 2, samples=1) == want
    assert crux.compress_levels(priority, intensity, [("a", "b"), ("c", "d")], 2) == want


# found by search: the sampled topological orders (seed, include_priority_order) decide these
SAMPLED = ({"j0": 6.0, "j1": 3.0, "j2": 18.0, "j3": 9.0, "j4": 2.0, "j5": 3.0, "j6": 3.0},
           {"j0": 1.0, "j1": 8.0, "j2": 1.0, "j3": 5.0, "j4": 4.0, "j5": 5.0, "j6": 2.0},
           [("j1", "j2"), ("j2", "j0"), ("j1", "j1"), ("j2", "j4"), ("j1", "j5"), ("j2", "j5"), ("j5", "j2"),
            ("j3", "j5"), ("j2", "j3"), ("j3", "j0"), ("j0", "j2")])
NO_PRIORITY_ORDER = ({"j0": 1.0, "j1": 16.0, "j2": 2.0, "j3": 10.0, "j4": 20.0, "j5": 19.0},
                     {"j0": 7.0, "j1": 3.0, "j2": 3.0, "j3": 9.0, "j4": 4.0, "j5": 1.0},
                     [("j4", "j4"), ("j1", "j3"), ("j4", "j2"), ("j4", "j2"), ("j3", "j2")])


def test_compression_is_deterministic_with_seed_0_by_default() -> None:
    want = {"j0": 0, "j1": 1, "j2": 2, "j3": 1, "j4": 1, "j5": 0, "j6": 2}
    assert crux.compress_levels(*SAMPLED, 3) == want
    assert crux.compress_levels(*SAMPLED, 3, samples=10, seed=0) == want
    assert crux.compress_levels(*SAMPLED, 3, seed=1) != want


def test_compression_without_the_priority_order_uses_random_orders_only() -> None:
    with_it = crux.compress_levels(*NO_PRIORITY_ORDER, 4)
    without = crux.compress_levels(*NO_PRIORITY_ORDER, 4, include_priority_order=False)
    assert with_it == {"j0": 3, "j1": 3, "j2": 1, "j3": 2, "j4": 3, "j5": 3}
    assert without == {"j0": 3, "j1": 3, "j2": 1, "j3": 2, "j4": 2, "j5": 3}


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


def test_crux_weights_refuse_two_jobs_with_one_name() -> None:
    jobs = [crux.CruxJob("a", 1, 1.0, 1.0), crux.CruxJob("b", 1, 2.0, 1.0), crux.CruxJob("a", 2, 1.0, 1.0)]
    with pytest.raises(UserError, match=r"repeated: \['a'\]"):
        crux.correction_factors(jobs)
    with pytest.raises(UserError, match=r"repeated: \['a'\]"):
        crux.priorities(jobs)


def test_crux_refuses_a_nan_compute_time() -> None:
    # NaN passes a "< 0" check; its intensity would be NaN and its place in the order arbitrary.
    with pytest.raises(UserError, match="compute_s must be >= 0"):
        crux.gpu_intensity(1, float("nan"), 1.0)
    with pytest.raises(UserError, match="compute_s must be >= 0"):
        crux.CruxJob("a", 1, float("nan"), 1.0)
