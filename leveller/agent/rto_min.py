"""A lower TCP RTO minimum toward the job peers (`leveller agent --rto-min-ms MS`), for as long as the agent lives.

A TCP flow that loses its ACK clock behind higher levels waits for a retransmission timeout of at
least Linux's RTO minimum, 200 ms (TCP_RTO_MIN), before it sends again: a third of an iteration on
the emulated cluster. Datacenters lower it (issue 25, item 4). The mechanism is the route metric
RTAX_RTO_MIN on one host route per job peer (the destinations of the job flows in the agent's
reports), in the agent's network namespace. Exactly this is changed (issue 41, finding 10: the
route covering a peer, its subnet or the default route, used to get the metric, so every
destination behind it got the lower minimum):

- for each peer, a host route (``PEER/32`` or ``PEER/128``) is added to the table the kernel uses
  toward it, with protocol 76 (:data:`RTPROT_LEVELLER`; name it in /etc/iproute2/rt_protos.d), the
  nexthop, source, preference and metrics of the route that covered the peer, and a locked
  ``rto_min``: ``ip route show proto 76`` lists them all. No other route and no other destination
  changes. A peer whose covering route already carries an RTO minimum (the operator's), is a host
  route of its own, or cannot be rebuilt attribute for attribute (multipath, encapsulation, nexthop
  objects, expiring routes) is left alone;
- the host route takes precedence over the covering route for that one address, so the keeper
  looks again every :data:`RESYNC_S` seconds: if the covering route changed (another gateway,
  device, metrics) the host route follows it, and if it is gone the host route goes too;
- a peer absent from the reports for :data:`FORGET_AFTER_S` seconds loses its host route; at most
  :data:`MAX_PEERS` peers have one (more are refused, counted and logged), so the set is bounded;
- it acts on connections already open: TCP reads a locked rto_min from the socket's cached route
  at every RTT sample, and adding or deleting a route invalidates the cached ones, so the jobs'
  long-lived connections converge to the new minimum within a few round trips. The per-namespace
  sysctl net.ipv4.tcp_rto_min_us is copied into a socket when it is created: it misses the
  connections a job opened before the agent started, and every socket made while it is lowered
  keeps the lower minimum for its whole life, whatever its destination;
- deleting the host route gives every connection opened afterwards Linux's minimum again. A
  connection that lived through the change keeps the RTT variance it converged to (TCP raises its
  variance term only when the RTT varies more, it does not re-apply a higher floor), so its RTO
  stays low until its RTT varies or it closes: the kernel offers no way to undo that from outside.

A route metric cannot expire by itself (IPv4 routes have no expiry at all), so the change is tied
to the agent's life instead: it is made and undone by a small keeper process (this module run as
``python -m leveller.agent.rto_min``) that reads the peers from a pipe of the agent and deletes
every host route it added when that pipe ends -- the agent exits, or dies however it dies (SIGKILL
included: the kernel closes the pipe) -- or when it gets SIGTERM/SIGINT. It runs in its own
session, so a Ctrl-C meant for the agent does not stop it before the agent is done. A host route is
deleted only if it is still the keeper's (protocol 76, its metrics). If the keeper itself is killed
with SIGKILL, its host routes stay until the next keeper in that namespace starts (it deletes every
route of protocol 76 there first) or the namespace goes. That is benign: a sender retransmits
sooner toward those peers (the RTO is still the smoothed RTT plus its variance term, so at worst a
spurious retransmission on a path whose ACKs are delayed more than that), nothing is dropped,
reordered or prioritised. No eBPF sockops program (TCP_BPF_RTO_MIN, which could check a lease by
the kernel clock like the DSCP marker) is used: it sees only connections opened after it was
attached, which misses the jobs already running when the agent starts.

Pure parts (unit-tested): :func:`route_of`, :func:`covering`, :func:`tuned`, :func:`host_route`,
:func:`replace_request`.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import io
import ipaddress
import json
import logging
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import Any

from leveller.errors import UserError

LOG = logging.getLogger("leveller.agent.rto_min")
RTAX_RTO_MIN = 13  # linux/rtnetlink.h
RTO_MIN_LOCK = 1 << RTAX_RTO_MIN  # TCP honours a route's rto_min only when it is locked (RTAX_LOCK bit)
RTN_UNICAST = 1
RTNH_F_ONLINK = 4  # the one nexthop flag a route is created with; the others are kernel state
MIN_MS, MAX_MS = 1, 200  # 200 ms: Linux's TCP_RTO_MIN; lowering it is the point
# route attributes a replace rebuilds (RTA_CACHEINFO is kernel state, read only)
HANDLED = frozenset({"RTA_DST", "RTA_OIF", "RTA_GATEWAY", "RTA_PREFSRC", "RTA_PRIORITY", "RTA_TABLE",
                     "RTA_METRICS", "RTA_PREF", "RTA_CACHEINFO"})
NETNS_DIR = Path("/run/netns")
START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0
RTPROT_LEVELLER = 76  # the protocol of the keeper's host routes (unassigned in linux/rtnetlink.h)
MAX_PEERS = 4096  # peers with a host route at most (and peers the agent tells the keeper)
FORGET_AFTER_S = 60.0  # a peer absent from the reports this long loses its host route
RESYNC_S = 10.0  # how often the host routes are checked against the routes that cover their peers
TICK_S = 1.0  # the keeper looks at the clock at least this often
LOG_EVERY_S = 60.0  # refusals at the bound are logged at most this often


def check_rto_min_ms(value: Any) -> int:
    """``--rto-min-ms`` as an int in MIN_MS..MAX_MS; UserError naming the option, the value and the range."""
    if isinstance(value, bool) or not isinstance(value, int) or not MIN_MS <= value <= MAX_MS:
        raise UserError(f"--rto-min-ms {value!r}: allowed is an integer number of milliseconds in "
                        f"{MIN_MS}..{MAX_MS} (Linux's default minimum is 200)")
    return value


@dataclass(frozen=True)
class Route:
    """One kernel route as far as a replace has to rebuild it (netlink field and attribute values)."""

    family: int
    dst: str | None  # None: the default route
    dst_len: int
    table: int
    tos: int = 0
    priority: int | None = None
    proto: int = 0
    scope: int = 0
    type: int = RTN_UNICAST
    flags: int = 0
    oif: int | None = None
    gateway: str | None = None
    prefsrc: str | None = None
    pref: int | None = None  # IPv6 router preference
    metrics: tuple[tuple[str, Any], ...] = ()
    unsupported: tuple[str, ...] = ()  # attributes a replace would not carry over

    @property
    def key(self) -> tuple[int, int, str | None, int, int, int | None]:
        """What identifies the route in its table (a replace matches on these)."""
        return self.family, self.table, self.dst, self.dst_len, self.tos, self.priority

    def label(self) -> str:
        dst = "default" if self.dst is None else f"{self.dst}/{self.dst_len}"
        return f"{dst} table {self.table}" + (f" metric {self.priority}" if self.priority is not None else "")

    def contains(self, peer: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
        if self.dst is None:
            return self.dst_len == 0
        try:
            return peer in ipaddress.ip_network(f"{self.dst}/{self.dst_len}", strict=False)
        except ValueError:
            return False

    @property
    def rto_min_ms(self) -> int | None:
        return dict(self.metrics).get("RTAX_RTO_MIN")


def route_of(fields: Mapping[str, Any], attrs: Iterable[tuple[str, Any]]) -> Route:
    """The Route of a netlink RTM_NEWROUTE message given as its header fields (family, dst_len, table,
    tos, proto, scope, type, flags) and its (name, value) attributes."""
    values: dict[str, Any] = {}
    unsupported = []
    for name, value in attrs:
        if name in HANDLED:
            values[name] = value
        elif name not in unsupported:
            unsupported.append(name)
    if fields.get("src_len"):
        unsupported.append("source prefix")
    metrics = values.get("RTA_METRICS")
    pairs = tuple((str(m[0]), m[1]) for m in (metrics.get("attrs") or () if metrics is not None else ()))
    return Route(family=int(fields["family"]), dst=values.get("RTA_DST"), dst_len=int(fields.get("dst_len", 0)),
                 table=int(values.get("RTA_TABLE", fields.get("table", 0))), tos=int(fields.get("tos", 0)),
                 priority=values.get("RTA_PRIORITY"), proto=int(fields.get("proto", 0)),
                 scope=int(fields.get("scope", 0)), type=int(fields.get("type", RTN_UNICAST)),
                 flags=int(fields.get("flags", 0)) & RTNH_F_ONLINK, oif=values.get("RTA_OIF"),
                 gateway=values.get("RTA_GATEWAY"), prefsrc=values.get("RTA_PREFSRC"), pref=values.get("RTA_PREF"),
                 metrics=pairs, unsupported=tuple(unsupported))


def covering(routes: Iterable[Route], peer: str, oif: int | None = None) -> Route | None:
    """The route of one table the kernel uses toward ``peer`` without the keeper's host routes: the unicast
    route with the longest prefix containing it, the lowest metric among equals (and the interface ``oif``
    the kernel named, if given); None if there is none."""
    addr = ipaddress.ip_address(peer)
    family = 2 if addr.version == 4 else 10
    best: Route | None = None
    for r in routes:
        if r.family != family or r.type != RTN_UNICAST or r.tos or r.proto == RTPROT_LEVELLER or not r.contains(addr):
            continue
        if oif is not None and r.oif is not None and r.oif != oif:
            continue
        if best is None or (r.dst_len, -(r.priority or 0)) > (best.dst_len, -(best.priority or 0)):
            best = r
    return best


def why_not(route: Route) -> str | None:
    """Why the RTO minimum of ``route`` is left alone (None: it can be changed and put back)."""
    if route.rto_min_ms is not None:
        return f"it has an RTO minimum already ({route.rto_min_ms} ms), left as set"
    if route.unsupported:
        return f"a replace could not rebuild its {', '.join(route.unsupported)}"
    if route.type != RTN_UNICAST:
        return "not a unicast route"
    return None


def why_not_host(route: Route) -> str | None:
    """Why the peer covered by ``route`` gets no host route (None: it can have one)."""
    if route.dst is not None and route.dst_len == (32 if route.family == 2 else 128):
        return "a host route of its own already, left as it is"
    return why_not(route)


def host_route(cover: Route, peer: str, rto_min_ms: int) -> Route:
    """The keeper's host route toward ``peer``: the nexthop, source, preference and metrics of ``cover``
    (the route that covers it), a locked RTO minimum of ``rto_min_ms``, protocol RTPROT_LEVELLER."""
    addr = ipaddress.ip_address(peer)
    return tuned(replace(cover, dst=str(addr), dst_len=addr.max_prefixlen, tos=0, proto=RTPROT_LEVELLER,
                         type=RTN_UNICAST), rto_min_ms)


def tuned(route: Route, rto_min_ms: int) -> Route:
    """``route`` with a locked RTO minimum of ``rto_min_ms`` milliseconds (the other metrics kept)."""
    metrics = dict(route.metrics)
    metrics["RTAX_LOCK"] = int(metrics.get("RTAX_LOCK", 0)) | RTO_MIN_LOCK
    metrics["RTAX_RTO_MIN"] = check_rto_min_ms(rto_min_ms)
    return replace(route, metrics=tuple(sorted(metrics.items())))


def replace_request(route: Route) -> dict[str, Any]:
    """Keyword arguments of pyroute2's ``route("replace", ...)`` that make the kernel's route ``route``
    (with exactly its metrics: none given = none kept)."""
    req: dict[str, Any] = {"family": route.family, "dst_len": route.dst_len, "table": route.table,
                           "tos": route.tos, "proto": route.proto, "scope": route.scope, "type": route.type}
    if route.dst is not None:
        req["dst"] = route.dst
    for name in ("priority", "oif", "gateway", "prefsrc"):
        value = getattr(route, name)
        if value is not None:
            req[name] = value
    if route.pref is not None:
        req["pref"] = route.pref
    if route.flags:
        req["flags"] = route.flags
    if route.metrics:
        req["metrics"] = dict(route.metrics)
    return req


def _iproute(netns: str | None) -> Any:
    """pyroute2's netlink socket of this namespace or of ``netns`` (never created here)."""
    from pyroute2 import IPRoute, NetNS

    if netns is None:
        return IPRoute()
    if not (NETNS_DIR / netns).exists():
        raise UserError(f"--netns {netns!r}: no such network namespace (see `ip netns list`)")
    return NetNS(netns, flags=0)


