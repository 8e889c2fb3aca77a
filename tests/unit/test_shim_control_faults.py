"""The root agent must not trust a socket because of its name (issue 26, High 2).

A user served ``/tmp/leveller-shim-<its pid>.sock``: the agent reported the user's invented RoCEv2
flows under a real job, a malformed reply (``"qps": [{}]``) made it exit with a KeyError, and a reply
dripping one byte every 4 s stopped every report. Here fake shims (unix sockets served by a thread
of this process) answer the agent's client: only trusted directories are searched, the peer must be
the process the socket's name gives, every reply is validated, and one deadline covers an exchange.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from leveller.agent import shim_control
from leveller.agent.enforce_shim import ShimFlows
from leveller.agent.shim_control import ShimClient, ShimError, discover

PID = os.getpid()


def good_qp(n: int) -> dict[str, Any]:
    return {"qp": n, "state": "RTS", "tc": 0, "desired_tc": None, "app_tc": 0, "connected": True,
            "local": {"qpn": n, "port": 1, "gid": "::ffff:10.0.0.1"},
            "remote": {"qpn": n + 1, "lid": 0, "gid": "::ffff:10.0.0.2"},
            "resurrections": 0, "failures": 0, "last_pause_us": 0.0, "last_error": None}


def listing(qps: list[Any], pid: int = PID, **extra: Any) -> bytes:
    return json.dumps({"ok": True, "pid": pid, "job": "gpt", "job_tc": None, "qps": qps, **extra}).encode() + b"\n"


@contextmanager
def fake_shim(path: Path, answer: Callable[[socket.socket], None]) -> Iterator[Path]:
    """Serve ``path`` from a thread of this process; ``answer(conn)`` runs for each connection."""
    ls = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ls.bind(str(path))
    ls.listen(8)
    ls.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = ls.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                try:
                    conn.settimeout(1.0)
                    conn.recv(4096)
                    answer(conn)
                except OSError:
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield path
    finally:
        stop.set()
        thread.join(15)
        ls.close()


def replies(data: bytes) -> Callable[[socket.socket], None]:
    return lambda conn: conn.sendall(data)


def drips(data: bytes, every_s: float, for_s: float) -> Callable[[socket.socket], None]:
    """Send ``data`` (repeated) one byte every ``every_s`` seconds, for at most ``for_s`` seconds."""
    def answer(conn: socket.socket) -> None:
        t0 = time.monotonic()
        i = 0
        while time.monotonic() - t0 < for_s:
            conn.send(data[i % len(data):i % len(data) + 1])
            i += 1
            time.sleep(every_s)
    return answer


def sock_path(tmp_path: Path, pid: int = PID) -> Path:
    return tmp_path / f"leveller-shim-{pid}.sock"


MALFORMED = [
    pytest.param(listing([{}]), "qps[0]", id="empty-qp"),
    pytest.param(listing([{**good_qp(1), "qp": "1"}]), "'qp'", id="qp-string"),
    pytest.param(listing([{**good_qp(1), "tc": 999}]), "'tc'", id="tc-range"),
    pytest.param(listing([{**good_qp(1), "remote": {"qpn": 2}}]), "'lid'", id="remote-incomplete"),
    pytest.param(listing([{**good_qp(1), "local": {"qpn": 1, "port": 1, "gid": 7}}]), "'gid'", id="gid-number"),
    pytest.param(listing([{**good_qp(1), "last_pause_us": float("nan")}]), "last_pause_us", id="nan"),
    pytest.param(listing({"qp": 1}), "'qps'", id="qps-object"),  # type: ignore[arg-type]
    pytest.param(listing([good_qp(1)], pid="1"), "'pid'", id="pid-string"),  # type: ignore[arg-type]
    pytest.param(listing([good_qp(1)], job=["gpt"]), "'job'", id="job-list"),
    pytest.param(b'{"ok": true, "pid": 1\n', "bad reply", id="bad-json"),
    pytest.param(b"[1, 2]\n", "not a JSON object", id="array"),
    pytest.param(b'{"ok": true}', "without its newline", id="cut-short"),
]


@pytest.mark.parametrize("reply,named", MALFORMED)
def test_a_malformed_list_reply_is_refused_not_a_crash(tmp_path: Path, reply: bytes, named: str) -> None:
    with fake_shim(sock_path(tmp_path), replies(reply)) as path:
        with pytest.raises(ShimError, match=named.replace("[", r"\[").replace("]", r"\]")):
            ShimClient(path, timeout=5.0).list_qps()
        flows = ShimFlows(sockets=lambda: [path])
        assert flows.refresh() == {} and len(flows.errors) == 1  # the agent notes it and goes on


def test_malformed_set_tc_and_lease_replies_are_refused(tmp_path: Path) -> None:
    result = {"qp": 1, "ok": True, "old_tc": 0, "tc": 32, "changed": True, "deferred": False, "pause_us": 1.0,
              "drain_us": 1.0}
    cases = [
        ({"ok": True, "results": [{}]}, "results[0]"),
        ({"ok": True, "results": [{**result, "ok": "yes"}]}, "'ok'"),
        ({"ok": True, "results": [{**result, "qp": 2}]}, "not for the QP 1"),
        ({"ok": True, "results": "all"}, "'results'"),
    ]
    for reply, named in cases:
        path = tmp_path / f"s{len(named)}" / f"leveller-shim-{PID}.sock"
        path.parent.mkdir()
        with fake_shim(path, replies(json.dumps(reply).encode() + b"\n")):
            with pytest.raises(ShimError, match=named.replace("[", r"\[").replace("]", r"\]")):
                ShimClient(path, timeout=5.0).set_traffic_class(32, qp=1)
    with fake_shim(sock_path(tmp_path), replies(b'{"ok": true, "was_armed": "no"}\n')) as path:
        with pytest.raises(ShimError, match="was_armed"):
            ShimClient(path, timeout=5.0).lease(100)


def test_a_dripping_reply_costs_one_deadline_not_one_per_read(tmp_path: Path) -> None:
    """A byte every 0.3 s beats any per-read timeout of 1 s; the whole exchange has 1 s."""
    with fake_shim(sock_path(tmp_path), drips(b'{"ok": true, "pid": 1, "qps": [', 0.3, 8.0)) as path:
        t0 = time.monotonic()
        with pytest.raises(ShimError, match="no complete reply within 1 s"):
            ShimClient(path, timeout=1.0).list_qps()
        assert time.monotonic() - t0 < 2.0


def test_a_shim_dripping_a_byte_every_4_s_does_not_stall_the_agents_listing(tmp_path: Path) -> None:
    """The issue's case with the agent's defaults: the good shim's QPs are listed within the listing's
    deadline, the bad one is noted, and skipped at the next listings (backoff)."""
    good_dir, bad_dir = tmp_path / "good", tmp_path / "bad"
    good_dir.mkdir()
    bad_dir.mkdir()
    with fake_shim(sock_path(bad_dir), drips(b'{"ok": true, "pid": 1, "qps": [', 4.0, 10.0)) as bad, \
            fake_shim(sock_path(good_dir), replies(listing([good_qp(7)]))) as good:
        flows = ShimFlows(sockets=lambda: [bad, good])
        t0 = time.monotonic()
        qps = flows.refresh()
        took = time.monotonic() - t0
        assert took < 3.0, f"one listing took {took:.1f} s behind a dripping shim"
        assert [ref.qp for ref in qps.values()] == [7]
        assert len(flows.errors) == 1 and str(bad) in flows.errors[0]
        t0 = time.monotonic()
        assert [ref.qp for ref in flows.refresh().values()] == [7]
        assert time.monotonic() - t0 < 0.5, "the dripping shim was asked again at once"
        assert "skipped" in flows.errors[0]


def test_a_socket_served_by_another_process_than_its_name_gives_is_refused(tmp_path: Path) -> None:
    """This process serves a socket named after its parent: a user's socket named after a job's pid."""
    with fake_shim(sock_path(tmp_path, os.getppid()), replies(listing([good_qp(1)], pid=os.getppid()))) as path:
        with pytest.raises(ShimError, match=f"served by process {PID}, not by process {os.getppid()}"):
            ShimClient(path, timeout=5.0).list_qps()


def test_a_list_reply_must_carry_the_peers_pid(tmp_path: Path) -> None:
    with fake_shim(tmp_path / "custom.sock", replies(listing([good_qp(1)], pid=1))) as path:
        with pytest.raises(ShimError, match=f"'pid' is 1, but the socket is served by process {PID}"):
            ShimClient(path, timeout=5.0).list_qps()
    with fake_shim(tmp_path / "custom2.sock", replies(listing([good_qp(1)]))) as path:
        client = ShimClient(path, timeout=5.0)
        assert [q.qp for q in client.list_qps()] == [1] and client.pid() == PID


def test_a_symlink_named_like_a_shim_socket_is_not_followed(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    with fake_shim(sock_path(real), replies(listing([good_qp(1)]))) as path:
        link = sock_path(tmp_path)
        link.symlink_to(path)
        assert discover([tmp_path]) == []
        with pytest.raises(ShimError, match="not a socket"):
            ShimClient(link, timeout=5.0).list_qps()
        assert discover([real]) == [path]


def test_the_agent_looks_only_in_the_root_owned_socket_directory() -> None:
    assert shim_control.default_socket_dirs() == [Path("/run/leveller/shim")]


def test_sockets_in_a_directory_every_user_may_write_are_ignored(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # as /tmp: any user can serve leveller-shim-<its pid>.sock here
    with fake_shim(sock_path(shared), replies(listing([good_qp(1)]))):
        assert discover([shared]) == []
        assert "writable by every user" in (shim_control.check_socket_dir(shared) or "")
        shared.chmod(0o755)
        assert discover([shared]) == [sock_path(shared)]
    loose = tmp_path / "loose"
    (loose / "inner").mkdir(parents=True)
    loose.chmod(0o777)  # a directory above it that anyone may rename things in
    assert "without the sticky bit" in (shim_control.check_socket_dir(loose / "inner") or "")
    link = tmp_path / "link"
    link.symlink_to(shared)
    assert "symbolic link" in (shim_control.check_socket_dir(link) or "")


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_sockets_in_a_directory_of_another_user_are_ignored(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, 65534, 65534)
    with fake_shim(sock_path(theirs), replies(listing([good_qp(1)]))):
        assert discover([theirs]) == []
        assert "owned by uid 65534" in (shim_control.check_socket_dir(theirs) or "")


def test_a_peer_running_as_another_user_than_the_sockets_owner_is_refused(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The peer must run as the socket file's owner (or root): SO_PEERCRED says uid 4242 here."""

    class Creds:
        size = struct.calcsize("3i")

        @staticmethod
        def unpack(_raw: bytes) -> tuple[int, int, int]:
            return PID, 4242, 4242

    monkeypatch.setattr(shim_control, "_UCRED", Creds)
    with fake_shim(sock_path(tmp_path), replies(listing([good_qp(1)]))) as path:
        with pytest.raises(ShimError, match=f"served by uid 4242, but the socket belongs to uid {os.geteuid()}"):
            ShimClient(path, timeout=5.0).list_qps()
