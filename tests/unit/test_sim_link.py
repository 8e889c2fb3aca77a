"""Single-link fluid simulator against the paper's worked examples (digest literals)."""

from fractions import Fraction
from fractions import Fraction as F
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveller.core.bound import cycle_bound
from leveller.core.policies import make_policy
from leveller.core.rate import Sample, progress_rate, trim_history
from leveller.model.shape import JobShape
from leveller.sim.link import event_bound, simulate_link
from leveller.sim.presets import PRESETS

TOL = 0.005


def rates(preset: str, policy: str, tau: int = 0, cycles: int = 1500) -> list[float]:
    return [float(r) for r in simulate_link(PRESETS[preset], make_policy(policy, tau), cycles=cycles).rates]


@pytest.mark.parametrize("policy,expected", [
    ("fair", [0.75, 0.75]),
    ("crux", [1.0, 0.75]),
    ("leveller", [0.857, 0.857]),
])
def test_fig3_pair(policy: str, expected: list[float]) -> None:
    assert rates("fig3", policy) == pytest.approx(expected, abs=TOL)


def test_fig3_leveller_with_tau_4() -> None:
    assert rates("fig3", "leveller", tau=4) == pytest.approx([0.857, 0.857], abs=TOL)


def test_fig1_trio() -> None:
    assert rates("fig1-trio", "fair") == pytest.approx([0.5, 0.5, 0.667], abs=TOL)
    assert rates("fig1-trio", "leveller") == pytest.approx([0.6, 0.6, 0.6], abs=TOL)
    crux = rates("fig1-trio", "crux")
    assert crux[1] == pytest.approx(0.0, abs=TOL)  # static priority starves Job 2
    assert min(crux[0], crux[2]) > 0.95


def test_fig3_leveller_rate_at_t36() -> None:
    # Digest: "R is 0.83 at t = 36" (12 ideal iterations of the longest job, 3 units each).
    assert rates("fig3", "leveller", cycles=12) == pytest.approx([0.83, 0.83], abs=TOL)


def kinds_at(res, t: Fraction) -> tuple:
    return tuple(next(s.kind for s in res.segments if s.job == j and s.start <= t < s.end)
                 for j in range(len(res.jobs)))


def repeats_with(res, period: int, start: int = 400) -> bool:
    grid = [Fraction(start) + Fraction(i, 4) for i in range(4 * 56)]
    return all(kinds_at(res, t) == kinds_at(res, t + period) for t in grid)


def test_fig3_settles_into_cycles_of_7_and_28() -> None:
    # Digest: tau = 0 settles at the optimal 7-unit cycle; tau = 4 enters a 28-unit cycle.
    res0 = simulate_link(PRESETS["fig3"], make_policy("leveller", 0), cycles=200, record_until=Fraction(600))
    assert repeats_with(res0, 7)
    res4 = simulate_link(PRESETS["fig3"], make_policy("leveller", 4), cycles=200, record_until=Fraction(600))
    assert repeats_with(res4, 28)
    assert not repeats_with(res4, 7) and not repeats_with(res4, 14)


def test_fair_fig3_timeline_matches_figure1() -> None:
    # Digest Figure 1, fair share: both compute [0,1), share the link [1,3), Job 2 alone [3,4).
    res = simulate_link(PRESETS["fig3"], make_policy("fair"), cycles=5, record_until=Fraction(8))
    job2 = [(s.kind, s.start, s.end) for s in res.segments if s.job == 1]
    assert job2[:3] == [("compute", 0, 1), ("share", 1, 3), ("send", 3, 4)]


def test_leveller_keeps_link_busy_after_t1() -> None:
    res = simulate_link(PRESETS["fig3"], make_policy("leveller"), cycles=5, record_until=Fraction(15))
    busy = sorted((s.start, s.end) for s in res.segments if s.kind == "send")
    t = Fraction(1)
    for start, end in busy:
        assert start <= t, f"link idle at {t}"
        t = max(t, end)
    assert t >= 15


