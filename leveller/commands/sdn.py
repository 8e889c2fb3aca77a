"""Run LEVELLER's os-ken OpenFlow 1.3 app in the foreground.

It installs an exact-match path for every new flow (one of the equal-cost
shortest paths, picked deterministically from the 5-tuple), programs the level ->
DSCP -> strict-priority queue mapping (OpenFlow set_queue, or a tc classifier on
every switch egress port for the OVS userspace datapath, which ignores set_queue),
reinstalls its state when a switch reconnects, and answers path and queue queries
over HTTP JSON (see sdn/README.md). The API bounds what clients can hold: a new
connection's headers must arrive within --api-header-timeout, a client's later ones and
every body within --api-timeout, bodies over --api-max-body are refused (413), a request
without the --api-token-file token is refused (401) before its body is read, and past
--api-max-connections a connection that has not shown it is a client (else the one idle
the longest) is closed for a new one, so unauthenticated, idle or half-open connections
cannot lock out /health. GET /metrics counts the refusals.

OpenFlow listens on --of-host (default 127.0.0.1; a real switch needs an address it can reach, e.g.
--of-host 10.0.0.254). A switch is accepted only if its dpid is one of the topology's, it connects
from --of-allow (default loopback; required with an --of-host beyond loopback) and it does not take
over a dpid connected from another address; a refused switch is logged and closed before it gets
any rule. Without TLS any process that can reach the port and claim an allowed dpid is a switch:
for real deployments give --of-tls-cert/--of-tls-key/--of-tls-ca (OpenFlow over TLS; every switch
must present a certificate of that CA, e.g. `ovs-vsctl set-ssl` and set-controller ssl:IP:PORT).

  leveller sdn --testbed leveller                 app for a testbed (topology, netns, mode from its state)
  leveller sdn --topology leafspine --queue-mode set_queue --of-port 6653 --api 127.0.0.1:8181
  leveller sdn --config examples/config/sdn.toml --api 10.0.0.254:8181 --api-token-file /etc/leveller/sdn-token
  leveller sdn --topology site.toml --of-host 10.0.0.254 --of-allow 10.0.0.0/24 --of-tls-cert of/ctl.pem \
      --of-tls-key of/ctl.key --of-tls-ca of/ca.pem
"""

from __future__ import annotations

import argparse

from sdn.options import of_allow, of_tls

__all__ = ["check_args", "configure", "of_allow", "of_tls", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--testbed", default=None, help="testbed name: read topology, switch netns and "
                        "datapath from its run directory")
    parser.add_argument("--run-dir", default=None, help="the testbed's run directory (default /run/leveller/NAME)")
    parser.add_argument("--topology", default=None, help="without --testbed: preset or TOML topology file")
    parser.add_argument("--queue-mode", choices=("set_queue", "tc"), default=None,
                        help="DSCP->queue mapping: OpenFlow set_queue (kernel/hardware datapath) or tc "
                        "classifiers on switch ports (OVS userspace); default from the testbed, else set_queue")
    parser.add_argument("--api", default="127.0.0.1:8181",
                        help="HOST:PORT of the HTTP API (port 0 = any free port; see RUN_DIR/sdn.json)")
    parser.add_argument("--api-token-file", metavar="FILE",
                        help="bearer token every API request must carry (Authorization: Bearer TOKEN); required "
                        "when --api is not a loopback address, e.g. --api 10.0.0.254:8181 --api-token-file "
                        "/etc/leveller/sdn-token (make one with `openssl rand -hex 24`)")
    parser.add_argument("--of-host", default="127.0.0.1",
                        help="OpenFlow listen address (default 127.0.0.1; the testbed's switches connect there), "
                        "e.g. --of-host 10.0.0.254 or 0.0.0.0 for switches beyond this host")
    parser.add_argument("--of-port", type=int, default=6653, help="OpenFlow listen port (default 6653)")
    parser.add_argument("--of-allow", metavar="NET[,NET...]",
                        help="networks switches may connect from (default loopback: 127.0.0.0/8,::1; required "
                        "with an --of-host beyond loopback), e.g. --of-allow 10.0.0.0/24,192.168.5.7")
    parser.add_argument("--of-tls-cert", metavar="PEM", help="OpenFlow over TLS: this app's certificate (all three "
                        "--of-tls-* together; switches must present a certificate of --of-tls-ca)")
    parser.add_argument("--of-tls-key", metavar="PEM", help="OpenFlow over TLS: the key of --of-tls-cert (0600)")
    parser.add_argument("--of-tls-ca", metavar="PEM", help="OpenFlow over TLS: the CA switch certificates are "
                        "signed by")
    parser.add_argument("--idle-timeout", type=int, default=60, help="seconds before an idle flow's rules expire")
    parser.add_argument("--api-header-timeout", type=float, default=2.0, metavar="S",
                        help="seconds a new connection has for its first request line and headers (default 2; "
                        "a connection that sends nothing is holding a slot)")
    parser.add_argument("--api-timeout", type=float, default=10.0, metavar="S",
                        help="seconds a client has for a later request's headers on its connection, and for a "
                        "request's body (default 10)")
    parser.add_argument("--api-max-body", type=int, default=4 << 20, metavar="BYTES",
                        help="largest request body accepted (default 4 MiB, about 40,000 flows in POST /paths)")
    parser.add_argument("--api-max-connections", type=int, default=512, metavar="N",
                        help="open API connections at most (default 512; keep it below `ulimit -n`)")
    from leveller.config import add_config_option

    add_config_option(parser, "sdn")
    parser.set_defaults(func=run)


