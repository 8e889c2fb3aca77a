"""Mutual TLS on real gRPC over loopback: certificates from `leveller certs init` (leveller.rpc.certs)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from leveller.errors import UserError
from leveller.rpc.certs import init
from leveller.rpc.push import LevelsWatcher
from leveller.rpc.tls import TlsConfig
from leveller.rpc.transport import ControllerClient, RpcFailure, serve
from tests.helpers.rpc import RecordingHandler, report


def tls(d: Path, name: str, ca_dir: Path | None = None) -> TlsConfig:
    return TlsConfig((d / f"{name}.pem").read_bytes(), (d / f"{name}.key").read_bytes(),
                     ((ca_dir or d) / "ca.pem").read_bytes())


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two independent lab CAs: the controller's and another one."""
    ours, other = tmp_path_factory.mktemp("ours"), tmp_path_factory.mktemp("other")
    init(ours, ("h1", "h2"))
    init(other, ("h1",))
    return ours, other


@pytest.fixture
def server(pki: tuple[Path, Path]) -> Iterator[tuple[RecordingHandler, str]]:
    handler = RecordingHandler()
    srv, port = serve(handler, "127.0.0.1:0", None, tls=tls(pki[0], "controller"))
    try:
        yield handler, f"127.0.0.1:{port}"
    finally:
        srv.stop(grace=None)


def test_keys_are_private_and_ca_is_reused(tmp_path: Path) -> None:
    first = init(tmp_path, ("h1",))
    ca = (tmp_path / "ca.pem").read_bytes()
    for i in first:
        assert stat.S_IMODE(os.stat(i.key).st_mode) == 0o600
    init(tmp_path, ("h2",))
    assert (tmp_path / "ca.pem").read_bytes() == ca
    assert (tmp_path / "h2.pem").exists()


def test_bad_host_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="--hosts"):
        init(tmp_path, ("h 1",))
    with pytest.raises(UserError, match="reserved"):
        init(tmp_path, ("admin",))


def test_agent_with_own_certificate_reports(server: Any, pki: tuple[Path, Path]) -> None:
    handler, address = server
    with ControllerClient(address, None, timeout_s=5, tls=tls(pki[0], "h1")) as c:
        reply = c.report(report("h1"))
    assert [f.level for f in reply.flows] == [1]
    assert [r.host for r in handler.reports] == ["h1"]


def test_certificate_of_another_host_is_refused(server: Any, pki: tuple[Path, Path]) -> None:
    handler, address = server
    with ControllerClient(address, None, timeout_s=5, tls=tls(pki[0], "h2")) as c:
        with pytest.raises(RpcFailure) as exc:
            c.report(report("h1"))
    assert exc.value.code == grpc.StatusCode.PERMISSION_DENIED
    assert "'h1' is not named" in exc.value.details
    assert handler.reports == []


def test_certificate_from_another_ca_is_refused(server: Any, pki: tuple[Path, Path]) -> None:
    handler, address = server
    # the client trusts our CA (so the server is fine) but presents a certificate of the other CA
    with ControllerClient(address, None, timeout_s=3, tls=tls(pki[1], "h1", ca_dir=pki[0])) as c:
        with pytest.raises(RpcFailure) as exc:
            c.report(report("h1"))
    assert exc.value.code == grpc.StatusCode.UNAVAILABLE
    assert handler.reports == []


def test_no_client_certificate_is_refused(server: Any, pki: tuple[Path, Path]) -> None:
    handler, address = server
    creds = grpc.ssl_channel_credentials(root_certificates=(pki[0] / "ca.pem").read_bytes())
    with grpc.secure_channel(address, creds) as ch:
        with pytest.raises(grpc.RpcError) as exc:
            ch.unary_unary("/leveller.v1.Controller/Status")(b'{"v":1}', timeout=3)
    assert exc.value.code() == grpc.StatusCode.UNAVAILABLE
    with grpc.insecure_channel(address) as ch:  # plain text to a TLS port
        with pytest.raises(grpc.RpcError) as exc:
            ch.unary_unary("/leveller.v1.Controller/Status")(b'{"v":1}', timeout=3)
    assert exc.value.code() == grpc.StatusCode.UNAVAILABLE
    assert handler.reports == []


