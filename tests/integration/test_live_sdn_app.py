"""sdn.app live (`leveller sdn`): OpenFlow admission, OpenFlow over TLS, SIGINT.

Issue 26, live: finding 11 (OpenFlow admission and TLS) and `leveller sdn` ignoring SIGINT.

A fake OpenFlow 1.3 switch (HELLO, FEATURES_REPLY with a chosen dpid, echo replies) connects to a real
`leveller sdn --topology dumbbell` (dpids 1 and 2): a dpid outside the topology, or a switch outside
--of-allow, is closed before it gets a single flow-mod; a topology switch from an allowed address gets its
rules; with --of-tls-* the port speaks TLS only and wants a client certificate of the CA. SIGINT ends the
app within seconds (it was ignored: os-ken's green threads swallowed the KeyboardInterrupt).
No privilege, no OVS: one process on loopback per test, each well under 30 s.
"""

from __future__ import annotations

import signal
import socket
import ssl
import struct
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from leveller.rpc.certs import init

from .support import Proc, free_port, leveller_proc, wait_until

FLOW_MOD, FEATURES_REQUEST, ECHO_REQUEST = 14, 5, 2


@contextmanager
def sdn(tmp_path: Path, *args: str) -> Iterator[tuple[Proc, int]]:
    api, of_port = free_port(), free_port()
    proc = leveller_proc(tmp_path / "sdn.out", "sdn", "--topology", "dumbbell", "--api", f"127.0.0.1:{api}",
                         "--of-port", str(of_port), *args)
    try:
        wait_until(lambda: _up(api), 30, lambda: f"the SDN app: {proc.output()}")
        wait_until(lambda: _listening(of_port), 30, lambda: f"the SDN app's OpenFlow port: {proc.output()}")
        yield proc, of_port
    finally:
        proc.kill()


def _listening(port: int) -> bool:
    """The OpenFlow port accepts connections (os-ken binds it after the API is up)."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def _up(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1):
            return True
    except OSError:
        return False


def fake_switch(port: int, dpid: int, tls: ssl.SSLContext | None = None, wait_s: float = 4.0) -> tuple[list[int], bool]:
    """(OpenFlow message types received, whether the app closed the connection) of a fake switch."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=wait_s)
    try:
        s = tls.wrap_socket(raw, server_hostname="localhost") if tls is not None else raw
    except (ConnectionError, ssl.SSLError):  # the handshake failed: TLS 1.2 checks the certificate in it
        raw.close()
        return [], True
    types: list[int] = []
    buf = b""
    deadline = time.monotonic() + wait_s
    try:
        s.sendall(struct.pack("!BBHI", 4, 0, 8, 1))  # HELLO, OpenFlow 1.3
        while time.monotonic() < deadline and FLOW_MOD not in types:
            s.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                break
            except (ConnectionError, ssl.SSLError):
                return types, True
            if not chunk:
                return types, True
            buf += chunk
            while len(buf) >= 8:
                _, kind, length, xid = struct.unpack_from("!BBHI", buf)
                if len(buf) < length:
                    break
                body, buf = buf[8:length], buf[length:]
                types.append(kind)
                if kind == FEATURES_REQUEST:
                    s.sendall(struct.pack("!BBHIQIBB2xII", 4, 6, 32, xid, dpid, 0, 254, 0, 0, 0))
                elif kind == ECHO_REQUEST:
                    s.sendall(struct.pack("!BBHI", 4, 3, 8 + len(body), xid) + body)
        return types, False
    except (ConnectionError, ssl.SSLError):  # the app closed or aborted it (a refused switch, a TLS failure)
        return types, True
    finally:
        s.close()


def test_switches_outside_the_topology_or_the_allowed_networks_get_nothing(tmp_path: Path) -> None:
    with sdn(tmp_path) as (proc, port):
        types, closed = fake_switch(port, 0xDEAD)  # not a dpid of the topology
        assert closed and FLOW_MOD not in types, types
        types, closed = fake_switch(port, 1)  # s1 from loopback, the default --of-allow: its rules
        assert FLOW_MOD in types, types
        assert "dpid 57005 is not a switch" in proc.output() or "dpid 0xdead" in proc.output()
    with sdn(tmp_path, "--of-allow", "10.0.0.0/8") as (proc, port):
        types, closed = fake_switch(port, 1)  # the finding: a local fake claiming dpid 1
        assert closed and FLOW_MOD not in types, types
        assert "not in --of-allow" in proc.output()


def test_openflow_over_tls_wants_a_certificate_of_the_ca(tmp_path: Path) -> None:
    pki = tmp_path / "pki"
    init(pki, ("sw1",))
    with sdn(tmp_path, "--of-tls-cert", str(pki / "controller.pem"), "--of-tls-key", str(pki / "controller.key"),
             "--of-tls-ca", str(pki / "ca.pem")) as (proc, port):
        switch = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        switch.load_verify_locations(pki / "ca.pem")
        switch.load_cert_chain(pki / "sw1.pem", pki / "sw1.key")
        types, _ = fake_switch(port, 1, switch)
        assert FLOW_MOD in types, (types, proc.output())
        anonymous = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        anonymous.load_verify_locations(pki / "ca.pem")
        types, closed = fake_switch(port, 1, anonymous)  # no client certificate
        assert closed and types == [], types
        types, closed = fake_switch(port, 1)  # plain OpenFlow on a TLS port
        assert FLOW_MOD not in types


def test_sigint_stops_the_app(tmp_path: Path) -> None:
    with sdn(tmp_path) as (proc, _):
        proc.p.send_signal(signal.SIGINT)
        try:
            rc = proc.p.wait(10)
        except Exception:
            pytest.fail(f"SIGINT ignored: {proc.output()}")
        assert rc == 130 and "SIGINT: stopping" in proc.output(), proc.output()
