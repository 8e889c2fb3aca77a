"""Readers of public GPU-cluster job traces: submit time, duration and GPU count per job.

- ``lingjun``: Alibaba Lingjun 2023 (alibaba/alibaba-lingjun-dataset-2023), a directory with
  ``job.csv`` (columns used: ``job_name``, ``gmt_job_submitted``, ``gmt_job_running``,
  ``gmt_job_finished``, else ``gmt_job_stopped``; times like ``2023/7/15 02:19``) and
  ``worker.csv`` (``job_name``, ``RES``: a JSON object whose ``nvidia.com/gpu`` is the
  worker's GPUs). A job's GPUs = the sum over its workers; duration = finished - running.
- ``philly``: Microsoft Philly (msr-fiddle/philly-traces) ``cluster_job_log``, a JSON list of
  jobs with ``jobid``, ``submitted_time`` and ``attempts``: [{``start_time``, ``end_time``,
  ``detail``: [{``ip``, ``gpus``: [...]}]}]; GPUs = those of the last attempt, duration =
  last end - first start; times like ``2017-10-03 02:45:01``.
- ``helios``: SenseTime Helios (S-Lab-System-Group/HeliosData) ``cluster_log.csv`` with
  ``job_id``, ``gpu_num``, ``submit_time``, ``start_time``, ``end_time`` (and ``duration``,
  used when present).

Jobs without GPUs or with missing or inverted times are skipped (they never ran on GPUs): a time is
missing when it is empty, null, ``None`` or ``nan``, a GPU count or duration when it is empty. A
trace file is untrusted input: anything else that is not what the format says (a time that is a
number or not a time, a GPU count or duration that is not a finite number in range, a ``detail``
that is not a list, a CSV field over 128 KiB, JSON nested too deep, an integer of over 4300
digits) is one UserError naming the file, the row (CSV line, or job index) and the field; nothing
else escapes. A missing file or column is one UserError naming it.

Rows are read one at a time and reading stops at ``limit`` jobs that ran on GPUs (the first ones of
the file: the public traces list jobs in submit order); they come back sorted by submit time.
Lingjun's worker.csv is read to its end first (a job's workers may be anywhere in it), keeping one
GPU count per job name.
"""

from __future__ import annotations

import contextlib
import csv
import itertools
import json
import math
import re
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from leveller.errors import UserError
from leveller.sim.network.jsonfile import iter_json_list

TIME_FORMATS = ("%Y/%m/%d %H:%M", "%Y/%m/%d %H:%M:%S", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M")
_ISO = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d(:\d\d)?", re.ASCII)  # matched whole: no T, zone or fraction
MISSING = ("", "none", "null", "nan")  # a time not recorded (a number not recorded is empty)
LINGJUN_JOB = ("job_name", "gmt_job_submitted", "gmt_job_running")
LINGJUN_WORKER = ("job_name", "RES")
HELIOS = ("job_id", "gpu_num", "submit_time", "start_time", "end_time")
MAX_GPUS = 1 << 20  # GPUs of one job (or worker): the largest clusters have about 100,000
MAX_SECONDS = 10 * 366 * 86400  # a job's duration: ten years is a unit or data error, not a job
MAX_NAME = 256  # characters of a job name


@dataclass(frozen=True)
class TraceJob:
    """One job of a trace: ``submit`` in s since the epoch, ``duration`` s of running, ``gpus``."""

    name: str
    submit: float
    duration: float
    gpus: int


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class _Row:
    """Where a value comes from (file, row, field), to name it in an error."""

    def __init__(self, what: str, path: str | Path, row: str) -> None:
        self.what, self.path, self.row = what, str(path), row

    def bad(self, field: str, value: Any, allowed: str) -> UserError:
        return UserError(f"{self.what} {self.path!r} {self.row}: {field} = {_show(value)} is invalid; {allowed}")


def parse_time(text: str | None) -> float | None:
    """Seconds since the epoch of a trace timestamp, None when empty or unreadable."""
    text = (text or "").strip()
    if text.lower() in MISSING:
        return None
    if _ISO.fullmatch(text):  # Philly's and Helios's form: fromisoformat reads it as strptime does, 10 times faster
        try:
            return datetime.fromisoformat(text).timestamp()
        except (ValueError, OverflowError):  # a month 13 (strptime says so too), a year 1 before the epoch's zone
            pass
    for fmt in TIME_FORMATS:
        try:
            return datetime.strptime(text, fmt).timestamp()
        except (ValueError, OverflowError):
            continue
    return None


def _time(where: _Row, field: str, value: Any) -> float | None:
    """A trace time: None when missing; UserError when it is not a text in one of TIME_FORMATS."""
    if value is None:
        return None
    if isinstance(value, str) and len(value) <= 64:
        if value.strip().lower() in MISSING:
            return None
        found = parse_time(value)
        if found is not None:
            return found
    raise where.bad(field, value, "a time like 2017-10-03 02:45:01 or 2023/7/15 02:19, or empty")


def _count(where: _Row, field: str, value: Any) -> int:
    """A GPU count from a CSV text or a JSON number: an integer 0..MAX_GPUS (empty or null: 0)."""
    rule = f"a whole number of GPUs, 0..{MAX_GPUS}"
    raw = value
    if value is None or (isinstance(value, str) and not value.strip()):
        return 0
    if isinstance(value, str):
        text = value.strip()
        try:
            value = int(text) if len(text) <= 32 else None
        except ValueError:
            try:
                value = float(text)
            except ValueError:
                value = None
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_GPUS:
        raise where.bad(field, raw, rule)
    return value


def _seconds(where: _Row, field: str, text: str) -> float | None:
    """A duration in seconds from a CSV text: None when empty, else a finite number 0..MAX_SECONDS."""
    if not text.strip():
        return None
    try:
        value = float(text) if len(text) <= 32 else math.nan
    except ValueError:
        value = math.nan
    if not 0 <= value <= MAX_SECONDS:  # NaN fails too
        raise where.bad(field, text, f"seconds, a number 0..{MAX_SECONDS}, or empty")
    return value


def _name(where: _Row, field: str, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)) or not 0 < len(str(value)) <= MAX_NAME:
        raise where.bad(field, value, f"a job name (text or integer) of 1-{MAX_NAME} characters")
    return str(value)


