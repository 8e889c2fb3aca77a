"""The shim when memory runs out: allocation failures injected at named sites of the shim's allocator
(LEVELLER_SHIM_FAIL_ALLOC=site:N fails every allocation at site after its first N). Whatever fails, the
application's traffic is untouched, the caller of set_tc gets an error saying why, the QP keeps its
class and state, and nothing half-built is left allocated."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from leveller.agent import shim_control
from leveller.bench.shim import StreamRun, parse_fake_log
from tests.helpers.wait import wait_until


def start(shim_build: Path, tmp_path: Path, fail: str) -> StreamRun:
    return StreamRun(shim_build, tmp_path, extra_env={"LEVELLER_SHIM_FAIL_ALLOC": fail})


def wait_for_traffic(run: StreamRun, qpn: int, timeout: float = 20.0) -> None:
    """Wait until the fake provider has carried a message of QP qpn (it logs WIRE once per class)."""
    wait_until(lambda: any(ln.kind == "WIRE" and int(ln.fields["qpn"], 16) == qpn for ln in parse_fake_log(run.log)),
               timeout, f"QP {qpn} to carry a message")


def assert_intact(summary: dict[str, Any]) -> None:
    assert summary["errors"] == 0, summary
    assert summary["in_order"] is True, summary
    assert summary["received"] == summary["posted"] > 0, summary
    assert summary["send_completions"] == summary["signaled_posted"], summary


def no_rebuild(run: StreamRun) -> None:
    """The provider never saw a rebuild step (the change stopped before ERR)."""
    steps = [ln for ln in parse_fake_log(run.log) if ln.kind == "MODIFY" and ln.fields["to"] in ("ERR", "RESET")]
    assert not steps, steps


def test_no_room_for_polled_completions_refuses_the_change_before_touching_the_qp(shim_build: Path,
                                                                                  tmp_path: Path) -> None:
    # window 2: B keeps at most 4 receives posted, each holding one shim block (its scatter list), so the
    # live count moves by at most 4 with the traffic; a block leaked per refused change would add 40
    run = StreamRun(shim_build, tmp_path, extra_args=["--window", "2"],
                    extra_env={"LEVELLER_SHIM_FAIL_ALLOC": "cqbuf:0"})
    changes = 40
    try:
        a = run.ids["qp_a"]
        client = shim_control.ShimClient(run.sock)
        wait_for_traffic(run, a)
        live = client.request({"op": "list"})["alloc_live"]
        for i in range(changes):
            (res,) = client.set_traffic_class(32 * (1 + i % 7), qp=a)
            assert not res.ok and res.tc == 0 and res.old_tc == 0, res
            assert res.error is not None and "out of memory" in res.error and "traffic class unchanged" in res.error
        listing = client.request({"op": "list"})
        (qa,) = [q for q in listing["qps"] if q["qp"] == a]
        assert (qa["state"], qa["tc"], qa["failures"], qa["resurrections"]) == ("RTS", 0, changes, 0)
        assert "out of memory" in qa["last_error"]
        assert listing["alloc_failed"] >= changes
        assert abs(listing["alloc_live"] - live) <= 4  # nothing half-built was left behind
        summary = run.stop()
    finally:
        run.kill()
    assert_intact(summary)
    no_rebuild(run)


@pytest.mark.parametrize("fail,lost_qp,why", [
    ("sig:0", "qp_a", "out of memory recording posted sends"),
    ("rq:0", "qp_b", "out of memory recording posted receives"),
    ("sge:3", "qp_b", "out of memory recording posted receives"),
])
def test_bookkeeping_lost_to_memory_keeps_the_traffic_and_refuses_only_that_qp(
        shim_build: Path, tmp_path: Path, fail: str, lost_qp: str, why: str) -> None:
    """The application's posts go through although the shim could not record them; that QP's class can
    no longer be changed safely, and set_tc says so; the other QP is rebuilt as usual."""
    run = start(shim_build, tmp_path, fail)
    try:
        lost = run.ids[lost_qp]
        other = run.ids["qp_b" if lost_qp == "qp_a" else "qp_a"]
        client = shim_control.ShimClient(run.sock)
        wait_for_traffic(run, run.ids["qp_a"])
        results = {r.qp: r for r in client.set_traffic_class(64, job="jobA")}
        assert not results[lost].ok and results[lost].tc == 0
        assert results[lost].error is not None and why in results[lost].error
        assert "lost track" in results[lost].error
        assert results[other].ok and results[other].tc == 64
        states = {q.qp: q for q in client.list_qps()}
        assert states[lost].tc == 0 and states[lost].state == "RTS" and states[lost].resurrections == 0
        summary = run.stop()
    finally:
        run.kill()
    assert_intact(summary)


def test_no_memory_for_a_reply_gives_a_plain_error_line(shim_build: Path, tmp_path: Path) -> None:
    run = start(shim_build, tmp_path, "out:0")
    try:
        client = shim_control.ShimClient(run.sock)
        reply = client.request({"op": "list"})
        assert reply == {"ok": False, "error": "out of memory in the shim building the reply"}
        with pytest.raises(shim_control.ShimError, match="out of memory"):
            client.list_qps()
        summary = run.stop()
    finally:
        run.kill()
    assert_intact(summary)


def test_no_memory_for_the_qp_list_changes_nothing(shim_build: Path, tmp_path: Path) -> None:
    run = start(shim_build, tmp_path, "snapshot:0")
    try:
        client = shim_control.ShimClient(run.sock)
        assert client.request({"op": "list"})["error"] == "out of memory listing the QPs"
        reply = client.request({"op": "set_tc", "job": "jobA", "tc": 64})
        assert reply == {"ok": False, "error": "out of memory listing the QPs; nothing changed"}
        summary = run.stop()
    finally:
        run.kill()
    assert_intact(summary)
    steps = [ln for ln in parse_fake_log(run.log) if ln.kind == "MODIFY" and ln.fields["to"] == "RTR"]
    assert [ln.fields["tc"] for ln in steps] == ["0", "0"]  # only the bring-up; the job class was not kept


def test_no_memory_for_the_qp_record_leaves_the_application_running_untracked(shim_build: Path,
                                                                             tmp_path: Path) -> None:
    run = start(shim_build, tmp_path, "qp:0")
    try:
        summary = run.stop()
    finally:
        run.kill()
    assert_intact(summary)
    assert not run.sock.exists()  # nothing tracked: no control channel was started
