"""ShimFlows / ShimEnforcer / SplitEnforcer against a FAKE shim control socket (the real one is
exercised in tests/integration/test_agent_shim.py): QPs as RoCEv2 flows, only changed QPs rebuilt,
failures retried, original classes restored, vanished processes forgotten."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from leveller.agent.enforce_shim import (
    ROCE_V2_PORT,
    ShimEnforcer,
    ShimFlows,
    SplitEnforcer,
    add_shim,
    qp_flow_key,
    roce_source_port,
)
from leveller.agent.reports import Classifier, FlowSample, parse_port_rule
from leveller.agent.shim_control import QpInfo, ShimError, TcResult
from leveller.model.flow import FlowKey, flow_key

GID_A, GID_B = "::ffff:10.0.0.1", "::ffff:10.0.0.2"


def qp(n: int, tc: int = 0, job: str = "gpt", connected: bool = True, gid: str = GID_A,
       pid: int = os.getpid()) -> QpInfo:
    return QpInfo(pid=pid, job=job, qp=n, state="RTS" if connected else "INIT", tc=tc, connected=connected,
                  local={"qpn": n, "port": 1, "gid": gid}, remote={"qpn": n + 1000, "lid": 0, "gid": GID_B}
                  if connected else None, resurrections=0, failures=0, last_pause_us=0.0, last_error=None)


class FakeShim:
    """One shim process: its QPs and classes; ``fail`` makes set_tc on those QPs fail, ``gone`` unreachable.
    Its lease (as in shim/control.c): ``expire()`` puts every QP back to the application's class."""

    def __init__(self, qps: list[QpInfo]) -> None:
        self.qps = {q.qp: q for q in qps}
        self.tc = {q.qp: q.tc for q in qps}
        self.app_tc = dict(self.tc)
        self.fail: set[int] = set()
        self.gone = False
        self.calls: list[tuple[int, int]] = []
        self.leases: list[int] = []  # every lease_ms / ms the agent sent
        self.armed = False

    def expire(self) -> None:
        self.armed = False
        self.tc = dict(self.app_tc)

    def client(self, path: Path, timeout: float) -> Any:
        shim = self

        class Client:
            def list_qps(self) -> list[QpInfo]:
                if shim.gone:
                    raise ShimError("connection refused")
                return list(shim.qps.values())

            def lease(self, ms: int) -> bool:
                if shim.gone:
                    raise ShimError("connection refused")
                was, shim.armed = shim.armed, ms > 0
                shim.leases.append(ms)
                if ms == 0:
                    shim.expire()
                return was

            def set_traffic_class(self, tc: int, *, qp: int | None = None, job: str | None = None,
                                  lease_ms: int | None = None) -> list[TcResult]:
                if shim.gone:
                    raise ShimError("connection refused")
                assert qp is not None and job is None
                shim.calls.append((qp, tc))
                if lease_ms is not None:
                    shim.armed = True
                    shim.leases.append(lease_ms)
                old = shim.tc[qp]
                ok = qp not in shim.fail
                if ok:
                    shim.tc[qp] = tc
                return [TcResult(os.getpid(), qp, ok, old, tc if ok else old, ok and old != tc, False, 10.0, 5.0,
                                 None if ok else "step RTR failed")]
        return Client()


def setup(qps: list[QpInfo], tmp_path: Path) -> tuple[FakeShim, ShimFlows, ShimEnforcer]:
    sock = tmp_path / f"leveller-shim-{os.getpid()}.sock"
    sock.touch()
    shim = FakeShim(qps)
    flows = ShimFlows(sockets=lambda: [sock], base=Classifier(ports=(parse_port_rule("bert=48000"),)),
                      client=shim.client)
    return shim, flows, ShimEnforcer(flows, clock=lambda: 100.0)  # a still clock: leases as given


def key(n: int) -> FlowKey:
    return flow_key("10.0.0.1", "10.0.0.2", roce_source_port(n), ROCE_V2_PORT, "udp")


def test_connected_ipv4_qps_are_roce_v2_flows() -> None:
    assert qp_flow_key(qp(0x123)) == flow_key("10.0.0.1", "10.0.0.2", 0xC123, 4791, "udp")
    assert roce_source_port(0x4123) == roce_source_port(0x123) == 0xC123  # 14 bits of entropy
    assert qp_flow_key(qp(7, connected=False)) is None  # no peer yet: not a flow
    assert qp_flow_key(qp(7, gid="fe80::1")) is None  # not an IPv4-mapped GID


def test_qps_are_reported_with_the_shims_job_and_other_flows_use_the_base_classifier(tmp_path: Path) -> None:
    _, flows, _ = setup([qp(1), qp(2, job="llama"), qp(3, connected=False)], tmp_path)
    seen = flows.read_flows()
    assert set(seen) == {key(1), key(2)}
    assert flows.job_of(key(1), seen[key(1)]) == "gpt" and flows.job_of(key(2), seen[key(2)]) == "llama"
    tcp = flow_key("10.0.0.1", "10.0.0.3", 40000, 48000)
    assert flows.job_of(tcp, FlowSample(5)) == "bert"


