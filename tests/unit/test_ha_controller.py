"""Controllers behind an election (leveller.controller.ha) on an in-memory etcd with fake clocks: one
leader, standbys that name it, a leader cut from etcd that stops deciding within its TTL, a successor
that takes the state over (no re-profiling, no replay), and guarded writes of a deposed leader."""

from __future__ import annotations

import pytest

from leveller.controller.ha import HaController
from leveller.controller.leadership import NotLeader
from leveller.controller.paths import SingleLinkPaths
from leveller.controller.service import Controller
from leveller.core.policies import make_policy
from leveller.core.qos import default_level_map
from leveller.model.flow import flow_key
from leveller.model.messages import FlowReport, JobReport, Report
from leveller.rpc.replay import ReplayError
from tests.helpers.etcd import FakeEtcd, pair

FA = flow_key("10.0.0.1", "10.0.0.3", 40000, 47000)
RUN = "ab" * 8


def report(host: str = "h1", ideal: float | None = None) -> Report:
    return Report(host, (JobReport("j", 10, 900.0, ideal),), (FlowReport(FA, "j", 1000),))


def test_one_leader_the_standby_names_it_and_replies_carry_the_epoch() -> None:
    etcd, mono, wall, (a, b), _ = pair()
    a.elect_once()
    b.elect_once()
    assert a.may_decide() and not b.may_decide()
    epoch = a.leadership.epoch
    assert epoch > 0 and b.leadership.epoch == epoch and b.leadership.leader == "a:50051"
    with pytest.raises(NotLeader, match="not the leader; the leader is a:50051"):
        b.report(report(), wall[0])
    a.controller.step(wall[0])
    assert a.report(report(), wall[0]).leader_epoch == epoch
    assert b.status(wall[0])["ha"]["leader"] == "a:50051" and a.status(wall[0])["ha"]["role"] == "leader"


def test_a_leader_cut_from_etcd_stops_deciding_before_its_lease_expires_and_a_successor_takes_over() -> None:
    etcd, mono, wall, (a, b), _ = pair(ttl=2)
    a.elect_once()
    b.elect_once()
    first = a.leadership.epoch
    etcd.down = True  # a cannot renew (b cannot reach etcd either, until it comes back)
    for t in (0.5, 1.0, 1.5):
        mono[0] = t
        with pytest.raises(Exception, match="etcd down"):
            a.elect_once()
    assert a.may_decide() is (mono[0] < 2 - a.leadership.guard_s)
    mono[0] = 1.7  # TTL 2 minus the guard (0.4): a stops though the lease may live until 2.0
    assert not a.may_decide()
    with pytest.raises(NotLeader, match="no leader is elected now"):
        a.report(report(), wall[0])
    etcd.down = False
    mono[0] = 2.0  # the lease is gone at etcd: b is elected at its next round, at a later epoch
    b.elect_once()
    assert b.may_decide() and b.leadership.epoch > first
    a.elect_once()  # a finds its lease gone and joins as a standby naming b
    assert not a.may_decide() and a.leadership.leader == "b:50051"


def test_the_successor_takes_the_state_over_no_reprofiling_no_replay() -> None:
    etcd, mono, wall, (a, b), (ga, gb) = pair()
    a.elect_once()
    b.elect_once()
    a.controller.report(report(), wall[0])
    job = a.controller.registry.jobs["j"]
    job.profiler.ideal = 0.5  # as if a had profiled it
    job.ideal_in_use, job.work_base, job.iter_base = 0.5, 2.0, 4
    a.controller.registry.weights["j"] = 3.0
    ga.admit("h1", RUN, 7, 1000.0, 1000.0)
    assert a.save() > 0 and a.save() == 0  # only changes are written
    keys = set(etcd.get_prefix("/leveller/state/"))
    assert keys == {"/leveller/state/jobs/j", "/leveller/state/replay/h1", "/leveller/state/weights"}

    mono[0], wall[0] = 5.0, 1005.0  # a died: its lease expired
    b.elect_once()
    assert b.may_decide()
    state = b.controller.registry.jobs["j"]
    assert state.profiler.ideal == 0.5 and (state.ideal_in_use, state.work_base, state.iter_base) == (0.5, 2.0, 4)
    assert b.controller.registry.weights == {"j": 3.0}
    b.controller.report(report(), wall[0])
    b.controller.registry.update_profiling(wall[0])
    assert not b.controller.registry.jobs["j"].profiler.profiling  # not profiled again
    with pytest.raises(ReplayError):  # a's last accepted report, replayed
        gb.admit("h1", RUN, 7, 1000.0, wall[0])
    with pytest.raises(ReplayError):  # a report signed before b was elected
        gb.admit("h1", RUN, 8, 1004.9, wall[0])
    gb.admit("h1", RUN, 9, 1005.1, wall[0])