class RtoMinRoutes:
    """The keeper's state: one host route with a lower RTO minimum per job peer, in one network namespace
    (see the module docstring). ``ipr()`` opens the namespace's netlink (tests give a fake)."""

    def __init__(self, rto_min_ms: int, netns: str | None = None, max_peers: int = MAX_PEERS,
                 forget_after_s: float = FORGET_AFTER_S, resync_s: float = RESYNC_S,
                 clock: Callable[[], float] = time.monotonic, ipr: Callable[[], Any] | None = None) -> None:
        self.rto_min_ms = check_rto_min_ms(rto_min_ms)
        self.netns, self.max_peers, self.forget_after_s, self.resync_s = netns, max_peers, forget_after_s, resync_s
        self.clock = clock
        self._ipr = ipr if ipr is not None else (lambda: _iproute(self.netns))
        self.routes: dict[str, Route] = {}  # peer -> the host route the keeper added toward it
        self.present: set[str] = set()  # the peers of the latest update
        self.absent_since: dict[str, float] = {}  # peers with a route that left the updates, since when
        self.left_alone: dict[str, str] = {}  # peers without a route, why (bounded like the routes)
        self.refused = 0  # peers refused at the bound
        self._logged_refusal = float("-inf")
        self._resynced = clock()

    def check(self) -> int:
        """Open the namespace's netlink (UserError if it does not exist) and delete the host routes a keeper
        killed before left there; returns how many."""
        ipr = self._ipr()
        try:
            stale = [route_of(m, m["attrs"]) for family in (2, 10)
                     for m in ipr.route("dump", family=family, proto=RTPROT_LEVELLER)]
            gone = 0
            for r in stale:
                if r.proto == RTPROT_LEVELLER and self._delete(ipr, r):
                    gone += 1
        finally:
            ipr.close()
        if gone:
            LOG.info("deleted %d host route(s) of protocol %d a keeper killed before left", gone, RTPROT_LEVELLER)
        return gone

    def update(self, peers: Iterable[str]) -> list[str]:
        """``peers``: every job peer of the agent's latest report. Add a host route toward each new one (up to
        ``max_peers``), note when a peer with one left, then :meth:`tick`. Returns the routes added."""
        now = self.clock()
        current = set()
        for peer in peers:
            try:
                current.add(str(ipaddress.ip_address(peer)))
            except ValueError:
                if peer not in self.left_alone and len(self.left_alone) < self.max_peers:
                    self.left_alone[peer] = "not an IP address"
                    LOG.warning("peer %r is not an IP address: skipped", peer)
        for peer in self.present - current:
            if peer in self.routes:
                self.absent_since.setdefault(peer, now)
        for peer in current:
            self.absent_since.pop(peer, None)
        self.present = current
        new = sorted(p for p in current if p not in self.routes and p not in self.left_alone)
        done = self._add(new) if new else []
        self.tick()
        return done

    def tick(self) -> None:
        """Delete the routes of peers absent for ``forget_after_s``; every ``resync_s`` make each route follow
        the route that covers its peer."""
        now = self.clock()
        gone = [p for p, since in self.absent_since.items() if now - since >= self.forget_after_s]
        resync = now - self._resynced >= self.resync_s and bool(self.routes)
        if not gone and not resync:
            return
        ipr = self._ipr()
        try:
            for peer in gone:
                del self.absent_since[peer]
                route = self.routes.pop(peer, None)
                if route is not None and self._delete(ipr, route):
                    LOG.info("host route %s deleted: the peer was not reported for %.0f s", route.label(),
                             self.forget_after_s)
            if resync:
                self._resynced = now
                self._resync(ipr)
        finally:
            ipr.close()

    def _add(self, peers: list[str]) -> list[str]:
        done: list[str] = []
        ipr = self._ipr()
        try:
            tables: dict[tuple[int, int], list[Route]] = {}
            for peer in peers:
                if len(self.routes) >= self.max_peers:
                    self._refuse(len(peers) - len(done))
                    break
                cover = self._route_toward(ipr, peer, tables)
                if cover is None:
                    self._leave(peer, "no unicast route toward it")
                    continue
                reason = why_not_host(cover)
                if reason is not None:
                    self._leave(peer, f"route {cover.label()}: {reason}")
                    continue
                ours = host_route(cover, peer, self.rto_min_ms)
                try:
                    ipr.route("add", **replace_request(ours))
                except Exception as exc:  # netlink refused (e.g. no CAP_NET_ADMIN, or a route of that key exists)
                    self._leave(peer, f"adding {ours.label()} failed: {exc}")
                    continue
                self.routes[peer] = ours
                done.append(ours.label())
                LOG.info("host route %s (as %s) with rto_min %d ms until the agent exits", ours.label(),
                         cover.label(), self.rto_min_ms)
        finally:
            ipr.close()
        return done

    def _leave(self, peer: str, why: str) -> None:
        if len(self.left_alone) < self.max_peers:
            self.left_alone[peer] = why
            LOG.info("peer %s left alone: %s", peer, why)

    def _refuse(self, n: int) -> None:
        self.refused += n
        now = self.clock()
        if now - self._logged_refusal >= LOG_EVERY_S:
            self._logged_refusal = now
            LOG.warning("%d peer(s) get no host route: %d already have one, the most allowed (%d refused so far)",
                        n, len(self.routes), self.refused)

    def _resync(self, ipr: Any) -> None:
        tables: dict[tuple[int, int], list[Route]] = {}
        for peer, ours in list(self.routes.items()):
            where = (ours.family, ours.table)
            if where not in tables:
                tables[where] = self._dump(ipr, *where)
            current = {r.key: r for r in tables[where]}.get(ours.key)
            if current is None or dict(current.metrics) != dict(ours.metrics):
                del self.routes[peer]  # deleted or changed by someone else: not ours any more
                self.absent_since.pop(peer, None)
                LOG.info("host route %s changed by someone else: left as it is", ours.label())
                continue
            cover = covering(tables[where], peer)
            if cover is None or why_not_host(cover) is not None:
                del self.routes[peer]
                self.absent_since.pop(peer, None)
                self._delete(ipr, ours)
                LOG.info("host route %s deleted: the route that covered its peer is gone or changed", ours.label())
                continue
            follow = host_route(cover, peer, self.rto_min_ms)
            if follow != ours:
                try:
                    ipr.route("replace", **replace_request(follow))
                except Exception as exc:
                    LOG.warning("host route %s: following %s failed: %s", ours.label(), cover.label(), exc)
                    continue
                self.routes[peer] = follow
                LOG.info("host route %s now follows %s", follow.label(), cover.label())

    def _route_toward(self, ipr: Any, peer: str, tables: dict[tuple[int, int], list[Route]]) -> Route | None:
        try:
            got = list(ipr.route("get", dst=peer))
        except Exception as exc:
            LOG.info("no route toward %s (%s): skipped", peer, exc)
            return None
        if not got or got[0].get("type", RTN_UNICAST) != RTN_UNICAST:
            return None  # a local or unreachable destination: no TCP retransmissions over a route
        family, table = int(got[0]["family"]), int(got[0].get_attr("RTA_TABLE") or got[0]["table"])
        if (family, table) not in tables:
            tables[(family, table)] = self._dump(ipr, family, table)
        return covering(tables[(family, table)], peer, got[0].get_attr("RTA_OIF"))

    @staticmethod
    def _dump(ipr: Any, family: int, table: int) -> list[Route]:
        out = []
        for msg in ipr.route("dump", family=family, table=table):
            r = route_of(msg, msg["attrs"])
            if r.table == table:
                out.append(r)
        return out

    @staticmethod
    def _delete(ipr: Any, route: Route) -> bool:
        try:
            ipr.route("del", **replace_request(route))
            return True
        except Exception as exc:
            if getattr(exc, "code", None) != errno.ESRCH:  # already gone is fine
                LOG.warning("host route %s: deleting it failed: %s", route.label(), exc)
            return False

    def restore(self) -> list[str]:
        """Delete every host route the keeper added that is still its own; the labels deleted."""
        if not self.routes:
            return []
        back: list[str] = []
        try:
            ipr = self._ipr()
        except UserError:
            self.routes = {}  # the namespace is gone, and its routes with it
            return back
        try:
            now: dict[tuple[int, int], dict[tuple[Any, ...], Route]] = {}
            for peer, ours in list(self.routes.items()):
                where = (ours.family, ours.table)
                if where not in now:
                    now[where] = {r.key: r for r in self._dump(ipr, *where)}
                current = now[where].get(ours.key)
                if current is None or current.proto != RTPROT_LEVELLER or dict(current.metrics) != dict(ours.metrics):
                    LOG.info("host route %s changed by someone else since: left as it is", ours.label())
                elif self._delete(ipr, ours):
                    back.append(ours.label())
                del self.routes[peer]
        finally:
            ipr.close()
        return back