def _job(where: _Row, name: str, submit: float | None, start: float | None, end: float | None,
         gpus: int) -> TraceJob | None:
    """The job, or None (skipped) when it lacks a time or GPUs or its end is not after its start."""
    if submit is None or start is None or end is None or gpus <= 0 or end <= start:
        return None
    if end - start > MAX_SECONDS:
        raise where.bad("duration", end - start, f"at most {MAX_SECONDS} s (ten years): a unit or data error")
    return TraceJob(name, submit, end - start, gpus)


@contextlib.contextmanager
def _csv_file(path: Path, columns: Iterable[str], what: str) -> Iterator[Iterator[tuple[_Row, dict[str, str]]]]:
    """The (where, row) of a CSV file with a header, one at a time (missing fields come back as ''); the
    header is checked on entry, the file closed on exit."""
    if not path.is_file():
        raise UserError(f"{what}: no such file {str(path)!r}")
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh, restval="")

        def failed(exc: csv.Error | UnicodeDecodeError) -> UserError:
            line = reader.line_num + 1
            if isinstance(exc, UnicodeDecodeError):
                return UserError(f"{what} {str(path)!r} line {line}: not UTF-8 text ({exc.reason})")
            return UserError(f"{what} {str(path)!r} line {line}: not valid CSV ({exc})")

        try:
            header = reader.fieldnames
        except (csv.Error, UnicodeDecodeError) as exc:  # a field over csv.field_size_limit() (128 KiB), a NUL
            raise failed(exc) from None
        missing = [c for c in columns if c not in (header or [])]
        if missing:
            raise UserError(f"{what} {str(path)!r}: no column {missing[0]!r} (header: {_show(header)})")

        def rows() -> Iterator[tuple[_Row, dict[str, str]]]:
            try:
                for row in reader:
                    yield _Row(what, path, f"line {reader.line_num}"), row
            except (csv.Error, UnicodeDecodeError) as exc:
                raise failed(exc) from None

        yield rows()


def _gpus_of(where: _Row, res: str) -> int:
    """The ``nvidia.com/gpu`` of a Lingjun worker's RES (a JSON object; empty: none)."""
    if not res.strip():
        return 0
    try:
        value = json.loads(res)
    except (ValueError, RecursionError):  # JSONDecodeError, an integer of over 4300 digits, deep nesting
        raise where.bad("RES", res, 'a JSON object like {"nvidia.com/gpu": 8}') from None
    if not isinstance(value, dict):
        raise where.bad("RES", res, 'a JSON object like {"nvidia.com/gpu": 8}')
    return _count(where, "RES nvidia.com/gpu", value.get("nvidia.com/gpu"))


