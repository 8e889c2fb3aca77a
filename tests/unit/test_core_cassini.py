"""CASSINI baseline (leveller.core.cassini): unified circle, compatibility, rotations, affinity BFS."""

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


@settings(max_examples=60, deadline=None)
@given(links(), st.integers(0, 60))
def test_score_in_unit_interval_and_invariant_under_a_common_shift(case, shift: int) -> None:
    jobs, rot = case
    score = cassini.compatibility(jobs, rot, 0.1, CAP)
    assert 0.0 <= score <= 1.0
    shifted = {n: r + shift * 0.1 for n, r in rot.items()}
    assert cassini.compatibility(jobs, shifted, 0.1, CAP) == pytest.approx(score, abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(links())
def test_score_ignores_job_order_and_whole_period_rotations(case) -> None:
    jobs, rot = case
    score = cassini.compatibility(jobs, rot, 0.1, CAP)
    assert cassini.compatibility(jobs[::-1], rot, 0.1, CAP) == pytest.approx(score, abs=1e-9)
    turned = {j.name: rot[j.name] + 3 * j.period_s for j in jobs}
    assert cassini.compatibility(jobs, turned, 0.1, CAP) == pytest.approx(score, abs=1e-9)


@settings(max_examples=40, deadline=None)
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


@settings(max_examples=60, deadline=None)
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
