"""Trace files are untrusted input: every bad row is one UserError naming the file, the row and the field,
and the readers stop at the jobs they were asked for. One test per class of bad input (each crashed with
another exception before), and a hypothesis test over every reader that only UserError escapes."""

import csv
import io
import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leveller.errors import UserError
from leveller.sim.network import lingjun
from leveller.sim.network.jobs import load_jobs
from leveller.sim.network.topology import load_network
from leveller.sim.network.trace import synthetic
from leveller.sim.network.tracefiles import read_trace
from leveller.sim.sweep import load_grid

NET = load_network("fabric:gpus=128")  # 16 hosts: the default max_hosts fits
HELIOS = "job_id,gpu_num,submit_time,start_time,end_time,duration\n"
TIMES = "2020-04-01 00:00:00,2020-04-01 00:00:30,2020-04-01 00:10:30"
GOOD_HELIOS = f"j1,1,{TIMES},600\n"
ATTEMPT = {"start_time": "2017-10-03 02:46:01", "end_time": "2017-10-03 02:50:01",
           "detail": [{"ip": "m1", "gpus": ["gpu0"]}]}
LINGJUN_JOB = "job_name,gmt_job_submitted,gmt_job_running,gmt_job_finished\n"
GOOD_LINGJUN_JOB = "ja,2023/8/1 10:00,2023/8/1 10:01,2023/8/1 10:31\n"
LINGJUN_WORKER = "job_name,RES\n"
DEEP = "[" * 50_000 + "]" * 50_000
LONG_INT = "1" * 5000  # over Python's 4300 digits of int(str)


def helios(tmp_path: Path, rows: str) -> str:
    path = tmp_path / "cluster_log.csv"
    path.write_text(HELIOS + rows, encoding="utf-8")
    return str(path)


def philly(tmp_path: Path, text: str | list) -> str:
    path = tmp_path / "cluster_job_log"
    path.write_text(text if isinstance(text, str) else json.dumps(text), encoding="utf-8")
    return str(path)


def lingjun_dir(tmp_path: Path, jobs: str, workers: str) -> str:
    (tmp_path / "job.csv").write_text(LINGJUN_JOB + jobs, encoding="utf-8")
    (tmp_path / "worker.csv").write_text(LINGJUN_WORKER + workers, encoding="utf-8")
    return str(tmp_path)


def res(value: str) -> str:
    """A worker.csv RES field (a JSON object, CSV-quoted) whose nvidia.com/gpu is the JSON text ``value``."""
    return '"{""nvidia.com/gpu"": ' + value + '}"'


def refused(kind: str, path: str, *parts: str) -> str:
    """The message of reading ``path`` (through the simulator's trace option), checked to name each part."""
    with pytest.raises(UserError) as caught:
        synthetic(f"synthetic:arrivals={kind},file={path}", NET)
    message = str(caught.value)
    assert all(p in message for p in parts), message
    return message


@pytest.mark.parametrize("gpus", ["inf", "-inf", "1e999", "nan", LONG_INT, "-8", "1.5", "eight"])
def test_a_gpu_count_that_is_no_whole_number_is_named(tmp_path, gpus: str) -> None:
    path = helios(tmp_path, GOOD_HELIOS + f"j2,{gpus},{TIMES},600\n")
    refused("helios", path, path, "line 3", "gpu_num =", "a whole number of GPUs")


@pytest.mark.parametrize("value", ["1e999", "NaN", "Infinity", "-4", "2.5", '""many""'])  # CSV-quoted JSON text
def test_a_lingjun_worker_gpu_count_that_is_no_whole_number_is_named(tmp_path, value: str) -> None:
    path = lingjun_dir(tmp_path, GOOD_LINGJUN_JOB, f"ja,{res('8')}\nja,{res(value)}\n")
    refused("lingjun", path, "worker.csv", "line 3", "nvidia.com/gpu", "a whole number of GPUs")


@pytest.mark.parametrize("duration", ["inf", "nan", "-60", "1e300", "soon"])
def test_a_duration_that_is_no_finite_number_of_seconds_is_named(tmp_path, duration: str) -> None:
    path = helios(tmp_path, f"j1,1,{TIMES},{duration}\n")
    refused("helios", path, path, "line 2", "duration =", "seconds")


