"""`leveller simulate sweep`: grids, results files, resume, and a 2-worker Dask LocalCluster."""

import csv
import json
from pathlib import Path

import pytest

from leveller.errors import UserError
from leveller.sim.sweep import check_grid, load_grid, mean_ci, point_key, points, run_point, summarise, write_results

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
    assert json.loads(capsys.readouterr().out) == {"out": str(out), "points": 4, "errors": 1, "invalid_rerun": 0}
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
    (["--scheduler", "http://x"], "tls://HOST:PORT or tcp://HOST:PORT"),
    (["--scheduler", "ucx://h:1"], "tls://HOST:PORT or tcp://HOST:PORT"),
    (["--scheduler", "tcp://h:1", "--workers", "2"], "not both"),
])
def test_sweep_option_errors(tmp_path, capsys, argv, message: str) -> None:
    from leveller.cli import main

    path = tmp_path / "grid.json"
    path.write_text(json.dumps(grid()))
    assert main(["simulate", "sweep", "--grid", str(path), "--out", str(tmp_path / "o"), *argv]) == 2
    assert message in capsys.readouterr().err


# ---- bounds of a grid (issue 41) ----------------------------------------------------------------------

def test_a_duration_too_large_for_a_float_is_a_named_error() -> None:
    for duration in (10**400, 1e8, float("inf"), float("nan"), 0, True, "600"):
        with pytest.raises(UserError, match=r"duration = .* is invalid; simulated seconds, a number > 0 and at most "
                                            r"10000000"):
            check_grid(grid(duration=duration))