def test_a_deposed_leader_writes_nothing_and_gives_up() -> None:
    etcd, mono, wall, (a, b), (ga, _) = pair()
    a.elect_once()
    ga.admit("h1", RUN, 7, 1000.0, 1000.0)
    epoch = a.leadership.epoch
    # a's lease is lost behind its back (etcd restored from a backup, an operator deleting the key...)
    etcd.revoke(a.lease or 0)
    b.elect_once()
    assert b.may_decide() and b.leadership.epoch > epoch
    assert a.may_decide()  # a does not know yet...
    assert a.save() == 0 and not a.may_decide()  # ...its guarded write fails: it stops
    assert "/leveller/state/replay/h1" not in etcd.kv


def test_a_clean_stop_hands_over_at_once() -> None:
    etcd, mono, wall, (a, b), _ = pair()
    a.elect_once()
    b.elect_once()
    a.close()
    mono[0] = 0.1  # well within the TTL
    b.elect_once()
    assert b.may_decide()


def test_the_ttl_must_be_at_most_half_the_agents_lease() -> None:
    ctl = Controller(SingleLinkPaths(), make_policy("leveller"), default_level_map(2), tau_s=0.5, lease_s=3.0)
    with pytest.raises(ValueError, match=r"--etcd-ttl 2: must be at most half the agents' lease \(--lease 3 s\)"):
        HaController(ctl, FakeEtcd([0.0]), "a", "a:1", 2)
    with pytest.raises(ValueError, match="--etcd-ttl 0.5: whole seconds"):
        HaController(ctl, FakeEtcd([0.0]), "a", "a:1", 0.5)  # type: ignore[arg-type]


def test_agents_follow_the_standby_to_the_leader_over_grpc() -> None:
    """Real gRPC on loopback: an agent whose list starts with the standby is sent to the leader at once,
    its reply carries the leader's epoch, and after a handover it follows the new leader."""
    from leveller.rpc.failover import FailoverClient
    from leveller.rpc.transport import serve

    secret = b"ha-test-secret-0123456789"
    etcd, mono, wall, (a, b), (ga, gb) = pair()
    servers, addresses = [], []
    for ha, guard in ((a, ga), (b, gb)):
        server, port = serve(ha, "127.0.0.1:0", secret, on_reject=ha.reject, replay=guard)
        servers.append(server)
        ha.address = f"127.0.0.1:{port}"
        addresses.append(ha.address)
    try:
        a.elect_once()
        b.elect_once()
        a.controller.step(wall[0])
        with FailoverClient([addresses[1], addresses[0]], secret, timeout_s=2) as admin:
            status = admin.status()  # asks the standby first, shows the leader's
            assert status["controller"] == addresses[0] and status["ha"]["role"] == "leader"
        with FailoverClient([addresses[1], addresses[0]], secret, timeout_s=2) as client:
            r = Report("h1", (JobReport("j", 10, 900.0, 0.5),), (FlowReport(FA, "j", 1000),))
            reply = client.report(r)
            assert client.active == addresses[0] and reply.leader_epoch == a.leadership.epoch
            first = a.leadership.epoch
            a.close()  # a steps down cleanly: b leads at its next round
            b.elect_once()
            b.controller.step(wall[0])
            reply = client.report(r)
            assert client.active == addresses[1] and reply.leader_epoch == b.leadership.epoch > first
            assert "FAILED_PRECONDITION: not the leader" in client.last_errors.get(addresses[0], "")
    finally:
        for server in servers:
            server.stop(grace=None)


def test_replay_marks_are_rewritten_once_a_minute_not_every_step() -> None:
    etcd, mono, wall, (a, _), (ga, _) = pair()
    a.elect_once()
    ga.admit("h1", RUN, 1, 1000.0, 1000.0)
    assert a.save() == 1
    ga.admit("h1", RUN, 2, 1001.0, 1001.0)
    assert a.save() == 0  # same run, a second later: the host is there, that is what a successor needs
    ga.admit("h1", RUN, 3, 1061.0, 1061.0)
    assert a.save() == 1
    ga.admit("h1", "cd" * 8, 1, 1062.0, 1062.0)  # the agent restarted: a new run is written at once
    assert a.save() == 1


