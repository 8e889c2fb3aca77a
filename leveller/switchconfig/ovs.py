"""Open vSwitch configuration for K strict-priority levels: the commands the testbed runs.

The emulated testbed builds its switch queues with `port_qos_args` (leveller.testbed.ovs)
and the SDN app maps DSCP to queues with the tc classifiers of `leveller.core.qos`
(userspace datapath) or the table-0 rules of `sdn.rules.switch_setup` (set_queue), so
what is rendered here is what the testbed does.
- Queues: OVSDB QoS `linux-htb` on each egress port, one Queue per level's queue with
  `other-config:priority` (smaller is served first: ovs-vswitchd.conf.db(5), QoS and
  Queue tables), a small `min-rate` and `max-rate` = the port rate; without a rate the
  ceiling is left to OVS (link rate of a physical port). With a floor F (needs the rate),
  every queue below the top gets `min-rate` = F x the port rate and the top one the rest
  (leveller.core.qos.queue_configs, as the testbed builds them). One more queue, after the
  levels and served before them (HTB priority 0), takes TCP's control packets (ACKs) so they
  never wait behind a level's data; only the tc classifiers fill it.
- DSCP -> queue, `queue_mode` "set_queue": the app's table-0 flows
  (`ip_dscp=D actions=set_queue:Q,goto_table:1`, ovs-fields(7), ovs-actions(7));
  `leveller sdn --queue-mode set_queue` installs exactly these when a switch connects.
- "tc": u32 classifiers on the HTB that OVS creates (queue q = class 1:(q+1)), because the
  OVS userspace datapath ignores set_queue; `leveller sdn --queue-mode tc` keeps them.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from leveller.core.qos import (
    CONTROL_MAX_BYTES,
    LevelMap,
    QueueConfig,
    check_floor,
    control_queue,
    dscp_levels,
    htb_classid,
    htb_root_burst,
    queue_configs,
    tc_dscp_filters,
)
from leveller.model.errors import UserError

QUEUE_MODES = ("set_queue", "tc")
DEFAULT_PORTS = ("eth0",)


@dataclass(frozen=True)
class Command:
    argv: tuple[str, ...]
    check: bool = True  # False: may fail harmlessly (removing what may not be there)


def check_port(name: str) -> str:
    """A Linux interface name (an OVS Port's name), by the kernel's rule."""
    from leveller.agent.names import check_ifname

    return check_ifname(name, "--ports")


def port_qos_args(port: str, queues: Sequence[QueueConfig], ref: str) -> list[str]:
    """ovs-vsctl arguments (appended to a transaction) giving `port` a linux-htb QoS with one
    Queue per entry of `queues`; `ref` names the new rows within the transaction."""
    qos = f"@{ref}"
    args = ["--", "set", "Port", port, f"qos={qos}", "--", f"--id={qos}", "create", "QoS", "type=linux-htb"]
    if queues[0].max_rate_bps is not None:
        args.append(f"other-config:max-rate={queues[0].max_rate_bps}")
    args += [f"queues:{q.queue}={qos}_{q.queue}" for q in queues]
    for q in queues:
        args += ["--", f"--id={qos}_{q.queue}", "create", "Queue", f"other-config:min-rate={q.min_rate_bps}"]
        if q.max_rate_bps is not None:
            args.append(f"other-config:max-rate={q.max_rate_bps}")
        if q.burst_bits is not None:
            args.append(f"other-config:burst={q.burst_bits}")
        args.append(f"other-config:priority={q.htb_priority}")
    return args


def ofctl_flow(table: int, priority: int, cookie: int, match: Sequence[tuple[str, int | str]],
               actions: Sequence[tuple[str, int]], goto: int | None) -> str:
    """One flow in ovs-ofctl syntax (match fields as in ovs-fields(7), e.g. eth_type, ip_dscp)."""
    fields = [f"cookie={cookie:#x}", f"table={table}", f"priority={priority}"]
    fields += [f"{name}={value:#06x}" if name == "eth_type" else f"{name}={value}" for name, value in match]
    acts = [f"{name}:{arg}" for name, arg in actions] + ([f"goto_table:{goto}"] if goto is not None else [])
    return ",".join(fields) + ",actions=" + (",".join(acts) if acts else "drop")


def qos_flows(level_map: LevelMap) -> list[str]:
    """The SDN app's table-0 rules (DSCP -> set_queue, then the path table), in ovs-ofctl syntax."""
    from sdn.rules import TABLE_QOS, AddFlow, switch_setup

    return [ofctl_flow(m.table, m.priority, m.cookie, m.match, m.actions, m.goto)
            for m in switch_setup(0, level_map, set_queue=True) if isinstance(m, AddFlow) and m.table == TABLE_QOS]


def commands(level_map: LevelMap, ports: tuple[str, ...], rate_mbps: float | None, queue_mode: str,
             bridge: str, floor: float = 0.0) -> list[Command]:
    """Every command, in order: queues on each port, then the DSCP -> queue mapping. `floor`: the share
    of `rate_mbps` guaranteed to every queue below the top (0: pure strict priority)."""
    if queue_mode not in QUEUE_MODES:
        raise UserError(f"--queue-mode {queue_mode!r}: one of {', '.join(QUEUE_MODES)}")
    queues = _queues(level_map.levels, rate_mbps, floor)
    out = [Command(("ovs-vsctl", *port_qos_args(p, queues, f"qos{i}"))) for i, p in enumerate(ports)]
    if queue_mode == "set_queue":
        out += [Command(("ovs-ofctl", "-O", "OpenFlow13", "add-flow", bridge, flow)) for flow in qos_flows(level_map)]
    else:
        for p in ports:
            first, *adds = tc_dscp_filters(p, level_map)
            out.append(Command(tuple(first), check=False))
            out += [Command(tuple(a)) for a in adds]
            if queues[0].burst_bits is not None and queues[0].max_rate_bps is not None:
                out.append(Command(tuple(htb_root_burst(p, f"{queues[0].max_rate_bps}bit", queues[0].burst_bits // 8))))
    return out


def _queues(levels: int, rate_mbps: float | None, floor: float) -> list[QueueConfig]:
    """`queue_configs`, its errors naming the command's flags."""
    check_floor(floor, levels, "--floor")
    if floor > 0 and levels > 1 and rate_mbps is None:
        raise UserError(f"--floor {floor:g}: OVS takes the floor as an absolute min-rate; give the port rate "
                        "with --rate-mbps")
    return queue_configs(levels, rate_mbps, floor)


def script(level_map: LevelMap, ports: tuple[str, ...], rate_mbps: float | None, queue_mode: str,
           bridge: str, invocation: str, floor: float = 0.0) -> str:
    """A commented POSIX shell script running `commands(...)` (stops at the first failure)."""
    k = level_map.levels
    queues = _queues(k, rate_mbps, floor)
    floored = floor > 0 and k > 1
    rate = f"{rate_mbps:g} Mbit/s" if rate_mbps is not None else "left to OVS (link rate, else 10 Gbit/s)"
    lines = ["#!/bin/sh", f"# LEVELLER: {k} strict-priority levels on Open vSwitch ports {', '.join(ports)}",
             f"# rendered by: {invocation}",
             "# level -> DSCP -> queue, from leveller.core.qos (the SDN app's map); HTB class and priority:"]
    for level in reversed(range(k)):
        q = level_map.queue[level]
        tag = " (highest)" if level == k - 1 else " (lowest)" if level == 0 else ""
        lines.append(f"#   level {level}{tag}: DSCP {level_map.dscp[level]} -> queue {q} "
                     f"-> HTB class {htb_classid(q)}, priority {queues[q].htb_priority}"
                     + (f", min-rate {queues[q].min_rate_bps} bit/s" if floored else ""))
    ctl = control_queue(k)
    lines.append(f"#   TCP's control packets (ACKs; TCP shorter than {CONTROL_MAX_BYTES} bytes): queue {ctl} -> HTB "
                 f"class {htb_classid(ctl)}, priority {queues[ctl].htb_priority}, min-rate "
                 f"{queues[ctl].min_rate_bps} bit/s"
                 + (" (only the tc classifiers fill it: set_queue cannot match a length)"
                    if queue_mode == "set_queue" else ""))
    unused = sum(1 for d, lv in enumerate(dscp_levels(level_map)) if lv == 0) - 1
    lines += [f"# the {unused} other DSCP values (unmarked traffic included) -> queue {level_map.queue[0]}, the lowest",
              "# run as root on the switch; ovs-vsctl uses the local database (set OVS_RUNDIR or add --db=...)",
              "set -e", "",
              f"# 1. strict-priority queues (OVSDB QoS linux-htb, ovs-vswitchd.conf.db(5)); ceiling: {rate}"]
    if floored:
        lines.append(f"#    floor {floor:g}: every queue below the top is guaranteed {100 * floor:g}% of the link "
                     "(its min-rate, served first), the top queue the rest")
    cmds = commands(level_map, ports, rate_mbps, queue_mode, bridge, floor)
    lines += [shlex.join(c.argv) for c in cmds if c.argv[0] == "ovs-vsctl"]
    lines.append("")
    if queue_mode == "set_queue":
        lines += [f"# 2. DSCP -> queue: OpenFlow set_queue in table 0 of bridge {bridge}, then the SDN app's path "
                  "table 1;", "#    `leveller sdn --queue-mode set_queue` installs these itself when the switch "
                  "connects"]
    else:
        lines += ["# 2. DSCP -> queue: tc u32 classifiers on the HTB OVS created (the userspace datapath ignores",
                  "#    set_queue), and the HTB root's burst widened to the queues' (OVS gives it one MTU: a late",
                  "#    dequeue would lose link time); OVS rebuilds the qdisc when ovs-vswitchd restarts and resets",
                  "#    the root's burst on every reconfiguration: `leveller sdn --queue-mode tc` redoes both every",
                  "#    second, else run this part again"]
    for c in cmds:
        if c.argv[0] != "ovs-vsctl":
            lines.append(shlex.join(c.argv) + ("" if c.check else " 2>/dev/null || true"))
    return "\n".join(lines) + "\n"
