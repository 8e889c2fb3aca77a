"""leveller.core.cassini, past what test_core_cassini.py pins.

The rotation search's result is what compatibility() says of its rotations, the first job stays put,
coordinate ascent ends at a local optimum, the exhaustive search is the global one on the grid (and is used
up to ``max_exhaustive`` combinations), ties go to the smaller rotation, the grid has ``angles`` rotations,
shifts remove overlap for complementary jobs, shift_overlap samples at mid-steps with half-open arcs.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveller.core import cassini
from leveller.core.cassini import CircleJob
from leveller.model.errors import UserError

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
