"""Arista EOS configuration for K strict-priority levels.

Syntax follows the EOS Quality of Service chapter (arista.com/um-eos, "Quality of
Service") as rendered by Arista's own AVD (eos_cli_config_gen: `qos map dscp ... to
traffic-class N`, `qos map traffic-class N to tx-queue M`, `qos profile` with
`qos trust dscp` and per `tx-queue` `priority strict`, applied with `service-profile`):
- every DSCP value 0..63 is mapped explicitly, so none is left to the platform's default
  map: values no level uses go to traffic class 0 together with level 0's own DSCP;
- traffic class L -> the level's tx-queue; every used tx-queue is `priority strict`
  (among strict-priority tx-queues the higher number is served first, so level K-1 wins);
- at most 7 levels: traffic class 7 / tx-queue 7 carry the switch's control-plane
  traffic (fixed on Sand platforms);
- with a floor (`--floor F`), every used tx-queue below the top also gets
  `bandwidth guaranteed percent P` (P = 100 x F, a whole percent; AVD's
  `bandwidth_guaranteed_percent`): a queue under its guaranteed bandwidth is served before
  strict priority, so a demoted level keeps P% of the port and the top queue takes the rest.
  Floor 0 renders no guarantee (pure strict priority).
Apply in configuration mode (`configure`, paste) and check with
`show qos maps` and `show qos interfaces EthernetN`.
"""

from __future__ import annotations

import re

from leveller.core.qos import LevelMap, check_floor, dscp_levels
from leveller.model.errors import UserError
from leveller.switchconfig import check_port_name

PROFILE = "LEVELLER"
MAX_LEVELS = 7
DEFAULT_PORTS = ("Ethernet1",)
_PORT = re.compile(r"Ethernet[0-9]{1,3}(/[0-9]{1,3}){0,2}|Port-Channel[0-9]{1,6}")


def check_port(name: str) -> str:
    """An EOS interface that takes a service-profile: EthernetN[/M[/P]] or Port-ChannelN."""
    return check_port_name(name, _PORT, "not an EOS interface name; EthernetN, EthernetN/M[/P] or "
                           "Port-ChannelN, e.g. Ethernet1,Ethernet2/1")


def floor_percent(floor: float) -> int:
    """`floor` as the whole percent `bandwidth guaranteed percent` takes, else UserError naming --floor."""
    percent = round(floor * 100)
    if abs(floor * 100 - percent) > 1e-9:
        raise UserError(f"--floor {floor:g}: EOS guarantees whole percents of the port (bandwidth guaranteed "
                        "percent); give a floor in steps of 0.01, e.g. 0.05")
    return percent


def render(level_map: LevelMap, ports: tuple[str, ...], floor: float = 0.0) -> list[str]:
    """Configuration lines (EOS running-config layout, `!` comments); `floor` > 0 guarantees that
    share of the port to every tx-queue below the top, 0 renders pure strict priority."""
    k = level_map.levels
    if k > MAX_LEVELS:
        raise UserError(f"--levels {k}: EOS keeps traffic class 7 / tx-queue 7 for control-plane traffic; "
                        f"at most {MAX_LEVELS} levels with --vendor eos")
    floor = check_floor(floor, k, "--floor")
    percent = floor_percent(floor)
    levels = dscp_levels(level_map)
    used = sorted(set(level_map.queue))
    flag = f" --floor {floor:g}" if percent else ""
    lines = [f"! LEVELLER: {k} strict-priority levels (leveller switch-config --vendor eos --levels {k}{flag})",
             "! level -> DSCP -> traffic-class -> tx-queue, from leveller.core.qos (the SDN app's map):"]
    for level in reversed(range(k)):
        tag = " (highest)" if level == k - 1 else " (lowest)" if level == 0 else ""
        lines.append(f"!   level {level}{tag}: DSCP {level_map.dscp[level]} -> traffic-class {level} "
                     f"-> tx-queue {level_map.queue[level]}")
    lines.append("! every other DSCP value (unmarked traffic included) -> traffic-class 0, the lowest")
    if percent and len(used) > 1:
        lines.append(f"! floor: every tx-queue below the top is guaranteed {percent}% of the port (served before "
                     "strict priority), the top one takes the rest")
    for level in range(k):
        values = " ".join(str(d) for d in range(64) if levels[d] == level)
        lines.append(f"qos map dscp {values} to traffic-class {level}")
    for level in range(k):
        lines.append(f"qos map traffic-class {level} to tx-queue {level_map.queue[level]}")
    lines += ["!", f"qos profile {PROFILE}", "   qos trust dscp"]
    for q in used:
        lines += ["   !", f"   tx-queue {q}", "      priority strict"]
        if percent and q != used[-1]:
            lines.append(f"      bandwidth guaranteed percent {percent}")
    for port in ports:
        lines += ["!", f"interface {port}", f"   service-profile {PROFILE}"]
    return lines
