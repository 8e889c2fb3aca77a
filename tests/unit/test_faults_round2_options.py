"""Issue 26, round 2, findings 9, 12, 13, 14, 18: what the controller, `config check` and the file readers
refuse at start (values the agents would refuse, busy-looping taus, devices, FIFOs, duplicate keys), and the
warning for a secret others can read."""

from __future__ import annotations

import argparse
import os
import threading
from pathlib import Path

import pytest

from leveller.cli import main
from leveller.codec import SchemaError
from leveller.errors import UserError
from leveller.model.limits import MAX_LEASE_S
from leveller.rpc.schema import reply_from_wire


@pytest.fixture
def no_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """A controller that gets past its checks fails the test instead of listening."""
    import leveller.rpc.transport

    def serve(*_: object, **__: object) -> None:
        raise AssertionError("the controller started")

    monkeypatch.setattr(leveller.rpc.transport, "serve", serve)
    monkeypatch.setenv("LEVELLER_SECRET", "s" * 32)


def _reply(lease: float) -> dict[str, object]:
    return {"v": 1, "epoch": 1, "lease_s": lease, "decision_age_s": 0.0, "dscp_by_level": [0, 46], "flows": []}


# --- 9: an unbounded lease starts but nothing is ever marked -------------------------------------------------

@pytest.mark.parametrize("argv", [["--lease", "inf"], ["--lease", "100000"], ["--lease", "nan"],
                                  ["--stale-after", "inf"]])
def test_controller_refuses_a_lease_agents_refuse(argv: list[str], no_start: None,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["controller", *argv]) == 2
    err = capsys.readouterr().err
    assert argv[0] in err and f"{MAX_LEASE_S:g}" in err


