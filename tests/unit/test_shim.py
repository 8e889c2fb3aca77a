"""RDMA shim under LD_PRELOAD, through the real dynamic linker, against the
FAKE verbs provider (no RDMA device exists here). The verbs program reaches
libibverbs both ways: linked, and dlopen + dlvsym("IBVERBS_1.1") like NCCL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from leveller.agent import shim_control
from leveller.bench.shim import SHIM_LIB, LogLine, StreamRun, parse_fake_log
from leveller.errors import UserError
from tests.helpers.wait import wait_until

MODES = ["linked", "dlopen"]
EINVAL = 22


def modifies(log: list[LogLine], qpn: int) -> list[LogLine]:
    return [ln for ln in log if ln.kind == "MODIFY" and int(ln.fields["qpn"], 16) == qpn]


def wait_for_wire(log_path: Path, qpn: int, tc: int, timeout: float = 20.0) -> None:
    """Wait until the fake has carried a message of QP qpn at class tc."""
    def at_class() -> bool:
        wire = [ln for ln in parse_fake_log(log_path) if ln.kind == "WIRE" and int(ln.fields["qpn"], 16) == qpn]
        return bool(wire) and int(wire[-1].fields["tc"]) == tc

    wait_until(at_class, timeout, f"a message of QP {qpn} at class {tc}")


def assert_intact(summary: dict) -> None:
    assert summary["errors"] == 0, summary
    assert summary["in_order"] is True, summary
    assert summary["received"] == summary["posted"] > 0, summary
    assert summary["send_completions"] == summary["signaled_posted"], summary
    assert summary["last_signaled_done"] == summary["posted"] - 1, summary


def assert_no_forbidden(log: list[LogLine]) -> None:
    bad = [ln for ln in log if ln.kind in ("REJECT", "ERROR")]
    assert not bad, bad


@pytest.mark.parametrize("mode", MODES)
def test_fake_provider_refuses_what_verbs_forbids(shim_build: Path, tmp_path: Path, mode: str) -> None:
    """The fake is a fair judge: without the shim, the forbidden calls fail."""
    env = dict(os.environ, LD_LIBRARY_PATH=str(shim_build / "fake"), LEVELLER_FAKE_LOG=str(tmp_path / "log"))
    env.pop("LD_PRELOAD", None)
    out = subprocess.run([str(shim_build / f"verbs_stream_{mode}"), "rules"], env=env, capture_output=True, text=True,
                         timeout=30, check=True)
    res = json.loads(out.stdout)
    assert res["mode"] == mode
    for key in ("rtr_before_init", "send_in_reset", "recv_in_reset", "send_in_init", "send_in_rtr", "av_in_rts",
                "rts_to_init", "rtr_after_reset"):
        assert res[key] == EINVAL, (key, res)
    assert res["to_reset"] == 0
    rejects = [ln for ln in parse_fake_log(tmp_path / "log") if ln.kind == "REJECT"]
    assert len(rejects) == 8


@pytest.mark.parametrize("mode", MODES)
def test_traffic_class_changes_while_streaming(shim_build: Path, tmp_path: Path, mode: str) -> None:
    run = StreamRun(shim_build, tmp_path, mode=mode)
    try:
        a, b = run.ids["qp_a"], run.ids["qp_b"]
        client = shim_control.ShimClient(run.sock)
        qps = {q.qp: q for q in client.list_qps()}
        assert set(qps) == {a, b}
        assert qps[a].job == "jobA" and qps[a].tc == 0 and qps[a].state == "RTS"
        assert qps[a].remote == {"qpn": b, "lid": 0, "gid": "::ffff:127.0.0.1"}
        assert qps[b].remote is not None and qps[b].remote["qpn"] == a
        assert qps[a].local["gid"] == "::ffff:127.0.0.1"
        classes = [32, 64, 96, 0, 160]
        previous = 0
        for tc in classes:
            wait_for_wire(run.log, a, previous)  # messages flow at the previous class
            results = client.set_traffic_class(tc, job="jobA")
            assert sorted(r.qp for r in results) == [a, b]
            assert all(r.ok and r.changed and r.tc == tc for r in results), results
            previous = tc
        wait_for_wire(run.log, a, previous)
        after = {q.qp: q for q in client.list_qps()}
        summary = run.stop()
    finally:
        run.kill()
    assert_intact(summary)
    assert summary["mode"] == mode
    assert after[a].tc == after[b].tc == 160 and after[a].resurrections == len(classes)
    log = parse_fake_log(run.log)
    assert_no_forbidden(log)
    for qpn in (a, b):
        seq = modifies(log, qpn)
        bring_up, rebuilds = seq[:3], seq[3:]
        assert [m.fields["to"] for m in bring_up] == ["INIT", "RTR", "RTS"]
        assert len(rebuilds) == 5 * len(classes)
        for i, tc in enumerate(classes):
            err, reset, init, rtr, rts = rebuilds[5 * i:5 * i + 5]
            assert [m.fields["to"] for m in (err, reset, init, rtr, rts)] == ["ERR", "RESET", "INIT", "RTR", "RTS"]
            assert rtr.fields["tc"] == rts.fields["tc"] == str(tc)
            # PSNs continue where the QP was, not where the application started it
            assert rtr.fields["rq_psn"] == err.fields["rq_psn"]
            assert rts.fields["sq_psn"] == err.fields["sq_psn"]
            assert reset.fields["dropped_sq"] == "0" and reset.fields["cleaned_cqes"] == "0"
    wire = [int(ln.fields["tc"]) for ln in log if ln.kind == "WIRE" and int(ln.fields["qpn"], 16) == a]
    assert wire == [0, *classes], "every class carried messages on the wire, in order"


@pytest.mark.parametrize("step,fail", [("ERR", "ERR:1"), ("RESET", "RESET:1"), ("INIT", "INIT:3"),
                                        ("RTR", "RTR:3"), ("RTS", "RTS:3")])
def test_failure_at_each_step_keeps_old_class(shim_build: Path, tmp_path: Path, step: str, fail: str) -> None:
    run = StreamRun(shim_build, tmp_path, mode="linked", fail=fail)
    try:
        a = run.ids["qp_a"]
        client = shim_control.ShimClient(run.sock)
        wait_for_wire(run.log, a, 0)
        (res,) = client.set_traffic_class(64, qp=a)
        assert not res.ok and res.tc == 0 and res.old_tc == 0
        assert res.error is not None and f"step {step} failed" in res.error
        (state,) = [q for q in client.list_qps() if q.qp == a]
        assert state.tc == 0 and state.state == "RTS" and state.failures == 1
        (again,) = client.set_traffic_class(96, qp=a)
        assert again.ok and again.tc == 96, again
        wait_for_wire(run.log, a, 96)
        summary = run.stop()
    finally:
        run.kill()
    assert_intact(summary)
    log = parse_fake_log(run.log)
    assert_no_forbidden(log)
    injected = [ln for ln in log if ln.kind == "INJECTED"]
    assert len(injected) == 1 and injected[0].fields["to"] == step
    rtr_tcs = [m.fields["tc"] for m in modifies(log, a) if m.fields["to"] == "RTR"]
    # bring-up at 0; a failed rebuild is redone at the old class 0; then 96
    assert rtr_tcs[0] == "0" and rtr_tcs[-1] == "96"
    # (an injected RTR is logged as INJECTED, not as a MODIFY)
    expected = {"ERR": ["0", "96"], "RESET": ["0", "0", "96"], "INIT": ["0", "0", "96"], "RTR": ["0", "0", "96"],
                "RTS": ["0", "64", "0", "96"]}[step]
    assert rtr_tcs == expected
    wire = [int(ln.fields["tc"]) for ln in log if ln.kind == "WIRE" and int(ln.fields["qpn"], 16) == a]
    assert 64 not in wire and wire[-1] == 96


def test_agent_level_change_reaches_the_qps(shim_build: Path, tmp_path: Path) -> None:
    """The agent's call path: job level -> caller's mapping -> every QP of the job."""
    run = StreamRun(shim_build, tmp_path, mode="dlopen", job="gpt")
    try:
        a, b = run.ids["qp_a"], run.ids["qp_b"]

        def level_to_tc(level: int) -> int:
            return shim_control.dscp_traffic_class(8 * level)

        other = shim_control.apply_job_level("bert", 2, level_to_tc, sockets=[run.sock])
        assert other == []
        results = shim_control.apply_job_level("gpt", 3, level_to_tc, sockets=[run.sock])
        assert sorted(r.qp for r in results) == [a, b]
        assert all(r.ok and r.tc == 96 and r.old_tc == 0 for r in results), results
        stale = tmp_path / "leveller-shim-999999999.sock"
        stale.touch()
        mixed = shim_control.apply_job_level("gpt", 1, level_to_tc, sockets=[stale, run.sock])
        assert [r.ok for r in mixed if r.qp == -1] == [False]
        assert sorted(r.tc for r in mixed if r.ok) == [32, 32]
        # the stale pid is skipped, and so is a name without a pid (the peer could not be checked)
        assert shim_control.discover([tmp_path]) == []
        summary = run.stop()
    finally:
        run.kill()
    assert_intact(summary)
    log = parse_fake_log(run.log)
    assert_no_forbidden(log)
    for qpn in (a, b):
        assert [m.fields["tc"] for m in modifies(log, qpn) if m.fields["to"] == "RTR"] == ["0", "96", "32"]


def test_class_set_before_connection_applies_at_rtr(shim_build: Path, tmp_path: Path) -> None:
    run = StreamRun(shim_build, tmp_path, extra_args=["--pause-before-rtr-ms", "400"])
    try:
        client = shim_control.ShimClient(run.sock)
        results = client.set_traffic_class(128, job="jobA")
        assert len(results) == 2 and all(r.ok and r.deferred for r in results), results
        run.wait_ready()
        wait_for_wire(run.log, run.ids["qp_a"], 128)
        assert {q.tc for q in client.list_qps()} == {128}
        summary = run.stop()
    finally:
        run.kill()
    assert_intact(summary)
    log = parse_fake_log(run.log)
    assert_no_forbidden(log)
    assert [m.fields["tc"] for m in log if m.kind == "MODIFY" and m.fields["to"] == "RTR"] == ["128", "128"]
    assert not [m for m in log if m.kind == "MODIFY" and m.fields["to"] == "RESET"], "no resurrection needed"


def test_control_channel_rejects_bad_requests(shim_build: Path, tmp_path: Path) -> None:
    run = StreamRun(shim_build, tmp_path)
    try:
        client = shim_control.ShimClient(run.sock)
        assert "unknown op" in client.request({"op": "bogus"})["error"]
        assert "'tc'" in client.request({"op": "set_tc", "job": "jobA", "tc": 300})["error"]
        assert "exactly one" in client.request({"op": "set_tc", "tc": 8})["error"]
        assert "no QP 4242" in client.request({"op": "set_tc", "qp": 4242, "tc": 8})["error"]
        with pytest.raises(UserError, match="traffic class"):
            client.set_traffic_class(256, job="jobA")
        with pytest.raises(UserError, match="exactly one"):
            client.set_traffic_class(8, job="jobA", qp=1)
        with pytest.raises(UserError, match="dscp"):
            shim_control.dscp_traffic_class(64)
        assert {q.tc for q in client.list_qps()} == {0}  # nothing was half-applied
        summary = run.stop()
    finally:
        run.kill()
    assert_intact(summary)


def test_unrelated_dlsym_lookups_pass_through(shim_build: Path) -> None:
    """dlsym/dlvsym interposition must not disturb other lookups (ctypes uses dlsym)."""
    code = "import ctypes, os; print(ctypes.CDLL(None).getpid() == os.getpid())"
    env = dict(os.environ, LD_PRELOAD=str(SHIM_LIB))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and out.stdout.strip() == "True", out.stderr


def test_trailing_unsignaled_sends_are_drained_by_a_fence(shim_build: Path, tmp_path: Path) -> None:
    """With one signaled send in 1000, the last posted sends are unsignaled at
    hold time: only the shim's signaled fence tells when they completed."""
    os.environ["LEVELLER_SHIM_DRAIN_TIMEOUT_MS"] = "3000"
    try:
        run = StreamRun(shim_build, tmp_path, extra_args=["--signal-every", "1000"])
    finally:
        del os.environ["LEVELLER_SHIM_DRAIN_TIMEOUT_MS"]
    try:
        a = run.ids["qp_a"]
        client = shim_control.ShimClient(run.sock)
        for tc in (32, 64, 96):
            wait_for_wire(run.log, a, 0 if tc == 32 else tc - 32)
            (res,) = client.set_traffic_class(tc, qp=a)
            assert res.ok, res.error
        wait_for_wire(run.log, a, 96)
        summary = run.stop()
    finally:
        run.kill()
    assert_intact(summary)  # the fence's completions never reached the application
    assert_no_forbidden(parse_fake_log(run.log))


