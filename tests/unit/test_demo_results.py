"""Pure parts of the live demo: R from iteration logs, the job plan, the JSON document, the checks."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from leveller.core.topology import topology_from_dict
from leveller.errors import UserError
from leveller.experiments.demo.plot import top_spans
from leveller.experiments.demo.results import RunResult, acceptance, json_doc, table_rows
from leveller.experiments.demo.scenario import plan
from leveller.experiments.shared.measure import (
    ideal_from_alone,
    measured_rate,
    parse_logs,
    rate_series,
    top_job_changes,
)
from leveller.experiments.shared.star import topology_dict
from leveller.model.shape import JobShape


def line(job: str, n: int, t: float, rank: int = 0) -> str:
    return f"leveller-iter job={job} rank={rank} iter={n} t={t:.6f}"


def test_rate_counts_iterations_finished_by_the_end_from_the_job_start() -> None:
    logs = parse_logs([line("a", 0, 100.0), line("a", 1, 100.5), line("a", 2, 101.0, rank=1),
                       line("a", 2, 101.1), "noise", line("a", 3, 102.5)])
    # 2 iterations by t=102 (the third ended after), ideal 0.5 s, 2 s elapsed
    assert measured_rate(logs["a"], 0.5, 102.0) == pytest.approx(0.5)
    assert logs["a"].ends[2] == 101.0  # earliest rank wins
    assert rate_series(logs["a"], 0.5, [99.0, 101.0]) == [None, pytest.approx(1.0)]


def test_rate_without_start_line_is_an_error() -> None:
    logs = parse_logs([line("a", 1, 1.0)])
    with pytest.raises(ValueError, match="no start line"):
        measured_rate(logs["a"], 1.0, 2.0)


def test_ideal_alone_is_the_median_after_the_first_iteration() -> None:
    logs = parse_logs([line("a", 0, 0.0), line("a", 1, 0.9), line("a", 2, 1.4), line("a", 3, 1.9),
                       line("a", 4, 2.6), line("a", 5, 3.1)])
    assert ideal_from_alone(logs["a"]) == pytest.approx(0.5)  # 0.9 (slow start) left out; 0.7 outvoted


@given(st.integers(1, 30), st.floats(0.1, 2.0))
def test_a_job_at_its_ideal_speed_has_rate_one_at_each_iteration_end(count, ideal) -> None:
    times, t = [line("j", 0, 0.0)], 0.0
    for n in range(1, count + 1):
        t += ideal
        times.append(line("j", n, t))
    log = parse_logs(times)["j"]
    t = log.end_times()[-1]  # as logged (6 decimals)
    assert measured_rate(log, ideal, t) == pytest.approx(1.0, rel=1e-4)
    assert measured_rate(log, ideal, t + ideal / 2) < 1.0


def test_top_job_changes_and_spans() -> None:
    decisions = [{"t": 0.0, "order": []}, {"t": 1.0, "order": ["a", "b"]}, {"t": 2.0, "order": ["b", "a"]},
                 {"t": 3.0, "order": ["b", "a"]}, {"t": 4.0, "order": ["a", "b"]}]
    assert top_job_changes(decisions) == 2
    # a job that starts reporting later changes the order but is no re-ranking (static crux: 0)
    arrival = [{"t": 0.0, "order": ["b"]}, {"t": 1.0, "order": ["a", "b"]}, {"t": 2.0, "order": ["a", "b"]}]
    assert top_job_changes(arrival) == 0
    assert top_job_changes(arrival + [{"t": 3.0, "order": ["b", "a"]}]) == 1
    assert top_spans(decisions, 5.0) == {"a": [(1.0, 1.0), (4.0, 1.0)], "b": [(2.0, 2.0)]}


def test_plan_puts_each_job_on_its_own_sender_and_port_range() -> None:
    trio = plan("trio")
    assert [(j.shape, j.sender) for j in trio] == [("1:2", "h1"), ("1:2", "h2"), ("2:1", "h3")]
    ranges = [(j.port, j.port + 1) for j in trio]
    assert all(b[0] > a[1] for a, b in zip(ranges, ranges[1:]))
    assert all(j.port + 1 < 32768 for j in trio)  # below the ephemeral range
    assert trio[0].live(0.25).ports == f"j1={trio[0].port}-{trio[0].port + 1}"
    # the shape in seconds, and its wire form for the controller's --job-shape (floats, as before)
    assert trio[2].seconds(0.25) == JobShape(0.5, 0.25) and trio[2].seconds(0.25).ideal == 0.75
    assert trio[2].live(0.25).shape == JobShape(0.5, 0.25)
    assert trio[2].live(0.25).shape_arg == "j3=0.5:0.25:1:0.0"
    with pytest.raises(UserError, match="example"):
        plan("quartet")
    topo = topology_from_dict(topology_dict())
    assert topo.levels == 2 and {h.name for h in topo.hosts} == {"h1", "h2", "h3", "h4"}


def _runs(pair_l, pair_f, pair_c, trio_l, trio_f):
    out = []
    for ex, pol, rates in (("pair", "leveller", pair_l), ("pair", "fair", pair_f), ("pair", "crux", pair_c),
                           ("trio", "leveller", trio_l), ("trio", "fair", trio_f)):
        n = len(rates)
        out.append(RunResult(ex, pol, [f"j{i + 1}" for i in range(n)], rates, [10] * n, [0.5] * n, 60.0))
    return out


# The model with the live options, written out here (not computed by the code under test): the default
# switching (hysteresis 0.02 / 2 s, floor 0.05) on two levels gives about these.
MODEL = {"pair": {"fair": [0.75, 0.75], "crux": [0.986, 0.738], "leveller": [0.836, 0.85]},
         "trio": {"fair": [0.5, 0.5, 0.667], "crux": [0.493, 0.493, 0.99], "leveller": [0.587, 0.583, 0.597]}}
ALL = {"switching": {"name": "all"}}


def test_json_shape_and_acceptance_pass() -> None:
    doc = json_doc(_runs([0.80, 0.86], [0.75, 0.79], [0.99, 0.7], [0.56, 0.61, 0.6], [0.50, 0.55, 0.66]),
                   MODEL, ALL)
    assert doc["pair"] == {"leveller": [0.8, 0.86], "fair": [0.75, 0.79], "crux": [0.99, 0.7]}
    assert doc["trio"]["fair"] == [0.5, 0.55, 0.66]
    assert "crux" not in doc["trio"]
    checks = {name: ok for name, ok, _ in acceptance(doc)}
    assert list(checks) == ["pair leveller min R >= 0.95 x model", "trio leveller min R >= 0.95 x model",
                            "pair leveller min R > fair min R", "pair crux job 2 R < leveller min R",
                            "trio leveller min R >= model fair min R + 0.5 x the model's lead"]
    assert all(checks.values()) and doc["acceptance"] == checks
    rows = table_rows("pair", doc)
    assert [r[0] for r in rows] == ["fair", "crux", "leveller"]
    assert rows[0][1] == "0.750 (0.750; 0.750)" and rows[0][-2:] == ["0.750", "0.770"]


def test_checks_follow_the_model_not_fixed_numbers() -> None:
    """0.787 failed the old fixed bar of 0.82; against the model with the live options (0.836) it is 0.94 of it."""
    runs = _runs([0.787, 0.86], [0.75, 0.79], [0.99, 0.7], [0.56, 0.61, 0.6], [0.50, 0.55, 0.66])
    checks = {name: ok for name, ok, _ in acceptance(json_doc(runs, MODEL, ALL))}
    assert checks["pair leveller min R >= 0.95 x model"] is False  # 0.787 < 0.95 x 0.836
    lower = {**MODEL, "pair": {**MODEL["pair"], "leveller": [0.82, 0.83]}}  # a rule the model says costs more
    checks = {name: ok for name, ok, _ in acceptance(json_doc(runs, lower, ALL))}
    assert checks["pair leveller min R >= 0.95 x model"] is True  # 0.787 >= 0.779


def test_acceptance_fails_when_leveller_is_no_better_than_fair() -> None:
    doc = json_doc(_runs([0.74, 0.86], [0.75, 0.79], [0.99, 0.8], [0.56, 0.61, 0.6], [0.53, 0.58, 0.66]),
                   MODEL, ALL)
    checks = {name: ok for name, ok, _ in acceptance(doc)}
    assert checks["pair leveller min R >= 0.95 x model"] is False
    assert checks["pair leveller min R > fair min R"] is False
    assert checks["pair crux job 2 R < leveller min R"] is False  # 0.80 is not below 0.74
    assert checks["trio leveller min R >= 0.95 x model"] is True  # 0.56 >= 0.95 x 0.583
    # live fair's 0.53 is phase luck: the lead is over the model's fair 0.5 (0.56 >= 0.5 + 0.04)
    assert checks["trio leveller min R >= model fair min R + 0.5 x the model's lead"] is True


def test_the_papers_number_is_named_only_under_the_papers_rule() -> None:
    runs = _runs([0.85, 0.86], [0.75, 0.79], [0.99, 0.7], [0.6, 0.61, 0.6], [0.5, 0.55, 0.66])
    paper_model = {"pair": {"fair": [0.75, 0.75], "crux": [1.0, 0.748], "leveller": [0.857, 0.857]}}
    detail = {n: d for n, _, d in acceptance(json_doc(runs, paper_model, {"switching": {"name": "paper"}}))}
    assert detail["pair leveller min R >= 0.95 x model"] == "min 0.850, model 0.857; paper 0.857"
    detail = {n: d for n, _, d in acceptance(json_doc(runs, MODEL, ALL))}
    assert detail["pair leveller min R >= 0.95 x model"] == "min 0.850, model 0.836"


def test_acceptance_reports_runs_not_done() -> None:
    checks = acceptance({"pair": {"leveller": [0.9, 0.9]}})
    assert [(ok, d) for _, ok, d in checks] == [(None, "no model"), (None, "not run"), (None, "not run"),
                                                (None, "not run"), (None, "not run")]


def test_demo_jobs_count_frame_headers_and_clamp_their_window() -> None:
    from leveller.jobs.launcher import worker_argv
    from leveller.jobs.spec import TCP_PAYLOAD_SHARE, RunConfig, WorkerPlace

    workers = (WorkerPlace("10.0.0.4"), WorkerPlace("10.0.0.1"))
    plain = RunConfig("j", workers, 0.25, 0.5, 100e6, duration_s=10)
    framed = RunConfig("j", workers, 0.25, 0.5, 100e6, duration_s=10, payload_share=TCP_PAYLOAD_SHARE,
                       window_bytes=65536)
    assert plain.bytes_per_iteration == 6_250_000  # 0.5 s at 100 Mbit/s
    # 1448 payload bytes per 1514-byte frame: 0.5 s of frames on the wire
    assert framed.bytes_per_iteration == round(6_250_000 * 1448 / 1514)
    argv = worker_argv(framed, 1, None, None)
    assert argv[argv.index("--window") + 1] == "65536" and "--window" not in worker_argv(plain, 1, None, None)
    with pytest.raises(UserError, match="--window"):
        RunConfig("j", workers, 0.25, 0.5, 100e6, duration_s=10, window_bytes=100)
    with pytest.raises(UserError, match="--payload-share"):
        RunConfig("j", workers, 0.25, 0.5, 100e6, duration_s=10, payload_share=1.5)


def test_a_second_demo_with_the_same_name_is_refused(tmp_path) -> None:
    from leveller.experiments.shared.cluster import DemoCluster

    first, second = DemoCluster("dx", tmp_path / "run"), DemoCluster("dx", tmp_path / "run")
    first._lock()
    try:
        with pytest.raises(UserError, match="another demo"):
            second._lock()
    finally:
        first._unlock()
    second._lock()  # free again
    second._unlock()


def test_a_failed_check_fails_the_demo_and_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    """`make demo` once printed `FAIL pair leveller min R >= 0.82: min 0.787` and exited 0."""
    from leveller.experiments.demo.report import exit_status

    failing = json_doc(_runs([0.787, 0.86], [0.75, 0.79], [0.99, 0.7], [0.62, 0.61, 0.6], [0.56, 0.55, 0.66]),
                       MODEL, ALL)
    assert exit_status(failing) == 1
    err = capsys.readouterr().err
    assert "check failed: pair leveller min R >= 0.95 x model (min 0.787, model 0.836)" in err
    assert "trio" not in err  # the checks that passed are not named

    passing = json_doc(_runs([0.85, 0.86], [0.75, 0.79], [0.99, 0.7], [0.62, 0.61, 0.6], [0.56, 0.55, 0.66]),
                       MODEL, ALL)
    assert exit_status(passing) == 0
    assert capsys.readouterr().err == ""
    assert exit_status({"pair": {"leveller": [0.9, 0.9]}}) == 0  # checks not run do not fail the run


def test_the_model_beside_the_live_runs_uses_the_live_options() -> None:
    from leveller.core.switching import DEFAULT, PAPER
    from leveller.experiments.demo.model import model_like_live

    paper = model_like_live(0.25, 0.1, 2, PAPER, 0.0, cycles=300)
    assert paper["pair"]["leveller"] == pytest.approx([0.857, 0.857], abs=0.005)  # the digest's 6/7
    assert paper["trio"]["fair"] == pytest.approx([0.5, 0.5, 0.667], abs=0.005)
    live = model_like_live(0.25, 0.1, 2, DEFAULT, 0.05, cycles=300)
    assert min(live["pair"]["leveller"]) < min(paper["pair"]["leveller"]) - 0.01  # dwell and floor cost R
    # the dwell and tau are seconds, the model's unit is unit_s: doubling all three is the same model
    assert model_like_live(0.5, 0.2, 2, type(DEFAULT)(delta=0.02, dwell=4.0), 0.05, cycles=300) == live


def test_the_trios_lead_is_over_the_models_fair_sharing_whose_phase_the_live_run_does_not_keep() -> None:
    """Live fair sharing's trio min R depends on the jobs' phases (0.524-0.576 measured, the model 0.500-0.595
    over start offsets); LEVELLER's lead is measured from the model's 0.5. A run at 0.56 against a lucky
    live fair of 0.58 passes; LEVELLER no better than the model's fair sharing (0.52 < 0.5 + 0.04) fails."""
    base = ([0.80, 0.86], [0.75, 0.79], [0.99, 0.7])
    name = "trio leveller min R >= model fair min R + 0.5 x the model's lead"
    lucky = {n: (ok, d) for n, ok, d in acceptance(json_doc(_runs(*base, [0.56, 0.61, 0.6], [0.58, 0.6, 0.6]),
                                                             MODEL, ALL))}
    assert lucky[name][0] is True
    assert lucky[name][1] == "0.560 vs 0.541 (model 0.583 vs fair 0.500; live fair 0.580)"
    flat = {n: ok for n, ok, _ in acceptance(json_doc(_runs(*base, [0.52, 0.6, 0.6], [0.5, 0.55, 0.66]),
                                                      MODEL, ALL))}
    assert flat[name] is False
