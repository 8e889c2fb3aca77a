"""A live `leveller sdn` process's HTTP API under abuse (issue 10, medium 10 and low 11).

- 1,100 idle (half-open) connections do not block GET /health;
- a client that sends its headers or its body too slowly is cut off after --api-timeout
  (headers: connection closed; body: 408);
- a body over the limit is refused 413 before it is read; a malformed Content-Length is a 400
  naming it;
- heavy work (a ~3.8 MB POST /paths) runs off the event loop: /health answers meanwhile;
- every malformed body is a 400 naming the field, never a 500 or a traceback.
No switch connects (none is needed for the API) and nothing is privileged: one process on loopback.
"""

from __future__ import annotations

import json
import resource
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .support import free_port, leveller_proc, wait_until


def _unread_by_server(port: int) -> list[int]:
    """Bytes the kernel holds unread (Recv-Q) on each established server-side socket of ``port``."""
    import subprocess

    out = subprocess.run(["ss", "-Htn", "state", "established", f"( sport = :{port} )"], capture_output=True,
                         text=True, check=True).stdout
    return sorted(int(line.split()[0]) for line in out.splitlines() if line.strip())

TIMEOUT_S = 2.0  # --api-timeout of the app under test


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """Port of the API of a running `leveller sdn --topology leafspine`."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4096 <= hard or soft < hard < 4096:  # room for 1,100 client sockets here and in the app
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(4096, hard), hard))
    port, of_port = free_port(), free_port()
    out = tmp_path_factory.mktemp("sdn") / "sdn.out"
    with leveller_proc(out, "sdn", "--topology", "leafspine", "--queue-mode", "set_queue", "--api",
                       f"127.0.0.1:{port}", "--of-port", str(of_port), "--api-timeout", str(TIMEOUT_S)) as proc:
        wait_until(lambda: _health(port, 2) is not None, 60, lambda: f"the SDN app's API: {proc.output()}")
        yield port
        assert proc.alive(), proc.output()
        proc.p.terminate()  # `leveller sdn` has no state to clean up here (no switch); SIGTERM ends it at once
        proc.p.wait(10)
        assert "Traceback" not in proc.output() or "API request" in proc.output()


def _health(port: int, timeout_s: float) -> Any:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=timeout_s) as r:
            return json.loads(r.read())
    except OSError:
        return None


def _post(port: int, body: bytes, timeout_s: float = 30) -> tuple[int, Any]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/paths", data=body, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _raw(port: int, request: bytes, wait_s: float = 20) -> tuple[bytes, float]:
    """Send raw bytes, read until the server closes (or ``wait_s``); the answer and how long it took."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(request)
        s.settimeout(wait_s)
        started, data = time.monotonic(), b""
        try:
            while chunk := s.recv(65536):
                data += chunk
        except TimeoutError:
            pass
        return data, time.monotonic() - started


def test_idle_connections_do_not_block_health(api: int) -> None:
    started = time.monotonic()
    idle = [socket.create_connection(("127.0.0.1", api)) for _ in range(1100)]
    try:
        assert time.monotonic() - started < TIMEOUT_S, "opening took too long to have them all idle at once"
        health = _health(api, 10)  # main: waited for the idle connections forever
        assert health is not None and health["queue_mode"] == "set_queue"
    finally:
        for s in idle:
            s.close()


