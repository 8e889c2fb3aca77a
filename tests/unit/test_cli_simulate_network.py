"""`leveller simulate network` contract (docs/api.md) and its errors, through leveller.cli.main."""

import json
from pathlib import Path

import pytest

from leveller.cli import main

RATE = 50e6 / 8  # the dumbbell preset's bottleneck, bytes/s


def jobs_file(tmp_path: Path, jobs: list) -> str:
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps({"jobs": jobs}))
    return str(path)


PAIR = [{"name": "a", "hosts": ["h1", "h3"], "compute": 1, "bytes": RATE},
        {"name": "b", "hosts": ["h2", "h4"], "compute": 1, "bytes": 2 * RATE}]


def run(capsys, *argv: str):
    code = main(["simulate", "network", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_json_contract(tmp_path, capsys) -> None:
    code, out, _ = run(capsys, "--topology", "dumbbell", "--jobs", jobs_file(tmp_path, PAIR),
                       "--policy", "leveller", "--levels", "2", "--duration", "1500", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["policy"] == "leveller"
    assert set(data["jobs"]) == {"a", "b"}
    for job in data["jobs"].values():
        assert job["rate"] == pytest.approx(0.857, abs=0.01)
        assert job["finish"] is None and job["iterations"] > 0
    assert data["min"] <= data["p10"] <= data["avg"]
    assert 0 < data["gpu_utilization"] < 1
    assert data["sim_seconds"] == 1500 and data["events"] > 0


def test_several_policies_give_a_list_and_plots(tmp_path, capsys) -> None:
    plots = tmp_path / "plots"
    code, out, _ = run(capsys, "--topology", "dumbbell", "--jobs", jobs_file(tmp_path, PAIR),
                       "--policy", "fair,leveller", "--duration", "300", "--plot", str(plots), "--json")
    assert code == 0
    runs = json.loads(out)
    assert [r["policy"] for r in runs] == ["fair", "leveller"]
    assert runs[0]["min"] < runs[1]["min"]
    names = sorted(p.name for p in plots.iterdir())
    assert names == ["cdf-rate.png", "link-utilisation.png", "rate-over-time-fair.png",
                     "rate-over-time-leveller.png"]
    # one line per policy run, in the policy's colour, and none for the policies not run
    from leveller.sim.network.plots import COLORS
    from tests.helpers.pictures import colour_pixels

    for name in ("cdf-rate.png", "link-utilisation.png"):
        drawn = colour_pixels(plots / name, COLORS)
        assert drawn["fair"] > 100 and drawn["leveller"] > 100, (name, drawn)
        assert drawn["crux"] == 0 and drawn["cassini"] == 0, (name, drawn)


def test_synthetic_trace_table(capsys) -> None:
    code, out, _ = run(capsys, "--topology", "fabric:gpus=64,gpus_per_host=4,hosts_per_leaf=2,spines=2",
                       "--trace", "synthetic:jobs=6,min_s=5,max_s=10,max_hosts=4", "--seed", "2",
                       "--policy", "fair", "--duration", "60")
    assert code == 0
    assert "min R" in out and "rail-style leaf-spine" in out


@pytest.mark.parametrize("jobs,message", [
    ([{**PAIR[0], "hosts": ["h1", "h9"]}], "unknown host 'h9'"),
    ([{**PAIR[0], "bytes": 0}], "bytes = 0 is invalid"),
    ([{**PAIR[0], "compute": -1}], "compute = -1 is invalid"),
    ([{**PAIR[0], "arrival": -5}], "arrival = -5 is invalid"),
    ([{**PAIR[0], "slack": 2}], "slack = 2 is invalid"),
    ([{**PAIR[0], "iterations": 0}], "iterations = 0 is invalid"),
    ([PAIR[0], PAIR[0]], "used twice"),
    ([{**PAIR[0], "gpus": 4}], "unknown key 'gpus'"),
])
def test_bad_jobs_fail_before_the_run(tmp_path, capsys, jobs, message) -> None:
    code, out, err = run(capsys, "--topology", "dumbbell", "--jobs", jobs_file(tmp_path, jobs),
                         "--duration", "10", "--json")
    assert code == 2 and out == ""
    assert message in err


@pytest.mark.parametrize("argv,message", [
    (["--trace", "synthetic:max_hosts=8"], "cannot place a job"),
    (["--trace", "synthetic:jobs=2", "--policy", "leveller,leveller"], "listed twice"),
    (["--trace", "synthetic:jobs=2", "--policy", "pfabric"], "unknown policy 'pfabric'"),
    (["--trace", "synthetic:jobs=2", "--levels", "9"], "--levels = 9"),
    (["--trace", "synthetic:jobs=2", "--tau", "-1"], "--tau = '-1'"),
    (["--trace", "replay:x.csv"], "allowed: synthetic:KEY=V"),
])
def test_bad_options_fail_before_the_run(capsys, argv, message) -> None:
    code, out, err = run(capsys, "--topology", "dumbbell", *argv, "--duration", "10", "--json")
    assert code == 2 and out == ""
    assert message in err


def test_endless_job_needs_a_duration(tmp_path, capsys) -> None:
    code, _, err = run(capsys, "--topology", "dumbbell", "--jobs", jobs_file(tmp_path, PAIR), "--json")
    assert code == 2 and "give --duration" in err


def test_no_path_between_hosts(tmp_path) -> None:
    from leveller.core.topology import Host, Link, Switch, Topology
    from leveller.errors import UserError
    from leveller.sim.network.jobs import check_paths, parse_jobs
    from leveller.sim.network.topology import Network

    # Two islands (the testbed validator refuses such a file; the simulator checks on its own too).
    topo = Topology((Host("a", "10.0.0.1", "02:00:00:00:00:01"), Host("b", "10.0.0.2", "02:00:00:00:00:02")),
                    (Switch("s1", 1), Switch("s2", 2)), (Link("a", "s1", 100.0), Link("b", "s2", 100.0)))
    net = Network("islands", topo, {"a": ("a",), "b": ("b",)}, 1)
    jobs = parse_jobs({"jobs": [{"name": "x", "hosts": ["a", "b"], "compute": 1, "bytes": 10}]}, ["a", "b"])
    with pytest.raises(UserError, match="no path between hosts 'a' and 'b'"):
        check_paths(jobs, net)


def test_help_teaches_with_examples(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["simulate", "network", "--help"])
    out = capsys.readouterr().out
    assert "fabric:gpus=1024" in out and "synthetic:jobs=200" in out and "--policy" in out


def test_bench_network_sim_prints_figures(capsys) -> None:
    assert main(["bench", "network-sim", "--gpus", "128", "--policy", "fair", "--jobs", "80",
                 "--duration", "900", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["128"]["fair"]
    assert row["jobs"] == 10 and row["sim_seconds"] == 900
    assert row["iterations"] > 0 and row["events"] > 0 and row["events_per_s"] > 0
    assert row["water_filling"] in ("numba", "numpy")


def test_example_pair_file(capsys) -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "jobs" / "dumbbell-pair.json"
    code, out, _ = run(capsys, "--topology", "dumbbell", "--jobs", str(example), "--policy", "crux",
                       "--levels", "2", "--duration", "3000", "--json")
    assert code == 0
    rates = [j["rate"] for j in json.loads(out)["jobs"].values()]
    assert rates == pytest.approx([1.0, 0.75], abs=0.01)


def test_contended_trace_on_the_paper_testbed_json(capsys) -> None:
    code, out, _ = run(capsys, "--topology", "paper-testbed",
                       "--trace", "contended:jobs=4,max_hosts=4,min_s=20,max_s=40",
                       "--policy", "fair,leveller", "--levels", "2", "--duration", "120", "--json")
    assert code == 0
    fair, leveller = json.loads(out)
    for r in (fair, leveller):
        assert r["measured"] >= 1 and 0 < r["min"] <= 1
        assert 0 <= r["congested_share"] <= 1 and isinstance(r["top_job_changes"], int)
    assert all(j["gpus"] in (2, 4) for j in fair["jobs"].values() if j["start"] is not None)
