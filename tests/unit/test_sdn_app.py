"""sdn.app's event handlers, fed os-ken-shaped events, with the real PathController behind them.

Switches are fakes that record the os-ken messages sent to them (no OVS unprivileged); the
integration tests run the same app against real Open vSwitch.
"""

from __future__ import annotations

import ipaddress
from types import SimpleNamespace
from typing import Any

import pytest
from os_ken.controller.handler import DEAD_DISPATCHER, MAIN_DISPATCHER
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

import sdn.app as app_module
from leveller.core.qos import LevelMap, default_level_map
from leveller.core.topology import preset
from leveller.model.flow import flow_key
from sdn.app import AppConfig, LevellerApp
from tests.helpers.sdn import FakeDatapath, frame

TOPO = preset("leafspine")
LEAF1, LEAF3 = TOPO.switches[0].dpid, 0x103
FLOW = flow_key("10.0.0.1", "10.0.0.6", 40000, 5201, "tcp")  # h1 (leaf1) -> h6 (leaf3)


def make_app(queue_mode: str = "set_queue", level_map: LevelMap | None = None) -> LevellerApp:
    return LevellerApp(leveller=AppConfig(TOPO, level_map or default_level_map(4), queue_mode, api_sock=None))


def features(app: LevellerApp, dp: FakeDatapath) -> None:
    app._features(SimpleNamespace(msg=SimpleNamespace(datapath=dp)))


def connected(app: LevellerApp, *dpids: int) -> dict[int, FakeDatapath]:
    dps = {d: FakeDatapath(d) for d in dpids}
    for dp in dps.values():
        features(app, dp)
    return dps


def test_a_connecting_switch_gets_a_clean_pipeline_and_is_asked_for_its_ports() -> None:
    app = make_app()
    dp = connected(app, LEAF1)[LEAF1]
    assert app.datapaths == {LEAF1: dp}
    kinds = [type(m).__name__ for m in dp.sent]
    assert kinds[0] == "OFPFlowMod" and dp.sent[0].command == ofp.OFPFC_DELETE  # clean slate first
    assert kinds[-1] == "OFPPortDescStatsRequest"
    dscp_rules = [m for m in dp.sent[:-1] if "ip_dscp" in dict(m.match.items())]
    for eth_type in (0x0800, 0x86DD):  # one per level, for IPv4 and for IPv6
        assert sorted(dict(m.match.items())["ip_dscp"] for m in dscp_rules
                      if dict(m.match.items())["eth_type"] == eth_type) == [0, 8, 16, 24]
    assert len(dscp_rules) == 8
    assert app.health()["switches"]["leaf1"] is True and app.health()["switches"]["leaf2"] is False


def test_a_switch_outside_the_topology_gets_no_rules() -> None:
    app = make_app()
    dp = connected(app, 0xDEAD)[0xDEAD]
    assert dp.sent == [] and dp.closed and app.datapaths == {}  # refused (issue 26, finding 11)


def test_only_the_current_datapath_of_a_switch_can_disconnect_it() -> None:
    app = make_app()
    old = connected(app, LEAF1)[LEAF1]
    new = FakeDatapath(LEAF1)
    features(app, new)  # the switch reconnected before the old connection was declared dead
    app._state(SimpleNamespace(datapath=old, state=DEAD_DISPATCHER))
    assert app.datapaths[LEAF1] is new and LEAF1 in app.logic.connected
    app._state(SimpleNamespace(datapath=new, state=MAIN_DISPATCHER))  # not a death
    assert app.datapaths[LEAF1] is new
    app._state(SimpleNamespace(datapath=new, state=DEAD_DISPATCHER))
    assert LEAF1 not in app.datapaths and LEAF1 not in app.logic.connected
    app._state(SimpleNamespace(datapath=SimpleNamespace(id=None), state=DEAD_DISPATCHER))  # before features


def test_packet_in_installs_the_path_and_forwards_the_packet() -> None:
    app = make_app()
    dps = connected(app, *(s.dpid for s in TOPO.switches))
    for dp in dps.values():
        dp.sent.clear()
    data = frame(FLOW)
    app._packet_in(SimpleNamespace(msg=SimpleNamespace(datapath=dps[LEAF1], match={"in_port": 5}, data=data)))
    path = app.logic.path(FLOW)
    on_path = {h.dpid for h in path.hops}
    for dpid, dp in dps.items():
        rules = [m for m in dp.sent if isinstance(m, parser.OFPFlowMod)]
        assert len(rules) == (dpid in on_path), dpid
    (out,) = [m for m in dps[LEAF1].sent if isinstance(m, parser.OFPPacketOut)]
    first = path.hops[0]
    assert out.in_port == 5 and out.actions[0].port == first.out_port and out.data == data


