"""A lower TCP RTO minimum toward the job peers (`leveller agent --rto-min-ms MS`), for as long as the agent lives.

A TCP flow that loses its ACK clock behind higher levels waits for a retransmission timeout of at
least Linux's RTO minimum, 200 ms (TCP_RTO_MIN), before it sends again: a third of an iteration on
the emulated cluster. Datacenters lower it (issue 25, item 4). The mechanism chosen here is the
route metric RTAX_RTO_MIN (``ip route replace ... rto_min 10ms``), set on the route through which
this host reaches each job peer (the destinations of the job flows in its reports), in the agent's
network namespace:

- it acts on connections already open: TCP reads a locked rto_min from the socket's cached route
  at every RTT sample, and replacing a route invalidates the cached ones, so the jobs' long-lived
  connections converge to the new minimum within a few round trips. The per-namespace sysctl
  net.ipv4.tcp_rto_min_us is copied into a socket when it is created: it misses the connections a
  job opened before the agent started, and every socket made while it is lowered keeps the lower
  minimum for its whole life.
- putting the route back gives every connection opened afterwards Linux's minimum again. A
  connection that lived through the change keeps the RTT variance it converged to (TCP raises its
  variance term only when the RTT varies more, it does not re-apply a higher floor), so its RTO
  stays low until its RTT varies or it closes: the kernel offers no way to undo that from outside.
- it touches only the routes toward the peers (and so only those destinations), not the host's
  other traffic; a route that already carries an RTO minimum (the operator's) is left alone, and
  so is a route a replace cannot rebuild attribute for attribute (multipath, encapsulation,
  nexthop objects, expiring routes).

A route metric cannot expire by itself (IPv4 routes have no expiry at all), so the change is tied
to the agent's life instead: it is made and undone by a small keeper process (this module run as
``python -m leveller.agent.rto_min``) that reads the peers from a pipe of the agent and puts every
route it changed back when that pipe ends -- the agent exits, or dies however it dies (SIGKILL
included: the kernel closes the pipe) -- or when it gets SIGTERM/SIGINT. It runs in its own
session, so a Ctrl-C meant for the agent does not stop it before the agent is done. A route is put
back only if it still holds the keeper's value (one changed meanwhile by someone else stays as it
is). What is left if the keeper itself is killed with SIGKILL: the lower minimum on those routes
until they are replaced or the namespace goes. It is benign: a sender retransmits sooner toward
those peers (the RTO is still the smoothed RTT plus its variance term, so at worst a spurious
retransmission on a path whose ACKs are delayed more than that), nothing is dropped,
reordered or prioritised. No eBPF sockops program (TCP_BPF_RTO_MIN, which could check a lease by
the kernel clock like the DSCP marker) is used: it sees only connections opened after it was
attached, which misses the jobs already running when the agent starts.

Pure parts (unit-tested): :func:`route_of`, :func:`covering`, :func:`tuned`, :func:`replace_request`.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import json
import logging
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
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
    """The route of one table the kernel uses toward ``peer``: the unicast route with the longest prefix
    containing it, the lowest metric among equals (and the interface ``oif`` the kernel named, if
    given); None if there is none."""
    addr = ipaddress.ip_address(peer)
    family = 2 if addr.version == 4 else 10
    best: Route | None = None
    for r in routes:
        if r.family != family or r.type != RTN_UNICAST or r.tos or not r.contains(addr):
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
    """Lowers the RTO minimum of the routes toward the peers it is given, in one network namespace, and
    puts back every route it changed (see the module docstring)."""

    def __init__(self, rto_min_ms: int, netns: str | None = None) -> None:
        self.rto_min_ms = check_rto_min_ms(rto_min_ms)
        self.netns = netns
        self.changed: dict[tuple[Any, ...], tuple[Route, Route]] = {}  # route key -> (original, ours)
        self._seen: set[str] = set()

    def check(self) -> None:
        """Open the namespace's netlink once (UserError if the namespace does not exist)."""
        _iproute(self.netns).close()

    def tune(self, peers: Iterable[str]) -> list[str]:
        """Lower the RTO minimum of the routes toward the peers not seen before; the labels of the routes
        changed now. A peer whose route is left alone is logged once."""
        new = []
        for peer in peers:
            if peer in self._seen:
                continue
            self._seen.add(peer)
            try:
                ipaddress.ip_address(peer)
            except ValueError:
                LOG.warning("peer %r is not an IP address: skipped", peer)
                continue
            new.append(peer)
        if not new:
            return []
        done: list[str] = []
        ipr = _iproute(self.netns)
        try:
            tables: dict[tuple[int, int], list[Route]] = {}
            for peer in new:
                route = self._route_toward(ipr, peer, tables)
                if route is None or route.key in self.changed:
                    continue
                reason = why_not(route)
                if reason is not None:
                    LOG.info("route %s toward %s: %s", route.label(), peer, reason)
                    continue
                ours = tuned(route, self.rto_min_ms)
                try:
                    ipr.route("replace", **replace_request(ours))
                except Exception as exc:  # netlink refused (e.g. no CAP_NET_ADMIN): the route is as it was
                    LOG.warning("route %s toward %s: setting rto_min %d ms failed: %s", route.label(), peer,
                                self.rto_min_ms, exc)
                    continue
                self.changed[route.key] = (route, ours)
                done.append(route.label())
                LOG.info("route %s toward %s: rto_min %d ms until the agent exits", route.label(), peer,
                         self.rto_min_ms)
        finally:
            ipr.close()
        return done

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

    def restore(self) -> list[str]:
        """Put every changed route back as it was, if it still holds our value; the labels put back."""
        if not self.changed:
            return []
        back: list[str] = []
        try:
            ipr = _iproute(self.netns)
        except UserError:
            self.changed = {}  # the namespace is gone, and its routes with it
            return back
        try:
            now: dict[tuple[int, int], dict[tuple[Any, ...], Route]] = {}
            for key, (original, ours) in list(self.changed.items()):
                where = (original.family, original.table)
                if where not in now:
                    now[where] = {r.key: r for r in self._dump(ipr, *where)}
                current = now[where].get(key)
                if current is None or dict(current.metrics) != dict(ours.metrics):
                    LOG.info("route %s changed by someone else since: left as it is", original.label())
                else:
                    try:
                        ipr.route("replace", **replace_request(original))
                        back.append(original.label())
                    except Exception as exc:
                        LOG.warning("route %s: putting its RTO minimum back failed: %s", original.label(), exc)
                del self.changed[key]
        finally:
            ipr.close()
        return back


