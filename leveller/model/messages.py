"""What agents and the controller tell each other, as immutable values (the wire form: leveller.rpc.schema).

    Report       agent -> controller every tau: its jobs' progress and its flows' byte counters
    LevelsReply  controller -> agent: the level (and DSCP) of each of the host's flows, under a lease
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from leveller.model.flow import FlowKey


@dataclass(frozen=True)
class JobReport:
    job: str
    iterations: int
    start_time: float
    ideal_time: float | None = None
    recent: tuple[tuple[int, float], ...] = ()  # (iteration number, unix end time), oldest first
    weight: float | None = None  # declared operator weight (None: not declared, 1)


class FlowReport(NamedTuple):  # tuples: a controller builds 100,000 of them per second
    key: FlowKey
    job: str
    bytes: int


@dataclass(frozen=True)
class Report:
    host: str
    jobs: tuple[JobReport, ...]
    flows: tuple[FlowReport, ...]
    run: str = ""  # set by the sending client (leveller.rpc.transport), checked by leveller.rpc.replay
    seq: int = 0
    dscp_bytes: tuple[tuple[int, int, int], ...] = ()  # (index into flows, DSCP sent with, bytes)


class FlowLevel(NamedTuple):
    key: FlowKey
    job: str
    level: int


@dataclass(frozen=True)
class JobShift:
    """CASSINI's time shift of one job: start an iteration ``start_in_s`` seconds after the reply
    left (or a whole number of ``period_s`` later), once per ``plan``."""

    job: str
    plan: int
    start_in_s: float
    period_s: float


@dataclass(frozen=True)
class LevelsReply:
    epoch: int
    lease_s: float
    dscp_by_level: tuple[int, ...]
    flows: tuple[FlowLevel, ...]
    decision_age_s: float = 0.0  # seconds since the decision was made (controller clock), at reply time
    shifts: tuple[JobShift, ...] = ()  # policy cassini: one per job of the host with a shift
    mode: str = "enforce"  # "shadow": the levels are what would be applied; the agent marks nothing
    # the deciding controller's election epoch (leveller.controller.leadership; 0: no election, no --etcd):
    # agents apply levels of the newest epoch they have seen only (leveller.agent.fencing)
    leader_epoch: int = 0