def flow_removed(app: LevellerApp, dp: FakeDatapath, reason: int, cookie: int) -> None:
    app._flow_removed(SimpleNamespace(msg=SimpleNamespace(datapath=dp, reason=reason, cookie=cookie)))


def test_an_idle_flow_is_forgotten_but_a_deleted_rule_is_not_a_flow_end() -> None:
    app = make_app()
    dps = connected(app, *(s.dpid for s in TOPO.switches))
    app._packet_in(SimpleNamespace(msg=SimpleNamespace(datapath=dps[LEAF1], match={"in_port": 5}, data=frame(FLOW))))
    assert FLOW in app.logic.flows
    path = app.logic.path(FLOW)
    assert len(path.hops) == 3  # leaf1, a spine, leaf3
    flow_removed(app, dps[LEAF1], ofp.OFPRR_DELETE, FLOW.cookie())  # our own DeleteFlows echoing back
    assert FLOW in app.logic.flows
    flow_removed(app, dps[LEAF1], ofp.OFPRR_IDLE_TIMEOUT, FLOW.cookie())
    assert FLOW not in app.logic.flows
    # the other switches of the path are told to delete the flow's rules, by its exact cookie
    deleted_on = {dpid for dpid, dp in dps.items() for m in dp.sent
                  if isinstance(m, parser.OFPFlowMod) and m.command == ofp.OFPFC_DELETE and m.cookie == FLOW.cookie()
                  and m.cookie_mask == 2**64 - 1}
    assert deleted_on == {h.dpid for h in path.hops} - {LEAF1}


def port_desc(app: LevellerApp, dp: FakeDatapath, ports: list[tuple[int, Any]]) -> None:
    body = [SimpleNamespace(port_no=no, name=name) for no, name in ports]
    app._port_desc(SimpleNamespace(msg=SimpleNamespace(datapath=dp, body=body)))


def test_port_names_keep_real_ports_only_and_tc_mode_keeps_their_classifiers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ensured: list[str] = []
    monkeypatch.setattr(app_module.tcmap, "ensure_filters", lambda name, lm: ensured.append(name) or "kept")
    app = make_app("tc")
    dp = connected(app, LEAF1)[LEAF1]
    port_desc(app, dp, [(1, b"leaf1-p1"), (2, "leaf1-p2"), (ofp.OFPP_LOCAL, b"leaf1")])
    assert app.port_names[LEAF1] == {1: "leaf1-p1", 2: "leaf1-p2"}  # the bridge's LOCAL port is no egress
    assert ensured == ["leaf1-p1", "leaf1-p2"]
    ensured.clear()
    kernel = make_app("set_queue")  # set_queue switches map DSCP themselves: no tc classifier
    dp2 = connected(kernel, LEAF1)[LEAF1]
    port_desc(kernel, dp2, [(1, b"leaf1-p1")])
    assert ensured == [] and kernel.port_names[LEAF1] == {1: "leaf1-p1"}


def test_health_says_queues_are_ready_only_once_every_connected_port_prioritises(
        monkeypatch: pytest.MonkeyPatch) -> None:
    found = {"leaf1-p1": app_module.tcmap.KEPT, "leaf1-p2": app_module.tcmap.NO_QDISC}
    monkeypatch.setattr(app_module.tcmap, "ensure_filters", lambda name, lm: found[name])
    app = make_app("tc")
    assert app.health()["queues"] == {"ready": True, "missing": []}  # nothing connected: nothing to wait for
    dp = connected(app, LEAF1)[LEAF1]
    assert app.health()["queues"] == {"ready": False, "missing": ["leaf1 (ports not known yet)"]}
    port_desc(app, dp, [(1, b"leaf1-p1"), (2, b"leaf1-p2")])
    assert app.health()["queues"] == {"ready": False, "missing": ["leaf1-p2"]}  # OVS has not made its HTB yet
    found["leaf1-p2"] = app_module.tcmap.INSTALLED  # the poll loop's next check installs it
    app._keep_classifiers(LEAF1)
    assert app.health()["queues"] == {"ready": True, "missing": []}
    found["leaf1-p1"] = app_module.tcmap.NO_QDISC  # OVS rebuilt a port's qdisc: not ready until reinstalled
    app._keep_classifiers(LEAF1)
    assert app.health()["queues"] == {"ready": False, "missing": ["leaf1-p1"]}
    kernel = make_app("set_queue")  # set_queue switches queue by their own rules: ready once the ports are known
    dp2 = connected(kernel, LEAF1)[LEAF1]
    assert kernel.health()["queues"]["ready"] is False
    port_desc(kernel, dp2, [(1, b"leaf1-p1")])
    assert kernel.health()["queues"] == {"ready": True, "missing": []}