def test_limited_levels_share_the_bottom_level() -> None:
    # One level = no priority: leveller degenerates to fair share.
    jobs = PRESETS["fig1-trio"]
    one = simulate_link(jobs, make_policy("leveller"), cycles=300, levels=1)
    assert [float(r) for r in one.rates] == pytest.approx([0.5, 0.5, 0.667], abs=TOL)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        JobShape(Fraction(0), Fraction(1))
    with pytest.raises(ValueError):
        JobShape(Fraction(1), Fraction(-1))
    with pytest.raises(ValueError):
        simulate_link([], make_policy("fair"))
    with pytest.raises(ValueError):
        simulate_link(PRESETS["fig3"], make_policy("fair"), cycles=0)
    with pytest.raises(ValueError):
        simulate_link(PRESETS["fig3"], make_policy("fair"), levels=0)


def test_timeline_png(tmp_path) -> None:
    from leveller.sim.timeline import COLORS, plot_timelines
    from tests.helpers.pictures import colour_pixels, shares, widest_row_coverage

    # The picture shows each state of each job for as long as it lasts: the area of each colour is the
    # state's share of the time (bars have one height), here with strict priority (waits, no sharing).
    res = simulate_link(PRESETS["fig3"], make_policy("leveller"), cycles=10, record_until=Fraction(15))
    out = plot_timelines([("leveller", res)], tmp_path / "t.png", Fraction(15))
    time_in = {k: 0.0 for k in COLORS}
    for seg in res.segments:
        if seg.start < 15:
            time_in[seg.kind] += float(min(seg.end, Fraction(15)) - seg.start)
    assert time_in["wait"] > 0 and time_in["share"] == 0
    drawn = shares(colour_pixels(out, COLORS))
    for kind, share in shares(time_in).items():
        assert drawn[kind] == pytest.approx(share, abs=0.02), (kind, drawn, time_in)
    assert widest_row_coverage(out, COLORS) > 0.95  # a job is always in some state: no gaps in its row


job_sets = st.lists(st.tuples(st.integers(1, 5), st.integers(1, 5)), min_size=1, max_size=4)


@settings(max_examples=25)
@given(job_sets, st.sampled_from([0, 2, 5]))
def test_leveller_meets_the_paper_bound(spec, tau) -> None:
    jobs = [JobShape(Fraction(c), Fraction(m)) for c, m in spec]
    res = simulate_link(jobs, make_policy("leveller", tau), cycles=150)
    bound = cycle_bound([(j.compute, j.comm) for j in jobs]).guaranteed
    # Allowance for the finite window: one unfinished iteration plus Corollary 1's tau / t.
    slack = (max(j.ideal for j in jobs) + tau) / res.horizon
    assert res.min >= bound - slack


@settings(max_examples=25)
@given(job_sets, st.sampled_from(["fair", "crux", "leveller"]), st.integers(1, 3))
def test_rates_stay_in_unit_interval(spec, policy, gpus) -> None:
    jobs = [JobShape(Fraction(c), Fraction(m), gpus) for c, m in spec]
    res = simulate_link(jobs, make_policy(policy), cycles=60)
    assert all(0 <= r <= 1 for r in res.rates)
    assert len(res.rates) == len(jobs)


def test_simulator_drives_the_policy_object_it_is_given() -> None:
    # Any object with the Policy interface works: the sim has no policy logic of its own.
    from leveller.core.policies import LevellerPolicy

    class Recording(LevellerPolicy):
        def order(self, jobs):
            calls.append([(j.name, j.rate) for j in jobs])
            return super().order(jobs)

    calls: list = []
    simulate_link(PRESETS["fig3"], Recording(tau=0), cycles=3)
    assert calls[0] == [("1", 0), ("2", 0)]  # t = 0: R taken as 0, job order breaks the tie
    assert calls[1] == [("1", 1), ("2", 0)]  # t = 2: Job 1 ended its first iteration
    assert calls[2] == [("1", Fraction(1, 2)), ("2", Fraction(3, 4))]  # t = 4: Job 2 ended one

    class Reversed(LevellerPolicy):  # a policy that favours the highest R: opposite result
        def order(self, jobs):
            return list(reversed(super().order(jobs)))

    res = simulate_link(PRESETS["fig3"], Reversed(tau=0), cycles=300)
    assert res.min < 0.8


@settings(max_examples=150)
@given(st.lists(st.tuples(st.integers(1, 6), st.integers(1, 6), st.integers(1, 3)), min_size=1, max_size=4),
       st.sampled_from(["fair", "crux", "leveller"]), st.sampled_from([None, "0", "1/2", "3"]), st.integers(1, 12))
