"""Issue 26, round 2, finding 7: under mutual TLS the admin certificate was accepted as an agent for host
"admin" (its job entered the decision), and any host's certificate read the whole cluster's status.
Roles now: hosts report (and watch) for their own host only, the admin reads the status only."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from leveller.rpc.certs import init
from leveller.rpc.tls import TlsConfig
from leveller.rpc.transport import ControllerClient, RpcFailure, serve
from tests.unit.test_rpc_transport import RecordingHandler, report


def _tls(d: Path, name: str) -> TlsConfig:
    return TlsConfig((d / f"{name}.pem").read_bytes(), (d / f"{name}.key").read_bytes(), (d / "ca.pem").read_bytes())


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    init(d, ("h1",))
    return d


@pytest.fixture
def server(pki: Path) -> Iterator[tuple[RecordingHandler, str, list[str]]]:
    handler, rejected = RecordingHandler(), []
    srv, port = serve(handler, "127.0.0.1:0", None, tls=_tls(pki, "controller"), on_reject=rejected.append)
    try:
        yield handler, f"127.0.0.1:{port}", rejected
    finally:
        srv.stop(grace=None)


def test_the_admin_certificate_cannot_report(server: Any, pki: Path) -> None:
    handler, address, rejected = server
    with ControllerClient(address, None, timeout_s=5, tls=_tls(pki, "admin")) as c:
        with pytest.raises(RpcFailure) as exc:
            c.report(report("admin"))
    assert exc.value.code.name == "PERMISSION_DENIED" and "role" in exc.value.details
    assert handler.reports == [] and rejected == ["identity"]


def test_a_host_certificate_cannot_read_the_status(server: Any, pki: Path) -> None:
    handler, address, rejected = server
    with ControllerClient(address, None, timeout_s=5, tls=_tls(pki, "h1")) as c:
        c.report(report("h1"))  # its own role: report for its host
        with pytest.raises(RpcFailure) as exc:
            c.status()
    assert exc.value.code.name == "PERMISSION_DENIED" and "admin certificate" in exc.value.details
    assert rejected == ["identity"]
    with ControllerClient(address, None, timeout_s=5, tls=_tls(pki, "admin")) as c:
        assert c.status() == {"reports": 1}  # the admin's role: read
