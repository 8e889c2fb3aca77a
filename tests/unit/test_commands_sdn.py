"""leveller.commands.sdn: the OpenFlow options (--of-host, --of-allow, --of-tls-*) and `leveller sdn`'s refusal
of an OpenFlow port beyond loopback without --of-allow (issue 26, finding 11: OpenFlow listened on 127.0.0.1
only and accepted any switch)."""

from __future__ import annotations

import argparse
import ipaddress
from pathlib import Path

import pytest

from leveller.cli import main
from leveller.errors import UserError
from sdn.logic import LOOPBACK


def _sdn_args(**kw: object) -> argparse.Namespace:
    from leveller.commands.config import _parser

    return argparse.Namespace(**{**vars(_parser("sdn").parse_args([])), **kw})


def test_of_options_are_checked() -> None:
    from leveller.commands.sdn import check_args, of_allow, of_tls

    assert _sdn_args().of_host == "127.0.0.1" and of_allow(_sdn_args()) == LOOPBACK
    with pytest.raises(UserError, match="--of-allow NET"):
        check_args(_sdn_args(of_host="10.0.0.254"))  # beyond loopback: which switches may connect?
    assert of_allow(_sdn_args(of_host="0.0.0.0", of_allow="10.1.0.0/24, 192.168.5.7")) == (
        ipaddress.ip_network("10.1.0.0/24"), ipaddress.ip_network("192.168.5.7/32"))
    with pytest.raises(UserError, match="--of-allow 'nope'"):
        of_allow(_sdn_args(of_allow="nope"))
    with pytest.raises(UserError, match="--of-host = 'ctl.lab'"):
        of_allow(_sdn_args(of_host="ctl.lab"))
    with pytest.raises(UserError, match="--of-tls-key, --of-tls-ca: needed with --of-tls-cert"):
        of_tls(_sdn_args(of_tls_cert="c.pem"))


def test_of_tls_files_are_checked(tmp_path: Path) -> None:
    from leveller.commands.sdn import of_tls
    from leveller.rpc.certs import init

    init(tmp_path, ())
    names = {"of_tls_cert": str(tmp_path / "controller.pem"), "of_tls_key": str(tmp_path / "controller.key"),
             "of_tls_ca": str(tmp_path / "ca.pem")}
    assert of_tls(_sdn_args(**names)) == (names["of_tls_cert"], names["of_tls_key"], names["of_tls_ca"])
    with pytest.raises(UserError, match="--of-tls-key .*not a PEM private key"):
        of_tls(_sdn_args(**{**names, "of_tls_key": names["of_tls_cert"]}))


def test_the_cli_refuses_of_host_beyond_loopback_without_of_allow(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sdn", "--topology", "dumbbell", "--of-host", "0.0.0.0"]) == 2
    assert "--of-allow" in capsys.readouterr().err


def test_the_api_header_deadline_is_checked_and_reaches_the_server() -> None:
    from leveller.commands.sdn import check_args
    from sdn.httpd import Limits

    assert _sdn_args().api_header_timeout == 2.0 < _sdn_args().api_timeout
    for bad in (0, -1, 4000):
        with pytest.raises(UserError, match=f"--api-header-timeout = {bad}: must be in"):
            check_args(_sdn_args(api_header_timeout=bad))
    with pytest.raises(ValueError, match="invalid HTTP limits"):
        Limits(header_timeout_s=0)