def test_event_bound_is_an_upper_bound(shapes, policy, tau, cycles) -> None:
    """The budget check counts on event_bound never being below what a run really takes."""
    from leveller.sim.link import event_bound

    jobs = [JobShape(Fraction(c, 2), Fraction(m, 3), g) for c, m, g in shapes]
    pol = make_policy(policy, Fraction(tau) if tau is not None else Fraction(0))
    seen: list[float] = []
    result = simulate_link(jobs, pol, cycles=cycles, on_progress=seen.append, progress_every=7)
    assert 0 < result.events <= event_bound(jobs, cycles, pol.tau)
    assert seen == sorted(seen) and seen[-1] == 1.0 and len(seen) == result.events // 7 + 1


# ---- the recorded timeline and counts, checked against hand-derived runs -----------------------------
# Two jobs 1:1 (C = M = 1) under fair sharing on one link: both compute [0, 1), both share the link
# for [1, 3) (each at half rate needs 2 units), and so on: every iteration takes 3 units, so R = 2/3.
# Under strict priority (leveller, lowest R first) the first job sends [1, 2) alone while the other
# waits, then the other sends [2, 3): each iteration of the slower one takes 3.


PAIR = [JobShape(F(1), F(1)), JobShape(F(1), F(1))]


def by_job(result, job: int) -> list[tuple[str, F, F]]:
    return [(s.kind, s.start, s.end) for s in result.segments if s.job == job]


def test_fair_pair_timeline_is_compute_then_a_shared_link() -> None:
    res = simulate_link(PAIR, make_policy("fair"), cycles=3, record_until=F(6))
    for j in (0, 1):
        assert by_job(res, j) == [("compute", F(0), F(1)), ("share", F(1), F(3)), ("compute", F(3), F(4)),
                                  ("share", F(4), F(6))]
    assert res.policy == "fair" and res.horizon == F(6) and res.iterations == (2, 2)
    assert res.rates == (F(2, 3), F(2, 3)) and res.min == res.avg == F(2, 3)


def test_priority_pair_timeline_has_one_sender_and_one_waiter() -> None:
    res = simulate_link(PAIR, make_policy("leveller"), cycles=2, record_until=F(3))
    kinds = {j: by_job(res, j) for j in (0, 1)}
    first = 0 if kinds[0][1][0] == "send" else 1
    other = 1 - first
    assert kinds[first][:2] == [("compute", F(0), F(1)), ("send", F(1), F(2))]
    assert kinds[other][:3] == [("compute", F(0), F(1)), ("wait", F(1), F(2)), ("send", F(2), F(3))]


def test_segments_are_recorded_only_before_record_until_and_are_contiguous() -> None:
    res = simulate_link(PAIR, make_policy("fair"), cycles=4, record_until=F(4))
    assert res.segments and all(s.start < 4 for s in res.segments)
    assert max(s.start for s in res.segments) == F(3)  # the segment starting at 3 is kept (3 < 4)
    for j in (0, 1):
        segs = by_job(res, j)
        assert segs[0][1] == 0
        for (k1, _, end), (k2, start, _) in zip(segs, segs[1:]):
            assert end == start and k1 != k2  # contiguous, and a kind never repeats back to back
    assert simulate_link(PAIR, make_policy("fair"), cycles=4).segments == ()  # nothing recorded by default


def test_events_count_phase_ends_and_stay_under_the_bound() -> None:
    one = simulate_link([JobShape(F(1), F(1))], make_policy("fair"), cycles=3)
    assert one.iterations == (3,) and one.events == 6  # compute end + send end, per iteration
    pair = simulate_link(PAIR, make_policy("fair"), cycles=3)
    assert pair.events <= event_bound(PAIR, 3, None)
    assert event_bound([JobShape(F(1), F(1))], 3, None) == 2 * (3 + 1) + 1
    assert event_bound([JobShape(F(1), F(1))], 3, F(2)) == 2 * (3 + 1) + 1 + 3
    assert event_bound(PAIR, 3, None) == 2 * (2 * (3 + 1)) + 1


