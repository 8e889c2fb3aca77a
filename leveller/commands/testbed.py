"""Build, inspect and tear down the emulated cluster: host network namespaces, veth
links with rates, and a private Open vSwitch (its own ovsdb-server / ovs-vswitchd,
userspace datapath when the kernel module is absent) with K strict-priority queues
on every switch egress port.

  leveller testbed up --topology dumbbell            two switches, one 50 Mbit/s bottleneck
  leveller testbed up --topology leafspine           3 leaves x 2 spines
  leveller testbed up --topology my.toml --name lab  a topology file (see examples/topologies/)
  leveller testbed up --no-sdn                       switches only: no forwarding until an
                                                     OpenFlow app connects (`leveller sdn`)
  leveller testbed status --json                     hosts (netns, ip, switch), switches, links,
                                                     whether forwarding is on
  leveller testbed down                              remove everything `up` made (safe twice)

`up` also starts the SDN app (`leveller sdn`) in the background and returns once
every switch is connected and has its flows, so hosts reach each other; `down`
stops it. The switches are fail-secure: without the app they drop every packet,
and `status` says so. `up` on a testbed that is already up with the same topology
restarts any dead OVS daemon or SDN app and reuses it; with a different topology
it refuses.
Run commands on a host with: ip netns exec lvtb-<name>-<host> <command>.
"""

from __future__ import annotations

import argparse
import json

from leveller.errors import UserError

DEFAULT_NAME = "leveller"


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    for action, help_text in (("up", "build the testbed (or repair one that is up)"),
                              ("down", "remove every namespace, link, process and file of the testbed"),
                              ("status", "print hosts, switches, links and daemon liveness")):
        p = sub.add_parser(action, help=help_text, description=help_text)
        p.add_argument("--name", default=DEFAULT_NAME,
                       help=f"testbed name, prefix of its namespaces lvtb-NAME-* (default {DEFAULT_NAME})")
        p.add_argument("--run-dir", default=None, help="state, OVS database, sockets and logs "
                       "(default /run/leveller/NAME)")
        if action == "up":
            p.add_argument("--topology", default="dumbbell",
                           help="preset (dumbbell, leafspine) or TOML file (default dumbbell)")
            p.add_argument("--datapath", choices=("netdev", "system"), default=None,
                           help="OVS datapath (default: system if the openvswitch module is loaded, else netdev)")
            p.add_argument("--floor", type=float, default=None, metavar="F",
                           help="share of each link guaranteed to every queue below the top (default: the "
                           "running testbed's, else 0.05; 0 = the paper's pure strict priority)")
            p.add_argument("--sdn", action=argparse.BooleanOptionalAction, default=True,
                           help="start `leveller sdn` for it in the background (default); --no-sdn leaves "
                           "the switches without forwarding, to attach another OpenFlow app")
            p.add_argument("--api-port", type=int, default=0,
                           help="port of the SDN app's HTTP API on 127.0.0.1 (default: any free port)")
        if action in ("up", "status"):
            p.add_argument("--json", action="store_true", help="machine-readable output")
        p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from leveller.testbed.cluster import Testbed

    console = Console(stderr=True)
    tb = Testbed(args.name, args.run_dir)
    if args.action == "down":
        with console.status("tearing down") as st:
            was_up = tb.down(progress=lambda m: st.update(m))
        console.print(f"testbed {args.name}: {'removed' if was_up else 'was not up'}")
        return 0
    if args.action == "up":
        from leveller.core.qos import DEFAULT_FLOOR
        from leveller.testbed.state import load_state
        from leveller.testbed.topofile import load_topology

        topo = load_topology(args.topology)
        state = load_state(tb.run_dir)
        fresh = state is None
        floor = args.floor if args.floor is not None else (DEFAULT_FLOOR if state is None else state.queue_floor)
        with console.status("building") as st:
            tb = Testbed.up(topo, args.name, args.run_dir, args.datapath, progress=lambda m: st.update(m),
                            floor=floor)
            if args.sdn:
                st.update("starting the SDN app and waiting for its flows")
                try:
                    tb.start_sdn(api_port=args.api_port, wait_forwarding=True)
                except RuntimeError as exc:
                    if fresh:  # nothing half-built stays behind
                        st.update("the SDN app failed: removing the testbed")
                        tb.down()
                    raise UserError(f"{exc}{'; the testbed was removed' if fresh else ''}") from None
    status = tb.status()
    if getattr(args, "json", False):
        print(json.dumps(status, indent=1))
        return 0
    console = Console()
    console.print(f"testbed [bold]{status['name']}[/] ({status['phase']}, datapath {status['datapath_type']}, "
                  f"run dir {status['run_dir']})")
    for name, h in status["hosts"].items():
        console.print(f"  host {name:8} {h['ip']:15} on {h['switch']:8} netns {h['netns']}")
    for link in status["links"]:
        console.print(f"  link {link['a']}-{link['b']} {link['rate_mbps']:g} Mbit/s")
    console.print("  processes: " + ", ".join(f"{k} {'up' if v else 'down'}" for k, v in status["processes"].items()))
    fwd = status["forwarding"]
    if fwd["on"]:
        console.print(f"  forwarding: on ({fwd['reason']})")
    else:
        console.print(f"  [bold red]forwarding: OFF[/] - {fwd['reason']}", highlight=False)
    return 0
