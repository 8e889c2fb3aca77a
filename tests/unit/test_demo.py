"""`leveller demo --model-only`: the paper's worked examples on the fluid model (table / JSON / PNGs),
and the live demo's argument checks (which fail before anything is built)."""

import json

import pytest

from leveller.cli import main

TOL = 0.005


def test_model_json_and_pictures(capsys, tmp_path) -> None:
    assert main(["demo", "--model-only", "--json", "--out", str(tmp_path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["pair"]["fair"] == pytest.approx([0.75, 0.75], abs=TOL)
    assert out["pair"]["crux"] == pytest.approx([1.0, 0.75], abs=TOL)
    assert out["pair"]["leveller"] == pytest.approx([0.857, 0.857], abs=TOL)
    assert out["trio"]["fair"] == pytest.approx([0.5, 0.5, 0.667], abs=TOL)
    assert out["trio"]["leveller"] == pytest.approx([0.6, 0.6, 0.6], abs=TOL)
    assert out["trio"]["crux"][1] == pytest.approx(0.0, abs=TOL)
    # one panel per policy: fair shares the link, crux and leveller make a job wait (strict priority);
    # in the trio, crux starves job 2: its panel is one long wait
    from leveller.sim.timeline import COLORS
    from tests.helpers.pictures import colour_pixels, shares

    for name in ("pair-model-timeline.png", "trio-model-timeline.png"):
        drawn = shares(colour_pixels(tmp_path / name, COLORS))
        assert drawn["share"] > 0.05 and drawn["wait"] > 0.05 and drawn["compute"] > 0.15, (name, drawn)
    trio, pair = (shares(colour_pixels(tmp_path / f"{n}-model-timeline.png", COLORS)) for n in ("trio", "pair"))
    assert trio["wait"] > pair["wait"], (trio, pair)


def test_model_table(capsys) -> None:
    assert main(["demo", "--model-only", "--no-plots", "--cycles", "300"]) == 0
    out = capsys.readouterr().out
    assert "pair" in out and "trio" in out and "0.857" in out and "0.600" in out


def test_model_bad_cycles(capsys) -> None:
    assert main(["demo", "--model-only", "--no-plots", "--cycles", "0"]) == 2
    assert "--cycles" in capsys.readouterr().err


@pytest.mark.parametrize("args, field", [(["--unit", "0"], "--unit"), (["--seconds", "3"], "--seconds"),
                                         (["--policies", "fair,fifo"], "--policies"),
                                         (["--examples", "quartet"], "--examples")])
def test_live_demo_bad_options_fail_before_building(capsys, args, field) -> None:
    assert main(["demo", "--no-plots", *args]) == 2
    err = capsys.readouterr().err
    assert field in err