def read_lingjun(directory: str) -> Generator[TraceJob, None, None]:
    """Jobs of Lingjun's ``job.csv`` + ``worker.csv`` in ``directory``, in file order."""
    base = Path(directory)
    gpus: dict[str, int] = {}
    with _csv_file(base / "job.csv", LINGJUN_JOB, "lingjun job.csv") as jobs, \
            _csv_file(base / "worker.csv", LINGJUN_WORKER, "lingjun worker.csv") as workers:
        for where, w in workers:
            name = w["job_name"]
            total = gpus.get(name, 0) + _gpus_of(where, w["RES"])
            if total > MAX_GPUS:
                raise where.bad("RES nvidia.com/gpu", total, f"at most {MAX_GPUS} GPUs summed over a job's workers")
            if total:
                gpus[name] = total
        for where, row in jobs:
            end = _time(where, "gmt_job_finished", row.get("gmt_job_finished"))
            if end is None:
                end = _time(where, "gmt_job_stopped", row.get("gmt_job_stopped"))
            name = _name(where, "job_name", row["job_name"])
            job = _job(where, name, _time(where, "gmt_job_submitted", row["gmt_job_submitted"]),
                       _time(where, "gmt_job_running", row["gmt_job_running"]), end, gpus.get(name, 0))
            if job is not None:
                yield job


def _list(where: _Row, field: str, value: Any) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise where.bad(field, value, "a list or null")
    return value


def _object(where: _Row, field: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise where.bad(field, value, "an object")
    return value


def read_philly(path: str) -> Generator[TraceJob, None, None]:
    """Jobs of Philly's ``cluster_job_log`` (JSON), in file order."""
    what = "philly cluster_job_log"
    for i, job in enumerate(iter_json_list(path, what)):
        where = _Row(what, path, f"job [{i}]")
        if not isinstance(job, dict) or "jobid" not in job or "submitted_time" not in job:
            raise UserError(f"{what} {path!r}: job [{i}] lacks 'jobid' or 'submitted_time'")
        name = _name(where, "jobid", job["jobid"])
        submitted = _time(where, "submitted_time", job["submitted_time"])
        attempts = [_object(where, f"attempts[{k}]", a)
                    for k, a in enumerate(_list(where, "attempts", job.get("attempts")))]
        if not attempts:
            continue
        gpus = 0
        last = len(attempts) - 1
        for k, d in enumerate(_list(where, f"attempts[{last}].detail", attempts[-1].get("detail"))):
            entry = _object(where, f"attempts[{last}].detail[{k}]", d)
            gpus += len(_list(where, f"attempts[{last}].detail[{k}].gpus", entry.get("gpus")))
        if gpus > MAX_GPUS:
            raise where.bad(f"attempts[{last}].detail gpus", gpus, f"at most {MAX_GPUS} GPUs")
        found = _job(where, name, submitted, _time(where, "attempts[0].start_time", attempts[0].get("start_time")),
                     _time(where, f"attempts[{last}].end_time", attempts[-1].get("end_time")), gpus)
        if found is not None:
            yield found


def read_helios(path: str) -> Generator[TraceJob, None, None]:
    """Jobs of a Helios ``cluster_log.csv``, in file order."""
    with _csv_file(Path(path), HELIOS, "helios cluster_log.csv") as rows:
        for where, row in rows:
            gpus = _count(where, "gpu_num", row["gpu_num"])
            start = _time(where, "start_time", row["start_time"])
            end = _time(where, "end_time", row["end_time"])
            duration = _seconds(where, "duration", row.get("duration") or "")
            if start is not None and duration is not None:
                end = start + duration
            job = _job(where, _name(where, "job_id", row["job_id"]),
                       _time(where, "submit_time", row["submit_time"]), start, end, gpus)
            if job is not None:
                yield job


READERS: dict[str, Callable[[str], Generator[TraceJob, None, None]]] = {"lingjun": read_lingjun, "philly": read_philly,
                                                           "helios": read_helios}


def read_trace(kind: str, path: str, limit: int | None = None) -> list[TraceJob]:
    """The first ``limit`` jobs (all without one) that ran on GPUs of a ``kind`` trace at ``path``, by
    submit time; reading stops there. UserError if none ran on GPUs, or naming the bad row."""
    if kind not in READERS:
        raise UserError(f"trace format {kind!r} is unknown; allowed: {', '.join(READERS)}")
    with contextlib.closing(READERS[kind](path)) as rows:  # closing: the file is closed when reading stops early
        jobs = sorted(itertools.islice(rows, limit), key=lambda j: (j.submit, j.name))
    if not jobs:
        raise UserError(f"{kind} trace {path!r}: no job with GPUs and valid times")
    return jobs