@pytest.mark.parametrize("field,value", [("submitted_time", 1506638472), ("submitted_time", ["2017-10-03"]),
                                         ("submitted_time", "next tuesday"),
                                         ("submitted_time", "0001-01-01 00:00:00")])  # before the epoch's zone
def test_a_philly_time_that_is_not_a_time_text_is_named(tmp_path, field: str, value) -> None:
    path = philly(tmp_path, [{"jobid": "a", field: value, "attempts": [ATTEMPT]}])
    refused("philly", path, path, "job [0]", f"{field} =", "a time like")


@pytest.mark.parametrize("attempt,field", [({**ATTEMPT, "detail": 5}, "attempts[0].detail ="),
                                           ({**ATTEMPT, "detail": [7]}, "attempts[0].detail[0] ="),
                                           ({**ATTEMPT, "detail": [{"gpus": 3}]}, "attempts[0].detail[0].gpus ="),
                                           ("attempt", "attempts[0] =")])
def test_a_philly_structure_of_the_wrong_type_is_named(tmp_path, attempt, field: str) -> None:
    path = philly(tmp_path, [{"jobid": "a", "submitted_time": "2017-10-03 02:45:01", "attempts": [attempt]}])
    refused("philly", path, path, "job [0]", field)


def test_an_integer_longer_than_python_reads_is_named(tmp_path) -> None:
    path = philly(tmp_path, '[{"jobid": "a", "submitted_time": ' + LONG_INT + "}]")
    refused("philly", path, path, "not valid JSON", "an integer of more than 4300 digits")
    path = lingjun_dir(tmp_path, GOOD_LINGJUN_JOB, f"ja,{res(LONG_INT)}\n")
    refused("lingjun", path, "worker.csv", "line 2", "RES =")
    for reader, what in ((lambda p: load_jobs(p, ["h1"]), "--jobs"), (load_grid, "--grid")):
        file = tmp_path / "f.json"
        file.write_text('{"jobs": [{"compute": ' + LONG_INT + "}]}")
        with pytest.raises(UserError, match=f"^{what} .*f.json': not valid JSON \\(an integer of more than 4300"):
            reader(str(file))


def test_json_nested_thousands_deep_is_named(tmp_path) -> None:
    refused("philly", philly(tmp_path, DEEP), "not valid JSON", "nested deeper than the parser goes")
    refused("philly", philly(tmp_path, "[" + DEEP + "]"), "not valid JSON", "nested deeper")
    for reader, what in ((lambda p: load_jobs(p, ["h1"]), "--jobs"), (load_grid, "--grid")):
        file = tmp_path / "f.json"
        file.write_text('{"jobs": ' + DEEP + "}")
        with pytest.raises(UserError, match=f"^{what} .*f.json': not valid JSON \\(nested deeper"):
            reader(str(file))


def test_a_csv_field_over_128_kib_is_named(tmp_path) -> None:
    long = "x" * (130 << 10)
    path = helios(tmp_path, GOOD_HELIOS + f"j2,1,{TIMES},600,{long}\n")
    refused("helios", path, path, "line 3", "not valid CSV", "field larger than field limit")
    path = lingjun_dir(tmp_path, GOOD_LINGJUN_JOB, f"ja,{res('8')}\n{long},{res('8')}\n")
    refused("lingjun", path, "worker.csv", "line 3", "not valid CSV")
    with pytest.raises(UserError, match="lingjun topo.csv line 3: not valid CSV"):
        lingjun.parse_topo_csv(f"ip,DSW,PSW,ASW\naa,G1,P2,S1\n{long},G1,P2,S1\n")


def test_text_that_is_not_utf8_is_named(tmp_path) -> None:
    path = tmp_path / "cluster_log.csv"
    path.write_bytes(HELIOS.encode() + GOOD_HELIOS.encode() + b"j2,\xff\xfe,x\n")
    refused("helios", str(path), "not UTF-8 text")
    path.write_bytes(b'[{"jobid": "\xff"}]')
    refused("philly", str(path), "not UTF-8 text")


