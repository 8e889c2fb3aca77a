"""Level -> DSCP -> switch queue mapping: one configuration used by hosts and switches.

PURE. Level 0 is the lowest priority and K-1 the highest (as in `leveller levels`).
Level L is carried in DSCP `dscp[L]` and served by switch queue `queue[L]`.

Defaults for K levels (K <= 8): DSCP = the first K of
    0 (CS0), 8 (CS1), 16 (CS2), 24 (CS3), 32 (CS4), 40 (CS5), 10 (AF11), 18 (AF21)
and queue L for level L. EF (46), CS6 (48) and CS7 (56), which deployments keep
for voice and network control, are never used by default (an explicit mapping
may use them). Unmarked traffic (DSCP 0) therefore lands at level 0.

Queues are strict priority: OVS queue q is HTB class 1:(q+1) with kernel HTB
priority K-1-q (0 is served first) and the link rate as ceiling, so a higher queue
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


def queue_configs(levels: int, rate_mbps: float | None, floor: float = DEFAULT_FLOOR) -> list[QueueConfig]:
    """HTB queues for one egress port of `rate_mbps` (None: unknown, no ceiling given), top served first.

    Every queue below the top gets `floor` x the link rate as its guaranteed (HTB) rate and the top
    queue the rest, so a demoted flow keeps a share while the top takes everything else; every
    ceiling is the link rate. Floor 0 (pure strict priority) and a single queue keep a token rate
    of a thousandth of the link. A floor needs the rate (OVS takes absolute rates)."""
    floor = check_floor(floor, levels)
    max_bps = None if rate_mbps is None else int(rate_mbps * 1e6)
    burst = None if max_bps is None else int(max_bps * HTB_BURST_S)
    if floor == 0 or levels == 1:
        min_bps = [max(OVS_MIN_RATE_BPS, (max_bps or 0) // 1000)] * levels
    elif max_bps is None:
        raise UserError(f"floor = {floor!r} needs the port rate: a floor is a share of the link rate and "
                        "OVS takes absolute rates; give the rate or floor = 0")
    else:
        lower = max(OVS_MIN_RATE_BPS, round(floor * max_bps))
        min_bps = [lower] * (levels - 1) + [max(OVS_MIN_RATE_BPS, max_bps - (levels - 1) * lower)]
    return [QueueConfig(q, levels - 1 - q, min_bps[q], max_bps, burst) for q in range(levels)]


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
    """`tc` argv lists that classify IPv4 and IPv6 packets on `dev` into the HTB class
    of their DSCP (for datapaths that ignore OpenFlow set_queue). DSCP values not
    listed fall into HTB's default class, OVS queue 0. The first argv removes every
    filter under the HTB root (a flush: no protocol or prio given), then IPv4 filters
    take prio 1..K (argv 1..K, level order) and IPv6 ones (the traffic class byte)
    prio K+1..2K."""
    cmds = [["tc", "filter", "del", "dev", dev, "parent", "1:"]]
    k = level_map.levels
    for version, (proto, field), base in ((4, ("ip", "dsfield"), 0), (6, ("ip6", "priority"), k)):
        for i, (d, q) in enumerate(zip(level_map.dscp, level_map.queue)):
            ethertype = "ip" if version == 4 else "ipv6"
            cmds.append(["tc", "filter", "add", "dev", dev, "parent", "1:", "protocol", ethertype,
                         "prio", str(base + i + 1), "u32", "match", proto, field, f"0x{d << 2:02x}", "0xfc",
                         "flowid", htb_classid(q)])
    return cmds
