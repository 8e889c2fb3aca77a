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

Jobs without GPUs or with missing or inverted times are skipped (they never ran on GPUs);
a file that is missing or lacks a column is one UserError naming the file and the column.
Rows come back sorted by submit time.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from leveller.errors import UserError
from leveller.sim.network.jsonfile import read_json

TIME_FORMATS = ("%Y/%m/%d %H:%M", "%Y/%m/%d %H:%M:%S", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M")
LINGJUN_JOB = ("job_name", "gmt_job_submitted", "gmt_job_running")
LINGJUN_WORKER = ("job_name", "RES")
HELIOS = ("job_id", "gpu_num", "submit_time", "start_time", "end_time")


@dataclass(frozen=True)
class TraceJob:
    """One job of a trace: ``submit`` in s since the epoch, ``duration`` s of running, ``gpus``."""

    name: str
    submit: float
    duration: float
    gpus: int


def parse_time(text: str | None) -> float | None:
    """Seconds since the epoch of a trace timestamp, None when empty or unreadable."""
    text = (text or "").strip()
    if not text or text.lower() in ("none", "null", "nan"):
        return None
    for fmt in TIME_FORMATS:
        try:
            return datetime.strptime(text, fmt).timestamp()
        except ValueError:
            continue
    return None


def _csv_rows(path: Path, columns: Iterable[str], what: str) -> list[dict[str, str]]:
    if not path.is_file():
        raise UserError(f"{what}: no such file {str(path)!r}")
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in columns if c not in (reader.fieldnames or [])]
        if missing:
            raise UserError(f"{what} {str(path)!r}: no column {missing[0]!r} (header: {reader.fieldnames})")
        return list(reader)


def _gpus_of(res: str) -> int:
    try:
        value = json.loads(res or "{}")
    except json.JSONDecodeError:
        return 0
    if not isinstance(value, dict):
        return 0
    try:
        return int(float(value.get("nvidia.com/gpu", 0) or 0))
    except (TypeError, ValueError):
        return 0


def _job(name: str, submit: float | None, start: float | None, end: float | None, gpus: int) -> TraceJob | None:
    if submit is None or start is None or end is None or gpus <= 0 or end <= start:
        return None
    return TraceJob(name, submit, end - start, gpus)


def read_lingjun(directory: str) -> list[TraceJob]:
    """Jobs of Lingjun's ``job.csv`` + ``worker.csv`` in ``directory``."""
    base = Path(directory)
    jobs = _csv_rows(base / "job.csv", LINGJUN_JOB, "lingjun job.csv")
    workers = _csv_rows(base / "worker.csv", LINGJUN_WORKER, "lingjun worker.csv")
    gpus: dict[str, int] = {}
    for w in workers:
        gpus[w["job_name"]] = gpus.get(w["job_name"], 0) + _gpus_of(w["RES"])
    out = []
    for row in jobs:
        end = parse_time(row.get("gmt_job_finished")) or parse_time(row.get("gmt_job_stopped"))
        job = _job(row["job_name"], parse_time(row["gmt_job_submitted"]), parse_time(row["gmt_job_running"]), end,
                   gpus.get(row["job_name"], 0))
        if job is not None:
            out.append(job)
    return out


def read_philly(path: str) -> list[TraceJob]:
    """Jobs of Philly's ``cluster_job_log`` (JSON)."""
    data = read_json(path, "philly cluster_job_log")
    if not isinstance(data, list):
        raise UserError(f"philly cluster_job_log {path!r}: expected a JSON list of jobs")
    out = []
    for i, job in enumerate(data):
        if not isinstance(job, dict) or "jobid" not in job or "submitted_time" not in job:
            raise UserError(f"philly cluster_job_log {path!r}: job [{i}] lacks 'jobid' or 'submitted_time'")
        attempts: list[Any] = [a for a in job.get("attempts") or [] if isinstance(a, dict)]
        if not attempts:
            continue
        gpus = sum(len(d.get("gpus") or []) for d in attempts[-1].get("detail") or [] if isinstance(d, dict))
        found = _job(str(job["jobid"]), parse_time(job["submitted_time"]), parse_time(attempts[0].get("start_time")),
                     parse_time(attempts[-1].get("end_time")), gpus)
        if found is not None:
            out.append(found)
    return out


def read_helios(path: str) -> list[TraceJob]:
    """Jobs of a Helios ``cluster_log.csv``."""
    out = []
    for row in _csv_rows(Path(path), HELIOS, "helios cluster_log.csv"):
        try:
            gpus = int(float(row["gpu_num"] or 0))
        except ValueError:
            gpus = 0
        start, end = parse_time(row["start_time"]), parse_time(row["end_time"])
        duration = row.get("duration")
        if start is not None and duration not in (None, ""):
            try:
                end = start + float(duration)
            except ValueError:
                pass
        job = _job(row["job_id"], parse_time(row["submit_time"]), start, end, gpus)
        if job is not None:
            out.append(job)
    return out


READERS: dict[str, Callable[[str], list[TraceJob]]] = {"lingjun": read_lingjun, "philly": read_philly,
                                                       "helios": read_helios}


def read_trace(kind: str, path: str) -> list[TraceJob]:
    """The jobs of a ``kind`` trace at ``path``, by submit time; UserError if none ran on GPUs."""
    if kind not in READERS:
        raise UserError(f"trace format {kind!r} is unknown; allowed: {', '.join(READERS)}")
    jobs = sorted(READERS[kind](path), key=lambda j: (j.submit, j.name))
    if not jobs:
        raise UserError(f"{kind} trace {path!r}: no job with GPUs and valid times")
    return jobs