def test_only_changed_qps_are_rebuilt_and_clear_restores_the_original_class(tmp_path: Path) -> None:
    shim, flows, enf = setup([qp(1, tc=96), qp(2)], tmp_path)
    flows.read_flows()
    tcp = flow_key("10.0.0.1", "10.0.0.3", 40000, 48000)
    enf.apply({key(1): 8, key(2): 8, tcp: 8}, 3.0)  # the TCP flow is not the shim's
    assert enf.wait_idle(5)
    assert shim.tc == {1: 32, 2: 32} and len(shim.calls) == 2
    enf.apply({key(1): 8, key(2): 0}, 3.0)
    assert enf.wait_idle(5)
    assert shim.tc == {1: 32, 2: 0} and shim.calls[2:] == [(2, 0)]  # QP 1 untouched
    enf.apply({key(2): 16}, 3.0)  # QP 1 no longer levelled: back to the application's class
    assert enf.wait_idle(5)
    assert shim.tc == {1: 96, 2: 64}
    enf.clear()
    assert enf.wait_idle(5)
    assert shim.tc == {1: 96, 2: 0} and enf.current == {}


def test_a_failed_change_keeps_the_old_class_is_reported_and_retried(tmp_path: Path) -> None:
    shim, flows, enf = setup([qp(1), qp(2)], tmp_path)
    flows.read_flows()
    shim.fail = {1}
    enf.apply({key(1): 8, key(2): 8}, 3.0)
    assert enf.wait_idle(5)
    assert shim.tc == {1: 0, 2: 32}
    assert len(enf.errors) == 1 and "QP 1" in enf.errors[0] and "RTR" in enf.errors[0]
    shim.fail = set()
    enf.apply({key(1): 8, key(2): 8}, 3.0)
    assert enf.wait_idle(5)
    assert shim.tc == {1: 32, 2: 32} and enf.errors == []
    assert shim.calls[-1] == (1, 32)


def test_a_vanished_shim_process_is_forgotten(tmp_path: Path) -> None:
    shim, flows, enf = setup([qp(1, pid=2**22 + 12345)], tmp_path)  # a pid that does not exist
    flows.read_flows()
    enf.apply({key(1): 8}, 3.0)
    assert enf.wait_idle(5)
    shim.gone = True
    assert flows.read_flows() == {} and flows.errors
    enf.clear()  # cannot reach it, and the process is gone: nothing left to restore
    assert enf.wait_idle(5)
    assert enf.current == {} and enf.errors == []


class Recording:
    def __init__(self) -> None:
        self.marks: dict[FlowKey, int] = {}
        self.cleared = 0

    def apply(self, marks: Mapping[FlowKey, int], valid_for_s: float) -> None:
        self.marks = dict(marks)

    def clear(self) -> None:
        self.cleared += 1


def test_split_enforcer_sends_qp_flows_to_the_shim_and_the_rest_to_the_datapath(tmp_path: Path) -> None:
    shim, flows, enf = setup([qp(1)], tmp_path)
    flows.read_flows()
    other = Recording()
    split = SplitEnforcer(enf, other)
    tcp = flow_key("10.0.0.1", "10.0.0.3", 40000, 48000)
    split.apply({key(1): 8, tcp: 16}, 3.0)
    assert split.shim.wait_idle(5)
    assert other.marks == {tcp: 16} and shim.tc == {1: 32}
    split.clear()
    assert split.shim.wait_idle(5)
    assert other.cleared == 1 and shim.tc == {1: 0}


class OneTcpFlow:
    def read_flows(self) -> Mapping[FlowKey, FlowSample]:
        return {flow_key("10.0.0.1", "10.0.0.3", 40000, 48000): FlowSample(7)}


def test_add_shim_extends_an_agents_flows_enforcer_and_classifier(tmp_path: Path) -> None:
    sock = tmp_path / f"leveller-shim-{os.getpid()}.sock"
    shim = FakeShim([qp(1)])
    other = Recording()
    flows, enforcer, classifier = add_shim(OneTcpFlow(), other, Classifier(ports=(parse_port_rule("bert=48000"),)),
                                           sockets=lambda: [sock])
    classifier.client = shim.client
    seen = flows.read_flows()
    tcp = flow_key("10.0.0.1", "10.0.0.3", 40000, 48000)
    assert set(seen) == {key(1), tcp}
    assert classifier.job_of(key(1), seen[key(1)]) == "gpt" and classifier.job_of(tcp, seen[tcp]) == "bert"
    enforcer.apply({key(1): 8, tcp: 8}, 3.0)
    assert enforcer.shim.wait_idle(5)
    assert shim.tc == {1: 32} and other.marks == {tcp: 8}


def test_every_change_carries_the_lease_and_each_apply_renews_it(tmp_path: Path) -> None:
    shim, flows, enf = setup([qp(1), qp(2)], tmp_path)
    flows.read_flows()
    enf.apply({key(1): 8, key(2): 8}, 1.5)
    assert enf.wait_idle(5)
    assert shim.leases == [1500, 1500] and shim.armed  # both changes armed the shim's lease
    enf.apply({key(1): 8, key(2): 8}, 0.25)  # nothing to change: the lease alone is renewed
    assert enf.wait_idle(5)
    assert shim.leases[2:] == [250] and len(shim.calls) == 2


def test_after_the_shims_lease_ran_out_the_next_apply_sets_the_classes_again(tmp_path: Path) -> None:
    shim, flows, enf = setup([qp(1, tc=96)], tmp_path)
    flows.read_flows()
    enf.apply({key(1): 8}, 1.0)
    assert enf.wait_idle(5)
    assert shim.tc == {1: 32}
    shim.expire()  # the agent was late: the shim put the QP back on its own
    assert shim.tc == {1: 96}
    enf.apply({key(1): 8}, 1.0)  # same levels: the QP must be changed again, not assumed changed
    assert enf.wait_idle(5)
    assert shim.tc == {1: 32} and shim.calls[-1] == (1, 32)
    enf.clear()
    assert enf.wait_idle(5)
    assert shim.tc == {1: 96} and shim.leases[-1] == 0 and enf.current == {}
