"""leveller.commands.controller: what `leveller controller` refuses at start (issue 26, findings 9 and 14: a lease
or --stale-after the agents refuse, a busy-looping tau, a metrics address that does not resolve)."""

from __future__ import annotations

import argparse
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


# --- an unbounded lease started, but nothing was ever marked (finding 9) -------------------------------------------

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


# --- --tau 1e-300 busy-looped (finding 14) -------------------------------------------------------------------------

@pytest.mark.parametrize("tau", ["1e-300", "0.001", "inf", "nan", "-1", "0", "1e9"])
def test_controller_refuses_a_tau_out_of_range(tau: str, no_start: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["controller", "--tau", tau]) == 2
    err = capsys.readouterr().err
    assert "--tau" in err and "0.01..3600" in err and "--verify-window" not in err


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
