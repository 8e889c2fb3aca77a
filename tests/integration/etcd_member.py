"""A real etcd member on loopback that a live test can kill, snapshot, restore and start afresh, and an HTTP
proxy in front of it that makes chosen requests fail (the request dropped, or its answer lost after etcd
applied it). Ports are free ports, data under the test's tmp dir; the member is SIGKILLed at the end."""

from __future__ import annotations

import base64
import http.client
import json
import shutil
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from .support import free_port, wait_until

ETCDCTL_ENV = {"ETCDCTL_API": "3", "PATH": "/usr/bin:/bin"}


class EtcdMember:
    """One etcd member (a cluster of one) on 127.0.0.1; a context manager (started on entry)."""

    def __init__(self, root: Path) -> None:
        if shutil.which("etcd") is None or shutil.which("etcdctl") is None:
            pytest.skip("etcd is not installed (scripts/setup-system.sh installs etcd-server and etcd-client)")
        self.root = root
        self.client, self.peer = free_port(), free_port()
        self.data = root / "etcd-data"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.client}"

    @property
    def _peer_url(self) -> str:
        return f"http://127.0.0.1:{self.peer}"

    def start(self) -> None:
        """Start on the data directory (a new cluster if it is empty) and wait until it is healthy."""
        log = (self.root / "etcd.log").open("ab")
        self.proc = subprocess.Popen(
            ["etcd", "--name", "e0", "--data-dir", str(self.data), "--listen-client-urls", self.url,
             "--advertise-client-urls", self.url, "--listen-peer-urls", self._peer_url,
             "--initial-advertise-peer-urls", self._peer_url, "--initial-cluster", f"e0={self._peer_url}",
             "--initial-cluster-token", "leveller-test", "--heartbeat-interval", "50", "--election-timeout", "500",
             "--logger", "zap", "--log-level", "warn"], stdout=log, stderr=subprocess.STDOUT)
        log.close()

        def healthy() -> bool:
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=1) as resp:
                    return bool(json.loads(resp.read())["health"] == "true")
            except (OSError, ValueError, KeyError):
                return False
        wait_until(healthy, 30, lambda: "etcd healthy: " + (self.root / "etcd.log").read_text()[-2000:], step_s=0.1)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def snapshot(self, path: Path) -> None:
        subprocess.run(["etcdctl", "--endpoints", self.url, "snapshot", "save", str(path)], env=ETCDCTL_ENV,
                       check=True, capture_output=True, timeout=30)

    def restore(self, snapshot: Path) -> None:
        """Kill the member and start it again from ``snapshot`` (etcdctl snapshot restore, same member,
        same URLs): its revisions go back to the snapshot's."""
        self.kill()
        shutil.rmtree(self.data)
        subprocess.run(["etcdctl", "snapshot", "restore", str(snapshot), "--name", "e0", "--data-dir", str(self.data),
                        "--initial-cluster", f"e0={self._peer_url}", "--initial-cluster-token", "leveller-test",
                        "--initial-advertise-peer-urls", self._peer_url], env=ETCDCTL_ENV, check=True,
                       capture_output=True, timeout=30)
        self.start()

    def call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST to the gateway (``/v3/...``) directly."""
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=5) as resp:
            out = json.loads(resp.read())
        return out if isinstance(out, dict) else {}

    def put(self, key: str, value: str) -> int:
        """Put a key; the revision after it."""
        out = self.call("/v3/kv/put", {"key": b64(key), "value": b64(value)})
        return int(out["header"]["revision"])

    def __enter__(self) -> EtcdMember:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def unb64(text: str) -> str:
    return base64.b64decode(text).decode(errors="replace")


# what the proxy does with one request: pass it on, drop it unanswered, or pass it on and drop the answer
Verdict = str  # "pass" | "drop" | "lose_answer"


class EtcdProxy:
    """An HTTP/1.1 proxy on 127.0.0.1 in front of ``upstream`` (an etcd client URL): each POST goes to
    ``rule(path, body)`` first; "drop" closes the connection unanswered (etcd never sees the request),
    "lose_answer" sends it to etcd and closes the connection without the answer. ``faults`` lists
    (time.time(), path, verdict) of every request not passed on as is. A context manager."""

    def __init__(self, upstream_port: int, rule: Callable[[str, dict[str, Any]], Verdict] | None = None) -> None:
        self.upstream_port = upstream_port
        self.rule: Callable[[str, dict[str, Any]], Verdict] = rule or (lambda path, body: "pass")
        self.faults: list[tuple[float, str, str]] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = {}
                with proxy._lock:
                    verdict = proxy.rule(self.path, body if isinstance(body, dict) else {})
                    if verdict != "pass":
                        proxy.faults.append((time.time(), self.path, verdict))
                if verdict == "drop":
                    self.close_connection = True
                    return
                conn = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=5)
                try:
                    conn.request("POST", self.path, raw, {"Content-Type": self.headers.get("Content-Type",
                                                                                        "application/json")})
                    resp = conn.getresponse()
                    answer = resp.read()
                finally:
                    conn.close()
                if verdict == "lose_answer":
                    self.close_connection = True
                    return
                self.send_response(resp.status)
                self.send_header("Content-Type", resp.getheader("Content-Type", "application/json"))
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> EtcdProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def once(match: Callable[[str, dict[str, Any]], bool], verdict: Verdict) -> Callable[[str, dict[str, Any]], Verdict]:
    """A proxy rule: ``verdict`` for the first request that ``match``es, every other one passed on."""
    done = [False]

    def rule(path: str, body: dict[str, Any]) -> Verdict:
        if not done[0] and match(path, body):
            done[0] = True
            return verdict
        return "pass"
    return rule


def is_campaign(path: str, body: dict[str, Any]) -> bool:
    """The election transaction (create-if-absent: compare the key's create revision with 0)."""
    return path.endswith("/kv/txn") and any(c.get("target") == "CREATE" and str(c.get("create_revision")) == "0"
                                            for c in body.get("compare", []))


def reads_under(prefix: str) -> Callable[[str, dict[str, Any]], bool]:
    """Matches a range read of the keys under ``prefix`` (the state a new leader reads)."""
    def match(path: str, body: dict[str, Any]) -> bool:
        return path.endswith("/kv/range") and "range_end" in body and unb64(body.get("key", "")) == prefix
    return match
