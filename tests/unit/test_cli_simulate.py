"""`leveller simulate link` contract (DESIGN.md), through leveller.cli.main."""

import json

import pytest

from leveller.cli import main

TOL = 0.005


def run_json(capsys, *argv: str) -> dict:  # type: ignore[no-untyped-def]
    assert main(["simulate", "link", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("policy,tau,expected", [
    ("fair", "0", [0.75, 0.75]),
    ("crux", "0", [1.0, 0.75]),
    ("leveller", "0", [0.857, 0.857]),
    ("leveller", "4", [0.857, 0.857]),
])
def test_pair(capsys, policy: str, tau: str, expected: list) -> None:  # type: ignore[no-untyped-def]
    out = run_json(capsys, "--job", "1:1", "--job", "1:2", "--policy", policy, "--tau", tau)
    assert out["policy"] == policy
    assert out["rates"] == pytest.approx(expected, abs=TOL)
    assert out["min"] == pytest.approx(min(expected), abs=TOL)
    assert out["avg"] == pytest.approx(sum(expected) / 2, abs=TOL)


def test_trio(capsys) -> None:  # type: ignore[no-untyped-def]
    trio = ["--job", "1:2", "--job", "1:2", "--job", "2:1"]
    assert run_json(capsys, *trio, "--policy", "fair")["rates"] == pytest.approx([0.5, 0.5, 0.667], abs=TOL)
    assert run_json(capsys, *trio, "--policy", "leveller")["rates"] == pytest.approx([0.6, 0.6, 0.6], abs=TOL)
    assert run_json(capsys, *trio, "--policy", "crux")["min"] == pytest.approx(0.0, abs=TOL)


def test_rates_follow_job_order(capsys) -> None:  # type: ignore[no-untyped-def]
    out = run_json(capsys, "--job", "1:2", "--job", "1:1", "--policy", "crux")
    assert out["rates"] == pytest.approx([0.75, 1.0], abs=TOL)


def test_gpus_change_crux_ranking(capsys) -> None:  # type: ignore[no-untyped-def]
    # Job 2 with 4 GPUs: intensity 4*1/2 = 2 > 1, so now Job 2 runs at full speed.
    out = run_json(capsys, "--job", "1:1", "--job", "1:2:4", "--policy", "crux")
    assert out["rates"][1] == pytest.approx(1.0, abs=TOL)
    assert out["rates"][0] < 0.9


def test_preset_and_cycles(capsys) -> None:  # type: ignore[no-untyped-def]
    out = run_json(capsys, "--preset", "fig3", "--policy", "leveller", "--cycles", "12")
    assert out["rates"] == pytest.approx([0.83, 0.83], abs=TOL)  # digest: R is 0.83 at t = 36
    assert out["horizon"] == 36


def test_table_and_timeline(capsys, tmp_path) -> None:  # type: ignore[no-untyped-def]
    png = tmp_path / "pair.png"
    assert main(["simulate", "link", "--preset", "fig3", "--policy", "fair", "--timeline", str(png)]) == 0
    out = capsys.readouterr().out
    assert "0.750" in out and "min R 0.750" in out
    assert png.read_bytes()[:4] == b"\x89PNG"


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
def test_bad_input(capsys, argv: list, words: list) -> None:  # type: ignore[no-untyped-def]
    assert main(["simulate", "link", *argv, "--json"]) == 2
    err = capsys.readouterr().err
    for word in words:
        assert word in err


def test_unknown_policy_is_rejected_with_choices(capsys) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "link", "--job", "1:1", "--policy", "fifo"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--policy" in err and "fair" in err and "leveller" in err
