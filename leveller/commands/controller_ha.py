"""`leveller controller --etcd URL[,URL...]`: the options of leader election and state on etcd.

Kept apart from leveller.commands.controller so the controller command only calls four functions:
``add_etcd_options`` (configure), ``check_etcd_args`` (check_args, also `leveller config check`),
``ha_handler`` (what to serve) and ``advertised`` (the address the standbys name).
"""

from __future__ import annotations

import argparse
import math
import re
import socket
from typing import Any

from leveller.errors import UserError

HELP = """Leader election and state on etcd v3 (etcd-server >= 3.4): controllers started with the same
--etcd and --etcd-prefix elect one leader on an etcd lease of --etcd-ttl seconds; only the leader decides,
a standby answers reports with "not the leader; the leader is X" (X its --advertise address: give agents
the same spelling in --controller) and takes over, with the profiles, weights, CASSINI plan and replay
marks the leader kept in etcd, within TTL + 2 tau of the leader's death. Without --etcd: one controller,
as before. Key layout: leveller/controller/hastate.py."""


def add_etcd_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("high availability (etcd)", HELP)
    group.add_argument("--etcd", metavar="URL[,URL...]",
                       help="etcd client URLs, e.g. http://10.0.0.1:2379,http://10.0.0.2:2379,http://10.0.0.3:2379")
    group.add_argument("--etcd-ttl", type=int, metavar="S",
                       help="seconds of the leader's etcd lease: a dead leader is replaced after it (whole "
                       "seconds >= 1, at most half of --lease; default --lease / 2 rounded down)")
    group.add_argument("--etcd-prefix", default="/leveller/", metavar="PREFIX",
                       help="key prefix of this cluster in etcd (default /leveller/)")
    group.add_argument("--etcd-cacert", metavar="FILE", help="CA of the etcd members' certificates (https:// URLs)")
    group.add_argument("--etcd-cert", metavar="FILE", help="client certificate for etcd (with --etcd-key)")
    group.add_argument("--etcd-key", metavar="FILE", help="key of --etcd-cert")
    group.add_argument("--etcd-timeout", type=float, metavar="S",
                       help="seconds an etcd call may take before the next member is tried (default TTL / 4, at "
                       "most 1: a keep-alive stuck on a dead member must not outlast the leader's term)")
    group.add_argument("--advertise", metavar="HOST:PORT",
                       help="this controller's address as agents reach it (default: --listen; needed when "
                       "listening on 0.0.0.0 or [::])")
    group.add_argument("--name", metavar="NAME",
                       help="this controller's name among the members (default: the host name)")


def etcd_ttl(args: argparse.Namespace) -> int:
    """--etcd-ttl, or --lease / 2 rounded down (the agents' lease: --lease, default 3 x tau)."""
    lease = args.lease if args.lease is not None else 3 * args.tau
    ttl = args.etcd_ttl if args.etcd_ttl is not None else max(1, math.floor(lease / 2))
    if ttl < 1 or 2 * ttl > lease + 1e-9:
        raise UserError(f"--etcd-ttl {ttl}: must be whole seconds >= 1 and at most half of --lease ({lease:g} s), "
                        "so a new leader decides before the agents' levels run out; e.g. --lease 4 --etcd-ttl 2")
    return ttl


def check_etcd_args(args: argparse.Namespace) -> None:
    """The etcd options' checks that need nothing but the options (UserError naming the option)."""
    from leveller.controller.etcdstore import parse_endpoints
    from leveller.controller.hastate import check_prefix
    from leveller.model.limits import NAME_PATTERN, NAME_RULE
    from leveller.rpc.failover import parse_addresses

    given = [o for o in ("etcd_ttl", "etcd_cacert", "etcd_cert", "etcd_key", "etcd_timeout", "advertise", "name")
             if getattr(args, o) is not None]
    if args.etcd is None:
        if given:
            raise UserError(f"--{given[0].replace('_', '-')} needs --etcd URL[,URL...]")
        return
    try:
        endpoints = parse_endpoints(args.etcd)
        check_prefix(args.etcd_prefix)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if (args.etcd_cert is None) != (args.etcd_key is None):
        raise UserError("--etcd-cert and --etcd-key go together (a client certificate and its key)")
    if (args.etcd_cacert or args.etcd_cert) and endpoints[0].scheme != "https":
        raise UserError(f"--etcd-cacert/--etcd-cert need https:// URLs in --etcd (got {args.etcd!r})")
    if args.etcd_timeout is not None and not (math.isfinite(args.etcd_timeout) and 0.05 <= args.etcd_timeout <= 10):
        raise UserError(f"--etcd-timeout {args.etcd_timeout:g}: must be 0.05..10 seconds")
    etcd_ttl(args)
    if args.advertise is not None:
        parse_addresses(args.advertise, "--advertise")
    if args.name is not None and not NAME_PATTERN.fullmatch(args.name):
        raise UserError(f"--name {args.name!r}: {NAME_RULE}")


def advertised(args: argparse.Namespace, port: int) -> str:
    """The address standbys name for this controller: --advertise, else --listen with the bound port
    (refused for a wildcard address, which no agent can dial)."""
    if args.advertise:
        return str(args.advertise)
    host = args.listen.rpartition(":")[0]
    if host in ("0.0.0.0", "[::]", ""):
        raise UserError(f"--listen {args.listen} with --etcd: give --advertise HOST:PORT (the address agents dial)")
    return f"{host}:{port}"


def ha_handler(args: argparse.Namespace, ctl: Any) -> tuple[Any, Any]:
    """(the HaController around ``ctl``, the replay memory to serve with), or (None, None) without --etcd."""
    if args.etcd is None:
        return None, None
    from leveller.controller.etcdstore import EtcdStore, EtcdTls, parse_endpoints
    from leveller.controller.ha import HaController, HaMetrics
    from leveller.controller.hastate import Layout
    from leveller.rpc.replay import ReplayGuard

    metrics = HaMetrics(ctl.metrics.registry)
    tls = EtcdTls(args.etcd_cacert, args.etcd_cert, args.etcd_key) if args.etcd_cacert else None
    ttl = etcd_ttl(args)
    timeout = args.etcd_timeout if args.etcd_timeout is not None else min(1.0, ttl / 4)
    store = EtcdStore(parse_endpoints(args.etcd), timeout, tls, on_call=metrics.on_call)
    replay = ReplayGuard()
    name = args.name or re.sub(r"[^A-Za-z0-9_.:-]", "-", socket.gethostname().split(".")[0])[:64] or "controller"
    ha = HaController(ctl, store, name, args.advertise or args.listen, ttl, Layout(args.etcd_prefix),
                      replay=replay, metrics=metrics)
    return ha, replay
