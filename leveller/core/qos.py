"""Level -> DSCP -> switch queue mapping: one configuration used by hosts and switches.

PURE. Level 0 is the lowest priority and K-1 the highest (as in `leveller levels`).
Level L is carried in DSCP `dscp[L]` and served by switch queue `queue[L]`.

Defaults for K levels (K <= 8): DSCP = the first K of
    0 (CS0), 8 (CS1), 16 (CS2), 24 (CS3), 32 (CS4), 40 (CS5), 10 (AF11), 18 (AF21)
and queue L for level L. EF (46), CS6 (48) and CS7 (56), which deployments keep
for voice and network control, are never used by default (an explicit mapping
may use them). Unmarked traffic (DSCP 0) therefore lands at level 0.

Queues are strict priority: OVS queue q is HTB class 1:(q+1) with kernel HTB
priority K-q (the control queue below has 0, served first) and the link rate as ceiling, so a higher queue
takes all the bandwidth it can use. A floor (a fraction of the link rate, default
DEFAULT_FLOOR) is guaranteed to every queue below the top: strict priority alone
starves a demoted TCP flow, which then loses its ACK clock and waits for a
retransmission timeout; with its floor it keeps sending. Queue q < K-1 gets
floor x link as its HTB rate, the top queue the rest, 1 - (K-1) x floor of the
link; HTB serves every class up to its rate first, then lends what is left by
priority. Floor 0 is the paper's pure strict priority (every queue a token
guaranteed rate, a thousandth of the link, at least OVS's minimum). Each queue may
send a burst of HTB_BURST_S of the link rate: HTB keeps at most a burst of
tokens, so a dequeue that comes late (a busy or virtualised CPU's timer) loses
the link time beyond it for good; with one MTU (OVS's default) a loaded machine
delivers visibly less than the link rate.

Above the K level queues every port has one control queue, OVS queue K (HTB
priority 0, served before every level), that carries TCP's small packets: pure
ACKs, SYN and FIN, any TCP packet of less than CONTROL_MAX_BYTES (the IPv4 total
or the IPv6 payload length). A level's queue holds up to a FIFO's length of data
packets; an ACK of the other direction that waits behind them (a queue of 100
packets is 48 ms at 25 Mbit/s) reaches its sender in bunches, and a link that
carries data both ways loses a fifth of its rate to the stalls (ACK compression;
docs/switching.md measures it). The control queue is guaranteed CONTROL_SHARE of
the link (ACKs are about 2-4 % of the data they acknowledge), taken from the
top queue's share, and borrows the rest like every queue. Switches that classify
by OpenFlow set_queue (which cannot match a packet's length) leave it empty.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from leveller.model.errors import UserError
from leveller.model.limits import MAX_LEVELS

DEFAULT_DSCP = (0, 8, 16, 24, 32, 40, 10, 18)
DEFAULT_FLOOR = 0.05  # share of the link guaranteed to every queue below the top (0: pure strict priority)
OVS_MIN_RATE_BPS = 12_000  # OVS linux-htb raises any min-rate below 1500 bytes/s to it
HTB_BURST_S = 0.01  # a queue's burst, in seconds of its ceiling rate
RESERVED_DSCP = (46, 48, 56)
CONTROL_SHARE = 0.05  # share of the link guaranteed to the control queue (TCP's ACKs), from the top's
CONTROL_MAX_BYTES = 128  # TCP packets shorter than this (IPv4 total, IPv6 payload length) go to the control queue


@dataclass(frozen=True)
class LevelMap:
    dscp: tuple[int, ...]
    queue: tuple[int, ...]

    @property
    def levels(self) -> int:
        return len(self.dscp)

    def dscp_for_level(self, level: int) -> int:
        if not 0 <= level < self.levels:
            raise UserError(f"level = {level!r} is invalid; 0..{self.levels - 1}")
        return self.dscp[level]

    def queue_for_dscp(self, dscp: int) -> int:
        """Queue of a DSCP value; unknown values go to the lowest level's queue."""
        for d, q in zip(self.dscp, self.queue):
            if d == dscp:
                return q
        return self.queue[0]

    def to_dict(self) -> dict[str, Any]:
        return {"levels": self.levels, "dscp": list(self.dscp), "queue": list(self.queue)}


def default_level_map(levels: int = 4) -> LevelMap:
    if isinstance(levels, bool) or not isinstance(levels, int) or not 1 <= levels <= MAX_LEVELS:
        raise UserError(f"levels = {levels!r} is invalid; an integer 1..{MAX_LEVELS}")
    return LevelMap(DEFAULT_DSCP[:levels], tuple(range(levels)))