class RtoMinGuard:
    """The agent's end of the route keeper: starts ``python -m leveller.agent.rto_min`` and tells it the
    job peers of every report (when they change); closing it (or the agent dying) makes the keeper delete
    its host routes and exit. At most ``max_peers`` peers are told (the rest are refused, logged)."""

    def __init__(self, rto_min_ms: int, netns: str | None = None, start_timeout_s: float = START_TIMEOUT_S,
                 max_peers: int = MAX_PEERS, clock: Callable[[], float] = time.monotonic) -> None:
        self.rto_min_ms = check_rto_min_ms(rto_min_ms)
        self.netns = netns
        self.start_timeout_s = start_timeout_s
        self.max_peers, self.clock = max_peers, clock
        self.proc: subprocess.Popen[str] | None = None
        self._sent: tuple[str, ...] | None = None
        self._lost = False
        self.refused = 0  # peers left out at the bound, over all reports
        self._logged_refusal = float("-inf")

    def argv(self) -> list[str]:
        return [sys.executable, "-m", "leveller.agent.rto_min", "--rto-min-ms", str(self.rto_min_ms),
                *(["--netns", self.netns] if self.netns else [])]

    def start(self) -> RtoMinGuard:
        """Start the keeper and wait until it is ready; UserError (naming --rto-min-ms) if it does not start."""
        proc = subprocess.Popen(self.argv(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                start_new_session=True)  # a Ctrl-C for the agent must not stop it first
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], self.start_timeout_s)
        line = proc.stdout.readline() if ready else ""
        if line.strip() != "ready":
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()
            raise UserError(f"--rto-min-ms {self.rto_min_ms}: the route keeper did not start "
                            f"(exit status {proc.returncode}; its error is above)")
        self.proc = proc
        return self

    def update(self, peers: Iterable[str]) -> None:
        """Tell the keeper the job peers of this report, when they differ from the last ones told (it adds a
        host route toward each new one and deletes those of peers gone for a while). At most ``max_peers``:
        the others (the highest addresses) are refused and logged."""
        current = sorted(set(peers))
        if len(current) > self.max_peers:
            left = len(current) - self.max_peers
            self.refused += left
            current = current[:self.max_peers]
            now = self.clock()
            if now - self._logged_refusal >= LOG_EVERY_S:
                self._logged_refusal = now
                LOG.warning("--rto-min-ms: %d job peer(s) over the %d with a lower RTO minimum get none "
                            "(%d refused so far)", left, self.max_peers, self.refused)
        peers_now = tuple(current)
        if peers_now == self._sent or self.proc is None or self._lost:
            return
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps({"peers": current}) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            self._lost = True
            LOG.warning("the route keeper (pid %d) is gone: new peers get no lower RTO minimum", self.proc.pid)
            return
        self._sent = peers_now

    def close(self) -> None:
        """End the keeper's input and wait until it has deleted its routes (SIGTERM, then SIGKILL, if it hangs)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError, ValueError):
            assert proc.stdin is not None
            proc.stdin.close()
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()

    def __enter__(self) -> RtoMinGuard:
        return self.start() if self.proc is None else self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _lines(stream: Any, tick_s: float) -> Iterator[str | None]:
    """The lines of ``stream`` until it ends, and None whenever ``tick_s`` passed without one (a stream
    without a file descriptor, as in tests, only gives its lines)."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, io.UnsupportedOperation):
        yield from stream
        return
    buffered = b""
    while True:
        ready, _, _ = select.select([fd], [], [], tick_s)
        if not ready:
            yield None
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            if buffered:
                yield buffered.decode(errors="replace")
            return
        buffered += chunk
        *lines, buffered = buffered.split(b"\n")
        for line in lines:
            yield line.decode(errors="replace") + "\n"
        if not lines:
            yield None


