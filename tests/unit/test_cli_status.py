"""`leveller status` against a real controller over gRPC on loopback, fed by two real agents.

The table shows the jobs highest priority first with the R the controller decided on, each flow
with its level and links; --json prints the controller's status object; a controller that is not
there, or a wrong secret, is one error line naming --controller.
"""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from leveller.cli import main
from leveller.controller.paths import SingleLinkPaths
from leveller.controller.service import Controller
from leveller.core.policies import make_policy
from leveller.core.qos import default_level_map
from leveller.rpc.transport import serve
from tests.helpers.agents import FA, FB, SECRET
from tests.helpers.agents import reporting_agent as agent


@pytest.fixture
def running(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Address of a controller that decided once: b (R 0.6) above a (R 0.9)."""
    ctl = Controller(SingleLinkPaths("s1>s2"), make_policy("leveller"), default_level_map(2), tau_s=0.5,
                     lease_s=30.0)
    server, port = serve(ctl, "127.0.0.1:0", SECRET)
    address = f"127.0.0.1:{port}"
    try:
        a, _ = agent(tmp_path, "h1", "a", 47000, FA, 18, 0.5, address)
        b, _ = agent(tmp_path, "h2", "b", 48000, FB, 6, 1.0, address)
        assert a.step().ok and b.step().ok
        ctl.step(time.time())
        monkeypatch.setenv("LEVELLER_SECRET", SECRET.decode())
        yield address
    finally:
        server.stop(grace=None)


def test_json_is_the_controllers_decision(running: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--controller", running, "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["order"] == ["b", "a"] and status["policy"] == "leveller" and status["levels"] == 2
    rates = {j["job"]: j["rate"] for j in status["jobs"]}
    assert rates["a"] == pytest.approx(0.9, abs=0.05) and rates["b"] == pytest.approx(0.6, abs=0.05)
    levels = {f["flow"]: (f["job"], f["level"], f["links"]) for f in status["flows"]}
    assert levels == {FA.label(): ("a", 0, ["s1>s2"]), FB.label(): ("b", 1, ["s1>s2"])}
    assert sorted(a["host"] for a in status["agents"]) == ["h1", "h2"]


def rows(text: str, title: str) -> list[list[str]]:
    """Cells of the rows of the rich table titled ``title`` (box-drawing borders dropped)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == title)
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("└"))
    return [[c.strip() for c in line.strip("│").split("│")] for line in lines[start:end] if line.startswith("│")]


def test_tables_show_jobs_by_priority_and_each_flows_level(running: str, capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["status", "--controller", running]) == 0
    out = capsys.readouterr().out
    assert re.search(r"policy leveller, K=2, tau=0.5 s, epoch 1, decided \d+\.\d s ago", out)
    jobs = rows(out, "jobs (cumulative R, highest priority first)")  # the kind of R ranked by
    assert [r[0] for r in jobs] == ["b", "a"]  # priority order, not name order
    assert [r[1] for r in jobs] == ["6", "18"]
    assert float(jobs[0][3]) == pytest.approx(0.6, abs=0.05) and float(jobs[1][3]) == pytest.approx(0.9, abs=0.05)
    flows = {r[0]: r for r in rows(out, "flows")}
    assert flows[FB.label()][1:4] == ["b", "h2", "1"] and flows[FB.label()][5] == "s1>s2"
    assert flows[FA.label()][1:4] == ["a", "h1", "0"]
    assert sorted(r[0] for r in rows(out, "agents")) == ["h1", "h2"]


def test_no_controller_or_a_wrong_secret_is_one_error_line(running: str, capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    assert main(["status", "--controller", dead]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"leveller status: error: --controller {dead}: ") and err.count("\n") == 1
    monkeypatch.setenv("LEVELLER_SECRET", "another-secret-of-enough-bytes")
    assert main(["status", "--controller", running]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"leveller status: error: --controller {running}: ") and "Traceback" not in err
    monkeypatch.delenv("LEVELLER_SECRET")
    assert main(["status", "--controller", running]) == 2
    assert "no shared secret" in capsys.readouterr().err