def _tc_of(client: shim_control.ShimClient, qpn: int) -> int | None:
    return {q.qp: q.tc for q in client.list_qps()}[qpn]


def test_a_lease_that_runs_out_puts_the_application_class_back_by_itself(shim_build: Path, tmp_path: Path) -> None:
    """The agent's lease is kept by the shim's own timer: nobody tells it, the QPs go back to the class
    the application gave them (64 here, not 0) once the lease ends, and never before."""
    run = StreamRun(shim_build, tmp_path, extra_args=["--tc", "64"])
    try:
        a, b = run.ids["qp_a"], run.ids["qp_b"]
        client = shim_control.ShimClient(run.sock)
        wait_for_wire(run.log, a, 64)
        sent = time.monotonic()
        results = client.set_traffic_class(160, job="jobA", lease_ms=600)
        assert all(r.ok and r.tc == 160 for r in results) and len(results) == 2
        listing = client.request({"op": "list"})
        assert listing["job_tc"] == 160 and 0 < listing["lease_ms_left"] <= 600
        assert {q["qp"]: q["app_tc"] for q in listing["qps"]} == {a: 64, b: 64}
        wait_for_wire(run.log, a, 160)
        wait_until(lambda: _tc_of(client, a) == 64 and _tc_of(client, b) == 64, 10,
                   "the classes back once the lease ran out")
        back = time.monotonic()
        assert back - sent >= 0.6  # not before the lease ended
        wait_for_wire(run.log, a, 64)
        listing = client.request({"op": "list"})
        assert listing["job_tc"] is None and listing["lease_ms_left"] is None and listing["lease_expiries"] == 1
        summary = run.stop()
    finally:
        run.kill()
    assert_intact(summary)
    assert_no_forbidden(parse_fake_log(run.log))


