"""`leveller simulate link` contract (docs/api.md), through leveller.cli.main."""

import json

import pytest

from leveller.cli import main

TOL = 0.005


def run_json(capsys, *argv: str) -> dict:
    assert main(["simulate", "link", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("policy,tau,expected", [
    ("fair", "0", [0.75, 0.75]),
    ("crux", "0", [1.0, 0.75]),
    ("leveller", "0", [0.857, 0.857]),
    ("leveller", "4", [0.857, 0.857]),
])
def test_pair(capsys, policy: str, tau: str, expected: list) -> None:
    out = run_json(capsys, "--job", "1:1", "--job", "1:2", "--policy", policy, "--tau", tau)
    assert out["policy"] == policy
    assert out["rates"] == pytest.approx(expected, abs=TOL)
    assert out["min"] == pytest.approx(min(expected), abs=TOL)
    assert out["avg"] == pytest.approx(sum(expected) / 2, abs=TOL)


def test_trio(capsys) -> None:
    trio = ["--job", "1:2", "--job", "1:2", "--job", "2:1"]
    assert run_json(capsys, *trio, "--policy", "fair")["rates"] == pytest.approx([0.5, 0.5, 0.667], abs=TOL)
    assert run_json(capsys, *trio, "--policy", "leveller")["rates"] == pytest.approx([0.6, 0.6, 0.6], abs=TOL)
    assert run_json(capsys, *trio, "--policy", "crux")["min"] == pytest.approx(0.0, abs=TOL)


def test_rates_follow_job_order(capsys) -> None:
    out = run_json(capsys, "--job", "1:2", "--job", "1:1", "--policy", "crux")
    assert out["rates"] == pytest.approx([0.75, 1.0], abs=TOL)


def test_gpus_change_crux_ranking(capsys) -> None:
    # Job 2 with 4 GPUs: intensity 4*1/2 = 2 > 1, so now Job 2 runs at full speed.
    out = run_json(capsys, "--job", "1:1", "--job", "1:2:4", "--policy", "crux")
    assert out["rates"][1] == pytest.approx(1.0, abs=TOL)
    assert out["rates"][0] < 0.9


def test_preset_and_cycles(capsys) -> None:
    out = run_json(capsys, "--preset", "fig3", "--policy", "leveller", "--cycles", "12")
    assert out["rates"] == pytest.approx([0.83, 0.83], abs=TOL)  # digest: R is 0.83 at t = 36
    assert out["horizon"] == 36


def test_table_and_timeline(capsys, tmp_path) -> None:
    png = tmp_path / "pair.png"
    assert main(["simulate", "link", "--preset", "fig3", "--policy", "fair", "--timeline", str(png)]) == 0
    out = capsys.readouterr().out
    assert "0.750" in out and "min R 0.750" in out
    # fair: the jobs share the link (the 'share' colour) and never wait behind a priority
    from leveller.sim.timeline import COLORS
    from tests.helpers.pictures import colour_pixels, shares

    drawn = shares(colour_pixels(png, COLORS))
    assert drawn["share"] > 0.25 and drawn["compute"] > 0.25 and drawn["wait"] < 0.01, drawn


@pytest.mark.parametrize("argv,words", [
    (["--job", "1:0"], ["--job", "communication time M", "> 0", "'0'"]),
    (["--job=-1:1"], ["compute time C", "> 0"]),
    (["--job", "1"], ["C:M[:G]"]),
    (["--job", "1:x"], ["communication time M", "'x'"]),
    (["--job", "1:1:0"], ["GPUs G", "integer >= 1"]),
    (["--job", "1:1", "--tau", "-2"], ["--tau", ">= 0", "'-2'"]),
    (["--job", "1:1", "--cycles", "0"], ["--cycles", ">= 1"]),
    (["--job", "1:1", "--levels", "0"], ["--levels", ">= 1"]),
    ([], ["--job", "--preset"]),
    (["--job", "1:1", "--preset", "fig3"], ["not both"]),
])
def test_bad_input(capsys, argv: list, words: list) -> None:
    assert main(["simulate", "link", *argv, "--json"]) == 2
    err = capsys.readouterr().err
    for word in words:
        assert word in err


def test_unknown_policy_is_rejected_with_choices(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "link", "--job", "1:1", "--policy", "fifo"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--policy" in err and "fair" in err and "leveller" in err


# ---- event budget and progress (issue 10, medium 9) ----------------------------------------------------

@pytest.mark.parametrize("argv", [
    ["--job", "1000000:0.000001", "--job", "1:2"],
    ["--preset", "fig3", "--cycles", "100000000"],
    ["--job", "1e300:1", "--job", "1:1"],
    ["--preset", "fig3", "--tau", "1e-9"],
])
def test_runs_over_the_event_budget_are_refused_at_once(argv: list) -> None:
    """These ran for hours without a word; now they are refused before starting, naming the budget.
    (A subprocess, so that a regression fails on the timeout instead of hanging the suite.)"""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "leveller.cli", "simulate", "link", *argv, "--json"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stdout == ""
    assert "--max-events 1,000,000" in out.stderr and "events" in out.stderr, out.stderr


def test_the_budget_can_be_raised_and_lowered(capsys) -> None:
    assert main(["simulate", "link", "--preset", "fig3", "--max-events", "7504", "--json"]) == 2
    assert "up to 7,505 events" in capsys.readouterr().err
    out = run_json(capsys, "--preset", "fig3", "--max-events", "7505")
    assert out["events"] == 4500 and out["rates"] == pytest.approx([0.857, 0.857], abs=TOL)
    assert main(["simulate", "link", "--preset", "fig3", "--max-events", "0"]) == 2
    assert "--max-events must be an integer >= 1" in capsys.readouterr().err


def test_progress_is_shown_on_a_terminal_and_json_stays_clean() -> None:
    import os
    import pty
    import subprocess
    import sys

    master, slave = pty.openpty()
    try:
        proc = subprocess.run([sys.executable, "-m", "leveller.cli", "simulate", "link", "--preset", "fig3",
                               "--cycles", "3000", "--json"], stdout=subprocess.PIPE, stderr=slave, timeout=120,
                              env=dict(os.environ, COLUMNS="100"))
        os.close(slave)
        shown = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the terminal's other end is closed and drained
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(master)
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["rates"] == pytest.approx([0.857, 0.857], abs=TOL)
    assert b"simulating (up to 15,005 events)" in shown and b"%" in shown
