"""Edges of the baselines (CASSINI, Crux) and of the pruning that their other tests leave open.

CASSINI: the rotation search's result is what compatibility() says of its rotations, the first job
stays put, coordinate ascent ends at a local optimum, the exhaustive search is the global one on the
grid (and is used up to ``max_exhaustive`` combinations), ties go to the smaller rotation, the grid
has ``angles`` rotations, shifts remove overlap for complementary jobs, shift_overlap samples at
mid-steps with half-open arcs. Crux: P = k * I with the documented defaults, k clamped to
[1/k_max, k_max], paths chosen with the flow's own demand, separate contention parts compressed
independently, nothing demoted without gain. Pruning: any numeric id arrays, link ids checked.
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveller.core import cassini, crux
from leveller.core.cassini import CircleJob
from leveller.core.crux import CruxJob
from leveller.core.levels import Flow, assign_levels, prune
from leveller.model.errors import UserError
from tests.levels_oracle import oracle_levels

# --- CASSINI: rotation search ---------------------------------------------------------


def arcs_job(name: str, period: float, *arcs: tuple[float, float, float]) -> CircleJob:
    return CircleJob(name, period, tuple(arcs))


# a 3-job link where greedy placement (b right after a's first arc) leaves no room for c, and
# moving one job at a time cannot fix it; b in a's second gap and c in the first one fit exactly
TRAP = [arcs_job("a", 8.0, (0.0, 1.0, 1.0), (4.0, 2.0, 1.0)), arcs_job("b", 8.0, (0.0, 2.0, 1.0)),
        arcs_job("c", 8.0, (0.0, 3.0, 1.0))]
# a 73-quantum circle: y fits only at rotation 37 quanta, off the default grid of 72 angles (step 2)
X73, Y73 = arcs_job("x", 0.73, (0.0, 0.37, 1.0)), arcs_job("y", 0.73, (0.0, 0.36, 1.0))
# found by search: coordinate ascent improves on greedy in its sweeps here
SWEPT = [arcs_job("j0", 16.0, (11.0, 6.0, 0.7), (14.0, 3.0, 0.7)), arcs_job("j1", 16.0, (15.0, 5.0, 0.7)),
         arcs_job("j2", 20.0, (14.0, 8.0, 0.7), (18.0, 9.0, 1.0)),
         arcs_job("j3", 16.0, (7.0, 6.0, 1.0), (5.0, 5.0, 0.7))]


@st.composite
def link_jobs(draw: st.DrawFn, max_jobs: int = 5) -> list[CircleJob]:
    """2..max_jobs jobs of 4..12 one-second quanta, one or two arcs each."""
    jobs = []
    for i in range(draw(st.integers(2, max_jobs))):
        q = draw(st.integers(4, 12))
        arcs = [(float(draw(st.integers(0, q - 1))), float(draw(st.integers(1, q // 2))),
                 draw(st.sampled_from([0.5, 0.7, 1.0]))) for _ in range(draw(st.integers(1, 2)))]
        jobs.append(CircleJob(f"j{i}", float(q), tuple(arcs)))
    return jobs


def grid(job: CircleJob, angles: int = 72) -> list[float]:
    """The candidate rotations (seconds, quantum 1 s) the module docstring promises for a job."""
    q = round(job.period_s)
    return [float(r) for r in range(0, q, -(-q // angles))]


@settings(max_examples=60)
@given(link_jobs(), st.integers(0, 3))
def test_greedy_search_ends_at_a_local_optimum_it_reports_truly(jobs: list[CircleJob], sweeps: int) -> None:
    """Greedy + coordinate ascent (forced by max_exhaustive=0): the score is compatibility() of the
    returned rotations, the first job stays at 0, more sweeps never score lower, and once converged
    no single job can move to a better rotation on its grid."""
    score, rot = cassini.link_rotations(jobs, 1.0, 1e6, max_exhaustive=0, sweeps=sweeps)
    assert score == pytest.approx(cassini.compatibility(jobs, rot, 1.0, 1e6), abs=1e-9)
    assert rot[jobs[0].name] == 0.0
    converged, final = cassini.link_rotations(jobs, 1.0, 1e6, max_exhaustive=0, sweeps=1000)
    assert converged >= score - 1e-9
    for job in jobs[1:]:
        for r in grid(job):
            moved = final | {job.name: r}
            assert cassini.compatibility(jobs, moved, 1.0, 1e6) <= converged + 1e-9, (job.name, r)


@settings(max_examples=40)
@given(link_jobs(max_jobs=3))
def test_exhaustive_search_is_the_best_on_the_grid(jobs: list[CircleJob]) -> None:
    score, rot = cassini.link_rotations(jobs, 1.0, 1e6)
    assert rot[jobs[0].name] == 0.0
    assert score == pytest.approx(cassini.compatibility(jobs, rot, 1.0, 1e6), abs=1e-9)
    for combo in itertools.product(*(grid(j) for j in jobs[1:])):
        rotations = {j.name: r for j, r in zip(jobs[1:], combo)}
        assert cassini.compatibility(jobs, rotations, 1.0, 1e6) <= score + 1e-9


def test_exhaustive_search_up_to_max_exhaustive_combinations_then_greedy() -> None:
    """TRAP's grid has 8 x 8 = 64 combinations of b and c: exhaustive (exact fit) at 64, greedy above."""
    exact = (1.0, {"a": 0.0, "b": 6.0, "c": 1.0})
    assert cassini.link_rotations(TRAP, 1.0, 100.0) == exact
    assert cassini.link_rotations(TRAP, 1.0, 100.0, max_exhaustive=64) == exact
    assert cassini.link_rotations(TRAP, 1.0, 100.0, max_exhaustive=63) == (0.875, {"a": 0.0, "b": 1.0, "c": 5.0})
    assert cassini.link_rotations(TRAP, 1.0, 100.0, max_exhaustive=10)[0] == 0.875


