"""--rto-min-ms: which route covers a peer, the host route toward it with a lower RTO minimum (pure), the
keeper's state over a FAKE netlink (one host route per peer, bounded, deleted when the peer is gone, following
the covering route), the agent's end of the route keeper, and the agent's options."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path
from typing import Any

import pytest

from leveller.agent import rto_min
from leveller.agent.rto_min import (
    RTO_MIN_LOCK,
    RTPROT_LEVELLER,
    Route,
    RtoMinGuard,
    RtoMinRoutes,
    check_rto_min_ms,
    covering,
    host_route,
    replace_request,
    route_of,
    tuned,
    why_not,
    why_not_host,
)
from leveller.cli import main
from leveller.errors import UserError

# as pyroute2 dumps them (ip route: "10.77.0.0/24 dev v0 proto kernel scope link src 10.77.0.1",
# "10.99.0.0/16 via 10.77.0.254 dev v0 mtu 1400 rto_min lock 50ms")
CONNECTED = ({"family": 2, "dst_len": 24, "src_len": 0, "tos": 0, "table": 254, "proto": 2, "scope": 253, "type": 1,
              "flags": 0},
             [("RTA_TABLE", 254), ("RTA_DST", "10.77.0.0"), ("RTA_PREFSRC", "10.77.0.1"), ("RTA_OIF", 3)])
TUNED_BY_OPERATOR = ({"family": 2, "dst_len": 16, "src_len": 0, "tos": 0, "table": 254, "proto": 3, "scope": 0,
                      "type": 1, "flags": 0},
                     [("RTA_TABLE", 254), ("RTA_DST", "10.99.0.0"), ("RTA_GATEWAY", "10.77.0.254"), ("RTA_OIF", 3),
                      ("RTA_METRICS", {"attrs": [("RTAX_LOCK", 8192), ("RTAX_MTU", 1400), ("RTAX_RTO_MIN", 50)]})])
V6 = ({"family": 10, "dst_len": 64, "src_len": 0, "tos": 0, "table": 254, "proto": 2, "scope": 0, "type": 1,
       "flags": 0},
      [("RTA_TABLE", 254), ("RTA_DST", "fd77::"), ("RTA_PRIORITY", 256), ("RTA_OIF", 3),
       ("RTA_CACHEINFO", {"rta_clntref": 0}), ("RTA_PREF", 0)])


def r(dst: str | None, dst_len: int, priority: int | None = None, oif: int | None = 3, family: int = 2,
      kind: int = 1, **kw: Any) -> Route:
    return Route(family, dst, dst_len, 254, priority=priority, oif=oif, type=kind, **kw)


def test_a_dumped_route_becomes_a_route() -> None:
    connected = route_of(*CONNECTED)
    assert connected == Route(2, "10.77.0.0", 24, 254, proto=2, scope=253, oif=3, prefsrc="10.77.0.1")
    assert connected.label() == "10.77.0.0/24 table 254" and connected.rto_min_ms is None
    operator = route_of(*TUNED_BY_OPERATOR)
    assert operator.metrics == (("RTAX_LOCK", 8192), ("RTAX_MTU", 1400), ("RTAX_RTO_MIN", 50))
    assert operator.rto_min_ms == 50 and operator.gateway == "10.77.0.254"
    v6 = route_of(*V6)
    assert (v6.priority, v6.pref, v6.unsupported) == (256, 0, ())  # RTA_CACHEINFO is kernel state
    fields, attrs = CONNECTED
    odd = route_of({**fields, "src_len": 8, "flags": 4 | 16}, [*attrs, ("RTA_MULTIPATH", []), ("RTA_ENCAP", {})])
    assert odd.unsupported == ("RTA_MULTIPATH", "RTA_ENCAP", "source prefix")
    assert odd.flags == 4  # onlink kept; linkdown (16) is kernel state


def test_the_covering_route_is_the_longest_prefix_then_the_lowest_metric() -> None:
    default, subnet, host = r(None, 0, gateway="10.0.0.254"), r("10.1.0.0", 16), r("10.1.2.3", 32)
    slow, fast = r("10.1.2.0", 24, priority=200), r("10.1.2.0", 24, priority=100)
    routes = [default, subnet, slow, fast]
    assert covering(routes, "10.1.2.9") == fast
    assert covering(routes, "10.1.9.9") == subnet
    assert covering(routes, "192.0.2.1") == default
    assert covering([*routes, host], "10.1.2.3") == host
    assert covering([subnet], "192.0.2.1") is None
    assert covering([subnet, r("10.1.2.0", 24, oif=7)], "10.1.2.9", oif=3) == subnet  # the kernel's interface
    assert covering([r("10.1.0.0", 16, kind=2)], "10.1.0.1") is None  # local, not unicast
    assert covering([subnet, r("fd00::", 64, family=10)], "fd00::5") == r("fd00::", 64, family=10)


def test_routes_left_alone_say_why() -> None:
    assert why_not(route_of(*CONNECTED)) is None
    assert "already (50 ms)" in str(why_not(route_of(*TUNED_BY_OPERATOR)))
    assert "RTA_MULTIPATH" in str(why_not(r("10.1.0.0", 16, unsupported=("RTA_MULTIPATH",))))


def test_the_tuned_route_locks_the_rto_minimum_and_keeps_the_other_metrics() -> None:
    route = r("10.88.0.0", 16, gateway="10.77.0.254", metrics=(("RTAX_LOCK", 1 << 2), ("RTAX_MTU", 1400)))
    ours = tuned(route, 10)
    assert dict(ours.metrics) == {"RTAX_LOCK": (1 << 2) | RTO_MIN_LOCK, "RTAX_MTU": 1400, "RTAX_RTO_MIN": 10}
    assert ours.key == route.key and ours.gateway == route.gateway


def test_the_replace_requests_rebuild_the_route_with_and_without_the_rto_minimum() -> None:
    original = route_of(*CONNECTED)
    assert replace_request(tuned(original, 10)) == {
        "family": 2, "dst": "10.77.0.0", "dst_len": 24, "table": 254, "tos": 0, "proto": 2, "scope": 253,
        "type": 1, "oif": 3, "prefsrc": "10.77.0.1", "metrics": {"RTAX_LOCK": RTO_MIN_LOCK, "RTAX_RTO_MIN": 10}}
    back = replace_request(original)
    assert "metrics" not in back and back["prefsrc"] == "10.77.0.1"  # a replace keeps no metric not given
    v6 = replace_request(route_of(*V6))
    assert (v6["priority"], v6["pref"], v6["dst"]) == (256, 0, "fd77::")
    default = replace_request(r(None, 0, gateway="10.0.0.254", flags=4))
    assert "dst" not in default and default["flags"] == 4 and default["gateway"] == "10.0.0.254"


@pytest.mark.parametrize("bad", [0, 201, -5, 10.0, "10", True, None])
def test_the_rto_minimum_is_checked(bad: Any) -> None:
    with pytest.raises(UserError, match=r"--rto-min-ms .*1\.\.200"):
        check_rto_min_ms(bad)
    assert check_rto_min_ms(1) == 1 and check_rto_min_ms(200) == 200


class FakeProc:
    pid = 4242

    def __init__(self, broken: bool = False) -> None:
        self.stdin: Any = io.StringIO()
        if broken:
            self.stdin.close()


def test_the_keeper_is_told_the_peers_when_they_change() -> None:
    guard = RtoMinGuard(10, "h1")
    assert guard.argv()[-4:] == ["--rto-min-ms", "10", "--netns", "h1"]
    proc = FakeProc()
    guard.proc = proc  # type: ignore[assignment]
    guard.update(["10.0.0.3", "10.0.0.2"])
    guard.update(["10.0.0.2", "10.0.0.3"])  # the same: nothing sent
    guard.update(["10.0.0.4", "10.0.0.2"])  # 10.0.0.3 gone: the keeper must know, to delete its route later
    lines = [json.loads(line) for line in proc.stdin.getvalue().splitlines()]
    assert lines == [{"peers": ["10.0.0.2", "10.0.0.3"]}, {"peers": ["10.0.0.2", "10.0.0.4"]}]


def test_the_guard_tells_at_most_max_peers_and_logs_the_refusal(caplog: pytest.LogCaptureFixture) -> None:
    """main: every peer ever seen was kept in a set that grew without bound."""
    guard = RtoMinGuard(10, max_peers=3, clock=lambda: 0.0)
    proc = FakeProc()
    guard.proc = proc  # type: ignore[assignment]
    guard.update([f"10.0.0.{i}" for i in range(1, 9)])
    guard.update([f"10.0.0.{i}" for i in range(1, 10)])
    lines = [json.loads(line) for line in proc.stdin.getvalue().splitlines()]
    assert lines == [{"peers": ["10.0.0.1", "10.0.0.2", "10.0.0.3"]}]
    assert guard.refused == 5 + 6
    assert sum("get none" in rec.message for rec in caplog.records) == 1  # logged once a minute


def test_a_keeper_that_is_gone_is_reported_once_and_not_fatal(caplog: pytest.LogCaptureFixture) -> None:
    guard = RtoMinGuard(10)
    guard.proc = FakeProc(broken=True)  # type: ignore[assignment]
    guard.update(["10.0.0.2"])
    guard.update(["10.0.0.3"])
    assert sum("route keeper" in rec.message for rec in caplog.records) == 1


class FakeRoutes:
    made: list[FakeRoutes] = []

    def __init__(self, rto_min_ms: int, netns: str | None = None) -> None:
        self.args = (rto_min_ms, netns)
        self.updates: list[list[str]] = []
        self.restored = 0
        FakeRoutes.made.append(self)

    def check(self) -> int:
        return 0

    def update(self, peers: Any) -> list[str]:
        self.updates.append(list(peers))
        return []

    def tick(self) -> None:
        pass

    def restore(self) -> list[str]:
        self.restored += 1
        return []


def test_the_keeper_updates_what_it_reads_and_restores_when_its_input_ends(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(rto_min, "RtoMinRoutes", FakeRoutes)
    monkeypatch.setattr(rto_min.signal, "signal", lambda *a: None)
    stdin = io.StringIO('{"peers": ["10.0.0.2"]}\nnot json\n{"peers": "x"}\n{"peers": ["10.0.0.3", "fd00::1"]}\n')
    assert rto_min.main(["--rto-min-ms", "10", "--netns", "h1"], stdin=stdin) == 0
    keeper = FakeRoutes.made[-1]
    assert keeper.args == (10, "h1")
    assert keeper.updates == [["10.0.0.2"], ["10.0.0.3", "fd00::1"]] and keeper.restored == 1
    assert capsys.readouterr().out == "ready\n"


def test_the_keeper_reads_lines_from_a_pipe_and_ticks_while_none_come() -> None:
    import os

    read, write = os.pipe()
    with os.fdopen(read, "rb") as stream:
        os.write(write, b'{"peers": ["10.0.0.2"]}\n{"pe')
        lines = rto_min._lines(stream, 0.01)
        assert next(lines) == '{"peers": ["10.0.0.2"]}\n'
        assert next(lines) is None  # half a line, then nothing: a tick
        os.write(write, b'ers": []}\n')
        assert [x for x in (next(lines), next(lines)) if x is not None][0] == '{"peers": []}\n'
        os.close(write)
        assert list(lines) in ([], [None])


# ---- the host routes (a FAKE netlink: routes as the kernel would dump them) -----------------------------


class Msg(dict):  # type: ignore[type-arg]
    def get_attr(self, name: str) -> Any:
        return dict(self["attrs"]).get(name)


def msg(route: Route) -> Msg:
    attrs = [("RTA_TABLE", route.table), ("RTA_OIF", route.oif)]
    for name, value in (("RTA_DST", route.dst), ("RTA_GATEWAY", route.gateway), ("RTA_PREFSRC", route.prefsrc),
                        ("RTA_PRIORITY", route.priority)):
        if value is not None:
            attrs.append((name, value))
    if route.metrics:
        attrs.append(("RTA_METRICS", {"attrs": list(route.metrics)}))
    return Msg(family=route.family, dst_len=route.dst_len, src_len=0, tos=route.tos, table=route.table,
               proto=route.proto, scope=route.scope, type=route.type, flags=route.flags, attrs=attrs)


class FakeNetlink:
    """A routing table (Route objects) answering get/dump/add/replace/del as pyroute2's IPRoute does."""

    def __init__(self, routes: list[Route]) -> None:
        self.routes = list(routes)
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __call__(self) -> FakeNetlink:
        return self

    def close(self) -> None:
        pass

    def route(self, op: str, **kw: Any) -> list[Msg]:
        self.calls.append((op, kw))
        if op == "get":
            best = covering(self.routes, kw["dst"]) or next((r for r in self.routes if r.proto == RTPROT_LEVELLER
                                                             and r.dst == kw["dst"]), None)
            ours = [r for r in self.routes if r.proto == RTPROT_LEVELLER and r.dst == kw["dst"]]
            return [msg((ours or [best])[0])] if best or ours else []
        if op == "dump":
            return [msg(r) for r in self.routes if r.family == kw["family"]
                    and ("table" not in kw or r.table == kw["table"]) and ("proto" not in kw or r.proto == kw["proto"])]
        key = (kw["family"], kw["table"], kw.get("dst"), kw["dst_len"], kw["tos"], kw.get("priority"))
        existing = [r for r in self.routes if r.key == key]
        new = route_of(kw, [(n, kw[k]) for k, n in (("dst", "RTA_DST"), ("oif", "RTA_OIF"), ("gateway", "RTA_GATEWAY"),
                                                   ("prefsrc", "RTA_PREFSRC"), ("priority", "RTA_PRIORITY"))
                            if k in kw] + [("RTA_TABLE", kw["table"])]
                       + ([("RTA_METRICS", {"attrs": list(kw["metrics"].items())})] if "metrics" in kw else []))
        if op == "add":
            if existing:
                raise OSError(17, "File exists")
            self.routes.append(new)
        elif op == "replace":
            self.routes = [r for r in self.routes if r.key != key] + [new]
        elif op == "del":
            if not existing:
                raise OSError(3, "No such process")
            self.routes = [r for r in self.routes if r.key != key]
        return []

    def ours(self) -> dict[str, Route]:
        return {str(r.dst): r for r in self.routes if r.proto == RTPROT_LEVELLER}


