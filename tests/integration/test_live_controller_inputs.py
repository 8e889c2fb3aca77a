"""A live `leveller controller` process against hostile but authenticated input (issue 10).

- medium 5: a captured report replayed later is refused, the state keeps the newer report; a
  restarted agent (new run id) is accepted, and the old run's reports stay refused.
- medium 6: an ideal time of 1e308 is refused by name; the most extreme values the schema allows
  leave `leveller status --json` working and free of Infinity/NaN.
- medium 4: after a flood of reports from distinct host and job names, the controller forgets them
  after --stale-after: status and the metrics show the steady agent only.
- low 14: 100k-deep JSON and a 5000-digit integer are INVALID_ARGUMENT, not UNKNOWN.
Needs no privileges: one controller process on loopback, raw gRPC calls.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from leveller.codec import encode
from leveller.rpc import auth
from leveller.rpc.replay import new_run_id
from leveller.rpc.transport import REPORT, ControllerClient, RpcFailure

from .support import free_port, leveller_proc, send_report, wait_until

SECRET = "live-inputs-secret-0123456789"
OK = grpc.StatusCode.OK
_SEQ = itertools.count(1)


@pytest.fixture(scope="module")
def ctl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """(address, metrics port) of a controller that forgets agents after 3 s."""
    tmp = tmp_path_factory.mktemp("ctl")
    port, metrics = free_port(), free_port()
    with leveller_proc(tmp / "controller.out", "controller", "--listen", f"127.0.0.1:{port}", "--tau", "0.3",
                       "--stale-after", "3", "--metrics-port", str(metrics),
                       env={"LEVELLER_SECRET": SECRET}) as proc:
        address = f"127.0.0.1:{port}"
        wait_until(lambda: _status_or_none(address) is not None, 30, lambda: f"controller up: {proc.output()}")
        yield address, metrics
        assert proc.alive(), proc.output()


def _status_or_none(address: str) -> dict[str, Any] | None:
    try:
        with ControllerClient(address, SECRET.encode(), timeout_s=2) as client:
            return client.status()
    except RpcFailure:  # not up yet (UNAVAILABLE); anything else is a failure of the test
        return None


def report(host: str, job: str, iterations: int, run: str = "1111111111111111", seq: int | None = None,
           ideal: Any = 0.5, start: float | None = None, port: int = 40000) -> dict[str, Any]:
    return {"v": 1, "host": host, "run": run, "seq": next(_SEQ) if seq is None else seq,
            "jobs": [{"job": job, "iterations": iterations, "ideal_time": ideal,
                      "start_time": time.time() - 100 if start is None else start}],
            "flows": [{"src": "10.0.0.1", "dst": "10.0.0.2", "sport": port, "dport": 47000, "proto": "tcp",
                       "job": job, "bytes": 1000}]}


def iterations_of(address: str, job: str) -> int | None:
    status = _status_or_none(address)
    assert status is not None
    return next((j["iterations"] for j in status["jobs"] if j["job"] == job), None)


def test_replayed_report_is_refused_and_a_restarted_agent_is_accepted(ctl: tuple[str, int]) -> None:
    address, _ = ctl
    key = SECRET.encode()
    captured = encode(report("rp1", "rpjob", 100, run="aaaaaaaaaaaaaaaa"))
    captured_md = auth.metadata(key, REPORT, time.time(), captured)
    assert send_report(address, captured, None, captured_md)[0] == OK
    assert send_report(address, encode(report("rp1", "rpjob", 500, run="aaaaaaaaaaaaaaaa")), key)[0] == OK
    time.sleep(0.5)  # the replay comes later, as in the issue (well inside the signature's 300 s)
    code, details = send_report(address, captured, None, captured_md)
    assert code == grpc.StatusCode.UNAUTHENTICATED and "not newer" in details, (code, details)
    assert iterations_of(address, "rpjob") == 500

    restarted = new_run_id()  # the agent restarts: new run id, numbering from 1 again
    assert send_report(address, encode(report("rp1", "rpjob", 510, run=restarted, seq=1)), key)[0] == OK
    code, details = send_report(address, captured, None, captured_md)
    assert code == grpc.StatusCode.UNAUTHENTICATED and "earlier run" in details, (code, details)
    assert send_report(address, encode(report("rp1", "rpjob", 520, run=restarted, seq=2)), key)[0] == OK
    assert iterations_of(address, "rpjob") == 520


def test_deep_json_and_huge_integers_are_invalid_argument(ctl: tuple[str, int]) -> None:
    address, _ = ctl
    key = SECRET.encode()
    good = encode(report("deep1", "deepjob", 3))
    for body, needle in [(b"[" * 100_000, "nested too deeply"),
                         (good.replace(b'"iterations":3', b'"iterations":' + b"9" * 5000), "digits")]:
        code, details = send_report(address, body, key)
        assert code == grpc.StatusCode.INVALID_ARGUMENT and needle in details, (code, details[:200])


def test_unbounded_ideal_time_is_refused_and_status_json_stays_finite(ctl: tuple[str, int], tmp_path: Path) -> None:
    address, _ = ctl
    key = SECRET.encode()
    code, details = send_report(address, encode(report("ideal1", "bigjob", 10, ideal=1e308)), key)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "jobs[0].ideal_time" in details, (code, details)

    def shown() -> Any:
        # the largest values the schema allows: 2^53 iterations of one day each, started a millisecond ago
        extreme = report("ideal1", "bigjob", 2**53, ideal=86400.0, start=time.time() - 1e-3)
        assert send_report(address, encode(extreme), key)[0] == OK
        assert send_report(address, encode(report("ideal2", "smalljob", 10, port=40001)), key)[0] == OK
        out = subprocess.run([sys.executable, "-m", "leveller.cli", "status", "--controller", address, "--json"],
                             capture_output=True, text=True, timeout=60,
                             env=dict(os.environ, LEVELLER_SECRET=SECRET))
        assert out.returncode == 0, out.stderr
        assert not re.search(r"\b(Infinity|NaN)\b", out.stdout), out.stdout
        jobs = {j["job"]: j["rate"] for j in json.loads(out.stdout)["jobs"]}
        return jobs if jobs.get("bigjob") is not None and jobs.get("smalljob") is not None else None

    rates = wait_until(shown, 20, "a decision that rates both jobs")
    assert rates["bigjob"] >= 1e6 > rates["smalljob"]  # capped, finite, and still ranked after the slow job


def test_flood_of_names_is_forgotten_after_stale_after(ctl: tuple[str, int]) -> None:
    address, metrics = ctl
    key = SECRET.encode()
    with grpc.insecure_channel(address) as channel:  # one report each from 300 distinct hosts and jobs
        call = channel.unary_unary(REPORT)
        for i in range(300):
            body = encode(report(f"flood{i}", f"floodjob{i}", 1, run=new_run_id(), seq=1, port=41000 + i))
            # raises if refused
            call.with_call(body, timeout=10, metadata=auth.metadata(key, REPORT, time.time(), body))
    steady_run = new_run_id()

    def only_steady() -> bool:
        assert send_report(address, encode(report("steady", "steadyjob", 5, run=steady_run)), key)[0] == OK
        status = _status_or_none(address)
        assert status is not None
        return [a["host"] for a in status["agents"]] == ["steady"] and \
            [j["job"] for j in status["jobs"]] == ["steadyjob"]

    wait_until(only_steady, 15, "the controller to forget the flooded hosts and jobs", step_s=0.3)
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=5).read().decode()
    assert re.findall(r'leveller_reports_total\{host="([^"]+)"\}', text) == ["steady"]