def test_lease_in_a_toml_file_is_refused(tmp_path: Path, no_start: None, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "c.toml"
    f.write_text("lease = inf\n")
    assert main(["controller", "--config", str(f)]) == 2
    assert "--lease inf" in capsys.readouterr().err


def test_every_lease_the_controller_accepts_the_agent_accepts() -> None:
    from leveller.commands.config import _parser
    from leveller.commands.controller import check_args

    base = _parser("controller").parse_args([])
    for lease in (1.01, 60.0, 3600.0, MAX_LEASE_S):
        check_args(argparse.Namespace(**{**vars(base), "lease": lease}))
        assert reply_from_wire(_reply(lease)).lease_s == lease
    for lease in (MAX_LEASE_S * 1.0001, float("inf")):
        with pytest.raises(UserError):
            check_args(argparse.Namespace(**{**vars(base), "lease": lease}))
        with pytest.raises(SchemaError, match="lease_s"):
            reply_from_wire(_reply(lease))


def test_the_controller_object_refuses_an_unbounded_lease() -> None:
    from leveller.controller.paths import SingleLinkPaths
    from leveller.controller.service import Controller
    from leveller.core.policies import make_policy
    from leveller.core.qos import default_level_map

    for lease in (float("inf"), MAX_LEASE_S + 1):
        with pytest.raises(ValueError, match="lease"):
            Controller(SingleLinkPaths(), make_policy("leveller"), default_level_map(2), 1.0, lease)


# --- 14: --tau 1e-300 busy-loops ---------------------------------------------------------------------------

@pytest.mark.parametrize("tau", ["1e-300", "0.001", "inf", "nan", "-1", "0", "1e9"])
def test_controller_refuses_a_tau_out_of_range(tau: str, no_start: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["controller", "--tau", tau]) == 2
    err = capsys.readouterr().err
    assert "--tau" in err and "0.01..3600" in err and "--verify-window" not in err


# --- 13: config check validates exactly what the command validates ------------------------------------------

@pytest.mark.parametrize(("text", "word"), [
    ("tau = -1\n", "--tau -1"),
    ("tau = inf\n", "--tau inf"),
    ("lease = -5\n", "--lease -5"),
    ("lease = inf\n", "--lease inf"),
    ("metrics_port = 99999999999\n", "--metrics-port 99999999999"),
    ("metrics_port = -1\n", "--metrics-port -1"),
    ("levels = 9\n", "--levels 9"),
    ("rate_window = 0.5\ntau = 1\n", "--rate-window"),
    ("verify_window = 7200\n", "--verify-window"),
])
def test_config_check_runs_the_controllers_checks(tmp_path: Path, text: str, word: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "c.toml"
    f.write_text(text)
    assert main(["config", "check", str(f), "--for", "controller"]) == 2
    err = capsys.readouterr().err
    assert word in err and str(f) in err


def test_config_check_runs_the_sdn_checks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "s.toml"
    f.write_text('of_port = 70000\n')
    assert main(["config", "check", str(f), "--for", "sdn"]) == 2
    assert "--of-port = 70000" in capsys.readouterr().err


def test_two_spellings_of_one_key_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "c.toml"
    f.write_text("metrics_port = 9109\nmetrics-port = 9110\n")
    assert main(["config", "check", str(f), "--for", "controller"]) == 2
    err = capsys.readouterr().err
    assert "'metrics_port' and 'metrics-port'" in err


def test_a_bad_metrics_address_is_a_user_error(no_start: None, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    import leveller.rpc.transport

    class Server:
        def stop(self, grace: float) -> threading.Event:
            e = threading.Event()
            e.set()
            return e

    monkeypatch.setattr(leveller.rpc.transport, "serve", lambda *a, **k: (Server(), 1))
    assert main(["controller", "--metrics-port", "9", "--metrics-addr", "no-such-host.invalid"]) == 2
    assert "--metrics-addr no-such-host.invalid" in capsys.readouterr().err


# --- 12: /dev/zero, FIFOs and huge files ---------------------------------------------------------------------

def test_config_check_refuses_a_device(capsys: pytest.CaptureFixture[str]) -> None:
    """/dev/null stands for every device: refused by its type, before any read (/dev/zero was read until
    memory ran out: 2.4 GB, and this test would have taken the machine with it)."""
    assert main(["config", "check", "/dev/null", "--for", "controller"]) == 2
    assert "character device" in capsys.readouterr().err


def test_config_fifo_does_not_hang(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "c.toml"
    os.mkfifo(fifo)
    done: list[int] = []
    t = threading.Thread(target=lambda: done.append(main(["config", "check", str(fifo), "--for", "sdn"])),
                         daemon=True)
    t.start()
    t.join(5)
    if t.is_alive():  # unblock the reader of the code before the fix, then fail
        with open(fifo, "w"):
            pass
        t.join(5)
        pytest.fail("config check of a FIFO blocked")
    assert done == [2] and "a FIFO" in capsys.readouterr().err


def test_huge_config_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "c.toml"
    f.write_text("# " + "x" * (2 << 20) + "\n")
    assert main(["config", "check", str(f), "--for", "controller"]) == 2
    assert "larger than" in capsys.readouterr().err


@pytest.mark.parametrize("loader", ["secret", "token", "tls"])
def test_secret_files_must_be_small_regular_files(loader: str) -> None:
    from leveller.rpc.auth import load_secret
    from leveller.rpc.tls import tls_from_args
    from sdn.token import load_token

    load = {"secret": lambda p: load_secret(p), "token": lambda p: load_token(p),
            "tls": lambda p: tls_from_args(argparse.Namespace(tls_cert=p, tls_key=p, tls_ca=p))}[loader]
    with pytest.raises(UserError, match="character device"):
        load("/dev/null")


# --- 18: a token or secret others can read -------------------------------------------------------------------

@pytest.mark.parametrize("loader", ["secret", "token"])
def test_a_world_readable_secret_warns(tmp_path: Path, loader: str, capsys: pytest.CaptureFixture[str]) -> None:
    from leveller.rpc.auth import load_secret
    from sdn.token import load_token

    load = load_secret if loader == "secret" else load_token
    f = tmp_path / "token"
    f.write_text("t" * 32 + "\n")
    f.chmod(0o600)
    assert load(str(f)) == b"t" * 32
    assert "warning" not in capsys.readouterr().err
    f.chmod(0o644)
    assert load(str(f)) == b"t" * 32
    err = capsys.readouterr().err
    assert "warning" in err and "0644" in err and "chmod 600" in err