def test_metrics_count_elections_and_show_the_epoch_and_etcd_calls() -> None:
    from prometheus_client import CollectorRegistry

    from leveller.controller.ha import HaMetrics

    etcd, mono, wall, (a, _), _ = pair()
    registry = CollectorRegistry()
    a.metrics = HaMetrics(registry)
    a.elect_once()
    a.metrics.on_call("keepalive", 0.003, None)
    a.metrics.on_call("keepalive", 1.0, "ConnectionFailedError")
    value = registry.get_sample_value
    assert value("leveller_ha_elections_total") == 1 and value("leveller_ha_leader") == 1
    assert value("leveller_ha_epoch") == a.leadership.epoch
    assert value("leveller_etcd_request_seconds_count", {"op": "keepalive"}) == 2
    assert value("leveller_etcd_errors_total", {"op": "keepalive", "error": "ConnectionFailedError"}) == 1


def test_a_new_leader_turns_every_poll_during_its_first_tau_then_every_tau() -> None:
    """Elected, the leader steps every poll_s for one tau (the agents' reports are arriving: it decides
    with them at once, not a tau later), then every tau; a standby every poll_s (at most tau)."""
    etcd, mono, wall, (a, b), _ = pair()
    a.poll_s = b.poll_s = 0.1
    a.elect_once()
    b.elect_once()
    assert b.period(b.may_decide()) == 0.1
    assert a.period(a.may_decide()) == 0.1  # just elected
    mono[0] += 0.3
    assert a.period(a.may_decide()) == 0.1
    mono[0] += 0.3  # tau (0.5 s) after the election
    a.elect_once()
    assert a.period(a.may_decide()) == 0.5
    assert a.period(False) == 0.1  # not leading (any more): poll


def test_eight_hundred_job_weights_do_not_stop_the_state_writes() -> None:
    """Weights too many for one record go in parts: written, and a successor has every one."""
    etcd, mono, wall, (a, b), _ = pair()
    weights = {f"w{i:05d}-" + "x" * 57: 1.0 + i / 7 for i in range(800)}
    a.elect_once()
    a.controller.registry.weights.update(weights)
    assert a.save() > 1
    a.close()
    b.elect_once()
    assert b.may_decide() and b.controller.registry.weights == weights


def test_records_left_out_are_logged_once_counted_and_shown(monkeypatch: pytest.MonkeyPatch,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    from prometheus_client import CollectorRegistry

    import leveller.controller.hastate as hastate
    from leveller.controller.ha import HaMetrics

    monkeypatch.setattr(hastate, "MAX_JOBS", 1)
    etcd, mono, wall, (a, _), _ = pair()
    registry = CollectorRegistry()
    a.metrics = HaMetrics(registry)
    a.elect_once()
    a.controller.report(report(), wall[0])
    a.controller.report(Report("h2", (JobReport("k", 10, 900.0, None),), ()), wall[0])
    with caplog.at_level("ERROR", "leveller.controller.ha"):
        assert a.save() == 1 and a.save() == 0
    said = [r.getMessage() for r in caplog.records if "not written" in r.getMessage()]
    assert said == ["state not written to etcd: /leveller/state/: 1 of 2 jobs left out (at most 1)"]
    assert registry.get_sample_value("leveller_ha_state_left_out") == 1
    assert a.status(wall[0])["ha"]["state_left_out"] == ["/leveller/state/: 1 of 2 jobs left out (at most 1)"]


def test_a_hostile_record_in_etcd_is_refused_and_the_successor_leads_with_the_others() -> None:
    from prometheus_client import CollectorRegistry

    from leveller.controller.ha import HaMetrics

    etcd, mono, wall, (a, b), _ = pair()
    etcd.put("/leveller/state/jobs/j", b'{"ideal":0.5,"in_use":0.5,"work_base":2.0,"iter_base":4,"first_seen":900}')
    etcd.put("/leveller/state/jobs/k", b'{"ideal":1' + b"0" * 400 + b',"in_use":null,"work_base":0,"iter_base":0,'
             b'"first_seen":0}')
    etcd.put("/leveller/state/weights", b"[" * 30000 + b"]" * 30000)
    registry = CollectorRegistry()
    b.metrics = HaMetrics(registry)
    b.elect_once()
    assert b.may_decide()
    assert b.controller.registry.jobs["j"].profiler.ideal == 0.5 and "k" not in b.controller.registry.jobs
    assert registry.get_sample_value("leveller_ha_state_refused_total") == 2
    b.controller.report(report(), wall[0])
    b.controller.step(wall[0])
    assert b.save() >= 1  # the bad records are rewritten from what b knows (or removed)
    assert "/leveller/state/jobs/k" not in etcd.kv and "/leveller/state/weights" not in etcd.kv
