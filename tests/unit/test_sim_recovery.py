"""Single-link simulator with windowed / decayed R and starvation, and the recovery figures."""

import json
from fractions import Fraction as F

import pytest

from leveller.bench.recovery import (
    Disturbance,
    RateMode,
    SimSetup,
    progress,
    recovery_figures,
    simulate_recovery,
    stretch_rate,
)
from leveller.cli import main
from leveller.core.policies import LevellerPolicy
from leveller.model.shape import JobShape
from leveller.sim.link import Starve, simulate_link
from leveller.sim.presets import PRESETS


def test_a_starved_job_stops_and_the_other_takes_the_link() -> None:
    # job 1 (1:1) starved on [10, 20): job 2 (1:2) alone meanwhile -> iterations of 3 units
    res = simulate_link(PRESETS["fig3"], LevellerPolicy(), cycles=10, starve=[Starve(0, F(10), F(20))],
                        record_ends=True)
    ends1, ends2 = res.ends
    assert not [t for t in ends1 if 10 < t < 20]  # no iteration of job 1 ends while it is starved
    inside = [t for t in ends2 if 11 <= t <= 20]
    assert all(b - a == 3 for a, b in zip(inside, inside[1:])) and len(inside) >= 3


def test_windowed_and_decayed_modes_come_close_to_the_papers_pair_result_without_disturbance() -> None:
    # the window equalizes the long-run R like the cumulative one; the decayed R a little less
    # (it weighs the alternation's recent phase more): 0.838 / 0.87 instead of 0.857 / 0.857
    res = simulate_link(PRESETS["fig3"], LevellerPolicy(), cycles=400, rate_window=F(30))
    assert [float(r) for r in res.rates] == pytest.approx([0.857, 0.857], abs=0.005)
    res = simulate_link(PRESETS["fig3"], LevellerPolicy(), cycles=400, rate_half_life=F(15))
    assert [float(r) for r in res.rates] == pytest.approx([0.838, 0.87], abs=0.005)


def test_the_rate_mode_changes_what_happens_after_a_starvation() -> None:
    starve = [Starve(0, F(60), F(90))]
    cum = simulate_link(PRESETS["fig3"], LevellerPolicy(), cycles=80, starve=starve, record_ends=True)
    dec = simulate_link(PRESETS["fig3"], LevellerPolicy(), cycles=80, starve=starve, record_ends=True,
                        rate_half_life=F(10))
    # over [100, 140): cumulative R makes job 1 repay its deficit (job 2 held at its crux share 0.75);
    # the decayed R has forgotten most of it and shares the link again
    r2 = [stretch_rate([float(t) for t in r.ends[1]], 0, 3, 100, 140) for r in (cum, dec)]
    assert r2[0] == pytest.approx(0.75, abs=0.02)
    assert r2[1] > 0.8


def test_progress_is_interpolated_inside_an_iteration() -> None:
    ends = [2.0, 4.0, 8.0]
    assert progress(ends, 0.0, 1.0) == 0.5
    assert progress(ends, 0.0, 6.0) == 2.5
    assert progress(ends, 0.0, 9.0) == 3.0
    assert stretch_rate(ends, 0.0, 2.0, 2.0, 8.0) == pytest.approx(2 * 2 / 6)


def test_recovery_time_is_when_min_rate_stays_inside_the_band() -> None:
    # job a: one iteration per second (ideal 1) except no progress in [30, 40); b always at 0.8
    a = [float(t) for t in range(1, 30)] + [float(t) for t in range(41, 121)]
    b = [k / 0.8 for k in range(1, 97)]
    fig = recovery_figures(RateMode(), {"a": a, "b": b}, {"a": 0.0, "b": 0.0}, {"a": 1.0, "b": 1.0},
                           Disturbance("a", 30, 10), horizon_s=120, warmup_s=5, measure_s=10, hold_s=10)
    assert fig.steady_min == pytest.approx(0.8, abs=0.02)
    # the 10 s window is clear of the stall at t = 50: min R = b's 0.8 from then on
    assert fig.recovery_s == pytest.approx(10, abs=1.5)
    assert fig.final_min == pytest.approx(0.8, abs=0.02)
    with pytest.raises(ValueError, match="steady stretch"):
        recovery_figures(RateMode(), {"a": a}, {"a": 0.0}, {"a": 1.0}, Disturbance("a", 10, 10), 120, 5)