def test_a_renewed_lease_keeps_the_class_and_ending_it_restores_at_once(shim_build: Path, tmp_path: Path) -> None:
    run = StreamRun(shim_build, tmp_path)
    try:
        a = run.ids["qp_a"]
        client = shim_control.ShimClient(run.sock)
        assert client.lease(300) is False  # nothing was running yet
        (res,) = client.set_traffic_class(96, qp=a, lease_ms=300)
        assert res.ok
        for _ in range(10):  # 1 s in all, three times the lease, renewed every 0.1 s
            time.sleep(0.1)
            assert client.lease(300) is True
        assert _tc_of(client, a) == 96
        assert client.lease(0) is True  # end it now: back before the answer
        assert _tc_of(client, a) == 0
        assert client.lease(300) is False
        summary = run.stop()
    finally:
        run.kill()
    assert_intact(summary)


def test_lease_requests_are_validated(shim_build: Path, tmp_path: Path) -> None:
    run = StreamRun(shim_build, tmp_path)
    try:
        client = shim_control.ShimClient(run.sock)
        assert "'ms'" in client.request({"op": "lease", "ms": -1})["error"]
        assert "'ms'" in client.request({"op": "lease"})["error"]
        assert "'lease_ms'" in client.request({"op": "set_tc", "job": "jobA", "tc": 8, "lease_ms": 0})["error"]
        with pytest.raises(UserError, match="lease"):
            client.set_traffic_class(8, job="jobA", lease_ms=0)
        with pytest.raises(UserError, match="lease"):
            client.lease(-5)
        listing = client.request({"op": "list"})
        assert listing["lease_ms_left"] is None and {q["tc"] for q in listing["qps"]} == {0}
        summary = run.stop()
    finally:
        run.kill()
    assert_intact(summary)