class RtoMinGuard:
    """The agent's end of the route keeper: starts ``python -m leveller.agent.rto_min`` and tells it the
    job peers; closing it (or the agent dying) makes the keeper put the routes back and exit."""

    def __init__(self, rto_min_ms: int, netns: str | None = None, start_timeout_s: float = START_TIMEOUT_S) -> None:
        self.rto_min_ms = check_rto_min_ms(rto_min_ms)
        self.netns = netns
        self.start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen[str] | None = None
        self._sent: set[str] = set()
        self._lost = False

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
        """Tell the keeper the peers not told yet (it lowers the RTO minimum of their routes)."""
        new = sorted(set(peers) - self._sent)
        if not new or self.proc is None or self._lost:
            return
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps({"peers": new}) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            self._lost = True
            LOG.warning("the route keeper (pid %d) is gone: routes toward new peers keep their RTO minimum",
                        self.proc.pid)
            return
        self._sent.update(new)

    def close(self) -> None:
        """End the keeper's input and wait until it has put the routes back (SIGTERM, then SIGKILL, if it hangs)."""
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


def _stop(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    """The keeper: lower the RTO minimum toward the peers read from stdin (one JSON object {"peers": [...]}
    a line) until stdin ends or SIGTERM/SIGINT comes, then put every changed route back."""
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
        for line in sys.stdin:
            try:
                peers = json.loads(line)["peers"]
                if not isinstance(peers, list):
                    raise TypeError
            except (ValueError, KeyError, TypeError):
                LOG.warning("input line %r skipped: expected {\"peers\": [ADDRESS, ...]}", line[:120])
                continue
            blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
            try:  # a stop signal waits until a route being replaced is recorded, so that it is put back
                routes.tune(str(p) for p in peers)
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    finally:
        back = routes.restore()
        if back:
            LOG.info("put back the RTO minimum of %d route(s) after %.0f s: %s", len(back),
                     time.monotonic() - started, ", ".join(back))
    return 0


if __name__ == "__main__":
    sys.exit(main())