def test_the_reader_stops_at_the_jobs_asked_for(tmp_path) -> None:
    # the first two jobs are good; what follows would be refused (or crashed before): it is never read
    rows = "".join(f"j{i},2,2020-04-01 00:0{i}:00,2020-04-01 00:0{i}:30,2020-04-01 00:1{i}:30,600\n"
                   for i in range(2))
    path = helios(tmp_path, rows + f"j9,inf,{TIMES},600\nj10,1,{'x' * (130 << 10)}\n")
    assert [j.name for j in read_trace("helios", path, limit=2)] == ["j0", "j1"]
    jobs, _ = synthetic(f"synthetic:arrivals=helios,file={path},jobs=2", NET)
    assert [j.arrival for j in jobs] == [0.0, 60.0]
    refused("helios", path, "line 4", "gpu_num")  # all 200 (the default) asked for: the bad row is reached
    good = [{"jobid": f"a{i}", "submitted_time": f"2017-10-03 02:4{5 - i}:01", "attempts": [ATTEMPT]}
            for i in range(3)]
    path = philly(tmp_path, json.dumps(good)[:-1] + ', {"jobid": "b", "submitted_time": 7}, ' + DEEP)
    assert [j.name for j in read_trace("philly", path, limit=3)] == ["a2", "a1", "a0"]  # by submit time
    assert len(read_trace("philly", path, limit=1)) == 1
    path = lingjun_dir(tmp_path, GOOD_LINGJUN_JOB + "jb,2023/8/1 10:02,x\n", f"ja,{res('8')}\n")
    assert [(j.name, j.gpus) for j in read_trace("lingjun", path, limit=1)] == [("ja", 8)]


def test_a_philly_list_read_in_pieces_is_what_json_loads_reads(tmp_path, monkeypatch) -> None:
    from leveller.sim.network import jsonfile

    monkeypatch.setattr(jsonfile, "CHUNK_CHARS", 7)  # every element cut by the buffer's end somewhere
    log = [{"jobid": f"app_{i}", "submitted_time": f"2017-10-03 0{i}:45:01", "status": "Pass", "n": 12345 + i,
            "attempts": [{**ATTEMPT, "start_time": f"2017-10-03 0{i}:46:01", "end_time": f"2017-10-03 0{i}:50:01"}]}
           for i in range(6)]
    path = philly(tmp_path, json.dumps(log, indent=2))
    assert list(jsonfile.iter_json_list(path, "x")) == log
    assert [(j.name, j.gpus, j.duration) for j in read_trace("philly", path)] == \
        [(f"app_{i}", 1, 240.0) for i in range(6)]
    for text, why in (("[1, 2", "not closed"), ("[1 2]", "expected ','"), ("[1] x", "text after the list"),
                      ("", "empty"), ('{"a": 1}', "expected a JSON list"), ("[1, ]", "Expecting value")):
        with pytest.raises(UserError, match=why):
            list(jsonfile.iter_json_list(philly(tmp_path, text), "x"))


# ---- fuzz: nothing but UserError escapes a reader ----------------------------------------------------

FIELDS = st.one_of(
    st.sampled_from(["2020-04-01 00:00:00", "2023/8/1 10:05", "2020-04-01 00:10:30", "", "None", "nan", "null",
                     "0001-01-01 00:00:00", "9999-12-31 23:59:59", "2020-13-01 00:00:00", "2020-04-01T00:00:00",
                     "0", "1", "8", "16", "-1", "1.5", "2.0", "inf", "-inf", "1e999", "nan", "NaN", LONG_INT,
                     "x" * (130 << 10), '"', "a\x00b", '{"nvidia.com/gpu": 8}', '{"nvidia.com/gpu": 1e999}',
                     '{"nvidia.com/gpu": "8"}', "[" * 3000, "{}", "[]"]),
    st.integers().map(str), st.floats().map(repr), st.text(max_size=12))
# JSON text that json.dumps cannot write, put in place of these markers by render()
RAW = {"@deep": DEEP, "@long": LONG_INT, "@big": "9" * 400, "@nan": "NaN", "@inf": "-Infinity", "@huge": "1e999"}
JSON_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=12),
                        st.sampled_from(["2017-10-03 02:45:01", "2017-10-03 03:45:01", "gpu0", *RAW]))
JSON = st.recursive(JSON_LEAVES, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                         st.dictionaries(st.text(max_size=6), inner, max_size=4)),
                    max_leaves=12)