@pytest.mark.parametrize("compute,comm,gpus,message", [
    (0, 1, 1, "compute time C must be > 0, got 0"),
    (1, 0, 1, "communication time M must be > 0, got 0"),
    (1, -1, 1, "communication time M must be > 0, got -1"),
    (1, 1, 0, "GPUs G must be >= 1, got 0"),
])
def test_bad_jobs_are_refused_with_the_parameter_named(compute: int, comm: int, gpus: int, message: str) -> None:
    with pytest.raises(ValueError) as exc:
        JobShape(F(compute), F(comm), gpus)
    assert str(exc.value) == message


def test_bad_runs_are_refused_with_their_message() -> None:
    with pytest.raises(ValueError, match="^need at least one job$"):
        simulate_link([], make_policy("fair"))
    with pytest.raises(ValueError, match="^cycles must be >= 1, got 0$"):
        simulate_link(PAIR, make_policy("fair"), cycles=0)
    with pytest.raises(ValueError, match="^levels K must be >= 1, got 0$"):
        simulate_link(PAIR, make_policy("fair"), levels=0)


def test_defaults_are_the_papers_1500_cycles() -> None:
    res = simulate_link([JobShape(F(1), F(1))], make_policy("fair"))
    assert res.horizon == 1500 * 2 and res.iterations == (1500,)


# ---- the floor, starvations, R windows, the switching rule and progress, by hand-derived runs ----------


def test_floor_keeps_a_share_for_the_lower_level() -> None:
    # K = 2, floor 1/4: from t = 1 job 1 (first on a tie of R) sends at 3/4, job 2 at 1/4, both "share".
    # Job 1 ends at 1 + 1 / (3/4) = 7/3, having left job 2 1 - 1/3 = 2/3; job 2, now alone (and first by R),
    # sends it at the full rate until 3. Job 1 computes [7/3, 10/3) and sends alone from 10/3.
    res = simulate_link(PAIR, make_policy("leveller"), cycles=2, levels=2, floor=F(1, 4), record_until=F(4))
    assert by_job(res, 0) == [("compute", F(0), F(1)), ("share", F(1), F(7, 3)), ("compute", F(7, 3), F(10, 3)),
                              ("send", F(10, 3), F(4))]
    assert by_job(res, 1) == [("compute", F(0), F(1)), ("share", F(1), F(7, 3)), ("send", F(7, 3), F(3)),
                              ("compute", F(3), F(4))]
    assert res.iterations == (1, 1)
    strict = simulate_link(PAIR, make_policy("leveller"), cycles=2, levels=2, record_until=F(4))
    assert by_job(strict, 1)[1] == ("wait", F(1), F(2))  # without the floor the lower job waits


@pytest.mark.parametrize("levels,floor,message", [
    (3, F(1, 2), "floor = 1/2 is invalid; 0 <= floor and (K - 1) x floor < 1 (K = 3)"),
    (2, F(-1, 10), "floor = -1/10 is invalid; 0 <= floor and (K - 1) x floor < 1 (K = 2)"),
    (None, F(1), "floor = 1 is invalid; 0 <= floor and (K - 1) x floor < 1 (K = 2)"),  # K = one per job
])
def test_a_floor_the_levels_cannot_all_keep_is_refused(levels: int | None, floor: F, message: str) -> None:
    with pytest.raises(ValueError) as exc:
        simulate_link(PAIR, make_policy("leveller"), levels=levels, floor=floor)
    assert str(exc.value) == message


def test_the_largest_floor_below_the_bound_runs() -> None:
    res = simulate_link(PAIR, make_policy("leveller"), cycles=2, levels=3, floor=F(49, 100))
    assert res.iterations == (1, 1)


def test_a_starved_job_waits_until_its_starvation_ends() -> None:
    # C = M = 1, starved in [1, 3): computes [0, 1), waits [1, 3), sends [3, 4), ... ends at 4 and 6.
    from leveller.sim.link import Starve

    res = simulate_link([JobShape(F(1), F(1))], make_policy("fair"), cycles=3, starve=[Starve(0, F(1), F(3))],
                        record_until=F(6), record_ends=True)
    assert by_job(res, 0) == [("compute", F(0), F(1)), ("wait", F(1), F(3)), ("send", F(3), F(4)),
                              ("compute", F(4), F(5)), ("send", F(5), F(6))]
    assert res.iterations == (2,) and res.ends == ((F(4), F(6)),) and res.events == 5
    assert res.events <= event_bound(res.jobs, 3, None, starvations=1)