def test_admin_reads_status(server: Any, pki: tuple[Path, Path]) -> None:
    _, address = server
    with ControllerClient(address, None, timeout_s=5, tls=tls(pki[0], "admin")) as c:
        assert c.status() == {"reports": 0}


def test_watch_checks_the_host_too(pki: tuple[Path, Path]) -> None:
    from leveller.rpc.schema import LevelsReply

    class Watched(RecordingHandler):
        def wait_levels(self, host: str, seen_epoch: int, timeout_s: float) -> LevelsReply:
            return LevelsReply(seen_epoch + 1, 2.0, (0, 8), ())

    srv, port = serve(Watched(), "127.0.0.1:0", None, tls=tls(pki[0], "controller"))
    try:
        for cert, ok in (("h1", True), ("h2", False)):
            w = LevelsWatcher(f"127.0.0.1:{port}", None, "h1", lambda r: None, lambda: (), wait_s=1,
                              tls=tls(pki[0], cert))
            try:
                if ok:
                    assert w.poll_once().epoch == 1
                else:
                    with pytest.raises(grpc.RpcError) as exc:
                        w.poll_once()
                    assert exc.value.code() == grpc.StatusCode.PERMISSION_DENIED
            finally:
                w.close()
    finally:
        srv.stop(grace=None)


def test_hmac_alone_still_works_and_secret_needed_without_tls() -> None:
    from leveller.rpc.auth import load_secret

    with pytest.raises(UserError, match="no shared secret"):
        load_secret(None, env={})
    assert load_secret(None, env={}, optional=True) is None
    with pytest.raises(ValueError):
        serve(RecordingHandler(), "127.0.0.1:0", None)


def test_tls_options_all_or_none(tmp_path: Path, pki: tuple[Path, Path]) -> None:
    import argparse

    from leveller.rpc.tls import tls_from_args

    ns = argparse.Namespace(tls_cert=str(pki[0] / "h1.pem"), tls_key=None, tls_ca=None)
    with pytest.raises(UserError, match="--tls-key, --tls-ca: needed with --tls-cert"):
        tls_from_args(ns)
    ns = argparse.Namespace(tls_cert=str(pki[0] / "h1.key"), tls_key=str(pki[0] / "h1.key"),
                            tls_ca=str(pki[0] / "ca.pem"))
    with pytest.raises(UserError, match="--tls-cert .*not a PEM certificate"):
        tls_from_args(ns)
    assert tls_from_args(argparse.Namespace(tls_cert=None, tls_key=None, tls_ca=None)) is None


# --- roles (issue 26, finding 7): hosts report and watch for their own host only, the admin reads the status
# only (the admin certificate was accepted as an agent for host "admin", and any host's read the status) ----


@pytest.fixture
def rejecting_server(pki: tuple[Path, Path]) -> Iterator[tuple[RecordingHandler, str, list[str]]]:
    """The TLS server of ``server`` that also lists the reasons of the calls it rejected."""
    handler, rejected = RecordingHandler(), []
    srv, port = serve(handler, "127.0.0.1:0", None, tls=tls(pki[0], "controller"), on_reject=rejected.append)
    try:
        yield handler, f"127.0.0.1:{port}", rejected
    finally:
        srv.stop(grace=None)


def test_the_admin_certificate_cannot_report(rejecting_server: Any, pki: tuple[Path, Path]) -> None:
    handler, address, rejected = rejecting_server
    with ControllerClient(address, None, timeout_s=5, tls=tls(pki[0], "admin")) as c:
        with pytest.raises(RpcFailure) as exc:
            c.report(report("admin"))
    assert exc.value.code.name == "PERMISSION_DENIED" and "role" in exc.value.details
    assert handler.reports == [] and rejected == ["identity"]


def test_a_host_certificate_cannot_read_the_status(rejecting_server: Any, pki: tuple[Path, Path]) -> None:
    handler, address, rejected = rejecting_server
    with ControllerClient(address, None, timeout_s=5, tls=tls(pki[0], "h1")) as c:
        c.report(report("h1"))  # its own role: report for its host
        with pytest.raises(RpcFailure) as exc:
            c.status()
    assert exc.value.code.name == "PERMISSION_DENIED" and "admin certificate" in exc.value.details
    assert rejected == ["identity"]
    with ControllerClient(address, None, timeout_s=5, tls=tls(pki[0], "admin")) as c:
        assert c.status() == {"reports": 1}  # the admin's role: read
