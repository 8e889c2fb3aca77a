"""The gRPC side without a controller: a recording handler served on loopback, a report to send, and
raw surgery on wire dicts for the schema's refusals."""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Iterator
from typing import Any

from leveller.codec import SchemaError
from leveller.model.flow import flow_key
from leveller.rpc.schema import FlowLevel, FlowReport, JobReport, LevelsReply, Report
from leveller.rpc.transport import serve

SECRET = b"test-secret-0123456789"
KEY = flow_key("10.0.0.1", "10.0.0.3", 40000, 47000, "tcp")


class RecordingHandler:
    """Stores accepted reports; answers level 1 for every flow; refuses host 'bad' semantically."""

    def __init__(self) -> None:
        self.reports: list[Report] = []

    def report(self, report: Report, now: float) -> LevelsReply:
        if report.host == "bad":
            raise SchemaError("host", "'bad' is refused by this handler")
        self.reports.append(report)
        return LevelsReply(len(self.reports), 2.0, (0, 8),
                           tuple(FlowLevel(f.key, f.job, 1) for f in report.flows))

    def status(self, now: float) -> dict[str, Any]:
        return {"reports": len(self.reports)}


@contextlib.contextmanager
def serving() -> Iterator[tuple[RecordingHandler, str]]:
    """The real server on loopback with a RecordingHandler: (handler, address)."""
    handler = RecordingHandler()
    srv, port = serve(handler, "127.0.0.1:0", SECRET, max_message_bytes=64 * 1024)
    try:
        yield handler, f"127.0.0.1:{port}"
    finally:
        srv.stop(grace=None)


def report(host: str = "h1", iterations: int = 3, run: str = "00112233aabbccdd", seq: int = 1) -> Report:
    """A report of job j1 (started 10 s ago, ideal time 1 s) and its one flow KEY."""
    return Report(host, (JobReport("j1", iterations, time.time() - 10, 1.0),), (FlowReport(KEY, "j1", 1000),),
                  run, seq)


def mutate(msg: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    """A deep copy of a wire dict with the item at ``path`` set to ``value`` (deleted if ``value`` is KeyError)."""
    msg = copy.deepcopy(msg)
    target = msg
    for p in path[:-1]:
        target = target[p]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return msg