def _stop(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None, stdin: Any = None) -> int:
    """The keeper: keep a host route with a lower RTO minimum toward every peer read from stdin (one JSON
    object {"peers": [...]} a line: the job peers of a report) until stdin ends or SIGTERM/SIGINT comes,
    then delete them all."""
    parser = argparse.ArgumentParser(prog="python -m leveller.agent.rto_min", description=main.__doc__)
    parser.add_argument("--rto-min-ms", type=int, required=True)
    parser.add_argument("--netns")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        routes = RtoMinRoutes(args.rto_min_ms, args.netns)
        routes.check()
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    print("ready", flush=True)
    started = time.monotonic()
    try:
        for line in _lines(stdin if stdin is not None else sys.stdin, TICK_S):
            peers: Any = None
            if line is not None:
                try:
                    peers = json.loads(line)["peers"]
                    if not isinstance(peers, list):
                        raise TypeError
                except (ValueError, KeyError, TypeError):
                    LOG.warning("input line %r skipped: expected {\"peers\": [ADDRESS, ...]}", line[:120])
                    continue
            blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
            try:  # a stop signal waits until a route being added is recorded, so that it is deleted
                if peers is None:
                    routes.tick()
                else:
                    routes.update(str(p) for p in peers[:MAX_PEERS])
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    finally:
        back = routes.restore()
        if back:
            LOG.info("deleted %d host route(s) with a lower RTO minimum after %.0f s: %s", len(back),
                     time.monotonic() - started, ", ".join(back))
    return 0

if __name__ == "__main__":
    sys.exit(main())
