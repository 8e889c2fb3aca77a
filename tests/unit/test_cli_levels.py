"""`leveller levels` contract (docs/api.md), through leveller.cli.main."""

import json
from pathlib import Path

import pytest

from leveller.cli import main

FIG6 = {
    "jobs": {"J1": {"rate": 0.4}, "J2": {"rate": 0.5}, "J3": {"rate": 0.7}, "J4": {"rate": 0.9}},
    "flows": {
        "f1": {"job": "J1", "links": ["S1", "S2"]},
        "f21": {"job": "J2", "links": ["S1"]},
        "f22": {"job": "J2", "links": ["S3", "S4"]},
        "f3": {"job": "J3", "links": ["S2"]},
        "f4": {"job": "J4", "links": ["S3", "S4"]},
    },
}


def write(tmp_path: Path, data: object) -> str:
    path = tmp_path / "in.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def test_figure6(capsys, tmp_path) -> None:
    assert main(["levels", "--input", write(tmp_path, FIG6), "--levels", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {"levels": {"f1": 1, "f21": 0, "f22": 1, "f3": 0, "f4": 0}}


def test_ranking_uses_rates_not_names(capsys, tmp_path) -> None:
    data = json.loads(json.dumps(FIG6))
    data["jobs"]["J1"]["rate"] = 0.95  # J1 now best off: J2 leads the first part
    assert main(["levels", "--input", write(tmp_path, data), "--levels", "2", "--json"]) == 0
    levels = json.loads(capsys.readouterr().out)["levels"]
    assert levels["f21"] == 1 and levels["f22"] == 1 and levels["f1"] == 0


def test_equal_rates_tie_goes_to_job_listed_first(capsys, tmp_path) -> None:
    data = {"jobs": {"B": {"rate": 0.5}, "A": {"rate": 0.5}},
            "flows": {"a": {"job": "A", "links": ["L"]}, "b": {"job": "B", "links": ["L"]}}}
    assert main(["levels", "--input", write(tmp_path, data), "--levels", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"levels": {"a": 0, "b": 1}}


def table_rows(text: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("│").split("│")] for line in text.splitlines() if line.startswith("│")]


@pytest.mark.parametrize("k,levels", [
    ("2", {"f1": 1, "f21": 0, "f22": 1, "f3": 0, "f4": 0}),  # Figure 6
    ("3", {"f1": 2, "f21": 1, "f22": 2, "f3": 1, "f4": 1}),
    ("1", {"f1": 0, "f21": 0, "f22": 0, "f3": 0, "f4": 0}),
])
def test_table_shows_every_flow_with_its_job_rate_links_and_level(capsys, tmp_path, k, levels) -> None:
    assert main(["levels", "--input", write(tmp_path, FIG6), "--levels", k]) == 0
    out = capsys.readouterr().out
    assert f"{k} levels (K-1 = highest priority)" in out
    rows = table_rows(out)
    got = {r[0]: (r[1], float(r[2]), r[3].split(","), int(r[4])) for r in rows}
    assert got == {f: (spec["job"], FIG6["jobs"][spec["job"]]["rate"], spec["links"], levels[f])
                   for f, spec in FIG6["flows"].items()}
    shown = [int(r[4]) for r in rows]
    assert shown == sorted(shown, reverse=True)  # highest level first


@pytest.mark.parametrize("data,k,words", [
    (FIG6, "0", ["--levels", ">= 1", "0"]),
    ("{not json", "2", ["malformed JSON", "line 1"]),
    ([1, 2], "2", ["'jobs'", "'flows'"]),
    ({"jobs": {}, "flows": {}}, "2", ["'jobs'", "non-empty"]),
    ({"jobs": {"J1": {"rate": -0.1}}, "flows": {}}, "2", ["jobs.J1.rate", ">= 0", "-0.1"]),
    ({"jobs": {"J1": {"rate": "fast"}}, "flows": {}}, "2", ["jobs.J1.rate", "'fast'"]),
    ({"jobs": {"J1": {"rate": 0.5}}, "flows": {"f": {"job": "J9", "links": ["L"]}}}, "2",
     ["flows.f.job", "'J9'", "known: J1"]),
    ({"jobs": {"J1": {"rate": 0.5}}, "flows": {"f": {"job": "J1", "links": []}}}, "2",
     ["flows.f.links", "non-empty list"]),
])
def test_bad_input(capsys, tmp_path, data, k, words) -> None:
    assert main(["levels", "--input", write(tmp_path, data), "--levels", k, "--json"]) == 2
    err = capsys.readouterr().err
    for word in words:
        assert word in err


def test_missing_file(capsys, tmp_path) -> None:
    assert main(["levels", "--input", str(tmp_path / "nope.json"), "--levels", "2"]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_too_many_flows_are_refused_before_any_work(capsys, tmp_path, monkeypatch) -> None:
    import leveller.commands.levels as levels_cmd

    monkeypatch.setattr(levels_cmd, "MAX_FLOWS", 4)
    assert main(["levels", "--input", write(tmp_path, FIG6), "--levels", "2", "--json"]) == 2
    err = capsys.readouterr().err
    assert "'flows' has 5 flows; at most 4" in err
    monkeypatch.setattr(levels_cmd, "MAX_FILE_BYTES", 100)
    assert main(["levels", "--input", write(tmp_path, FIG6), "--levels", "2", "--json"]) == 2
    assert "MiB; at most" in capsys.readouterr().err


def test_long_tables_are_cut_with_a_note(capsys, tmp_path, monkeypatch) -> None:
    import leveller.commands.levels as levels_cmd

    monkeypatch.setattr(levels_cmd, "MAX_TABLE_ROWS", 2)
    assert main(["levels", "--input", write(tmp_path, FIG6), "--levels", "2"]) == 0
    out = capsys.readouterr().out
    assert "3 more flows (--json prints them all)" in out
    assert "f1" in out and "S1,S2" in out  # highest level first, with its links


def test_bench_cluster_file_round_trips_through_levels(capsys, tmp_path) -> None:
    """`leveller bench controller --write-levels` writes a FILE that `leveller levels` decides in full."""
    path = tmp_path / "cluster.json"
    assert main(["bench", "controller", "--write-levels", str(path), "--flows", "500"]) == 0
    assert main(["levels", "--input", str(path), "--levels", "8", "--json"]) == 0
    levels = json.loads(capsys.readouterr().out)["levels"]
    data = json.loads(path.read_text())
    assert len(data["jobs"]) == 37 and list(levels) == list(data["flows"]) and len(levels) == 500
    assert set(levels.values()) <= set(range(8)) and 7 in levels.values()
