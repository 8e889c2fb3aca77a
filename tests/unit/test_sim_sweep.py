"""`leveller simulate sweep`: grids, results files, resume, and a 2-worker Dask LocalCluster."""

import csv
import json

import pytest

from leveller.errors import UserError
from leveller.sim.sweep import check_grid, mean_ci, point_key, points, run_point, summarise, write_results

TOPOLOGY = "fabric:gpus=32,gpus_per_host=4,hosts_per_leaf=2,spines=2"
TRACE = "synthetic:jobs=4,min_s=5,max_s=10,max_hosts=4"


def grid(**over) -> dict:
    return {"topology": [TOPOLOGY], "trace": [TRACE], "policy": ["fair", "leveller", "crux", "pfabric"],
            "levels": [2], "seed": [1], "duration": 30, **over}


def test_points_are_the_product_of_the_lists() -> None:
    g = check_grid({**grid(), "policy": ["fair", "leveller"], "seed": [1, 2], "tau": [0, 5]})
    ps = points(g)
    assert len(ps) == 8 and all(p["duration"] == 30 for p in ps)
    assert len({point_key(p) for p in ps}) == 8
    assert ps[0] == {"topology": TOPOLOGY, "trace": TRACE, "policy": "fair", "levels": 2, "seed": 1, "tau": 0,
                     "duration": 30}


@pytest.mark.parametrize("bad,message", [
    ([], "expected a JSON object"),
    ({**grid(), "colour": ["red"]}, "unknown key 'colour'"),
    ({k: v for k, v in grid().items() if k != "levels"}, "missing key 'levels'"),
    ({**grid(), "jobs": ["a.json"]}, "exactly one of 'jobs'"),
    ({**grid(), "seed": []}, "seed = \\[\\] is invalid"),
    ({**grid(), "duration": -1}, "duration = -1 is invalid"),
])
def test_grid_errors(bad, message: str) -> None:
    with pytest.raises(UserError, match=message):
        check_grid(bad)


def test_a_bad_point_is_one_named_error() -> None:
    row = run_point({**points(grid())[0], "topology": "fabric:gpus=100"})
    assert row["topology"] == "fabric:gpus=100" and "multiple of gpus_per_host" in row["error"]
    assert "UserError" in row["error"] and "min" not in row
    assert "levels = 0" in run_point({**points(grid())[0], "levels": 0})["error"]


def test_results_files_and_summary(tmp_path) -> None:
    rows = [{"topology": "t", "policy": "fair", "levels": 2, "seed": s, "duration": 1, "min": m, "p10": m,
             "avg": m, "gpu_utilization": 0.5, "top_job_changes": 0} for s, m in ((1, 0.5), (2, 0.7))]
    rows.append({"topology": "t", "policy": "x", "levels": 2, "seed": 1, "duration": 1, "error": "UserError: x"})
    write_results(tmp_path, rows)
    assert json.loads((tmp_path / "results.json").read_text()) == rows
    table = list(csv.DictReader((tmp_path / "results.csv").open()))
    assert [r["policy"] for r in table] == ["fair", "fair", "x"] and table[2]["error"] == "UserError: x"
    summary = summarise(rows)
    fair = next(s for s in summary if s["policy"] == "fair")
    assert fair["seeds"] == 2 and fair["min"]["mean"] == pytest.approx(0.6)
    assert fair["min"]["ci95"] == pytest.approx(12.706 * 0.1414214 / 2 ** 0.5, rel=1e-3)
    assert next(s for s in summary if s["policy"] == "x")["errors"] == 1
    assert mean_ci([0.3]) == (0.3, 0.0)


def test_sweep_on_a_two_worker_local_cluster(tmp_path, capsys) -> None:
    pytest.importorskip("distributed")
    from leveller.cli import main

    path = tmp_path / "grid.json"
    path.write_text(json.dumps(grid()))
    out = tmp_path / "out"
    assert main(["simulate", "sweep", "--grid", str(path), "--out", str(out), "--workers", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"out": str(out), "points": 4, "errors": 1}
    rows = json.loads((out / "results.json").read_text())
    assert [r["policy"] for r in rows] == ["fair", "leveller", "crux", "pfabric"]
    done = [r for r in rows if "error" not in r]
    assert len(done) == 3 and all(0 < r["min"] <= 1 and "top_job_changes" in r for r in done)
    failed = [r for r in rows if "error" in r]
    assert len(failed) == 1 and "policy = 'pfabric' is unknown" in failed[0]["error"]
    assert (out / "results.csv").is_file() and (out / "summary.png").is_file()
    # without --resume the results are kept from being overwritten; with it, done points are not re-run
    assert main(["simulate", "sweep", "--grid", str(path), "--out", str(out), "--workers", "1"]) == 2
    assert "--resume" in capsys.readouterr().err
    before = {r["policy"]: r.get("wall_seconds") for r in rows}
    assert main(["simulate", "sweep", "--grid", str(path), "--out", str(out), "--workers", "1", "--resume",
                 "--json"]) == 0
    again = json.loads((out / "results.json").read_text())
    assert {r["policy"]: r.get("wall_seconds") for r in again} == before


@pytest.mark.parametrize("argv,message", [
    (["--workers", "0"], "--workers = 0"),
    (["--scheduler", "http://x"], "tcp://HOST:PORT"),
    (["--scheduler", "tcp://h:1", "--workers", "2"], "not both"),
])
def test_sweep_option_errors(tmp_path, capsys, argv, message: str) -> None:
    from leveller.cli import main

    path = tmp_path / "grid.json"
    path.write_text(json.dumps(grid()))
    assert main(["simulate", "sweep", "--grid", str(path), "--out", str(tmp_path / "o"), *argv]) == 2
    assert message in capsys.readouterr().err
