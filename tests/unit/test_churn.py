"""The churn experiment's pure parts: the arrivals (leveller.experiments.churn.plan) and the measures
(leveller.experiments.churn.report) on hand-made records."""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from leveller.experiments.churn.plan import Arrival, ChurnSettings, PolicyRecord, draw, leafspine, leaves
from leveller.experiments.churn.plot import level_spans, plot_churn
from leveller.experiments.churn.report import checks, marks_gone, summarize
from leveller.experiments.shared.measure import JobLog

TOPO = leafspine(4)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.floats(2, 30), st.integers(2, 100))
@example(44, 6.14915892131066, 2)  # its last arrival fell at 299.9996 s and was rounded to 300.0
def test_arrivals_are_seeded_spread_over_two_leaves_and_within_the_duration(seed: int, mean: float, n: int) -> None:
    a = draw(300, mean, n, seed, TOPO)
    assert a == draw(300, mean, n, seed, TOPO)  # the same seed, the same arrivals
    leaf = {h: sw for sw, hosts in leaves(TOPO).items() for h in hosts}
    for x in a:
        assert 0 < x.at < 300 and 2 <= len(x.hosts) <= 3 and len(set(x.hosts)) == len(x.hosts)
        assert len({leaf[h] for h in x.hosts}) >= 2
        assert max(1, n // 2) <= x.iterations <= max(1, 3 * n // 2)
        assert 0.4 - 1e-3 <= x.ideal_s <= 1.2 + 1e-3 or x.slack_s > 0
    assert [x.at for x in a] == sorted(x.at for x in a) and len({x.name for x in a}) == len(a)


def test_the_mean_arrival_is_the_poisson_rate() -> None:
    counts = [len(draw(1000, 10, 10, seed, TOPO)) for seed in range(20)]
    assert 90 <= sum(counts) / len(counts) <= 110  # 1000 s / 10 s


def _arrival(name: str, at: float = 1.0, iterations: int = 3) -> Arrival:
    return Arrival(name, at, ("h1", "h5"), "m", 0.5, 0.5, 0.0, iterations, 23000)


def _record(policy: str = "leveller") -> PolicyRecord:
    """Job a: starts at 101, iterations 1-3 at 102, 103, 104 (finished); its flow f1 gets level 2 at 101.5,
    its mark is gone from agent h1's report at 104.5. Job b starts at 105 and is never given a level."""
    r = PolicyRecord(policy, 100.0, 120.0)
    r.logs = {"a": JobLog("a", 101.0, {1: 102.0, 2: 103.0, 3: 104.0}), "b": JobLog("b", 105.0, {1: 107.0})}
    r.decisions = [{"t": 101.2, "levels": {}, "jobs": {"a": {"ideal": None}}, "order": ["a"], "rates": {"a": None}},
                   {"t": 101.5, "levels": {"f1": 2}, "jobs": {"a": {"ideal": 0.8}}, "order": ["a", "b"],
                    "rates": {"a": 0.61234, "b": 0.0}},
                   {"t": 103.5, "levels": {"f1": 1}, "jobs": {"a": {"ideal": 0.9}}, "order": ["b", "a"],
                    "rates": {"a": 0.5, "b": 0.25}}]
    r.agent_lines = {"h1": [{"t": 101.6, "marks": {"f1": 16}, "bytes": {"a": {"f1": 10}}},
                            {"t": 104.2, "marks": {"f1": 16}, "bytes": {"a": {"f1": 20}}},
                            {"t": 104.5, "marks": {}, "bytes": {"b": {"f2": 5}}}],
                     "h5": [{"t": 101.6, "marks": {}, "bytes": {}}]}
    return r


def test_timings_rates_and_checks_of_a_hand_made_run() -> None:
    doc = summarize([_arrival("a"), _arrival("b", 4.0, 5)], [_record()], ChurnSettings(tau_s=0.2, lease_s=2.0))
    p = doc["policies"]["leveller"]
    a, b = p["jobs"]["a"], p["jobs"]["b"]
    assert a["finished"] and not b["finished"]
    assert a["ideal_s"] == 0.9 and a["rate"] == pytest.approx(3 * 0.9 / 3.0, abs=1e-4)
    assert a["first_level_s"] == pytest.approx(0.5) and a["first_level_target_s"] == pytest.approx(5 * 0.9 + 0.4)
    assert a["marks_gone_s"] == pytest.approx(0.5)  # from its last iteration (104) to h1's report at 104.5
    assert a["levels"] == [(1.5, 2), (3.5, 1)]
    assert a["controller"] == [(1.2, None, 0), (1.5, 0.6123, 0), (3.5, 0.5, 1)]  # (t, R it ranked by, place)
    assert b["controller"] == [(1.5, 0.0, 1), (3.5, 0.25, 0)]  # not in the first decision
    assert p["never_ranked"] == ["b"] and p["jobs_finished"] == 1 and p["min"] == pytest.approx(0.9)
    assert doc["checks"]["every_job_ranked"] is False and doc["checks"]["no_mark_past_lease"] is True


def test_a_mark_still_held_at_the_last_report_is_past_the_lease() -> None:
    r = _record()
    r.agent_lines["h1"] = r.agent_lines["h1"][:2]  # the agent never reported f1 unmarked
    assert math.isinf(marks_gone(r, {"f1"}, 104.0) or 0)
    doc = summarize([_arrival("a")], [r], ChurnSettings())
    assert doc["policies"]["leveller"]["marks_past_lease"] == ["a"] and not doc["checks"]["no_mark_past_lease"]


def test_a_mark_past_the_lease_names_the_agent_the_mark_and_who_still_reports_the_flow() -> None:
    """What a failed no_mark_past_lease check needs to be diagnosed after the run (the agents' lines are
    not kept): the first report past the lease that still marks the job's flow, and its owner there."""
    r = _record()
    r.agent_lines["h1"] = r.agent_lines["h1"][:2] + [
        {"t": 105.0, "marks": {"f1": 16}, "jobs": {"a": 3}, "bytes": {"a": {"f1": 20}}},  # within the lease
        {"t": 106.5, "marks": {"f1": 16, "f9": 8}, "jobs": {"c": 1}, "bytes": {"c": {"f1": 30}}},
        {"t": 107.0, "marks": {"f1": 16}, "jobs": {}, "bytes": {}}]
    a = summarize([_arrival("a")], [r], ChurnSettings(lease_s=2.0))["policies"]["leveller"]["jobs"]["a"]
    assert a["marks_gone_s"] is None
    assert a["marks_kept"] == [{"host": "h1", "t_after_end": 2.5, "marks": {"f1": 16}, "reported_for": {"f1": "c"},
                                "jobs_reported": ["c"]}]
    r.agent_lines["h1"][2:] = [{"t": 105.0, "marks": {}, "bytes": {}}]  # gone within the lease: nothing to say
    assert "marks_kept" not in summarize([_arrival("a")], [r], ChurnSettings(lease_s=2.0))["policies"]["leveller"][
        "jobs"]["a"]


def test_an_agent_that_stops_reporting_while_it_marks_is_named_with_its_last_report() -> None:
    """The 600 s run's fair policy failed no_mark_past_lease for two jobs with an empty marks_kept: the
    agent's last report, under the lease, still marked the job's flow and it made no later one. Such an
    agent is named, with that report and last_report, and the job's end is in the result."""
    r = _record()
    r.agent_lines["h1"] = r.agent_lines["h1"][:2] + [
        {"t": 104.0, "marks": {"f1": 16}, "jobs": {"a": 3}, "bytes": {"a": {"f1": 20}}}]
    a = summarize([_arrival("a")], [r], ChurnSettings(lease_s=2.0))["policies"]["leveller"]["jobs"]["a"]
    assert a["marks_gone_s"] is None
    assert a["marks_kept"] == [{"host": "h1", "t_after_end": 0.0, "marks": {"f1": 16}, "reported_for": {"f1": "a"},
                                "jobs_reported": ["a"], "last_report": True}]
    assert a["end"] == 104.0 - r.t_start


def test_marks_gone_before_an_agents_last_report_are_gone_whenever_the_job_ends() -> None:
    """An agent whose reports stop before the job's end, the last of them marking none of its flows,
    holds no mark of it: gone at once, not never."""
    r = _record()
    r.agent_lines["h1"] = r.agent_lines["h1"][:1] + [{"t": 103.0, "marks": {}, "bytes": {}}]
    assert marks_gone(r, {"f1"}, 104.0) == 0.0
    r.agent_lines["h1"][-1]["marks"] = {"f1": 16}
    assert marks_gone(r, {"f1"}, 104.0) == float("inf")


def test_leveller_min_is_compared_with_every_other_policy() -> None:
    base = {"never_ranked": [], "first_level_late": [], "marks_past_lease": [], "jobs_finished": 2}
    assert checks({"leveller": {**base, "min": 0.5}, "fair": {**base, "min": 0.4}})["leveller_min_at_least_others"]
    assert not checks({"leveller": {**base, "min": 0.3}, "crux": {**base, "min": 0.4}})["leveller_min_at_least_others"]
    assert "leveller_min_at_least_others" not in checks({"leveller": {**base, "min": 0.3}})


def test_marks_are_timed_from_the_jobs_processes_exit_when_known() -> None:
    """A job's processes may outlive its last iteration (their flows rightly marked meanwhile): the
    lease runs from their exit. Here a's workers exit at 104.4, 0.1 s before h1 reports f1 unmarked."""
    r = _record()
    r.exits = {"a": 104.4}
    a = summarize([_arrival("a")], [r], ChurnSettings(lease_s=2.0))["policies"]["leveller"]["jobs"]["a"]
    assert a["marks_gone_s"] == pytest.approx(0.1)
    r.agent_lines["h1"].insert(2, {"t": 104.45, "marks": {"f1": 16}, "bytes": {}})  # still marked after the exit
    r.agent_lines["h1"][-1]["t"] = 107.0
    doc = summarize([_arrival("a")], [r], ChurnSettings(lease_s=2.0))
    assert doc["policies"]["leveller"]["jobs"]["a"]["marks_gone_s"] == pytest.approx(2.6)
    assert doc["policies"]["leveller"]["marks_past_lease"] == ["a"]


# --- the plot's level stretches ------------------------------------------------------------

def test_level_spans_merge_steps_at_one_level_and_stop_at_the_end() -> None:
    steps = [[1.0, 3], [2.0, 3], [2.5, 0], [2.5, 1], [4.0, 1], [6.0, 3], [12.0, 2]]
    # 1-2.5 at 3 (two steps), nothing at 0 (no time), 2.5-6 at 1 (two steps), 6-10 at 3, 12 is past the end
    assert level_spans(steps, 10.0) == {3: [(1.0, 1.5), (6.0, 4.0)], 1: [(2.5, 3.5)]}
    assert level_spans([], 10.0) == {}
    assert level_spans([[11.0, 2]], 10.0) == {}


@settings(max_examples=200)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 3)), max_size=30), st.integers(0, 45))
def test_level_spans_cover_each_moment_at_the_level_of_its_step(raw, end) -> None:
    steps = [[t / 4, lv] for t, lv in sorted(raw, key=lambda x: x[0])]
    spans = level_spans(steps, end / 4)
    for stretches in spans.values():
        assert all(w > 0 for _, w in stretches)
        ends = [(s, s + w) for s, w in stretches]
        assert all(a[1] < b[0] for a, b in zip(ends, ends[1:]))  # apart: touching ones would be one stretch
    for q in range(0, 180):  # every eighth of a second: the step in force then, by the plain rule
        at = q / 8 + 1 / 16
        before = [lv for t, lv in steps if t <= at]
        want = before[-1] if before and at < end / 4 else None
        got = [lv for lv, st_ in spans.items() for s, w in st_ if s <= at < s + w]
        assert got == ([] if want is None else [want])