def test_recovery_experiment_orders_the_modes_as_expected() -> None:
    # the demo's pair (1:1 and 1:2 at 0.25 s per unit), job 1 starved 30 s at t = 60
    setup = SimSetup(((F(1, 4), F(1, 4)), (F(1, 4), F(1, 2))), Disturbance("1", 60, 30), 300, 20)
    cum, win, dec = simulate_recovery(setup, [RateMode(), RateMode(window_s=20), RateMode(half_life_s=10)])
    for f in (cum, win, dec):
        assert f.steady_min == pytest.approx(0.857, abs=0.02)
    assert cum.recovery_s is not None and cum.recovery_s > 90  # repays the whole deficit first
    assert cum.dip_min == pytest.approx(0.75, abs=0.02)  # the other job at its crux share meanwhile
    assert dec.recovery_s is not None and dec.recovery_s < 40
    assert win.recovery_s is None or win.recovery_s > dec.recovery_s  # the window's echo oscillates


def test_simulate_link_cli_accepts_rate_options_and_starvation(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "link", "--preset", "fig3", "--rate-half-life", "10", "--starve", "1:60:30",
                 "--cycles", "100", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["rate_half_life"] == 10 and out["rate_window"] is None
    assert out["rates"][0] < 0.8  # job 1 lost 30 of 300 units
    for bad, msg in ((["--rate-window", "0"], "--rate-window"), (["--starve", "3:1:1"], "--starve"),
                     (["--rate-window", "2", "--rate-half-life", "2"], "not both")):
        assert main(["simulate", "link", "--preset", "fig3", *bad]) == 2
        assert msg in capsys.readouterr().err


def test_link_job_list_is_unchanged_by_default() -> None:
    a = simulate_link(PRESETS["fig1-trio"], LevellerPolicy(), cycles=50)
    b = simulate_link([JobShape(j.compute, j.comm) for j in PRESETS["fig1-trio"]], LevellerPolicy(), cycles=50,
                      starve=[])
    assert a.rates == b.rates and a.ends == ()


def test_experiment_recovery_in_the_network_simulator(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["experiment", "recovery", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    cum, win, dec = out["modes"]
    assert (cum["mode"], win["mode"], dec["mode"]) == ("cumulative", "window 20 s", "half-life 10 s")
    for m in out["modes"]:
        assert m["steady_min"] == pytest.approx(0.857, abs=0.015)  # the paper's pair, as in `simulate link`
    assert cum["recovery_s"] > 90 and dec["recovery_s"] < 40  # repaying the deficit vs forgetting it
    assert win["recovery_s"] is None or win["recovery_s"] > dec["recovery_s"]
    assert main(["experiment", "recovery", "--at", "10"]) == 2
    assert "--at 10" in capsys.readouterr().err


def test_network_simulator_disturbance_stalls_only_the_job_on_that_link() -> None:
    from leveller.bench.recovery import DUMBBELL, network_pair
    from leveller.sim.network.engine import Disturbance as Held
    from leveller.sim.network.engine import Simulation
    from leveller.sim.network.policies import make_net_policy
    from leveller.sim.network.topology import load_network

    net = load_network(DUMBBELL)
    before = net.capacity.copy()
    res = Simulation(net, network_pair(), make_net_policy("fair"), 2, 100.0,
                     disturbances=[Held("h1>s1", 20.0, 30.0)]).run()
    plain = Simulation(net, network_pair(), make_net_policy("fair"), 2, 100.0).run()
    assert (net.capacity == before).all()  # restored
    r1, r2 = (j.rate for j in res.jobs)
    p1, p2 = (j.rate for j in plain.jobs)
    assert r1 == pytest.approx(p1 * 70 / 100, abs=0.03)  # job 1 lost 30 of 100 s
    assert r2 > p2  # job 2 had the bottleneck alone meanwhile
    with pytest.raises(ValueError, match="no such directed link"):
        Simulation(net, network_pair(), make_net_policy("fair"), 2, 10.0, disturbances=[Held("x>y", 1.0, 1.0)])


def test_simulate_network_cli_rate_options_and_disturbance(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["simulate", "network", "--topology", "dumbbell", "--jobs", "examples/jobs/dumbbell-pair.json",
            "--levels", "2", "--duration", "300", "--no-progress", "--json"]
    assert main(base) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main(base + ["--rate-half-life", "10", "--disturb", "h1>s1:60:30"]) == 0
    hit = json.loads(capsys.readouterr().out)
    assert hit["jobs"]["job1"]["rate"] < plain["jobs"]["job1"]["rate"] - 0.05
    for bad, msg in ((["--disturb", "h1>s1:60"], "--disturb"), (["--disturb", "q>s1:1:1"], "not a directed link"),
                     (["--rate-window", "-3"], "--rate-window")):
        assert main(base + bad) == 2
        assert msg in capsys.readouterr().err