def check_args(args: argparse.Namespace) -> tuple[str, int]:
    """(API host, API port) after every check of the options that needs nothing but the options: what
    `run` refuses at start and `leveller config check` runs on a file. UserError naming the option."""
    from leveller.errors import UserError

    host, _, port = args.api.rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise UserError(f"--api = {args.api!r} is invalid; HOST:PORT, e.g. 127.0.0.1:8181")
    if not 0 < args.api_timeout <= 3600:
        raise UserError(f"--api-timeout = {args.api_timeout}: must be in (0, 3600] seconds")
    if not 0 < args.api_header_timeout <= 3600:
        raise UserError(f"--api-header-timeout = {args.api_header_timeout}: must be in (0, 3600] seconds")
    if not 1024 <= args.api_max_body <= 1 << 30:
        raise UserError(f"--api-max-body = {args.api_max_body}: must be 1024..{1 << 30} bytes")
    if not 2 <= args.api_max_connections <= 100_000:
        raise UserError(f"--api-max-connections = {args.api_max_connections}: must be 2..100000")
    if not 1 <= args.of_port <= 65535:
        raise UserError(f"--of-port = {args.of_port}: must be a TCP port 1..65535")
    if not 0 <= args.idle_timeout <= 65535:  # OpenFlow's idle_timeout is 16 bits
        raise UserError(f"--idle-timeout = {args.idle_timeout}: must be 0..65535 seconds (0 = never)")
    of_allow(args)
    return host, int(port)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from leveller.core.qos import default_level_map
    from leveller.errors import UserError

    host, port = check_args(args)
    tls = of_tls(args)
    from sdn.token import is_loopback, load_token

    token = load_token(args.api_token_file) if args.api_token_file else None
    if token is None and not is_loopback(host):
        raise UserError(f"--api {args.api!r}: listening beyond loopback needs --api-token-file FILE "
                        "(clients send Authorization: Bearer TOKEN)")
    netns, info_file, of_port = None, None, args.of_port
    if args.testbed:
        from leveller.testbed.cluster import OF_PORT, Testbed

        tb = Testbed(args.testbed, args.run_dir)
        state = tb.state
        topo = tb.topology
        netns = state.switch_netns
        of_port = OF_PORT
        mode = args.queue_mode or ("tc" if state.datapath_type == "netdev" else "set_queue")
        info_file = Path(tb.run_dir) / "sdn.json"
    elif args.topology:
        from leveller.testbed.topofile import load_topology

        topo = load_topology(args.topology)
        mode = args.queue_mode or "set_queue"
    else:
        raise UserError("give --testbed NAME or --topology (preset or TOML file)")
    from sdn.httpd import Limits
    from sdn.main import run as run_app

    run_app(topo, default_level_map(topo.levels), mode, host, int(port), of_host=args.of_host, of_port=of_port,
            netns=netns, of_allow=of_allow(args), of_tls=tls,
            info_file=info_file, idle_timeout=args.idle_timeout,
            api_limits=Limits(args.api_timeout, args.api_max_body, args.api_max_connections,
                              args.api_header_timeout), api_token=token,
            api_token_file=str(Path(args.api_token_file).resolve()) if args.api_token_file else None)
    return 0
