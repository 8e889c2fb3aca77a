"""`leveller controller --etcd URL[,URL...]`: the options of leader election and state on etcd.

The flags only: their checks, the HaController they build and the address it advertises are in
leveller.controller.app (check_etcd, ha_handler, advertised).
"""

from __future__ import annotations

import argparse

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
