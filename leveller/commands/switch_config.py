"""Print the switch configuration for K strict-priority levels: DSCP -> traffic class -> queue
maps and a strict-priority scheduler, from the same level -> DSCP map the SDN app and the
agents use (leveller.core.qos: levels 0..K-1 carry DSCP 0, 8, 16, 24, 32, 40, 10, 18; queue L
= level L, K-1 the highest). DSCP values no level uses, unmarked traffic included, go to
traffic class / queue 0, the lowest.

  sonic  config_db tables DSCP_TO_TC_MAP, TC_TO_QUEUE_MAP, SCHEDULER, QUEUE, PORT_QOS_MAP
         (JSON, all 64 DSCP values listed once); load with `config load FILE`
  eos    `qos map dscp ... to traffic-class ...`, `qos map traffic-class ... to tx-queue ...`,
         a `qos profile` with `qos trust dscp` and strict-priority tx-queues, applied per port
         with `service-profile` (at most 7 levels)
  ovs    a shell script: ovs-vsctl linux-htb QoS/Queue rows per port, then the DSCP -> queue
         mapping: OpenFlow set_queue flows (--queue-mode set_queue, kernel datapath) or tc u32
         classifiers (--queue-mode tc, userspace datapath) -- what the emulated testbed runs

Without --ports the per-port part is rendered for one example port (Ethernet0, Ethernet1, eth0).

--floor F guarantees every queue below the top F of the port (default 0: the paper's pure strict
priority), so a demoted TCP flow keeps its ACK clock instead of waiting for a retransmission
timeout: sonic a second STRICT scheduler with cir = F x --rate-mbps (bytes/s) on the lower queues,
eos `bandwidth guaranteed percent` on the lower tx-queues, ovs min-rate = F x --rate-mbps on the
lower queues and the rest on the top one (what the emulated testbed builds, by default F = 0.05).

examples:
  leveller switch-config --vendor sonic --levels 4 --ports Ethernet0,Ethernet4 > leveller-qos.json
  leveller switch-config --vendor eos --levels 2 --ports Ethernet1,Ethernet2/1
  leveller switch-config --vendor ovs --levels 4 --ports eth1,eth2 --rate-mbps 10000 | sudo sh
  leveller switch-config --vendor ovs --levels 4 --ports s1-p1 --rate-mbps 50 --queue-mode tc --json
  leveller switch-config --vendor sonic --levels 4 --ports Ethernet0 --floor 0.05 --rate-mbps 100000
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys

from leveller.errors import UserError

VENDORS = ("sonic", "eos", "ovs")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--vendor", required=True, choices=VENDORS, help="switch operating system")
    parser.add_argument("--levels", type=int, required=True, metavar="K",
                        help="priority levels, as `leveller controller --levels` (1..8; eos 1..7)")
    parser.add_argument("--ports", metavar="P,...", help="egress ports to configure, comma-separated "
                        "(sonic: Ethernet0,Ethernet4; eos: Ethernet1,Ethernet2/1; ovs: interface names)")
    parser.add_argument("--rate-mbps", type=float, metavar="R",
                        help="ovs: port rate, the queues' ceiling (default: left to OVS, the link rate); "
                        "sonic with --floor: the port speed")
    parser.add_argument("--floor", type=float, default=0.0, metavar="F",
                        help="share of the port guaranteed to every queue below the top, 0 <= F with "
                        "(K-1) x F < 1 (default 0: pure strict priority; sonic and ovs need --rate-mbps)")
    parser.add_argument("--queue-mode", choices=("set_queue", "tc"),
                        help="ovs: DSCP -> queue by OpenFlow set_queue flows (default) or tc classifiers "
                        "(OVS userspace datapath, which ignores set_queue)")
    parser.add_argument("--bridge", metavar="NAME", help="ovs --queue-mode set_queue: bridge of the flows "
                        "(default br0)")
    parser.add_argument("--json", action="store_true",
                        help="sonic: the tables (always JSON); eos/ovs: {vendor, levels, ports, level_map, "
                        "text[, commands]}")
    parser.set_defaults(func=run)


def parse_ports(value: str | None, vendor: str) -> tuple[str, ...]:
    """Validated, distinct port names from --ports (the vendor's example port when absent)."""
    from leveller.switchconfig import eos, ovs, sonic

    module = {"sonic": sonic, "eos": eos, "ovs": ovs}[vendor]
    if value is None:
        print(f"leveller switch-config: no --ports: rendering for {module.DEFAULT_PORTS[0]} only; "
              "name your egress ports with --ports", file=sys.stderr)
        return module.DEFAULT_PORTS
    names = value.split(",")
    for name in names:
        if not name.strip():
            raise UserError(f"--ports {value!r}: empty port name; comma-separated names without spaces")
        module.check_port(name)
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise UserError(f"--ports {value!r}: {dup[0]!r} given twice")
    return tuple(names)


def _check_ovs_options(args: argparse.Namespace) -> None:
    if args.vendor != "ovs":
        for flag, value in (("--queue-mode", args.queue_mode), ("--bridge", args.bridge)):
            if value is not None:
                raise UserError(f"{flag}: only for --vendor ovs")
        if args.rate_mbps is not None and not (args.vendor == "sonic" and args.floor > 0):
            raise UserError("--rate-mbps: only for --vendor ovs, or --vendor sonic with --floor > 0 (the port "
                            "speed its floor needs)")
    if args.rate_mbps is not None and not 0.1 <= args.rate_mbps <= 4_000_000:
        raise UserError(f"--rate-mbps {args.rate_mbps:g}: the port rate in Mbit/s, 0.1..4000000")
    if args.bridge is not None:
        if (args.queue_mode or "set_queue") != "set_queue":
            raise UserError("--bridge: only with --queue-mode set_queue (tc classifiers are per port)")
        from leveller.agent.names import check_ifname

        check_ifname(args.bridge, "--bridge")


def run(args: argparse.Namespace) -> int:
    from leveller.core.qos import check_floor, default_level_map
    from leveller.model.limits import MAX_LEVELS
    from leveller.switchconfig import eos, ovs, sonic

    if not 1 <= args.levels <= MAX_LEVELS:
        raise UserError(f"--levels {args.levels}: an integer 1..{MAX_LEVELS} (switch priority levels K)")
    if args.vendor == "eos" and args.levels > eos.MAX_LEVELS:
        raise UserError(f"--levels {args.levels}: EOS keeps traffic class 7 / tx-queue 7 for control-plane "
                        f"traffic; at most {eos.MAX_LEVELS} levels with --vendor eos")
    floor = check_floor(args.floor, args.levels, "--floor")
    _check_ovs_options(args)
    ports = parse_ports(args.ports, args.vendor)
    level_map = default_level_map(args.levels)
    if args.vendor == "sonic":
        print(json.dumps(sonic.render(level_map, ports, floor, args.rate_mbps), indent=4))
        return 0
    summary = {"vendor": args.vendor, "levels": args.levels, "ports": list(ports), "level_map": level_map.to_dict()}
    if floor > 0:
        summary["floor"] = floor
    if args.vendor == "eos":
        text = "\n".join(eos.render(level_map, ports, floor)) + "\n"
        extra = {}
    else:
        mode, bridge = args.queue_mode or "set_queue", args.bridge or "br0"
        invocation = shlex.join(["leveller", "switch-config", "--vendor", "ovs", "--levels", str(args.levels),
                                 "--ports", ",".join(ports)]
                                + (["--rate-mbps", f"{args.rate_mbps:g}"] if args.rate_mbps is not None else [])
                                + (["--floor", f"{floor:g}"] if floor > 0 else [])
                                + ["--queue-mode", mode] + (["--bridge", bridge] if mode == "set_queue" else []))
        text = ovs.script(level_map, ports, args.rate_mbps, mode, bridge, invocation, floor)
        extra = {"queue_mode": mode, "commands": [{"argv": list(c.argv), "check": c.check}
                                                  for c in ovs.commands(level_map, ports, args.rate_mbps, mode,
                                                                        bridge, floor)]}
    if args.json:
        print(json.dumps(summary | extra | {"text": text}))
    else:
        sys.stdout.write(text)
    return 0