def test_a_starvation_starting_mid_send_stops_it_there() -> None:
    from leveller.sim.link import Starve

    res = simulate_link([JobShape(F(1), F(1))], make_policy("fair"), cycles=2,
                        starve=[Starve(0, F(3, 2), F(5, 2))], record_until=F(4), record_ends=True)
    assert by_job(res, 0) == [("compute", F(0), F(1)), ("send", F(1), F(3, 2)), ("wait", F(3, 2), F(5, 2)),
                              ("send", F(5, 2), F(3)), ("compute", F(3), F(4))]
    assert res.ends == ((F(3),),)


def test_the_others_have_the_link_to_themselves_while_one_job_starves() -> None:
    from leveller.sim.link import Starve

    res = simulate_link(PAIR, make_policy("fair"), cycles=3, starve=[Starve(0, F(0), F(100))], record_until=F(6))
    assert res.iterations == (0, 3) and res.rates == (F(0), F(1))
    assert [k for k, _, _ in by_job(res, 1)] == ["compute", "send"] * 3  # the full rate, never shared


def test_starvations_of_other_jobs_or_other_times_change_nothing() -> None:
    from leveller.sim.link import Starve

    plain = simulate_link(PAIR, make_policy("leveller"), cycles=5, record_until=F(10), record_ends=True)
    late = simulate_link(PAIR, make_policy("leveller"), cycles=5, record_until=F(10), record_ends=True,
                         starve=[Starve(1, F(50), F(60))])
    assert (late.iterations, late.ends, late.segments) == (plain.iterations, plain.ends, plain.segments)


def test_bad_starvations_are_refused_with_their_message() -> None:
    from leveller.sim.link import Starve

    for start, end in ((F(2), F(2)), (F(-1), F(1)), (F(3), F(2))):
        with pytest.raises(ValueError) as exc:
            Starve(0, start, end)
        assert str(exc.value) == f"a starvation needs 0 <= start < end, got [{start}, {end})"
    for job in (2, -1):
        with pytest.raises(ValueError) as exc:
            simulate_link(PAIR, make_policy("fair"), starve=[Starve(job, F(0), F(1))])
        assert str(exc.value) == f"starvation of job index {job}: there are 2 jobs"
    assert Starve(0, F(0), F(1)).start == 0  # a starvation from the start is allowed


def test_event_bound_adds_two_events_per_starvation_and_the_ticks() -> None:
    job = [JobShape(F(1), F(1))]
    assert event_bound(job, 3, None, starvations=2) == event_bound(job, 3, None) + 4
    assert event_bound(job, 3, F(1, 2)) == event_bound(job, 3, None) + 12  # horizon 6 / tau 1/2
    assert event_bound(job, 3, 0) == event_bound(job, 3, None)  # tau 0: no ticks


def test_iteration_ends_are_kept_only_when_asked() -> None:
    res = simulate_link(PAIR, make_policy("fair"), cycles=3, record_ends=True)
    assert res.ends == ((F(3), F(6)), (F(3), F(6)))
    assert simulate_link(PAIR, make_policy("fair"), cycles=3).ends == ()


def _rates_seen(jobs: list[JobShape], cycles: int, tau: F, **rate: F) -> tuple[list[list[F]], tuple]:
    """The R the policy is given at each tick (t = 0, tau, 2 tau, ...), and the run's iteration ends."""
    from leveller.core.policies import LevellerPolicy

    seen: list[list[F]] = []

    class Recording(LevellerPolicy):
        def order(self, views):  # type: ignore[no-untyped-def]
            seen.append([v.rate for v in views])
            return super().order(views)

    res = simulate_link(jobs, Recording(tau=tau), cycles=cycles, record_ends=True, **rate)  # type: ignore[arg-type]
    return seen, res.ends


