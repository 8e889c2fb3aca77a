"""SONiC config_db tables for K strict-priority levels.

Follows the SONiC Configuration Database Manual (sonic-buildimage,
src/sonic-yang-models/doc/Configuration.md: DSCP_TO_TC_MAP, TC to Queue map,
Scheduler, Port QoS Map, Queue) and the YANG models beside it (sonic-dscp-tc-map,
sonic-tc-queue-map, sonic-scheduler, sonic-queue, sonic-port-qos-map):
- DSCP_TO_TC_MAP|LEVELLER lists all 64 DSCP values exactly once (strings, as config_db
  stores them); values no level uses go to traffic class 0 (level 0, the lowest).
- TC_TO_QUEUE_MAP|LEVELLER: traffic class L -> the level's queue.
- SCHEDULER|LEVELLER_STRICT: {"type": "STRICT"} only. The YANG model also has a
  `priority` leaf, but orchagent's qosorch ignores or rejects it, so it is left out:
  among STRICT queues the higher queue index is served first (SAI strict priority),
  and level K-1 sits on the highest queue.
- QUEUE|<port>|<q>: every queue a level uses gets that scheduler.
- With a floor (`--floor F`, a share of the port speed `--rate-mbps R`), every queue below
  the top gets SCHEDULER|LEVELLER_FLOOR instead: also STRICT (the levels keep their order),
  with `meter_type` bytes and `cir` = F x R in bytes/s, the SAI minimum bandwidth
  (SAI_SCHEDULER_ATTR_MIN_BANDWIDTH_RATE; SONiC QoS scheduler/shaper HLD and the
  sonic-scheduler YANG model): queues under their minimum are served first, then the rest
  by strict priority, so a demoted level keeps F of the port while the top takes the rest.
  Not DWRR weights: a DWRR queue is served only when every STRICT queue is empty, so a
  weight gives no share against a busy top queue, and equal weights would merge the lower
  levels into one. The top queue keeps LEVELLER_STRICT. Floor 0: one scheduler, as above.
- PORT_QOS_MAP|<port>: binds both maps; one entry per port (the YANG key is one
  interface name; the manual's comma-joined keys are an older form).
"""

from __future__ import annotations

import re
from typing import Any

from leveller.core.qos import LevelMap, check_floor, dscp_levels
from leveller.model.errors import UserError
from leveller.switchconfig import check_port_name

MAP_NAME = "LEVELLER"
SCHEDULER_NAME = "LEVELLER_STRICT"
FLOOR_SCHEDULER_NAME = "LEVELLER_FLOOR"
MAX_LEVELS = 8  # traffic classes / queues 0..7 on every SONiC ASIC
DEFAULT_PORTS = ("Ethernet0",)
_PORT = re.compile(r"Ethernet[0-9]{1,4}")


def check_port(name: str) -> str:
    """A SONiC front-panel port name (PORT table key): EthernetN."""
    return check_port_name(name, _PORT, "not a SONiC port name; EthernetN as in the PORT table, "
                           "e.g. Ethernet0,Ethernet4")


def render(level_map: LevelMap, ports: tuple[str, ...], floor: float = 0.0,
           rate_mbps: float | None = None) -> dict[str, Any]:
    """The five tables, ready to merge into config_db.json (keys and values are strings).

    `floor` > 0 guarantees that share of the port speed `rate_mbps` (needed then: `cir` is in
    bytes/s) to every queue below the top; 0 renders pure strict priority."""
    if level_map.levels > MAX_LEVELS:
        raise UserError(f"--levels {level_map.levels}: SONiC has traffic classes 0..7; at most {MAX_LEVELS}")
    floor = check_floor(floor, level_map.levels, "--floor")
    queues = sorted(set(level_map.queue))
    schedulers: dict[str, dict[str, str]] = {SCHEDULER_NAME: {"type": "STRICT"}}
    scheduler_of = dict.fromkeys(queues, SCHEDULER_NAME)
    if floor > 0 and len(queues) > 1:
        if rate_mbps is None:
            raise UserError(f"--floor {floor:g}: SONiC guarantees it as a rate (cir, bytes/s); give the port "
                            "speed with --rate-mbps")
        cir = round(floor * rate_mbps * 1e6 / 8)
        schedulers[FLOOR_SCHEDULER_NAME] = {"type": "STRICT", "meter_type": "bytes", "cir": str(cir)}
        scheduler_of.update(dict.fromkeys(queues[:-1], FLOOR_SCHEDULER_NAME))
    return {
        "DSCP_TO_TC_MAP": {MAP_NAME: {str(d): str(level) for d, level in enumerate(dscp_levels(level_map))}},
        "TC_TO_QUEUE_MAP": {MAP_NAME: {str(level): str(q) for level, q in enumerate(level_map.queue)}},
        "SCHEDULER": schedulers,
        "QUEUE": {f"{p}|{q}": {"scheduler": scheduler_of[q]} for p in ports for q in queues},
        "PORT_QOS_MAP": {p: {"dscp_to_tc_map": MAP_NAME, "tc_to_queue_map": MAP_NAME} for p in ports},
    }