def test_slow_headers_are_cut_off_and_slow_bodies_get_408(api: int) -> None:
    data, took = _raw(api, b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ")  # headers never finished
    assert data == b"" and took < TIMEOUT_S + 8, (data, took)
    data, took = _raw(api, b"POST /paths HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n[")  # 99 bytes missing
    assert data.startswith(b"HTTP/1.1 408") and b"body not received within 2 s" in data, data
    assert took < TIMEOUT_S + 8


def test_oversize_and_malformed_content_length(api: int) -> None:
    data, _ = _raw(api, b"POST /paths HTTP/1.1\r\nHost: x\r\nContent-Length: 5000000\r\n\r\n[")
    assert data.startswith(b"HTTP/1.1 413") and b"at most 4194304" in data, data
    data, _ = _raw(api, b"POST /paths HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000000\r\n\r\n[]")
    assert data.startswith(b"HTTP/1.1 413"), data
    data, _ = _raw(api, b"POST /paths HTTP/1.1\r\nHost: x\r\nContent-Length: 1e12\r\n\r\n[]")
    assert data.startswith(b"HTTP/1.1 400") and b"Content-Length" in data, data
    status, res = _post(api, b"[" + b" " * (5 << 20) + b"]")  # a client that sends it all before reading
    assert status == 413 and "at most 4194304" in res["error"], res


def test_heavy_request_runs_off_the_event_loop(api: int) -> None:
    flows = [{"src": f"10.0.0.{1 + i % 6}", "dst": f"10.0.0.{1 + (i // 6) % 6}", "sport": i, "dport": 80}
             for i in range(45_000)]
    body = json.dumps(flows).encode()
    assert len(body) < 4 << 20
    result: dict[str, Any] = {}

    def post() -> None:
        result["answer"] = _post(api, body, timeout_s=120)
        result["at"] = time.monotonic()

    worker = threading.Thread(target=post)
    started = time.monotonic()
    worker.start()
    answered: list[float] = []
    while worker.is_alive():
        if _health(api, 60) is not None:
            answered.append(time.monotonic())
        time.sleep(0.05)
    worker.join()
    status, res = result["answer"]
    assert status == 200 and len(res["paths"]) == 45_000 and res["paths"][1]["src_host"] == "h2"
    # /health kept being served all along: no gap between answers took half of the big request's time
    # (main: the event loop was busy with the flows for ~80% of it, one /health waiting all that time)
    times = [started] + answered + [result["at"]]
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert max(gaps) < 0.5 * (result["at"] - started), [round(t - started, 2) for t in times]


@pytest.mark.parametrize("body,field", [
    (b"[1]", "body[0]"), (b"[null]", "body[0]"), (b"[true]", "body[0]"), (b"[NaN]", "NaN"),
    (b'[{"src": "10.0.0.1", "dst": "10.0.0.6", "sport": 1e400}]', "body[0].sport"),
    (b"[" * 100_000, "nested too deeply"),
    (b'[{"src": "10.0.0.1", "dst": "10.0.0.6", "sport": 1.5}]', "body[0].sport"),
    (b'[{"src": "10.0.0.1", "dst": "10.0.0.6", "proto": true}]', "body[0].proto"),
])
def test_malformed_bodies_are_400_naming_the_field(api: int, body: bytes, field: str) -> None:
    status, res = _post(api, body)
    assert status == 400 and field in res["error"] and "Traceback" not in res["error"], res


def test_client_sends_big_batches_in_chunks_under_the_limit(api: int) -> None:
    from sdn.client import SdnClient

    flows = [{"src": "10.0.0.1", "dst": f"10.0.0.{2 + i % 5}", "sport": i, "dport": 80, "proto": 6}
             for i in range(2500)]
    paths = SdnClient(f"http://127.0.0.1:{api}").paths(flows, batch=1000)  # 3 requests
    assert [p["flow"] for p in paths] == flows  # all answered, in order


def test_connection_limit_evicts_idle_connections_and_sheds_only_when_all_are_busy(tmp_path: Path) -> None:
    """With room for 4 connections: 4 idle ones are evicted for /health; 4 mid-request ones are not
    (the 5th connection is answered 503) until their header deadline closes them."""
    port, of_port = free_port(), free_port()
    with leveller_proc(tmp_path / "sdn.out", "sdn", "--topology", "dumbbell", "--api", f"127.0.0.1:{port}",
                       "--of-port", str(of_port), "--api-timeout", str(TIMEOUT_S), "--api-max-connections",
                       "4") as proc:
        wait_until(lambda: _health(port, 2) is not None, 60, lambda: f"the SDN app's API: {proc.output()}")
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(4)]
        assert _health(port, 10) is not None  # one idle connection was closed to make room
        for s in idle:
            s.close()
        busy = [socket.create_connection(("127.0.0.1", port)) for _ in range(4)]
        for s in busy:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # request started, headers unfinished
        # the app has read what they sent (their request has begun: busy, not idle) once the kernel holds
        # nothing unread on the server side of the 4 connections
        wait_until(lambda: (lambda q: len(q) >= 4 and not any(q))(_unread_by_server(port)), 10,
                   lambda: f"the app to read the 4 partial requests: Recv-Q {_unread_by_server(port)}")
        data, _ = _raw(port, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert data.startswith(b"HTTP/1.1 503"), data
        for s in busy:
            s.settimeout(TIMEOUT_S + 8)
            assert s.recv(100) == b""  # closed at the header deadline
            s.close()
        assert _health(port, 10) is not None
        proc.p.terminate()
        proc.p.wait(10)