def test_exhaustive_search_gives_the_last_job_its_own_grid() -> None:
    """The middle job's period is half the last one's: the only exact fit puts c at 4 s, beyond b's grid."""
    jobs = [arcs_job("a", 8.0, (0.0, 3.0, 1.0)), arcs_job("b", 4.0, (0.0, 1.0, 0.5)),
            arcs_job("c", 8.0, (0.0, 3.0, 1.0))]
    assert cassini.link_rotations(jobs, 1.0, 100.0) == (1.0, {"a": 0.0, "b": 3.0, "c": 4.0})


def test_ties_go_to_the_smaller_rotation() -> None:
    third = [arcs_job(n, 3.0, (0.0, 1.0, 1.0)) for n in "tuv"]
    assert cassini.link_rotations(third, 1.0, 100.0) == (1.0, {"t": 0.0, "u": 1.0, "v": 2.0})
    # no rotation can remove any excess (two halves fill the link): everyone stays at 0, also when
    # the 72 candidates of a 20,000-quantum circle are evaluated in more than one block
    halves = [arcs_job(n, 200.0, (0.0, 100.0, 0.5)) for n in "pq"]
    assert cassini.link_rotations(halves, 0.01, 1000.0) == (1.0, {"p": 0.0, "q": 0.0})
    # a sweep moves a job only for a strict gain, so ties keep the greedy placement
    assert cassini.link_rotations(SWEPT, 1.0, 1e6, max_exhaustive=0, sweeps=2) == (
        pytest.approx(0.03375), {"j0": 0.0, "j1": 2.0, "j2": 7.0, "j3": 14.0})


def test_the_default_grid_has_72_angles() -> None:
    assert cassini.link_rotations([X73, Y73], 0.01, 100.0) == (pytest.approx(72 / 73), {"x": 0.0, "y": 0.36})
    assert cassini.link_rotations([X73, Y73], 0.01, 100.0, angles=73) == (1.0, {"x": 0.0, "y": 0.37})
    assert cassini.job_shifts({"L": [X73, Y73]}, 0.01, 100.0) == {"x": 0.0, "y": 0.36}


@pytest.mark.parametrize("kwargs", [{"angles": 1}, {"sweeps": 0}])
def test_the_smallest_search_settings_are_accepted(kwargs: dict[str, int]) -> None:
    score, rot = cassini.link_rotations(TRAP, 1.0, 100.0, **kwargs)
    assert score == pytest.approx(cassini.compatibility(TRAP, rot, 1.0, 100.0))
    if "angles" in kwargs:
        assert rot == {"a": 0.0, "b": 0.0, "c": 0.0}


@pytest.mark.parametrize("links,settings_", [
    ({"L": TRAP}, {}),
    ({"L": [X73, Y73]}, {"angles": 73}),
    ({"L": [X73, Y73]}, {}),
    ({"L": SWEPT}, {"max_exhaustive": 0, "sweeps": 0}),
    ({"L": SWEPT}, {"max_exhaustive": 0, "sweeps": 2}),
])
def test_job_shifts_on_one_link_are_its_rotations_with_the_same_settings(links: dict[str, list[CircleJob]],
                                                                         settings_: dict[str, int]) -> None:
    jobs = links["L"]
    quantum = 0.01 if jobs[0].period_s < 1 else 1.0
    _, rot = cassini.link_rotations(jobs, quantum, 1e6, **settings_)
    assert cassini.job_shifts(links, quantum, 1e6, **settings_) == rot


# --- CASSINI: profiles, unified circle, compatibility ---------------------------------