def level_map_from_dict(data: Mapping[str, Any]) -> LevelMap:
    """Validate `{"dscp": [...], "queue": [...]}` (queue optional: identity)."""
    dscp = data.get("dscp")
    if not isinstance(dscp, Sequence) or isinstance(dscp, str) or not 1 <= len(dscp) <= MAX_LEVELS:
        raise UserError(f"qos: dscp = {dscp!r} is invalid; a list of 1..{MAX_LEVELS} values, index = level")
    for v in dscp:
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 63:
            raise UserError(f"qos: dscp value {v!r} is invalid; integers 0..63")
    if len(set(dscp)) != len(dscp):
        raise UserError(f"qos: dscp = {list(dscp)!r} is invalid; values must be distinct")
    queue = data.get("queue", list(range(len(dscp))))
    if not isinstance(queue, Sequence) or len(queue) != len(dscp):
        raise UserError(f"qos: queue = {queue!r} is invalid; one queue per level ({len(dscp)})")
    for v in queue:
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < len(dscp):
            raise UserError(f"qos: queue value {v!r} is invalid; integers 0..{len(dscp) - 1}")
    if list(queue) != sorted(queue):
        raise UserError(f"qos: queue = {list(queue)!r} is invalid; a higher level may not get a lower queue")
    return LevelMap(tuple(dscp), tuple(queue))


@dataclass(frozen=True)
class QueueConfig:
    queue: int
    htb_priority: int
    min_rate_bps: int
    max_rate_bps: int | None  # None: the port's own rate (OVS: link rate of a physical port)
    burst_bits: int | None = None  # None: the switch's default (OVS: one MTU)


def check_floor(floor: float, levels: int, name: str = "floor") -> float:
    """`floor` as a float if it is a valid floor for `levels` queues: 0 <= floor and the K-1 lower
    queues' floors together under the link, (K-1) x floor < 1; else UserError naming `name`."""
    bad = isinstance(floor, bool) or not isinstance(floor, (int, float)) or not math.isfinite(floor)
    if bad or not 0 <= floor < 1 or (levels - 1) * floor >= 1:
        limit = f"(levels - 1) x floor < 1, here floor < {1 / (levels - 1):.4g} for {levels} levels" \
            if levels > 1 else "floor < 1"
        raise UserError(f"{name} = {floor!r} is invalid; the share of the link rate guaranteed to every queue "
                        f"below the top: a number >= 0 (0 = pure strict priority) with {limit}")
    return float(floor)


def control_queue(levels: int) -> int:
    """The OVS queue of TCP's control packets on a port with `levels` level queues: the one after them."""
    return levels