@pytest.mark.parametrize("rate", [{"rate_window": F(5)}, {"rate_half_life": F(4)}, {}])
def test_the_policy_ranks_by_the_r_of_the_iteration_ends_so_far(rate: dict[str, F]) -> None:
    """Against leveller.core.rate fed with the run's own iteration ends: windowed and decayed R see the
    whole history the window needs (the simulator trims it beyond 64 samples)."""
    jobs = [JobShape(F(1), F(1)), JobShape(F(1), F(2)), JobShape(F(2), F(1))]
    tau = F(1, 2)
    seen, ends = _rates_seen(jobs, 100, tau, **rate)  # over 64 iterations of a job: its history is trimmed
    assert max(len(e) for e in ends) > 70
    for tick, rates in enumerate(seen):
        t = tick * tau
        for i, job in enumerate(jobs):
            done = [e for e in ends[i] if e <= t]
            history = [(F(0), 0)] + [(e, k + 1) for k, e in enumerate(done)]
            want = progress_rate(len(done), job.ideal, 0, t, history, rate.get("rate_window"),
                                 rate.get("rate_half_life"))
            if "rate_half_life" in rate:  # decayed R: samples older than the horizon weigh < 1e-4
                assert float(rates[i]) == pytest.approx(float(want), rel=1e-3), (tick, i)
            else:  # exact
                assert rates[i] == want, (tick, i)


@pytest.mark.parametrize("window, longest", [(F(31), 64), (F(63, 2), 64), (F(50), 101)])
def test_a_windowed_r_keeps_a_short_history_trimmed_in_batches(monkeypatch: pytest.MonkeyPatch, window: F,
                                                               longest: int) -> None:
    """One job alone ends an iteration every 1/2. The history the policy's R reads stays short: at most 64
    samples, or the window's own when it spans more (100 ends of a 50-long window and their base: 101). It
    is trimmed in batches, only once it holds over 64 samples and only when a sample can go (a trim at
    every iteration end would copy the whole window each time)."""
    import leveller.sim.link as link

    seen: list[int] = []
    trims: list[tuple[int, int]] = []

    def spy_rate(*args: Any, **kwargs: Any) -> Any:
        if len(args) > 4:
            seen.append(len(args[4]))
        return progress_rate(*args, **kwargs)

    def spy_trim(history: list[Sample], now: F, horizon: F) -> list[Sample]:
        kept = trim_history(history, now, horizon)
        trims.append((len(history), len(kept)))
        return kept

    monkeypatch.setattr(link, "progress_rate", spy_rate)
    monkeypatch.setattr(link, "trim_history", spy_trim)
    res = simulate_link([JobShape(F(1, 4), F(1, 4))], make_policy("leveller"), cycles=300, rate_window=window)
    assert res.iterations == (300,)
    assert max(seen) == longest
    assert trims and all(before > 64 and after < before for before, after in trims), trims


def test_a_bad_r_window_is_refused_before_the_run() -> None:
    with pytest.raises(ValueError, match="window must be > 0"):
        simulate_link(PAIR, make_policy("leveller"), rate_window=F(0))
    with pytest.raises(ValueError, match="half_life must be > 0"):
        simulate_link(PAIR, make_policy("leveller"), rate_half_life=F(0))
    # both given: the conflict is what is named, also when one of the two is bad on its own
    for window, half_life in ((F(2), F(2)), (F(1), F(0)), (F(0), F(1))):
        with pytest.raises(ValueError, match="give a window or a half-life, not both"):
            simulate_link(PAIR, make_policy("leveller"), rate_window=window, rate_half_life=half_life)


def test_the_policy_sees_each_jobs_shape() -> None:
    from leveller.core.policies import LevellerPolicy

    views: list = []

    class Recording(LevellerPolicy):
        def order(self, jobs):  # type: ignore[no-untyped-def]
            views.append(list(jobs))
            return super().order(jobs)

    jobs = [JobShape(F(1), F(2), 4), JobShape(F(3), F(1))]
    simulate_link(jobs, Recording(), cycles=1)
    assert [(v.name, v.gpus, v.compute, v.comm) for v in views[0]] == [("1", 4, F(1), F(2)), ("2", 1, F(3), F(1))]
    assert jobs[0].ideal == F(3) and jobs[1].ideal == F(4)


