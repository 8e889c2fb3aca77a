"""CASSINI baseline (leveller.core.cassini): unified circle, compatibility, rotations, affinity BFS.

Beyond the worked cases: the rotation search's result is what compatibility() says of its rotations, the
first job stays put, coordinate ascent ends at a local optimum, the exhaustive search is the global one on
the grid (and is used up to ``max_exhaustive`` combinations), ties go to the smaller rotation, the grid has
``angles`` rotations, shifts remove overlap for complementary jobs, shift_overlap samples at mid-steps with
half-open arcs. The search equals, bit for bit, the implementation it replaced (kept here as the
reference), and job_shifts' cache of searched links changes no result.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveller.core import cassini
from leveller.core.cassini import CircleJob
from leveller.model.errors import UserError

Q = 0.01  # quantum (s)
CAP = 100.0  # LCM cap (s): large enough to be exact in these tests


def half(name: str, period: float = 1.0, demand: float = 1.0) -> CircleJob:
    """Communicates the first half of every iteration."""
    return CircleJob(name, period, ((0.0, period / 2, demand),))


# --- unified circle -------------------------------------------------------------------

def test_unified_period_is_the_lcm_of_quantised_periods() -> None:
    assert cassini.unified_period([1.0, 1.5], 0.5, 100) == pytest.approx(3.0)
    assert cassini.unified_period([0.7, 1.1], 0.1, 100) == pytest.approx(7.7)
    assert cassini.unified_period([0.98, 1.52], 0.5, 100) == pytest.approx(3.0)  # 2 and 3 quanta


def test_unified_period_cap_keeps_whole_longest_iterations() -> None:
    # LCM 7.7 s > 3 s: as many whole 1.1 s iterations as fit (2), never less than one.
    assert cassini.unified_period([0.7, 1.1], 0.1, 3.0) == pytest.approx(2.2)
    assert cassini.unified_period([0.7, 1.1], 0.1, 0.5) == pytest.approx(1.1)


@pytest.mark.parametrize("args, field", [(([1.0], 0, 10), "quantum_s"), (([1.0], 0.1, 0), "lcm_cap"),
                                         (([0.0], 0.1, 10), "periods"), (([], 0.1, 10), "period")])
def test_unified_period_rejects_bad_input(args: tuple, field: str) -> None:
    with pytest.raises(UserError, match=field):
        cassini.unified_period(*args)


@pytest.mark.parametrize("arc, field", [((1.0, 0.1, 0.5), "start_s"), ((0.0, 0.0, 0.5), "duration_s"),
                                        ((0.0, 0.5, 1.5), "demand_fraction"), ((0.0, 0.5), "arc")])
def test_circle_job_rejects_bad_arcs(arc: tuple, field: str) -> None:
    with pytest.raises(UserError, match=field):
        CircleJob("j", 1.0, (arc,))


# --- compatibility and rotation search ------------------------------------------------

def test_compatibility_of_two_aligned_half_jobs_is_one_half() -> None:
    # Both send at full rate in [0, 0.5): excess 1 for half the circle.
    assert cassini.compatibility([half("a"), half("b")], {}, Q, CAP) == pytest.approx(0.5)
    assert cassini.compatibility([half("a"), half("b")], {"b": 0.5}, Q, CAP) == pytest.approx(1.0)
    assert cassini.compatibility([half("a"), half("b")], {"b": 0.25}, Q, CAP) == pytest.approx(0.75)


def test_demands_that_fit_together_are_fully_compatible() -> None:
    assert cassini.compatibility([half("a", demand=0.5), half("b", demand=0.5)], {}, Q, CAP) == 1.0


def test_overload_is_clipped_at_zero() -> None:
    full = [CircleJob(n, 1.0, ((0.0, 1.0, 1.0),)) for n in "abc"]  # raw 1 - 2 = -1
    assert cassini.compatibility(full, {}, Q, CAP) == 0.0
    assert cassini.link_rotations(full, Q, CAP)[0] == 0.0


def test_wrapping_arc_counts_on_both_ends_of_the_circle() -> None:
    wrap = CircleJob("w", 1.0, ((0.75, 0.5, 1.0),))  # [0.75, 1) and [0, 0.25)
    assert cassini.compatibility([wrap, half("a")], {}, Q, CAP) == pytest.approx(0.75)
    assert cassini.compatibility([wrap, half("a")], {"a": 0.25}, Q, CAP) == pytest.approx(1.0)


def test_two_complementary_jobs_get_shifts_that_remove_overlap() -> None:
    a, b = half("a"), half("b")
    score, rot = cassini.link_rotations([a, b], Q, CAP)
    assert score == pytest.approx(1.0)
    assert rot == {"a": 0.0, "b": pytest.approx(0.5)}
    shifts = cassini.job_shifts({"s1-s2": [a, b]}, Q, CAP)
    assert shifts == {"a": 0.0, "b": pytest.approx(0.5)}
    assert cassini.shift_overlap(a, 0.0, b, 0.0, 20.0) == pytest.approx(10.0, rel=0.01)
    assert cassini.shift_overlap(a, shifts["a"], b, shifts["b"], 20.0) == 0.0


def test_complementary_jobs_with_different_periods_interleave() -> None:
    # a: period 1, sends half; b: period 2, sends [0, 0.5) and [1, 1.5). Unified circle: 2 s.
    a = half("a")
    b = CircleJob("b", 2.0, ((0.0, 0.5, 1.0), (1.0, 0.5, 1.0)))
    shifts = cassini.job_shifts({"l": [a, b]}, Q, CAP)
    assert cassini.compatibility([a, b], shifts, Q, CAP) == pytest.approx(1.0)
    assert cassini.shift_overlap(a, shifts["a"], b, shifts["b"], 40.0) == 0.0


def test_four_quarter_jobs_tile_the_link_through_the_heuristic_search() -> None:
    # 20 rotations per job -> 20^3 = 8000 combinations > max_exhaustive: greedy + coordinate ascent.
    jobs = [CircleJob(n, 1.0, ((0.0, 0.25, 1.0),)) for n in "abcd"]
    score, rot = cassini.link_rotations(jobs, 0.05, CAP)
    assert score == pytest.approx(1.0)
    assert sorted(round(r, 6) for r in rot.values()) == [0.0, 0.25, 0.5, 0.75]


def test_exhaustive_and_heuristic_search_agree_on_a_small_case() -> None:
    jobs = [CircleJob("a", 1.0, ((0.0, 0.4, 1.0),)), CircleJob("b", 0.5, ((0.0, 0.2, 0.8),)),
            CircleJob("c", 1.0, ((0.1, 0.3, 0.6),))]
    exact, _ = cassini.link_rotations(jobs, 0.05, CAP)
    greedy, _ = cassini.link_rotations(jobs, 0.05, CAP, max_exhaustive=1)
    assert greedy <= exact + 1e-12
    assert greedy >= exact - 0.05


def test_link_rotations_rejects_a_job_listed_twice() -> None:
    with pytest.raises(UserError, match="twice"):
        cassini.link_rotations([half("a"), half("a")], Q, CAP)


# --- affinity graph BFS ---------------------------------------------------------------

def test_bfs_formula_on_a_chain_of_links() -> None:
    # A -l1- B -l2- C -l3- D. t_A = 0; t_B = (0 - 0 + 0.3) mod 1 = 0.3;
    # t_C = (0.3 - 0.1 + 0.7) mod 0.8 = 0.1; t_D = (0.1 - 0.2 + 0.05) mod 0.5 = 0.45.
    rotations = {"l1": {"A": 0.0, "B": 0.3}, "l2": {"B": 0.1, "C": 0.7}, "l3": {"C": 0.2, "D": 0.05}}
    periods = {"A": 1.0, "B": 1.0, "C": 0.8, "D": 0.5}
    shifts = cassini.bfs_shifts(rotations, periods)
    assert shifts == pytest.approx({"A": 0.0, "B": 0.3, "C": 0.1, "D": 0.45})


def test_bfs_handles_disconnected_parts_and_keeps_the_first_shift_on_a_loop() -> None:
    rotations = {"l1": {"A": 0.0, "B": 0.2}, "l2": {"B": 0.1, "C": 0.5}, "l3": {"C": 0.0, "A": 0.9},
                 "m1": {"X": 0.4, "Y": 0.6}}
    periods = {"A": 1.0, "B": 1.0, "C": 1.0, "X": 2.0, "Y": 2.0}
    shifts = cassini.bfs_shifts(rotations, periods)
    # Breadth first from A (its links l1, l3): B = 0.2 via l1, C = (0 - 0.9 + 0.0) mod 1 = 0.1 via
    # l3; l2 closes the loop and changes nothing (B-C through l2 would have given 0.6).
    assert shifts == pytest.approx({"A": 0.0, "B": 0.2, "C": 0.1, "X": 0.0, "Y": 0.2})


def test_bfs_reaches_a_link_keyed_none_like_any_other() -> None:
    """Links are any hashable key, None included: it is visited once, as every other link."""
    rotations = {"l1": {"A": 0.0, "B": 0.3}, None: {"B": 0.1, "C": 0.5}}
    shifts = cassini.bfs_shifts(rotations, {"A": 1.0, "B": 1.0, "C": 1.0})
    # A = 0; B = 0 - 0 + 0.3 via l1; C = (0.3 - 0.1 + 0.5) mod 1 = 0.7 via the link None
    assert shifts == pytest.approx({"A": 0.0, "B": 0.3, "C": 0.7})


def test_job_shifts_on_a_chain_keep_every_links_best_score() -> None:
    # a and c each meet b on a different link; the tree lets both links reach their optimum
    # (c fits b's gaps only at rotation 0.7: a 0.05 s quantum has it on the grid).
    a, b = half("a"), CircleJob("b", 1.0, ((0.2, 0.5, 1.0),))
    c = CircleJob("c", 2.0, ((0.0, 0.5, 1.0), (1.1, 0.3, 1.0)))
    links = {"l1": [a, b], "l2": [b, c]}
    shifts = cassini.job_shifts(links, 0.05, CAP)
    for jobs in links.values():
        best, _ = cassini.link_rotations(jobs, 0.05, CAP)
        assert best == pytest.approx(1.0)
        assert cassini.compatibility(jobs, {j.name: shifts[j.name] for j in jobs}, 0.05, CAP) == pytest.approx(best)


def test_job_shifts_give_zero_to_jobs_alone_on_their_links_and_check_periods() -> None:
    assert cassini.job_shifts({"l1": [half("a")], "l2": [half("b"), half("c")]}, Q, CAP) == \
        {"a": 0.0, "b": 0.0, "c": pytest.approx(0.5)}
    with pytest.raises(UserError, match="period"):
        cassini.job_shifts({"l1": [half("a", 1.0)], "l2": [half("a", 2.0)]}, Q, CAP)


def test_job_shifts_are_deterministic() -> None:
    links = {f"l{i}": [half(f"j{i}", 1.0 + 0.1 * i), half(f"j{i + 1}", 1.1 + 0.1 * i)] for i in range(4)}
    assert cassini.job_shifts(links, 0.05, 20.0) == cassini.job_shifts(links, 0.05, 20.0)


# --- properties -----------------------------------------------------------------------

PERIODS = st.sampled_from([0.2, 0.4, 0.5, 0.6, 1.0])


@st.composite
def circle_jobs(draw, name: str) -> CircleJob:
    period = draw(PERIODS)
    arcs = []
    for _ in range(draw(st.integers(1, 2))):
        start = draw(st.integers(0, 9)) * period / 10
        duration = draw(st.integers(1, 10)) * period / 10
        arcs.append((start, duration, draw(st.sampled_from([0.25, 0.5, 1.0]))))
    return CircleJob(name, period, tuple(arcs))


@st.composite
def links(draw):
    n = draw(st.integers(1, 3))
    jobs = [draw(circle_jobs(f"j{i}")) for i in range(n)]
    rotations = {j.name: draw(st.integers(0, 50)) * 0.1 for j in jobs}
    return jobs, rotations


@settings(max_examples=60)
@given(links(), st.integers(0, 60))
def test_score_in_unit_interval_and_invariant_under_a_common_shift(case, shift: int) -> None:
    jobs, rot = case
    score = cassini.compatibility(jobs, rot, 0.1, CAP)
    assert 0.0 <= score <= 1.0
    shifted = {n: r + shift * 0.1 for n, r in rot.items()}
    assert cassini.compatibility(jobs, shifted, 0.1, CAP) == pytest.approx(score, abs=1e-9)


@settings(max_examples=60)
@given(links())
def test_score_ignores_job_order_and_whole_period_rotations(case) -> None:
    jobs, rot = case
    score = cassini.compatibility(jobs, rot, 0.1, CAP)
    assert cassini.compatibility(jobs[::-1], rot, 0.1, CAP) == pytest.approx(score, abs=1e-9)
    turned = {j.name: rot[j.name] + 3 * j.period_s for j in jobs}
    assert cassini.compatibility(jobs, turned, 0.1, CAP) == pytest.approx(score, abs=1e-9)


@settings(max_examples=40)
@given(links())
def test_search_is_never_worse_than_no_shift_and_reports_its_own_score(case) -> None:
    jobs, _ = case
    best, rot = cassini.link_rotations(jobs, 0.1, CAP)
    assert best >= cassini.compatibility(jobs, {}, 0.1, CAP) - 1e-9
    assert cassini.compatibility(jobs, rot, 0.1, CAP) == pytest.approx(best, abs=1e-9)
    assert rot[jobs[0].name] == 0.0
    assert all(0 <= rot[j.name] < j.period_s for j in jobs)


# --- every refusal says what is wrong, in full -------------------------------------------

@pytest.mark.parametrize("call, message", [
    (lambda: CircleJob("", 1.0, ()), "circle job name must be a non-empty string"),
    (lambda: CircleJob("j", 0, ()), "job 'j': period_s must be > 0, got 0"),
    (lambda: CircleJob("j", 1.0, ((0.0, 0.5),)),
     "job 'j': an arc is (start_s, duration_s, demand_fraction), got (0.0, 0.5)"),
    (lambda: CircleJob("j", 1.0, ((1.0, 0.1, 0.5),)), "job 'j': arc start_s must be in [0, period_s), got 1.0"),
    (lambda: CircleJob("j", 1.0, ((0.0, 0.0, 0.5),)), "job 'j': arc duration_s must be in (0, period_s], got 0.0"),
    (lambda: CircleJob("j", 1.0, ((0.0, 0.5, 1.5),)), "job 'j': arc demand_fraction must be in (0, 1], got 1.5"),
    (lambda: CircleJob("j", 1.0, ((0.0, 0.5, 0.0),)), "job 'j': arc demand_fraction must be in (0, 1], got 0.0"),
    (lambda: cassini.unified_period([1.0], 0, 10), "quantum_s must be > 0, got 0"),
    (lambda: cassini.unified_period([1.0], 0.1, 0), "lcm_cap must be > 0, got 0"),
    (lambda: cassini.unified_period([], 0.1, 10), "need at least one period"),
    (lambda: cassini.unified_period([1.0, 0.0], 0.1, 10), "periods must be > 0, got 0.0"),
    (lambda: cassini.link_rotations([], Q, CAP), "need at least one job on the link"),
    (lambda: cassini.link_rotations([half("a"), half("a")], Q, CAP),
     "a job appears twice on one link (merge its arcs): ['a', 'a']"),
    (lambda: cassini.compatibility([half("a")], {"b": 0.1, "c": 0.0}, Q, CAP),
     "rotations given for jobs not on the link: ['b', 'c']"),
    (lambda: cassini.link_rotations([half("a")], Q, CAP, angles=0), "angles must be >= 1, got 0"),
    (lambda: cassini.link_rotations([half("a")], Q, CAP, sweeps=-1), "sweeps must be >= 0, got -1"),
    (lambda: cassini.bfs_shifts({"l": {"x": 0.0}}, {}), "job 'x' on link 'l' has no period"),
    (lambda: cassini.job_shifts({"l1": [half("a", 1.0)], "l2": [half("a", 2.0)]}, Q, CAP),
     "job 'a' has period 1.0 on one link and 2.0 on link 'l2'"),
    (lambda: cassini.shared_link_shifts({"l": [half("a"), half("b")]}, quantum_fraction=0),
     "quantum_fraction must be in (0, 1], got 0"),
    (lambda: cassini.shared_link_shifts({"l": [half("a"), half("b")]}, lcm_periods=0.5),
     "lcm_periods must be >= 1, got 0.5"),
])
def test_refusals_name_the_value_and_the_rule(call, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UserError) as exc:
        call()
    assert str(exc.value) == message


def test_job_shifts_search_with_link_rotations_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    """job_shifts' own defaults are link_rotations' (72 angles, 4,096 combinations, 3 sweeps)."""
    import inspect

    defaults = {k: p.default for k, p in inspect.signature(cassini.link_rotations).parameters.items()
                if k in ("angles", "max_exhaustive", "sweeps")}
    seen: list[tuple] = []
    original = cassini.link_rotations

    def spy(jobs, quantum_s, lcm_cap, angles, max_exhaustive, sweeps):  # type: ignore[no-untyped-def]
        seen.append((angles, max_exhaustive, sweeps))
        return original(jobs, quantum_s, lcm_cap, angles, max_exhaustive, sweeps)

    monkeypatch.setattr(cassini, "link_rotations", spy)
    cassini.job_shifts({"l": [half("a"), half("b")]}, Q, CAP)
    assert seen == [(defaults["angles"], defaults["max_exhaustive"], defaults["sweeps"])] == [(72, 4096, 3)]


@settings(max_examples=60)
@given(links(), st.integers(0, 3))
def test_greedy_search_keeps_the_first_job_in_place(case, sweeps: int) -> None:
    """Greedy placement and coordinate ascent move every job but the first (rotating all together changes
    nothing), and report the score of the rotations they return."""
    jobs, _ = case
    best, rot = cassini.link_rotations(jobs, 0.1, CAP, max_exhaustive=0, sweeps=sweeps)
    assert rot[jobs[0].name] == 0.0
    assert cassini.compatibility(jobs, rot, 0.1, CAP) == pytest.approx(best, abs=1e-9)


def test_coordinate_ascent_never_moves_the_first_job() -> None:
    """A link where moving the first job would raise the score: the sweeps move only the others."""
    jobs = [CircleJob("j0", 0.4, ((0.12, 0.36, 0.25), (0.24, 0.32, 0.5))),
            CircleJob("j1", 0.6, ((0.54, 0.24, 0.25),)), CircleJob("j2", 0.5, ((0.25, 0.35, 0.5),))]
    best, rot = cassini.link_rotations(jobs, 0.1, CAP, max_exhaustive=0)
    assert rot["j0"] == 0.0
    assert cassini.compatibility(jobs, rot, 0.1, CAP) == pytest.approx(best, abs=1e-9)


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


# found by search: 17 x 241 = 4,097 combinations, one more than the default exhaustive limit; greedy
# placement and the exhaustive search tie on the score but place c differently
OVER_LIMIT = [arcs_job("a", 17.0, (1.5, 4.2, 0.5)), arcs_job("b", 17.0, (4.3, 2.8, 0.5), (9.8, 2.3, 0.7)),
              arcs_job("c", 241.0, (193.6, 126.1, 1.0), (228.7, 84.2, 0.7))]
# found by search: each of the first four sweeps of coordinate ascent improves on the one before
SLOW_ASCENT = [arcs_job("j0", 8.0, (2.4, 0.56, 0.5), (3.76, 0.75, 0.5)), arcs_job("j1", 16.0, (1.97, 4.0, 0.5)),
               arcs_job("j2", 16.0, (7.2, 8.7, 0.5), (10.8, 1.76, 0.7)), arcs_job("j3", 10.0, (7.0, 5.2, 0.7)),
               arcs_job("j4", 10.0, (5.67, 4.25, 0.5)), arcs_job("j5", 8.0, (3.5, 0.94, 0.5), (6.6, 0.98, 0.5)),
               arcs_job("j6", 10.0, (3.9, 3.1, 1.0), (3.26, 0.95, 1.0))]


def test_the_default_search_is_exhaustive_up_to_4096_combinations_with_three_sweeps_beyond() -> None:
    """The documented defaults: 4,097 combinations are searched greedily, and greedy placement is followed
    by at most three sweeps (a fourth would still improve SLOW_ASCENT)."""
    greedy = cassini.link_rotations(OVER_LIMIT, 1.0, 1e6, angles=241)
    exhaustive = cassini.link_rotations(OVER_LIMIT, 1.0, 1e6, angles=241, max_exhaustive=4097)
    assert greedy[0] == exhaustive[0]
    assert (greedy[1]["c"], exhaustive[1]["c"]) == (16.0, 1.0)
    assert greedy == cassini.link_rotations(OVER_LIMIT, 1.0, 1e6, angles=241, max_exhaustive=4096)
    scores = [cassini.link_rotations(SLOW_ASCENT, 1.0, 1e6, max_exhaustive=0, sweeps=s)[0] for s in range(5)]
    assert scores == sorted(scores) and len(set(scores)) == 5
    assert cassini.link_rotations(SLOW_ASCENT, 1.0, 1e6, max_exhaustive=0)[0] == scores[3]


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


# --- the search against the implementation it replaced -----------------------------------
# The rotation search of issue 26, kept as the reference: it scored every candidate rotation element by
# element. The current search ranks candidates by sums over runs and scores only the near-best ones
# (leveller.core.cassini._rough); its results must be these, ties included.


def oracle_profile(job: CircleJob, quantum_s: float) -> np.ndarray:
    q = max(1, round(job.period_s / quantum_s))
    scale = q / job.period_s
    prof = np.zeros(q)
    edges = np.arange(q + 1, dtype=float)
    for start, duration, demand in job.arcs:
        a = start * scale
        b = a + duration * scale
        for lo, hi in ((a, min(b, q)), (0.0, b - q)):
            if hi > lo:
                prof += demand * np.clip(np.minimum(edges[1:], hi) - np.maximum(edges[:-1], lo), 0.0, None)
    return prof


def oracle_bins(periods: list[float], quantum_s: float, lcm_cap: float) -> int:
    q = [max(1, round(p / quantum_s)) for p in periods]
    full = math.lcm(*q)
    cap = int(math.floor(lcm_cap / quantum_s + 1e-9))
    return full if full <= cap else max(q) * max(1, cap // max(q))


def oracle_best_rotation(base: np.ndarray, curve: np.ndarray, candidates: np.ndarray,
                         max_cells: int = 1 << 20) -> tuple[float, int]:
    bins = len(base)
    rows = max(1, max_cells // bins)
    best_val, best_r = -math.inf, 0
    col = np.arange(bins)
    for lo in range(0, len(candidates), rows):
        rs = candidates[lo:lo + rows]
        shifted = curve[(col[None, :] - rs[:, None]) % bins]
        vals = 1.0 - np.maximum(base[None, :] + shifted - 1.0, 0.0).mean(axis=1)
        i = int(vals.argmax())
        if vals[i] > best_val:
            best_val, best_r = float(vals[i]), int(rs[i])
    return best_val, best_r


def oracle_link_rotations(jobs: list[CircleJob], quantum_s: float, lcm_cap: float, angles: int = 72,
                          max_exhaustive: int = 4096, sweeps: int = 3) -> tuple[float, dict[str, float]]:
    bins = oracle_bins([j.period_s for j in jobs], quantum_s, lcm_cap)
    curves = []
    for j in jobs:
        prof = oracle_profile(j, quantum_s)
        curves.append(np.tile(prof, -(-bins // len(prof)))[:bins])
    grids = []
    for job in jobs:
        q = max(1, round(job.period_s / quantum_s))
        grids.append(np.arange(0, q, -(-q // angles)))
    n = len(jobs)
    rot = [0] * n
    if n == 1:
        score = 1.0 - float(np.maximum(curves[0] - 1.0, 0.0).mean())
    elif math.prod(len(g) for g in grids[1:]) <= max_exhaustive:
        score = -math.inf
        for combo in itertools.product(*(g.tolist() for g in grids[1:-1])):
            base = curves[0].copy()
            for c, r in zip(curves[1:-1], combo):
                base += np.roll(c, r)
            val, last = oracle_best_rotation(base, curves[-1], grids[-1])
            if val > score:
                score, rot = val, [0, *combo, last]
    else:
        total = curves[0].copy()
        for i in range(1, n):
            _, rot[i] = oracle_best_rotation(total, curves[i], grids[i])
            total += np.roll(curves[i], rot[i])
        score = 1.0 - float(np.maximum(total - 1.0, 0.0).mean())
        for _ in range(sweeps):
            improved = False
            for i in range(1, n):
                base = total - np.roll(curves[i], rot[i])
                val, r = oracle_best_rotation(base, curves[i], grids[i])
                if val > score + 1e-12:
                    rot[i], score, improved = r, val, True
                total = base + np.roll(curves[i], rot[i])
            if not improved:
                break
    return min(1.0, max(0.0, score)), {j.name: r * quantum_s for j, r in zip(jobs, rot)}


DEMANDS = st.one_of(st.sampled_from([0.125, 0.25, 0.5, 0.75, 1.0]), st.floats(0.01, 1.0))


@st.composite
def random_circle(draw: st.DrawFn, name: str, quantum: float) -> CircleJob:
    """A circle of 1..90 quanta (periods off the quantum grid too) with 1..3 arcs, some wrapping."""
    period = draw(st.integers(1, 90)) * quantum * draw(st.sampled_from([1.0, 1.0, 0.97, 1.013]))
    arcs = []
    for _ in range(draw(st.integers(1, 3))):
        start = draw(st.floats(0.0, 0.999)) * period
        duration = draw(st.floats(0.01, 1.0)) * period
        arcs.append((start, duration, draw(DEMANDS)))
    return CircleJob(name, period, tuple(arcs))


@st.composite
def random_link(draw: st.DrawFn) -> tuple[list[CircleJob], float, float, dict[str, int]]:
    """2..6 circles, a cap that sometimes cuts the unified circle, and search settings."""
    quantum = draw(st.sampled_from([1.0, 0.1, 0.03]))
    jobs = [draw(random_circle(f"j{i}", quantum)) for i in range(draw(st.integers(2, 6)))]
    longest = max(j.period_s for j in jobs)
    cap = longest * draw(st.sampled_from([1.0, 1.5, 3.0, 20.0, 100.0]))
    settings_ = {"angles": draw(st.sampled_from([72, 72, 7, 1, 200])),
                 "max_exhaustive": draw(st.sampled_from([4096, 0, 64])), "sweeps": draw(st.integers(0, 3))}
    return jobs, quantum, cap, settings_


@settings(max_examples=150)
@given(random_link())
def test_search_returns_what_the_reference_search_returns(case) -> None:  # type: ignore[no-untyped-def]
    """Score and rotations equal the replaced implementation's, bit for bit, on random circles."""
    jobs, quantum, cap, settings_ = case
    assert cassini.link_rotations(jobs, quantum, cap, **settings_) == \
        oracle_link_rotations(jobs, quantum, cap, **settings_)