SUBNET = route_of(*CONNECTED)  # 10.77.0.0/24 dev 3, connected
DEFAULT = Route(2, None, 0, 254, proto=3, oif=3, gateway="10.77.0.254", metrics=(("RTAX_MTU", 1400),))


def test_a_peer_gets_a_host_route_with_the_covering_routes_nexthop_and_nothing_else_changes() -> None:
    """main: the covering route itself (its subnet, or the default route) got the RTO minimum, so every
    destination behind it did."""
    ours = host_route(SUBNET, "10.77.0.9", 10)
    assert (ours.dst, ours.dst_len, ours.proto, ours.oif, ours.prefsrc, ours.scope) == (
        "10.77.0.9", 32, RTPROT_LEVELLER, 3, "10.77.0.1", 253)
    assert dict(ours.metrics) == {"RTAX_LOCK": RTO_MIN_LOCK, "RTAX_RTO_MIN": 10}
    via = host_route(DEFAULT, "192.0.2.7", 20)
    assert (via.dst, via.dst_len, via.gateway) == ("192.0.2.7", 32, "10.77.0.254")
    assert dict(via.metrics) == {"RTAX_LOCK": RTO_MIN_LOCK, "RTAX_MTU": 1400, "RTAX_RTO_MIN": 20}
    v6 = host_route(route_of(*V6), "fd77::5", 10)
    assert (v6.dst, v6.dst_len, v6.priority, v6.pref) == ("fd77::5", 128, 256, 0)
    assert why_not_host(r("10.1.2.3", 32)) is not None and why_not_host(SUBNET) is None
    assert covering([SUBNET, ours], "10.77.0.9") == SUBNET  # the keeper's own routes never cover

    net = FakeNetlink([SUBNET, DEFAULT])
    routes = RtoMinRoutes(10, ipr=net, clock=lambda: 0.0)
    assert routes.update(["10.77.0.9", "192.0.2.7"]) == ["10.77.0.9/32 table 254", "192.0.2.7/32 table 254"]
    assert set(net.ours()) == {"10.77.0.9", "192.0.2.7"}
    assert [x for x in net.routes if x.proto != RTPROT_LEVELLER] == [SUBNET, DEFAULT]  # untouched
    assert routes.update(["10.77.0.9", "192.0.2.7"]) == []  # known: nothing more
    assert routes.restore() == ["10.77.0.9/32 table 254", "192.0.2.7/32 table 254"] and net.ours() == {}


