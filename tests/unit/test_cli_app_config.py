"""`leveller controller` and `leveller agent` run what leveller.controller.app / leveller.agent.app build
from one typed configuration: every flag is a field of it, with the flag's default."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

import pytest

from leveller.agent.app import AgentConfig
from leveller.cli import build_parser
from leveller.config import SKIP_DESTS, option_actions
from leveller.controller.app import ControllerConfig, check
from leveller.errors import UserError


def _parser(command: str) -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[command]


@pytest.mark.parametrize("command, config", [("controller", ControllerConfig), ("agent", AgentConfig)])
def test_every_flag_is_a_field_with_the_flags_default(command: str, config: Any) -> None:
    actions = option_actions(_parser(command))
    fields = {f.name for f in dataclasses.fields(config)}
    assert set(actions) == fields - SKIP_DESTS
    made = config()
    for dest, action in actions.items():
        assert getattr(made, dest) == action.default, dest
    parsed = config.from_namespace(_parser(command).parse_args([]))
    assert parsed == made


def test_the_configuration_is_checked_like_the_flags() -> None:
    check(ControllerConfig())
    with pytest.raises(UserError, match="--levels 0: must be 1.."):
        check(ControllerConfig(levels=0))
    with pytest.raises(UserError, match="--etcd-ttl needs --etcd"):
        check(ControllerConfig(etcd_ttl=2))
    assert ControllerConfig.from_namespace(argparse.Namespace(tau=0.5, func=print)).tau == 0.5


def test_start_serves_the_controller_and_close_ends_it() -> None:
    from leveller.controller.app import start

    app = start(ControllerConfig(listen="127.0.0.1:0", tau=0.5, levels=4), secret=b"s" * 32, pace_gc=False)
    try:
        assert app.port > 0 and app.level_map.levels == 4 and app.controller.lease_s == 1.5
        assert app.banner() == f"controller listening on port {app.port} (policy leveller, K=4, tau=0.5s, lease=1.5s)"
        assert app.decision_text(None) == [] and app.decision_line("boom", 1.0)["error"] == "boom"
    finally:
        app.close()
    with pytest.raises(UserError, match="--verify needs --paths sdn:"):
        start(ControllerConfig(listen="127.0.0.1:0", verify=True), secret=b"s" * 32, pace_gc=False)