def test_a_wrapping_arc_demands_on_both_sides_of_the_circle() -> None:
    wraps = arcs_job("w", 1.0, (0.8, 0.4, 1.0))  # 0.8..1.0 and 0..0.2
    late, early = arcs_job("z", 1.0, (0.85, 0.1, 1.0)), arcs_job("e", 1.0, (0.05, 0.1, 1.0))
    assert cassini.compatibility([wraps, late], {}, 0.01, 10) == pytest.approx(0.9)
    assert cassini.compatibility([wraps, early], {}, 0.01, 10) == pytest.approx(0.9)
    both = arcs_job("b", 1.0, (0.1, 0.1, 1.0), (0.6, 0.1, 1.0))
    assert cassini.compatibility([both, arcs_job("f", 1.0, (0.0, 1.0, 1.0))], {}, 0.01, 10) == pytest.approx(0.8)


def test_a_job_missing_from_rotations_is_not_rotated() -> None:
    jobs = [arcs_job("h1", 2.0, (0.0, 1.0, 1.0)), arcs_job("h2", 2.0, (0.0, 1.0, 1.0))]
    assert cassini.compatibility(jobs, {}, 0.01, 10) == pytest.approx(0.5)
    assert cassini.compatibility(jobs, {"h2": 0.0}, 0.01, 10) == pytest.approx(0.5)
    assert cassini.compatibility(jobs, {"h2": 1.0}, 0.01, 10) == 1.0


def test_unified_circle_at_the_cap_and_below_one_quantum() -> None:
    assert cassini.unified_period([1.0, 1.5], 0.5, 3.0) == 3.0  # LCM exactly at the cap: kept whole
    assert cassini.unified_period([1.0, 1.5], 0.5, 2.5) == 1.5  # above it: one longest period
    assert cassini.unified_period([0.01], 0.01, 1.0) == 0.01
    assert cassini.unified_period([0.004], 0.01, 1.0) == 0.01  # never less than one quantum


def test_a_rotation_for_a_job_without_period_names_job_and_link() -> None:
    with pytest.raises(UserError, match="job 'x' on link 'L' has no period"):
        cassini.bfs_shifts({"L": {"x": 0.0}}, {})


# --- CASSINI: shared_link_shifts ------------------------------------------------------

HALF_A, HALF_B = arcs_job("a", 1.0, (0.0, 0.5, 1.0)), arcs_job("b", 1.0, (0.0, 0.5, 1.0))


def test_shared_link_shifts_interleave_complementary_jobs() -> None:
    shifts = cassini.shared_link_shifts({"L": [HALF_A, HALF_B]})
    assert shifts == {"a": 0.0, "b": pytest.approx(0.5)}
    assert cassini.shift_overlap(HALF_A, 0.0, HALF_B, 0.0, 10.0) == pytest.approx(5.0)
    assert cassini.shift_overlap(HALF_A, shifts["a"], HALF_B, shifts["b"], 10.0) == pytest.approx(0.0, abs=1e-9)


def test_shared_link_shifts_ignore_links_of_one_job() -> None:
    assert cassini.shared_link_shifts({}) == {}
    assert cassini.shared_link_shifts({"L": [HALF_A], "M": [HALF_B]}) == {}
    assert cassini.shared_link_shifts({"L": [HALF_A], "M": [HALF_A, HALF_B]}) == {"a": 0.0, "b": pytest.approx(0.5)}


@pytest.mark.parametrize("links", [
    {"L": [arcs_job("a", 2.0, (0.0, 0.7, 1.0)), arcs_job("b", 2.6, (0.3, 0.9, 1.0))]},
    {"L": [arcs_job("a", 1.0, (0.0, 0.31, 1.0)), arcs_job("b", 1.7, (0.2, 0.5, 1.0))],
     "M": [arcs_job("b", 1.7, (0.2, 0.5, 1.0)), arcs_job("c", 0.9, (0.1, 0.33, 0.8))]},
])
def test_shared_link_shifts_scale_the_grid_to_the_jobs(links: dict[str, list[CircleJob]]) -> None:
    """Quantum = 1 % of the shortest period, unified circle capped at 20 longest periods."""
    periods = [j.period_s for jobs in links.values() for j in jobs]
    want = cassini.job_shifts(links, 0.01 * min(periods), 20 * max(periods))
    assert cassini.shared_link_shifts(links) == want
    assert cassini.shared_link_shifts(links, 0.01, 20.0) == want


def test_shared_link_shifts_bounds() -> None:
    links = {"L": [HALF_A, HALF_B]}
    assert cassini.shared_link_shifts(links, quantum_fraction=1.0) == {"a": 0.0, "b": 0.0}  # one quantum
    assert cassini.shared_link_shifts(links, lcm_periods=1.0) == {"a": 0.0, "b": pytest.approx(0.5)}
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(UserError, match=rf"quantum_fraction must be in \(0, 1\], got {bad!r}"):
            cassini.shared_link_shifts(links, quantum_fraction=bad)
    for bad in (0.5, 0.0):
        with pytest.raises(UserError, match=rf"lcm_periods must be >= 1, got {bad!r}"):
            cassini.shared_link_shifts(links, lcm_periods=bad)