def test_the_plot_draws_each_level_of_a_job_once_however_many_steps(tmp_path, monkeypatch) -> None:
    # A 600 s run has thousands of steps per job: an artist per step took matplotlib over 7 minutes.
    import matplotlib.axes

    calls = []
    real = matplotlib.axes.Axes.broken_barh
    monkeypatch.setattr(matplotlib.axes.Axes, "broken_barh",
                        lambda self, *a, **k: calls.append(a) or real(self, *a, **k))
    steps = [[10 + i * 0.1, i % 2 * 3] for i in range(3000)]
    job = {"start": 10.0, "iterations": 30, "ideal_s": 10.0, "rate": 1.0, "finished": True, "levels": steps}
    doc = {"settings": {"levels": 4}, "arrivals": [{"name": "j"}],
           "policies": {"leveller": {"jobs": {"j": job}, "jobs_finished": 1, "min": 1.0, "never_ranked": []}}}
    plot_churn(tmp_path / "churn.png", doc)
    assert (tmp_path / "churn.png").stat().st_size > 0
    assert len(calls) <= 1 + 4  # the grey bar, then one call per level
    assert sum(len(c[0]) for c in calls[1:]) == 3000  # each alternation still drawn


@pytest.mark.parametrize("mbps", ["0.5", "150", "nan"])
def test_a_link_rate_out_of_range_is_refused_naming_the_option(mbps: str) -> None:
    from leveller.cli import build_parser
    from leveller.commands.experiment_churn import check
    from leveller.errors import UserError

    args = build_parser().parse_args(["experiment", "churn", "--link-mbps", mbps])
    with pytest.raises(UserError, match=f"--link-mbps={mbps}: allowed is 1..100"):
        check(args)


def test_the_default_link_rate_leaves_the_switch_thread_room() -> None:
    """12.5 Mbit/s, half the tenants experiment's: at 25 the one ovs-vswitchd thread fell behind when ten
    jobs ran at once (see plan.LINK_MBPS); every link of the run's leaf-spine and every job take it."""
    settings = ChurnSettings()
    assert settings.link_mbps == 12.5
    topo = leafspine(4, settings.link_mbps)
    assert {lk.rate_mbps for lk in topo.links} == {12.5}
