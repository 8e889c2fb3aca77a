"""Issue 26, round 2, finding 11: OpenFlow listened on 127.0.0.1 only (real switches could not reach the app)
and accepted any switch: a local fake claiming dpid 1 was taken for s1 and got 13 flow-mods. Now --of-host,
switches admitted by dpid (the topology's) and source network (--of-allow), no takeover of a connected
dpid from another address, and OpenFlow over TLS (--of-tls-*)."""

from __future__ import annotations

import argparse
import ipaddress
from pathlib import Path
from types import SimpleNamespace

import pytest

from leveller.cli import main
from leveller.core.qos import default_level_map
from leveller.core.topology import preset
from leveller.errors import UserError
from sdn.app import AppConfig, LevellerApp
from sdn.logic import LOOPBACK, switch_refusal
from tests.unit.test_sdn_ofsend import FakeDatapath

TOPO = preset("leafspine")
LEAF1 = TOPO.switches[0].dpid
SITE = (ipaddress.ip_network("10.1.0.0/24"),)


def _features(app: LevellerApp, dp: FakeDatapath) -> None:
    app._features(SimpleNamespace(msg=SimpleNamespace(datapath=dp)))


def test_switch_admission_rules() -> None:
    assert switch_refusal(TOPO, LEAF1, "10.1.0.7", SITE, {}) is None
    assert "not a switch of the topology" in (switch_refusal(TOPO, 0xDEAD, "10.1.0.7", SITE, {}) or "")
    assert "not in --of-allow" in (switch_refusal(TOPO, LEAF1, "10.9.0.7", SITE, {}) or "")
    assert "not in --of-allow" in (switch_refusal(TOPO, LEAF1, "127.0.0.1", SITE, {}) or "")
    assert "connected already from 10.1.0.7" in (switch_refusal(TOPO, LEAF1, "10.1.0.8", SITE,
                                                                 {LEAF1: "10.1.0.7"}) or "")
    assert switch_refusal(TOPO, LEAF1, "::ffff:10.1.0.7", SITE, {LEAF1: "10.1.0.7"}) is None  # it restarted
    assert switch_refusal(TOPO, LEAF1, "::1", LOOPBACK, {}) is None


def test_a_fake_switch_cannot_take_over_a_connected_dpid() -> None:
    app = LevellerApp(leveller=AppConfig(TOPO, default_level_map(4), "set_queue", api_sock=None, of_allow=SITE))
    real = FakeDatapath(LEAF1, ("10.1.0.7", 50000))
    _features(app, real)
    fake = FakeDatapath(LEAF1, ("10.1.0.66", 50001))  # same dpid, another switch's address
    _features(app, fake)
    assert app.datapaths == {LEAF1: real} and fake.sent == [] and fake.closed
    local = FakeDatapath(LEAF1 + 1, ("127.0.0.1", 50002))  # a local process, not from the switches' network
    _features(app, local)
    assert local.sent == [] and local.closed and app.refused_switches == 2
    assert any(type(m).__name__ == "OFPFlowMod" for m in real.sent)


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
