"""One JSON reader for the simulator's inputs: jobs files, sweep grids and Philly job logs fail alike."""

import pytest

from leveller.errors import UserError
from leveller.sim.network.jobs import load_jobs
from leveller.sim.network.jsonfile import read_json
from leveller.sim.network.tracefiles import read_trace
from leveller.sim.sweep import load_grid

READERS = [
    (lambda p: load_jobs(p, ["h1", "h2"]), "--jobs"),
    (load_grid, "--grid"),
    (lambda p: read_trace("philly", p), "philly cluster_job_log"),
]


@pytest.mark.parametrize("reader,what", READERS)
def test_every_reader_names_itself_and_the_problem(tmp_path, reader, what: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('[{"jobs": [1, 2,')  # a list cut short: the streaming Philly reader sees it too
    with pytest.raises(UserError, match=rf"^{what} '.*bad.json': not valid JSON \(Expecting"):
        reader(str(bad))
    with pytest.raises(UserError, match=rf"^{what} '.*absent.json': no such file$"):
        reader(str(tmp_path / "absent.json"))
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe[]")
    with pytest.raises(UserError, match=rf"^{what} '.*binary.json': not UTF-8 text"):
        reader(str(binary))


def test_a_directory_is_not_a_file(tmp_path) -> None:
    with pytest.raises(UserError, match="no such file"):
        read_json(str(tmp_path), "--grid")


def test_the_value_comes_back_as_parsed(tmp_path) -> None:
    path = tmp_path / "v.json"
    path.write_text('{"a": [1, 2.5, null, "é"]}', encoding="utf-8")
    assert read_json(str(path), "--grid") == {"a": [1, 2.5, None, "é"]}