def test_queue_statistics_are_reported_per_level_with_their_age(monkeypatch: pytest.MonkeyPatch) -> None:
    app = make_app(level_map=LevelMap(dscp=(0, 10, 46), queue=(1, 2, 7)))  # queue numbers are not levels
    dp = connected(app, LEAF1)[LEAF1]
    port_desc(app, dp, [(1, b"leaf1-p1")])
    clock = iter([1000.0, 1002.5])
    monkeypatch.setattr(app_module.time, "time", lambda: next(clock))
    stats = [SimpleNamespace(port_no=1, queue_id=q, tx_bytes=100 * q, tx_packets=q, tx_errors=0) for q in (7, 0, 1)]
    app._queue_stats(SimpleNamespace(msg=SimpleNamespace(datapath=dp, body=stats)))
    rows = app.queues()
    assert [(r["queue"], r["level"], r["tx_bytes"], r["port_name"], r["switch"]) for r in rows] == [
        (0, None, 0, "leaf1-p1", "leaf1"), (1, 0, 100, "leaf1-p1", "leaf1"), (7, 2, 700, "leaf1-p1", "leaf1")]
    assert all(r["age_s"] == 2.5 for r in rows)


class StopLoop(Exception):
    pass


class BrokenDatapath(FakeDatapath):
    def send_msg(self, msg: Any) -> None:
        raise OSError("connection reset")


def test_poll_loop_asks_every_switch_for_queue_stats_and_survives_a_broken_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    app = make_app()
    good = FakeDatapath(LEAF3)
    app.datapaths = {LEAF1: BrokenDatapath(LEAF1), LEAF3: good}
    sleeps: list[float] = []

    def sleep(s: float) -> None:
        sleeps.append(s)
        if len(sleeps) == 2:
            raise StopLoop

    monkeypatch.setattr(app_module.hub, "sleep", sleep)
    with pytest.raises(StopLoop):
        app._poll_loop()
    requests = [m for m in good.sent if isinstance(m, parser.OFPQueueStatsRequest)]
    assert len(requests) == 2  # one per round, although the switch before it failed each time
    assert requests[0].port_no == ofp.OFPP_ANY and requests[0].queue_id == ofp.OFPQ_ALL
    assert sleeps == [app.cfg.poll_interval] * 2


def test_two_checks_of_the_classifiers_never_run_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A port's reply and the poll loop both check the classifiers, each in its own green thread; a
    check runs tc (a green subprocess: other threads run meanwhile). Two reinstalls of one port that
    interleave each flush and add, and left a switch port with 11 rules instead of 6 (a live run)."""
    from os_ken.lib import hub

    inside: list[str] = []
    overlaps: list[tuple[str, ...]] = []

    def ensure(name: str, lm: LevelMap) -> str:
        inside.append(name)
        if len(inside) > 1:
            overlaps.append(tuple(inside))
        hub.sleep(0.01)  # tc runs: the hub switches to the other thread
        inside.remove(name)
        return app_module.tcmap.INSTALLED

    monkeypatch.setattr(app_module.tcmap, "ensure_filters", ensure)
    app = make_app("tc")
    dp = connected(app, LEAF1)[LEAF1]
    app.port_names[LEAF1] = {1: "leaf1-p1", 2: "leaf1-p2"}
    threads = [hub.spawn(port_desc, app, dp, [(1, b"leaf1-p1"), (2, b"leaf1-p2")]),
               hub.spawn(app._keep_classifiers, LEAF1)]
    hub.joinall(threads)
    assert overlaps == []
    assert app.classified == {"leaf1-p1": True, "leaf1-p2": True}


# ---- admission (issue 26, finding 11): a local fake claiming a connected switch's dpid took it over -------------

SITE = (ipaddress.ip_network("10.1.0.0/24"),)


def test_a_fake_switch_cannot_take_over_a_connected_dpid() -> None:
    app = LevellerApp(leveller=AppConfig(TOPO, default_level_map(4), "set_queue", api_sock=None, of_allow=SITE))
    real = FakeDatapath(LEAF1, ("10.1.0.7", 50000))
    features(app, real)
    fake = FakeDatapath(LEAF1, ("10.1.0.66", 50001))  # same dpid, another switch's address
    features(app, fake)
    assert app.datapaths == {LEAF1: real} and fake.sent == [] and fake.closed
    local = FakeDatapath(LEAF1 + 1, ("127.0.0.1", 50002))  # a local process, not from the switches' network
    features(app, local)
    assert local.sent == [] and local.closed and app.refused_switches == 2
    assert any(type(m).__name__ == "OFPFlowMod" for m in real.sent)