# --- CASSINI: shift_overlap -----------------------------------------------------------

FULL = arcs_job("f", 1.0, (0.0, 1.0, 1.0))


def test_shift_overlap_samples_mid_steps_of_a_thousandth_period() -> None:
    # b starts at 0.1004 s: mid-step samples 0.1005, 0.1015, ... are the 900 last of 1000
    assert cassini.shift_overlap(FULL, 0.0, FULL, 0.1004, 1.0) == pytest.approx(0.9)
    assert cassini.shift_overlap(FULL, 0.0, FULL, 0.0, 1.0) == pytest.approx(1.0)
    assert cassini.shift_overlap(FULL, 0.0, FULL, 0.1004, 1.0, 0.001) == pytest.approx(0.9)


def test_shift_overlap_delays_each_job_and_counts_all_its_arcs() -> None:
    assert cassini.shift_overlap(HALF_A, 0.0, HALF_B, 0.25, 2.0) == pytest.approx(0.5)
    two = arcs_job("t", 1.0, (0.0, 0.1, 1.0), (0.3, 0.2, 1.0))
    assert cassini.shift_overlap(two, 0.0, HALF_B, 0.0, 1.0) == pytest.approx(0.3)


def test_shift_overlap_arcs_are_half_open_and_start_at_the_shift() -> None:
    """With 1 s steps the samples are 0.5, 1.5, ...: an arc ending at 1.5 is off there, a job
    delayed by 1.5 is on."""
    ends = arcs_job("e", 10.0, (0.0, 1.5, 1.0))
    late = arcs_job("l", 10.0, (0.0, 1.0, 1.0))
    assert cassini.shift_overlap(ends, 0.0, late, 1.5, 10.0, 1.0) == 0.0
    longer = arcs_job("g", 10.0, (0.0, 2.0, 1.0))
    assert cassini.shift_overlap(longer, 0.0, late, 1.5, 10.0, 1.0) == 1.0


# --- Crux -----------------------------------------------------------------------------

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


# --- pruning --------------------------------------------------------------------------

def random_incidence(seed: int, n_flows: int, n_links: int, n_jobs: int) -> tuple[list[int], list[int], list[int]]:
    """Ranks of n_flows flows of n_jobs jobs, each crossing 1-4 of n_links links."""
    rng = np.random.default_rng(seed)
    rank = rng.integers(0, n_jobs, n_flows).tolist()
    inc_flow: list[int] = []
    inc_link: list[int] = []
    for f in range(n_flows):
        for lk in rng.choice(n_links, rng.integers(1, 5), replace=False).tolist():
            inc_flow.append(f)
            inc_link.append(lk)
    return rank, inc_flow, inc_link


@pytest.mark.parametrize("n_flows", [60, 400])  # below and above SMALL_INCIDENCE pairs
def test_prune_takes_ids_in_any_numeric_array(n_flows: int) -> None:
    """Ranks and ids decoded as floats (e.g. JSON numbers) or int32 give the oracle's levels."""
    n_links = n_flows // 4
    rank, inc_flow, inc_link = random_incidence(n_flows, n_flows, n_links, 12)
    flows = {f"f{i:04d}": Flow(f"J{rank[i]:02d}", tuple(lk for fl, lk in zip(inc_flow, inc_link) if fl == i))
             for i in range(n_flows)}
    order = [f"J{j:02d}" for j in range(12)]
    want = [oracle_levels(order, flows, 4)[f"f{i:04d}"] for i in range(n_flows)]
    assert list(assign_levels(order, flows, 4).values()) == want
    for dtype in (np.float64, np.int32, np.int64):
        got = prune(np.array(rank, dtype=dtype), np.array(inc_flow, dtype=dtype), np.array(inc_link, dtype=dtype),
                    n_links, 4)
        assert got.tolist() == want, dtype


@pytest.mark.parametrize("pairs", [1, 600])
def test_prune_refuses_a_link_id_equal_to_the_number_of_links(pairs: int) -> None:
    inc_flow = np.zeros(pairs, dtype=np.int64)
    inc_link = np.zeros(pairs, dtype=np.int64)
    inc_link[-1] = 3
    with pytest.raises(ValueError, match="out of range"):
        prune(np.zeros(1, dtype=np.int64), inc_flow, inc_link, 3, 2)
    assert prune(np.zeros(1, dtype=np.int64), inc_flow, inc_link, 4, 2).tolist() == [1]