def queue_configs(levels: int, rate_mbps: float | None, floor: float = DEFAULT_FLOOR) -> list[QueueConfig]:
    """HTB queues for one egress port of `rate_mbps` (None: unknown, no ceiling given): the `levels`
    level queues, top served first, then the control queue (`control_queue`), served before them.

    Every queue below the top gets `floor` x the link rate as its guaranteed (HTB) rate, the control
    queue CONTROL_SHARE of it (at most half of what the floors leave) and the top queue the rest, so a
    demoted flow keeps a share while the top takes everything else; every ceiling is the link rate.
    Floor 0 (pure strict priority) and a single queue keep a token rate of a thousandth of the link
    for the levels. A floor needs the rate (OVS takes absolute rates)."""
    floor = check_floor(floor, levels)
    max_bps = None if rate_mbps is None else int(rate_mbps * 1e6)
    burst = None if max_bps is None else int(max_bps * HTB_BURST_S)
    token = max(OVS_MIN_RATE_BPS, (max_bps or 0) // 1000)
    if floor == 0 or levels == 1:
        min_bps = [token] * levels
        control = token if max_bps is None else max(token, round(CONTROL_SHARE * max_bps))
    elif max_bps is None:
        raise UserError(f"floor = {floor!r} needs the port rate: a floor is a share of the link rate and "
                        "OVS takes absolute rates; give the rate or floor = 0")
    else:
        lower = max(OVS_MIN_RATE_BPS, round(floor * max_bps))
        rest = max_bps - (levels - 1) * lower
        control = max(OVS_MIN_RATE_BPS, min(round(CONTROL_SHARE * max_bps), rest // 2))
        min_bps = [lower] * (levels - 1) + [max(OVS_MIN_RATE_BPS, rest - control)]
    return [QueueConfig(q, levels - q, min_bps[q], max_bps, burst) for q in range(levels)] + \
        [QueueConfig(control_queue(levels), 0, control, max_bps, burst)]


def dscp_levels(level_map: LevelMap) -> tuple[int, ...]:
    """Level of every DSCP value 0..63: a level's own DSCP gives that level, every other value
    (unmarked traffic included) the lowest level 0, as `LevelMap.queue_for_dscp` does."""
    level_of = {d: level for level, d in enumerate(level_map.dscp)}
    return tuple(level_of.get(d, 0) for d in range(64))


def htb_classid(queue: int) -> str:
    """OVS linux-htb queue q is kernel HTB class 1:(q+1) (hex minor)."""
    return f"1:{queue + 1:x}"


HTB_ROOT_MINOR = 0xFFFE  # OVS linux-htb's root class, 1:fffe: the port's rate, which every queue borrows from


def htb_root_burst(dev: str, rate: str, burst_bytes: int, mpu: int = 60) -> list[str]:
    """The `tc` argv giving the HTB root class 1:fffe of `dev` (OVS linux-htb's; its rate and ceiling
    `rate`, in tc's syntax) a burst of `burst_bytes`: OVS sets one MTU there and has no setting for it."""
    return ["tc", "class", "change", "dev", dev, "parent", "1:", "classid", f"1:{HTB_ROOT_MINOR:x}", "htb",
            "rate", rate, "ceil", rate, "burst", str(burst_bytes), "cburst", str(burst_bytes), "mpu", str(mpu)]


def tc_dscp_filters(dev: str, level_map: LevelMap) -> list[list[str]]:
    """`tc` argv lists that classify IPv4 and IPv6 packets on `dev` into the HTB class of their
    queue (for datapaths that ignore OpenFlow set_queue). The first argv removes every filter under
    the HTB root (a flush: no protocol or prio given). Then TCP packets shorter than
    CONTROL_MAX_BYTES go to the control queue (prio 1 IPv4, 2 IPv6: ACKs must not wait behind a
    level's data), every other packet by its DSCP to its level's queue: IPv4 filters take prio
    3..K+2 (level order), IPv6 ones (the traffic class byte) prio K+3..2K+2. DSCP values not listed
    fall into HTB's default class, OVS queue 0."""
    control = htb_classid(control_queue(level_map.levels))
    length_mask = f"0x{0xFFFF & ~(CONTROL_MAX_BYTES - 1):04x}"  # "shorter than", CONTROL_MAX_BYTES a power of 2
    cmds = [["tc", "filter", "del", "dev", dev, "parent", "1:"],
            ["tc", "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32",
             "match", "ip", "protocol", "6", "0xff", "match", "u16", "0x0000", length_mask, "at", "2",
             "flowid", control],
            ["tc", "filter", "add", "dev", dev, "parent", "1:", "protocol", "ipv6", "prio", "2", "u32",
             "match", "ip6", "protocol", "6", "0xff", "match", "u16", "0x0000", length_mask, "at", "4",
             "flowid", control]]
    k = level_map.levels
    for version, (proto, field), base in ((4, ("ip", "dsfield"), 2), (6, ("ip6", "priority"), k + 2)):
        for i, (d, q) in enumerate(zip(level_map.dscp, level_map.queue)):
            ethertype = "ip" if version == 4 else "ipv6"
            cmds.append(["tc", "filter", "add", "dev", dev, "parent", "1:", "protocol", ethertype,
                         "prio", str(base + i + 1), "u32", "match", proto, field, f"0x{d << 2:02x}", "0xfc",
                         "flowid", htb_classid(q)])
    return cmds


def tc_host_queues(dev: str, level_map: LevelMap, rate_mbps: float, floor: float = DEFAULT_FLOOR,
                   fifo_packets: int = 100) -> list[list[str]]:
    """`tc` argv lists that give a host's `dev` the egress of a NIC with strict-priority queues: an HTB
    root class 1:fffe at `rate_mbps`, under it the queues of a switch port (`queue_configs`: one per
    level, the control queue served first, the same rates, priorities and bursts), each a FIFO of
    `fifo_packets`, and the filters of `tc_dscp_filters` (without its flush). Several jobs' ranks on
    one host then meet at its link as they meet at a switch port, the higher level served first;
    unclassified packets go to the lowest level's queue. The host's own marks (the agent's DSCP
    rewrite on the clsact egress hook) are set before this qdisc classifies them."""
    if not rate_mbps > 0:
        raise UserError(f"rate_mbps = {rate_mbps!r} is invalid; the host link's rate in Mbit/s, > 0")
    if not fifo_packets >= 1:
        raise UserError(f"fifo_packets = {fifo_packets!r} is invalid; a queue length in packets, >= 1")
    queues = queue_configs(level_map.levels, rate_mbps, floor)
    rate = f"{queues[0].max_rate_bps}bit"
    burst = str(max(1514, (queues[0].burst_bits or 0) // 8))
    root = f"1:{HTB_ROOT_MINOR:x}"
    cmds = [["tc", "qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb",
             "default", htb_classid(level_map.queue[0]).split(":")[1]],
            ["tc", "class", "add", "dev", dev, "parent", "1:", "classid", root, "htb", "rate", rate, "ceil", rate,
             "burst", burst, "cburst", burst]]
    for q in queues:
        cls = htb_classid(q.queue)
        cmds.append(["tc", "class", "add", "dev", dev, "parent", root, "classid", cls, "htb",
                     "rate", f"{q.min_rate_bps}bit", "ceil", rate, "prio", str(q.htb_priority),
                     "burst", burst, "cburst", burst])
        cmds.append(["tc", "qdisc", "add", "dev", dev, "parent", cls, "pfifo", "limit", str(fifo_packets)])
    return cmds + tc_dscp_filters(dev, level_map)[1:]