def test_the_host_routes_are_bounded_and_those_of_peers_gone_are_deleted(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    net = FakeNetlink([SUBNET])
    routes = RtoMinRoutes(10, ipr=net, max_peers=2, forget_after_s=60, clock=lambda: now[0])
    routes.update(["10.77.0.2", "10.77.0.3", "10.77.0.4"])
    assert set(net.ours()) == {"10.77.0.2", "10.77.0.3"} and routes.refused == 1
    assert any("the most allowed" in rec.message for rec in caplog.records)
    now[0] = 10
    routes.update(["10.77.0.2"])  # 10.77.0.3 left the reports
    now[0] = 69
    routes.tick()
    assert set(net.ours()) == {"10.77.0.2", "10.77.0.3"}
    now[0] = 70
    routes.tick()
    assert set(net.ours()) == {"10.77.0.2"}  # gone for 60 s: deleted
    routes.update(["10.77.0.2", "10.77.0.4"])
    assert set(net.ours()) == {"10.77.0.2", "10.77.0.4"}  # room again


def test_a_host_route_follows_its_covering_route_and_goes_with_it() -> None:
    now = [0.0]
    net = FakeNetlink([DEFAULT])
    routes = RtoMinRoutes(10, ipr=net, resync_s=10, clock=lambda: now[0])
    routes.update(["192.0.2.7"])
    assert net.ours()["192.0.2.7"].gateway == "10.77.0.254"
    net.routes = [Route(2, None, 0, 254, proto=3, oif=3, gateway="10.77.0.253")] + [
        x for x in net.routes if x.proto == RTPROT_LEVELLER]  # the operator moved the default route
    now[0] = 10
    routes.tick()
    assert net.ours()["192.0.2.7"].gateway == "10.77.0.253" and dict(net.ours()["192.0.2.7"].metrics) == {
        "RTAX_LOCK": RTO_MIN_LOCK, "RTAX_RTO_MIN": 10}
    net.routes = [x for x in net.routes if x.proto == RTPROT_LEVELLER]  # no route any more
    now[0] = 20
    routes.tick()
    assert net.ours() == {} and routes.routes == {}


def test_operator_routes_are_left_alone_and_a_killed_keepers_routes_are_swept() -> None:
    operator = route_of(*TUNED_BY_OPERATOR)  # 10.99.0.0/16 with rto_min 50
    own_host = Route(2, "10.77.0.5", 32, 254, proto=4, oif=3)
    leftover = host_route(SUBNET, "10.77.0.6", 10)
    net = FakeNetlink([SUBNET, operator, own_host, leftover])
    routes = RtoMinRoutes(10, ipr=net, clock=lambda: 0.0)
    assert routes.check() == 1 and net.ours() == {}  # the route of a keeper killed before
    assert routes.update(["10.99.1.1", "10.77.0.5", "10.77.0.6"]) == ["10.77.0.6/32 table 254"]
    assert "already (50 ms)" in routes.left_alone["10.99.1.1"] and "of its own" in routes.left_alone["10.77.0.5"]
    assert operator in net.routes and own_host in net.routes


def test_the_keeper_refuses_a_bad_value(capsys: pytest.CaptureFixture[str]) -> None:
    assert rto_min.main(["--rto-min-ms", "0"]) == 2
    assert "--rto-min-ms 0" in capsys.readouterr().err


# ---- the agent's options ----------------------------------------------------------------------------


@pytest.mark.parametrize("extra,message", [
    (["--rto-min-ms", "0"], "--rto-min-ms 0: allowed is an integer"),
    (["--rto-min-ms", "10"], "--rto-min-ms 10: needs --dev"),
    (["--phase-demotion", "--demote-wait-max", "0"], "--demote-wait-max 0.0: must be in (0, 60]"),
    (["--demote-wait-max", "nan"], "--demote-wait-max nan: must be in (0, 60]"),
])
def test_bad_agent_options_are_refused_naming_them(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   extra: list[str], message: str) -> None:
    argv = ["agent", "--controller", "127.0.0.1:1", "--log", str(tmp_path / "j.log"), *extra]
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_the_options_and_their_config_keys(tmp_path: Path) -> None:
    from leveller.commands.agent import _phase_demotion
    from tests.helpers.cli import parsed

    args = parsed(["agent"])
    assert (args.phase_demotion, args.demote_wait_max, args.rto_min_ms) == (True, None, None)  # on by default
    assert _phase_demotion(parsed(["agent", "--no-phase-demotion"])) is None
    f = tmp_path / "agent.toml"
    f.write_text("phase_demotion = true\ndemote_wait_max = 0.5\nrto_min_ms = 10\npoll = 0.05\n")
    args = parsed(["agent", "--config", str(f)])
    assert (args.phase_demotion, args.demote_wait_max, args.rto_min_ms) == (True, 0.5, 10)
    made = _phase_demotion(args)
    assert made is not None and made[0].wait_max_s == 0.5 and made[1].quiet_s == 0.05
    assert parsed(["agent", "--config", str(f), "--no-phase-demotion"]).phase_demotion is False
    assert _phase_demotion(argparse.Namespace(phase_demotion=True, demote_wait_max=None, poll=0))[0].wait_max_s == 1.0