def test_top_job_changes_count_the_new_first_jobs_of_the_orders() -> None:
    from leveller.core.policies import LevellerPolicy

    firsts: list[str] = []

    class Recording(LevellerPolicy):
        def order(self, jobs):  # type: ignore[no-untyped-def]
            out = super().order(jobs)
            firsts.append(out[0])
            return out

    res = simulate_link(PRESETS["fig1-trio"], Recording(tau=0), cycles=30)
    want = sum(a != b for a, b in zip(firsts, firsts[1:]))
    assert want > 5 and res.top_job_changes == want
    assert simulate_link(PRESETS["fig1-trio"], make_policy("fair"), cycles=30).top_job_changes == 0


def test_the_switching_rule_holds_back_leveller_only() -> None:
    from leveller.core.switching import SwitchRule

    rule = SwitchRule(delta=0.2, dwell=5.0)
    trio = PRESETS["fig1-trio"]
    plain = simulate_link(trio, make_policy("leveller"), cycles=30)
    held = simulate_link(trio, make_policy("leveller"), cycles=30, switching=rule)
    assert held.top_job_changes < plain.top_job_changes
    # the dwell, measured in simulated time: 5 units hold the top job longer than a dwell of almost 0
    dwell = simulate_link(trio, make_policy("leveller"), cycles=30, switching=SwitchRule(dwell=5.0))
    brief = simulate_link(trio, make_policy("leveller"), cycles=30, switching=SwitchRule(dwell=1e-9))
    assert dwell.top_job_changes < brief.top_job_changes
    for name in ("crux", "fair"):  # orders not by R: the rule does not apply
        a = simulate_link(trio, make_policy(name), cycles=30, record_until=F(20))
        b = simulate_link(trio, make_policy(name), cycles=30, record_until=F(20), switching=rule)
        assert (a.iterations, a.segments) == (b.iterations, b.segments)


def test_progress_is_reported_every_2048_events_by_default() -> None:
    seen: list[float] = []
    res = simulate_link(PAIR, make_policy("leveller"), cycles=2100, on_progress=seen.append)
    assert res.events > 2 * 2048
    assert len(seen) == res.events // 2048 + 1 and seen[-1] == 1.0
    assert all(0 < x < 1 for x in seen[:-1]) and seen == sorted(seen)


def test_levels_default_to_one_per_job() -> None:
    trio = [JobShape(F(1), F(1))] * 3  # all three send together from t = 1
    default = simulate_link(trio, make_policy("leveller"), cycles=4, record_until=F(12))
    three = simulate_link(trio, make_policy("leveller"), cycles=4, levels=3, record_until=F(12))
    assert default.segments == three.segments and default.iterations == three.iterations
    assert "share" not in {s.kind for s in three.segments}  # three levels: one sender at a time
    # K is the number of jobs exactly: a floor of 1/2 fits K = 2, not K = 3
    assert simulate_link(PAIR, make_policy("leveller"), cycles=2, floor=F(1, 2)).iterations == (1, 1)
    with pytest.raises(ValueError, match=r"\(K = 3\)"):
        simulate_link(trio, make_policy("leveller"), floor=F(1, 2))


def test_the_run_stops_at_the_horizon_in_the_middle_of_a_phase() -> None:
    """Fair pair, C = M = 1, one cycle: the shared sends from t = 1 would end at t = 3, after the horizon
    of 2; the run stops at 2 with no iteration done, and nothing is recorded past it."""
    res = simulate_link([JobShape(F(1), F(1))] * 2, make_policy("fair"), cycles=1, record_until=F(10))
    assert res.horizon == 2 and res.iterations == (0, 0) and res.rates == (0, 0)
    assert max(s.end for s in res.segments) == 2


def test_result_records_its_inputs_and_the_cumulative_rates() -> None:
    jobs = (JobShape(F(1), F(1)), JobShape(F(1), F(2)))
    res = simulate_link(list(jobs), make_policy("crux"), cycles=10)
    assert res.policy == "crux" and res.jobs == jobs and res.horizon == 30
    assert res.rates == tuple(F(n) * j.ideal / 30 for n, j in zip(res.iterations, jobs))


def test_progress_is_reported_at_the_2048th_event() -> None:
    # One job, C = M = 1: two events per iteration, so 1,024 iterations are 2,048 events; the 2,048th
    # starts the last send at t = 2047 of 2048.
    seen: list[float] = []
    res = simulate_link([JobShape(F(1), F(1))], make_policy("fair"), cycles=1024, on_progress=seen.append)
    assert res.events == 2048 and seen == [2047 / 2048, 1.0]