def test_a_grid_of_too_many_points_is_refused_before_they_are_made(tmp_path) -> None:
    from leveller.sim.sweep import MAX_POINTS, load_grid

    huge = {"topology": [f"t{i}" for i in range(40)], "trace": [f"s{i}" for i in range(40)],
            "policy": ["fair", "crux", "leveller", "cassini"], "levels": list(range(1, 9)), "seed": list(range(20)),
            "tau": list(range(10)), "switch_delta": [0, 1, 2, 3, 4], "switch_dwell": [0, 1], "duration": 10}
    path = tmp_path / "grid.json"
    path.write_text(json.dumps(huge, separators=(",", ":")))
    assert path.stat().st_size < 1024
    with pytest.raises(UserError, match=r"the grid has 102400000 points \(topology 40 x trace 40 x policy 4 x levels 8 "
                                        r"x seed 20 x tau 10 x switch_delta 5 x switch_dwell 2\); at most 100000"):
        load_grid(str(path))
    assert len(points(check_grid({**grid(), "seed": list(range(MAX_POINTS // 4))}))) == MAX_POINTS
    with pytest.raises(UserError, match="the grid has 100004 points"):
        check_grid({**grid(), "seed": list(range(MAX_POINTS // 4 + 1))})


@pytest.mark.parametrize("key,value,message", [
    ("topology", [[TOPOLOGY]], r"topology\[0\] = \[.* is invalid; a string of at most 4096 characters or a number"),
    ("seed", [1, {"a": 1}], r"seed\[1\] = \{'a': 1\} is invalid"),
    ("trace", ["x" * 5000], r"trace\[0\] = 'xxx.*\.\.\. is invalid"),
    ("levels", [None], r"levels\[0\] = None is invalid"),
])
def test_a_list_entry_that_is_no_string_or_number_is_named(key: str, value, message: str) -> None:
    with pytest.raises(UserError, match=message):
        check_grid(grid(**{key: value}))


def test_a_grid_file_over_a_mib_is_refused(tmp_path) -> None:
    from leveller.sim.sweep import load_grid

    path = tmp_path / "grid.json"
    path.write_text(json.dumps(grid(topology=[TOPOLOGY] * 30_000)))
    with pytest.raises(UserError, match=r"^--grid .*: larger than 1048576 bytes"):
        load_grid(str(path))


def test_a_number_too_large_for_a_float_in_a_point_is_named() -> None:
    row = run_point({**points(grid())[0], "tau": 10**400})
    assert row["error"].startswith("UserError: tau = 1000") and "a finite number >= 0" in row["error"]
    assert "seed = " in run_point({**points(grid())[0], "seed": 2**64})["error"]


# ---- results: every row checked, kept rows too (issue 41) ---------------------------------------------

GOOD = {"min": 0.5, "p10": 0.6, "avg": 0.7, "gpu_utilization": 0.4, "top_job_changes": 3, "congested_share": None,
        "measured": 4, "events": 100, "wall_seconds": 0.2}


@pytest.mark.parametrize("change,reason", [
    ({"min": "x"}, "min = 'x' is invalid; a finite number >= 0 or null"),
    ({"avg": float("nan")}, "avg = nan is invalid"),
    ({"gpu_utilization": None}, "gpu_utilization = None is invalid; a finite number >= 0"),
    ({"p10": -0.1}, "p10 = -0.1 is invalid"),
    ({"events": 1.5}, "events = 1.5 is invalid; an integer >= 0"),
    ({"top_job_changes": True}, "top_job_changes = True is invalid"),
    ({"wall_seconds": 10**400}, "wall_seconds = 1000"),
])
def test_check_row(change: dict, reason: str) -> None:
    from leveller.sim.sweep import check_row

    assert check_row(GOOD) is None
    assert check_row({**GOOD, "min": None, "p10": None, "avg": None}) is None  # no job measured
    assert reason in check_row({**GOOD, **change})
    assert check_row({k: v for k, v in GOOD.items() if k != "events"}) == "no 'events'"
    assert "is not an object" in check_row([1])


def write_rows(path, rows) -> None:
    path.mkdir(exist_ok=True)
    (path / "results.json").write_text(json.dumps(rows))


def test_resume_reruns_a_kept_row_that_is_no_valid_result_and_keeps_it_aside(tmp_path, capsys) -> None:
    pytest.importorskip("distributed")
    from leveller.cli import main

    g = grid(policy=["fair", "leveller", "crux"])
    path = tmp_path / "grid.json"
    path.write_text(json.dumps(g))
    fair, lev, crux = points(g)
    out = tmp_path / "out"
    bad = {**lev, **GOOD, "min": "not a number"}
    write_rows(out, [{**fair, **GOOD}, bad, {**fair, **GOOD, "min": 0.1}, {**crux, "error": "UserError: x"}, 7])
    assert main(["simulate", "sweep", "--grid", str(path), "--out", str(out), "--workers", "1", "--resume",
                 "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out) == {"out": str(out), "points": 3, "errors": 0, "invalid_rerun": 3}
    assert "row 1: min = 'not a number' is invalid" in captured.err
    assert "row 2: a second row of the same point" in captured.err and "row 4: not an object" in captured.err
    rows = json.loads((out / "results.json").read_text())
    assert rows[0] == {**fair, **GOOD}  # kept, not run again
    assert rows[1]["policy"] == "leveller" and 0 < rows[1]["min"] <= 1 and rows[1]["min"] != "not a number"
    assert rows[2]["policy"] == "crux" and "error" not in rows[2]  # an error row is run again, as before
    aside = json.loads((out / "results.invalid.json").read_text())
    assert [(a["row"], a["value"]) for a in aside] == [(1, bad), (2, {**fair, **GOOD, "min": 0.1}), (4, 7)]
    summary = json.loads((out / "summary.json").read_text())
    assert {s["policy"] for s in summary} == {"fair", "leveller", "crux"}


def test_resume_refuses_rows_that_are_no_point_of_the_grid(tmp_path, capsys) -> None:
    from leveller.cli import main

    path = tmp_path / "grid.json"
    path.write_text(json.dumps(grid(policy=["fair"])))
    out = tmp_path / "out"
    rows = [{**points(grid(policy=["fair"]))[0], **GOOD}, {**points(grid(policy=["crux"]))[0], **GOOD}]
    write_rows(out, rows)
    before = (out / "results.json").read_text()
    assert main(["simulate", "sweep", "--grid", str(path), "--out", str(out), "--workers", "1", "--resume"]) == 2
    assert "1 rows that are no point of this grid (first: row 1)" in capsys.readouterr().err
    assert (out / "results.json").read_text() == before  # nothing dropped


def test_a_new_row_with_bad_metrics_becomes_an_error_row() -> None:
    from leveller.sim.sweep import _result

    point = points(grid())[0]
    assert _result(point, {**point, **GOOD}) == {**point, **GOOD}
    assert _result(point, {**point, **GOOD, "min": float("inf")})["error"].startswith("ResultError: min = inf")
    assert _result(point, {"policy": "other", **GOOD}) == {**point, **GOOD}  # parameters are the point's own
    assert _result(point, {"error": "x" * 10_000})["error"] == "x" * 2000


def test_rows_computed_before_an_interruption_are_on_disk(tmp_path) -> None:
    distributed = pytest.importorskip("distributed")
    from leveller.sim.sweep import run_sweep

    g = grid(policy=["fair", "leveller", "crux"])

    def stop(done: int, total: int) -> None:
        if done >= 1:
            raise KeyboardInterrupt

    with distributed.Client(processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None) as client, \
            pytest.raises(KeyboardInterrupt):
        run_sweep(g, tmp_path, client, on_done=stop)
    rows = json.loads((tmp_path / "results.json").read_text())
    assert len(rows) == 1 and 0 < rows[0]["min"] <= 1


EXAMPLE_GRIDS = sorted((Path(__file__).resolve().parents[2] / "examples" / "sweeps").glob("*.json"))


@pytest.mark.parametrize("path", EXAMPLE_GRIDS, ids=lambda p: p.name)
def test_every_example_grid_loads_and_builds_its_networks_and_traces(path: Path) -> None:
    # EXPERIMENTS.md runs these files; a typo in a topology or trace option would surface only
    # when a point runs, minutes into a sweep.
    from leveller.model.limits import POLICIES
    from leveller.sim.network.topology import load_network
    from leveller.sim.network.trace import synthetic

    pts = points(load_grid(str(path)))
    assert pts and {p["policy"] for p in pts} <= set(POLICIES)
    for topology, trace in sorted({(p["topology"], p["trace"]) for p in pts}):
        net = load_network(topology)
        jobs, _ = synthetic(trace + ",seed=1", net)
        assert jobs


def test_the_example_grids_are_found() -> None:
    assert {"contended-1024.json", "oversub-1024-hour.json"} <= {p.name for p in EXAMPLE_GRIDS}
