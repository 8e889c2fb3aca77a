"""Where a pushed decision's milliseconds go: the watcher's stamps (`leveller agent --trace-pushes`)
and the bench's cut of one sample into stages."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from leveller.bench.levels_latency import STAGES, stages
from leveller.commands.agent import _trace_file, _traced
from leveller.controller.paths import SingleLinkPaths
from leveller.controller.service import Controller
from leveller.core.policies import make_policy
from leveller.core.qos import default_level_map
from leveller.errors import UserError
from leveller.rpc.push import LevelsWatcher
from leveller.rpc.transport import serve
from tests.helpers.agents import SECRET, two_job_agent
from tests.helpers.wait import wait_until


def test_the_watcher_stamps_arrival_then_decoding_after_the_decision(tmp_path: Path) -> None:
    ctl = Controller(SingleLinkPaths(), make_policy("leveller"), default_level_map(2), tau_s=1.0, lease_s=60)
    server, port = serve(ctl, "127.0.0.1:0", SECRET)
    agent, enf, _log = two_job_agent(tmp_path, f"127.0.0.1:{port}")
    lines = io.StringIO()
    holder: list[LevelsWatcher] = []
    try:
        agent.step()
        watcher = LevelsWatcher(f"127.0.0.1:{port}", SECRET, "h1", _traced(agent.apply_pushed, lines,
                                lambda: holder[0]), lambda: agent.known_jobs, wait_s=20)
        holder.append(watcher)
        with watcher:
            decided = time.time()
            ctl.step(decided)
            wait_until(lambda: bool(enf.marks) and lines.getvalue().endswith("\n"))
        entry = json.loads(lines.getvalue().splitlines()[0])
        assert entry["epoch"] == ctl.epoch
        assert decided <= entry["arrived"] <= entry["decoded"] <= entry["applied"] <= time.time()
    finally:
        server.stop(grace=None)


def test_a_sample_is_cut_into_stages_that_add_up_to_its_latency() -> None:
    push = {"arrived": 10.0040, "decoded": 10.0045, "applied": 10.0050}
    cut = stages(10.0, 10.0010, 10.0030, push, 10.0052)
    assert cut is not None and tuple(cut) == STAGES
    assert cut["decide"] == pytest.approx(1.0) and cut["wake"] == pytest.approx(2.0)
    assert cut["send"] == pytest.approx(1.0) and cut["decode"] == pytest.approx(0.5)
    assert cut["apply"] == pytest.approx(0.5) and cut["wire"] == pytest.approx(0.2)
    assert sum(cut.values()) == pytest.approx(5.2)


@pytest.mark.parametrize("built, push", [
    (None, {"arrived": 1.0, "decoded": 1.0, "applied": 1.0}),  # no pushed reply built for the epoch
    (10.003, None),  # the agent never traced that epoch
    (10.003, {"arrived": None, "decoded": None, "applied": 10.004}),  # applied without the watcher
    (10.003, {"arrived": 10.002, "decoded": 10.0045, "applied": 10.005}),  # arrived before it was built
    (10.003, {"arrived": 10.004, "decoded": 10.0045, "applied": 10.006}),  # applied after the wire showed it
])
def test_missing_or_out_of_order_stamps_give_no_stages(built: float | None, push: dict | None) -> None:
    assert stages(10.0, 10.001, built, push, 10.0052) is None


def test_a_trace_file_that_cannot_be_opened_is_named(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"--trace-pushes .*/no/such/dir/t.jsonl: cannot open"):
        with _trace_file(str(tmp_path / "no" / "such" / "dir" / "t.jsonl")):
            pass
    with _trace_file(None) as nothing:
        assert nothing is None


def test_traced_applies_first_then_writes_one_line_per_push() -> None:
    applied: list[int] = []
    out = io.StringIO()
    fake = SimpleNamespace(arrived_at=1.5, decoded_at=1.6)
    traced = _traced(lambda r: applied.append(r.epoch), out, lambda: fake)  # type: ignore[arg-type,return-value]
    for epoch in (3, 4):
        traced(SimpleNamespace(epoch=epoch))  # type: ignore[arg-type]
    assert applied == [3, 4]
    rows = [json.loads(x) for x in out.getvalue().splitlines()]
    assert [r["epoch"] for r in rows] == [3, 4]
    assert all(r["arrived"] == 1.5 and r["decoded"] == 1.6 and r["applied"] >= 1.6 for r in rows)