ATTEMPTS = st.lists(st.fixed_dictionaries({}, optional={"start_time": JSON, "end_time": JSON, "detail": st.one_of(
    JSON, st.lists(st.fixed_dictionaries({}, optional={"gpus": st.one_of(JSON, st.lists(JSON))}), max_size=3))}),
    max_size=3)
PHILLY_JOBS = st.lists(st.one_of(JSON, st.fixed_dictionaries(
    {"jobid": JSON, "submitted_time": JSON}, optional={"attempts": st.one_of(JSON, ATTEMPTS)})), max_size=5)
CUTS = st.one_of(st.none(), st.integers(0, 400), st.sampled_from(["deep", "long", "bytes"]))
FUZZ = settings(max_examples=120, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def csv_text(header: list[str], rows: list[list[str]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(header)
    writer.writerows(rows)
    return out.getvalue()


def render(value) -> str:
    """JSON text of ``value`` with every RAW marker replaced by its hostile text."""
    text = json.dumps(value)
    for marker, raw in RAW.items():
        text = text.replace(json.dumps(marker), raw)
    return text


def spoil(text: str, cut) -> bytes:
    """The file's bytes, cut short, or with something hostile appended."""
    if cut == "deep":
        return (text + DEEP).encode()
    if cut == "long":
        return (text + LONG_INT).encode()
    if cut == "bytes":
        return text.encode() + b"\xff\xfe\x00"
    return text.encode()[:cut] if cut is not None else text.encode()


def only_user_errors(call) -> None:
    try:
        call()
    except UserError:
        pass


@FUZZ
@given(rows=st.lists(st.lists(FIELDS, min_size=4, max_size=7), max_size=4), cut=CUTS,
       limit=st.one_of(st.none(), st.integers(1, 3)))
def test_fuzz_helios_and_lingjun(rows, cut, limit) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        path = base / "cluster_log.csv"
        path.write_bytes(spoil(csv_text(HELIOS.strip().split(","), rows), cut))
        only_user_errors(lambda: read_trace("helios", str(path), limit))
        only_user_errors(lambda: synthetic(f"synthetic:arrivals=helios,file={path}", NET))
        (base / "job.csv").write_bytes(spoil(csv_text(LINGJUN_JOB.strip().split(","), [r[:4] for r in rows]), cut))
        (base / "worker.csv").write_text(csv_text(["job_name", "RES"], [r[:2] for r in rows]), encoding="utf-8")
        only_user_errors(lambda: read_trace("lingjun", tmp, limit))
        only_user_errors(lambda: synthetic(f"synthetic:arrivals=lingjun,file={tmp}", NET))
        only_user_errors(lambda: lingjun.parse_topo_csv(spoil(csv_text(["ip", "DSW", "PSW", "ASW"], rows), cut)
                                                        .decode("utf-8", "replace")))


@FUZZ
@given(jobs=PHILLY_JOBS, cut=CUTS, limit=st.one_of(st.none(), st.integers(1, 3)))
def test_fuzz_philly(jobs, cut, limit) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cluster_job_log"
        path.write_bytes(spoil(render(jobs), cut))
        only_user_errors(lambda: read_trace("philly", str(path), limit))
        only_user_errors(lambda: synthetic(f"synthetic:arrivals=philly,file={path},jobs={limit or 200}", NET))


@FUZZ
@given(value=st.one_of(JSON, st.fixed_dictionaries({"jobs": st.lists(st.one_of(JSON, st.fixed_dictionaries(
    {"name": JSON, "hosts": st.one_of(JSON, st.lists(st.sampled_from(["h1", "h2"])))},
    optional={"compute": JSON, "bytes": JSON, "arrival": JSON, "iterations": JSON, "slack": JSON})), max_size=3)}),
    st.fixed_dictionaries({"topology": JSON, "trace": JSON, "policy": JSON, "levels": JSON, "seed": JSON,
                           "duration": JSON}, optional={"tau": JSON, "switch_delta": JSON})), cut=CUTS)
def test_fuzz_jobs_and_grid_files(value, cut) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "f.json"
        path.write_bytes(spoil(render(value), cut))
        only_user_errors(lambda: load_jobs(str(path), ["h1", "h2"]))
        only_user_errors(lambda: load_grid(str(path)))
