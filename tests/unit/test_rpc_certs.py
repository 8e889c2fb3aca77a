"""leveller.rpc.certs (`leveller certs init`): what it refuses and what it keeps.

Issue 26, finding 15: `leveller certs init` replaced a CA whose key is kept offline, reused a
CA key others can read, re-issued the controller's and admin's keys at every run, put '*', 'a b' and
newlines into the SAN, left CA files behind after a traceback for 'é.lab', and made hidden files for the
hosts '.' and '..'."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from leveller.cli import main
from leveller.errors import UserError
from leveller.rpc.certs import init


def test_a_ca_whose_key_is_offline_is_not_replaced(tmp_path: Path) -> None:
    init(tmp_path, ("h1",))
    ca = (tmp_path / "ca.pem").read_bytes()
    (tmp_path / "ca.key").rename(tmp_path.parent / "ca.key.offline")
    with pytest.raises(UserError, match="ca.pem is there but ca.key is not"):
        init(tmp_path, ("h2",))
    assert (tmp_path / "ca.pem").read_bytes() == ca and not (tmp_path / "h2.pem").exists()


def test_a_ca_key_others_can_read_is_refused(tmp_path: Path) -> None:
    init(tmp_path, ())
    os.chmod(tmp_path / "ca.key", 0o644)
    with pytest.raises(UserError, match="0644.*chmod 600"):
        init(tmp_path, ("h2",))
    assert not (tmp_path / "h2.pem").exists()


def test_a_rerun_keeps_the_pairs_it_has(tmp_path: Path) -> None:
    init(tmp_path, ("h1",))
    before = {p.name: p.read_bytes() for p in tmp_path.glob("*.key")}
    again = init(tmp_path, ("h1", "h2"))
    after = {p.name: p.read_bytes() for p in tmp_path.glob("*.key")}
    assert {k: after[k] for k in before} == before  # controller, admin, h1 and the CA: not re-issued
    assert "h2.key" in after
    assert {i.name: i.kept for i in again} == {"ca": True, "controller": True, "admin": True, "h1": True,
                                               "h2": False}
    changed = init(tmp_path, (), ("ctl.lab", "10.0.0.254"))  # other names: the controller's pair is new
    assert not next(i for i in changed if i.name == "controller").kept
    assert (tmp_path / "controller.key").read_bytes() != before["controller.key"]


@pytest.mark.parametrize("name", ["*", "a b", "ctl\nlab", "é.lab", "-ctl.lab", "a..b", "x" * 64 + ".lab", ""])
def test_bad_controller_names_are_refused_before_any_file(tmp_path: Path, name: str) -> None:
    out = tmp_path / "tls"
    with pytest.raises(UserError, match="--controller-names"):
        init(out, ("h1",), (name,) if name else ("",))
    assert not out.exists() or not any(out.iterdir())


def test_good_controller_names_pass(tmp_path: Path) -> None:
    init(tmp_path, (), ("ctl.lab", "xn--l-9fa.lab", "10.0.0.254", "::1", "localhost", "ctl.lab."))


@pytest.mark.parametrize("host", [".", "..", ".hidden"])
def test_hosts_that_would_be_hidden_files_are_refused(tmp_path: Path, host: str) -> None:
    with pytest.raises(UserError, match="--hosts"):
        init(tmp_path, (host,))
    assert list(tmp_path.iterdir()) == []


def test_cli_says_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["certs", "init", str(tmp_path), "--hosts", "h1"]) == 0
    capsys.readouterr()
    assert main(["certs", "init", str(tmp_path), "--hosts", "h1"]) == 0
    assert all(line.endswith(" kept") for line in capsys.readouterr().out.splitlines())