@st.composite
def rotation_case(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A base over the circle and a tiled profile: values on a coarse grid make many exact ties."""
    q = draw(st.integers(1, 40))
    bins = q * draw(st.integers(1, 6)) + draw(st.integers(0, q - 1))
    grid = draw(st.booleans())
    values = st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0]) if grid else st.floats(0.0, 1.0)
    base = np.array(draw(st.lists(values, min_size=bins, max_size=bins))) * draw(st.sampled_from([1.0, 2.0, 0.3]))
    prof = np.array(draw(st.lists(values, min_size=q, max_size=q)))
    step = draw(st.integers(1, q))
    return base, prof, np.arange(0, q, step)


@settings(max_examples=200)
@given(rotation_case())
def test_best_rotation_is_the_first_best_reference_score(case) -> None:  # type: ignore[no-untyped-def]
    """The first candidate with the highest element-wise score, and that score, over cut tiles and ties."""
    base, prof, candidates = case
    curve = np.tile(prof, -(-len(base) // len(prof)))[:len(base)]
    assert cassini._best_rotation(base, curve, prof, candidates) == oracle_best_rotation(base, curve, candidates)
    # blocks of one row give the same reference values as blocks of many
    assert oracle_best_rotation(base, curve, candidates, max_cells=1) == oracle_best_rotation(base, curve, candidates)


def test_near_ties_are_settled_by_the_reference_scores() -> None:
    """Two rotations whose excess differs by less than the rough sums can resolve: the reference decides."""
    base = np.array([1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0])
    prof = np.array([1e-12, 0.0, 0.0, 0.0])
    curve = np.tile(prof, 2)
    # rotation 0 puts the tiny demand on both full bins (excess 2e-12), rotations 1-3 on empty ones
    assert cassini._best_rotation(base, curve, prof, np.arange(4)) == (1.0, 1)
    base[1] = base[5] = 1.0 + 1e-13  # now rotation 1 overflows too, by a hair more than rotation 0
    assert cassini._best_rotation(base, curve, prof, np.arange(2)) == oracle_best_rotation(base, curve, np.arange(2))
    assert cassini._best_rotation(base, curve, prof, np.arange(2))[1] == 0


def test_rounding_decides_between_equal_rotations_as_the_reference_does() -> None:
    """Rotations 4 and 6 have the same excess on paper; the element-wise sums round them apart one way, the
    rough sums the other way. The reference scores, computed for both, decide."""
    base = np.array([0.3, 0.3, 1.1, 0.3, 0.7, 0.9, 0.3, 0.3, 0.9, 0.9, 0.9, 0.9, 0.1, 0.7, 0.7, 0.7, 0.2, 1.1,
                     1.1, 1.1, 0.9, 0.7, 0.3, 0.3, 0.3, 0.3, 0.1, 1.1, 1.1, 1.1, 0.2])
    prof = np.array([0.3, 0.6, 0.3, 0.6, 0.3, 0.6, 0.6])
    curve = np.tile(prof, 5)[:31]
    excess, _, _ = cassini._rough(base, prof, np.arange(7))
    assert excess[6] < excess[4]
    assert cassini._best_rotation(base, curve, prof, np.arange(7)) == oracle_best_rotation(base, curve, np.arange(7))
    assert cassini._best_rotation(base, curve, prof, np.arange(7))[1] == 4


def big_arcs(n: int, period: float) -> tuple[tuple[float, float, float], ...]:
    """``n`` arcs of 0.7 period each, demands 0.5 up to 1: a link loaded several times over."""
    return tuple((period * i / n, 0.7 * period, 0.5 + 0.5 * i / n) for i in range(n))


@pytest.mark.parametrize("jobs, quantum, cap", [
    # two identical jobs of 5 arcs on a 1,000-bin circle: the rounding bound per bin exceeds NEAR (1e-9)
    ([CircleJob("a", 1.0, big_arcs(5, 1.0)), CircleJob("b", 1.0, big_arcs(5, 1.0))], 0.001, 1.0),
    # a short job on a long circle (a tile of 12 bins, 593 tiles): the bound's tile count matters
    ([CircleJob("a", 7.3, big_arcs(20, 7.3)), CircleJob("c", 7.3, big_arcs(20, 7.3)),
      CircleJob("b", 0.0123, big_arcs(5, 0.0123))], 0.001, 100.0),
])
def test_heavily_loaded_links_keep_every_near_best_rotation(jobs: list[CircleJob], quantum: float,
                                                           cap: float) -> None:
    """Where the rough sums' rounding bound is large, the margin grows with it: the search still returns
    the reference's rotations (a margin of NEAR alone, or a bound that undercounts, loses the best)."""
    got = cassini.link_rotations(jobs, quantum, cap)
    assert got == oracle_link_rotations(jobs, quantum, cap)
    assert got[1][jobs[-1].name] > 0  # the best is not rotation 0


def test_rough_sums_count_every_bin_once() -> None:
    """Excess per rotation over whole and cut tiles, against the sum of the rolled curve's excess."""
    rng = np.random.default_rng(5)
    for q, bins in ((5, 17), (4, 8), (7, 7), (1, 3), (6, 11)):
        base = rng.uniform(0.0, 1.5, bins)
        prof = rng.choice([0.0, 0.3, 0.8], q)
        curve = np.tile(prof, -(-bins // q))[:bins]
        candidates = np.arange(q)
        excess, over, err = cassini._rough(base, prof, candidates)
        want = np.array([np.maximum(base + np.roll(curve, r) - 1.0, 0.0).sum() for r in candidates])
        assert excess == pytest.approx(want, abs=1e-12)
        assert (over == (want > 0)).all()
        assert 0 < err < 1e-9
    # runs longer than two bins go through the folded prefix sums: rotation 3 fits exactly, the others not
    prof = np.array([1.0, 1.0, 1.0, 0.0, 0.0, 0.0])
    base = np.tile(prof, 2)
    excess, over, _ = cassini._rough(base, prof, np.arange(6))
    assert excess.tolist() == [6.0, 4.0, 2.0, 0.0, 2.0, 4.0]
    assert over.tolist() == [True, True, True, False, True, True]
    # and over a cut tile, where the tail's own prefix sums count: only rotation 0 leaves a bin without excess
    cut = ((15, np.tile(prof, 3)[:15]), (16, np.r_[np.zeros(12), np.ones(4)]), (9, np.r_[np.zeros(6), 1.0, 0, 0]))
    for bins, base in cut:
        curve = np.tile(prof, 3)[:bins]
        excess, over, _ = cassini._rough(base, prof, np.arange(6))
        want = np.array([np.maximum(base + np.roll(curve, r) - 1.0, 0.0).sum() for r in range(6)])
        assert excess == pytest.approx(want, abs=1e-12)
        assert over.tolist() == (want > 0).tolist()


def test_a_rotation_without_excess_scores_one_without_the_reference_scores(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rotations that fit exactly are known to score 1: no element-wise scoring is needed."""
    def refuse(*args):  # type: ignore[no-untyped-def]
        raise AssertionError("reference scores computed")

    monkeypatch.setattr(cassini, "_scores", refuse)
    base = np.array([1.0, 0.0, 0.0, 1.0, 0.0, 0.0])
    prof = np.array([1.0, 0.0, 0.0])
    assert cassini._best_rotation(base, np.tile(prof, 2), prof, np.arange(3)) == (1.0, 1)


# --- the cache of searched links ----------------------------------------------------------

def test_job_shifts_search_a_cached_link_once(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = half("a"), CircleJob("b", 1.0, ((0.2, 0.5, 1.0),))
    c = CircleJob("c", 2.0, ((0.0, 0.5, 1.0), (1.1, 0.3, 1.0)))
    links = {"l1": [a, b], "l2": [b, c], "l3": [a, b]}
    want = cassini.job_shifts(links, 0.05, CAP)
    calls: list[tuple[str, ...]] = []
    original = cassini.link_rotations

    def spy(jobs, *args):  # type: ignore[no-untyped-def]
        calls.append(tuple(j.name for j in jobs))
        return original(jobs, *args)

    monkeypatch.setattr(cassini, "link_rotations", spy)
    cache: dict = {}
    assert cassini.job_shifts(links, 0.05, CAP, cache=cache) == want
    assert calls == [("a", "b"), ("b", "c")]  # l3 holds what l1 holds
    assert cassini.job_shifts(links, 0.05, CAP, cache=cache) == want
    assert calls == [("a", "b"), ("b", "c")]
    calls.clear()
    want = cassini.shared_link_shifts({"l": [a, b]})  # its own grid: quantum 0.01 s, circle capped at 20 s
    assert cassini.shared_link_shifts({"l": [a, b]}, cache=cache) == want
    assert cassini.shared_link_shifts({"l": [a, b], "m": [a, b]}, cache=cache) == want
    assert calls == [("a", "b"), ("a", "b")]  # the one without the cache, then the first with it


def test_the_cache_keys_on_every_search_setting() -> None:
    """The same link under other settings is searched again: TRAP and X73 give other results then."""
    cache: dict = {}
    assert cassini.job_shifts({"L": TRAP}, 1.0, 100.0, cache=cache) == {"a": 0.0, "b": 6.0, "c": 1.0}
    assert cassini.job_shifts({"L": TRAP}, 1.0, 100.0, max_exhaustive=63, cache=cache) == \
        {"a": 0.0, "b": 1.0, "c": 5.0}
    assert cassini.job_shifts({"L": TRAP}, 1.0, 100.0, angles=1, cache=cache) == {"a": 0.0, "b": 0.0, "c": 0.0}
    assert cassini.job_shifts({"L": [X73, Y73]}, 0.01, 100.0, cache=cache) == {"x": 0.0, "y": 0.36}
    assert cassini.job_shifts({"L": [X73, Y73]}, 0.01, 100.0, angles=73, cache=cache) == {"x": 0.0, "y": 0.37}
    assert cassini.job_shifts({"L": [X73, Y73]}, 0.01, 50.0, angles=73, cache=cache) == {"x": 0.0, "y": 0.37}
    assert cassini.job_shifts({"L": SWEPT}, 1.0, 1e6, max_exhaustive=0, sweeps=0, cache=cache) != \
        cassini.job_shifts({"L": SWEPT}, 1.0, 1e6, max_exhaustive=0, sweeps=2, cache=cache)
    assert len(cache) == 8
    assert cassini.job_shifts({"L": TRAP}, 2.0, 100.0, cache=cache) == {"a": 0.0, "b": 2.0, "c": 6.0}
    # periods of 3 and 4 quanta: the whole unified circle (12) has no fit, one longest period (4) has
    three, four = CircleJob("a", 3.0, ((0.0, 1.0, 1.0),)), CircleJob("b", 4.0, ((0.0, 2.0, 1.0),))
    assert cassini.job_shifts({"L": [three, four]}, 1.0, 12.0, cache=cache) == {"a": 0.0, "b": 0.0}
    assert cassini.job_shifts({"L": [three, four]}, 1.0, 4.0, cache=cache) == {"a": 0.0, "b": 1.0}


def test_a_cached_result_is_not_changed_by_the_caller() -> None:
    cache: dict = {}
    first = cassini.job_shifts({"L": [HALF_A, HALF_B]}, Q, CAP, cache=cache)
    first["b"] = 7.0
    assert cassini.job_shifts({"L": [HALF_A, HALF_B]}, Q, CAP, cache=cache) == {"a": 0.0, "b": pytest.approx(0.5)}
