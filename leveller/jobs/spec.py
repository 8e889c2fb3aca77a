"""What a job emulator run is (its RunConfig: a process run configuration, not the model's job, which is
leveller.model.job.JobSpec): validated from user input, with errors that name the field."""

from __future__ import annotations

import ipaddress
import math
import re
from dataclasses import dataclass

from leveller.errors import UserError
from leveller.jobs.logline import check_job_name
from leveller.model.limits import NETNS_PATTERN

PATTERNS = ("push", "ring")
# TCP payload per frame on a 1500-byte MTU Ethernet link with TCP timestamps: 1448 of 1514 bytes
TCP_PAYLOAD_SHARE = 1448 / 1514
_RATE = re.compile(r"([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([kmgt]?)(?:bit|bps|b/s)?(?:/s)?", re.I)
_UNITS = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}


@dataclass(frozen=True)
class WorkerPlace:
    """Where one worker runs: the address it listens on and, optionally, its network namespace."""

    address: str
    netns: str | None = None
    agent_sock: str | None = None  # its host agent's registration socket (None: the worker's default)
    cgroup: str | None = None  # cgroup v2 directory the worker starts in (None: the launcher's)


def parse_worker(text: str) -> WorkerPlace:
    """Parse ``ADDR[@NETNS]`` (e.g. ``10.0.0.1@h1`` or ``127.0.0.1``)."""
    addr, _, netns = text.partition("@")
    try:
        ipaddress.ip_address(addr)
    except ValueError:
        raise UserError(f"--worker {text!r}: {addr!r} is not an IP address (expected ADDR[@NETNS], "
                        "e.g. 10.0.0.1@h1 or 127.0.0.1)") from None
    if netns and (not NETNS_PATTERN.fullmatch(netns) or netns in (".", "..")):
        raise UserError(f"--worker {text!r}: namespace {netns!r} is invalid "
                        "(letters, digits, '_', '.', '-'; not . or ..)")
    return WorkerPlace(addr, netns or None)


def parse_compute_change(text: str) -> tuple[float, float]:
    """``SECONDS:C``: from SECONDS after the start, compute C seconds per iteration."""
    at, _, compute = text.partition(":")
    try:
        return float(at), float(compute)
    except ValueError:
        raise UserError(f"--compute-change {text!r}: expected SECONDS:C, e.g. 30:0.5 (from 30 s on, compute "
                        "0.5 s per iteration)") from None


def parse_rate(text: str) -> float:
    """Parse a bit rate such as ``100M``, ``1G``, ``2.5e9`` or ``100Mbit``; returns bits/s."""
    m = _RATE.fullmatch(text.strip())
    value = float(m.group(1)) * _UNITS[m.group(2).lower()] if m else math.nan
    if not (math.isfinite(value) and value > 0):
        raise UserError(f"--rate {text!r} is not a positive bit rate (examples: 100M, 1G, 2.5e9)")
    return value


@dataclass(frozen=True)
class RunConfig:
    """One emulated job's run configuration: W workers (addresses, ports) alternating C seconds of compute
    and M seconds of communication at ``rate_bps``, with the pattern, TCP window, shift file... of the run."""

    name: str
    workers: tuple[WorkerPlace, ...]
    compute_s: float
    comm_s: float
    rate_bps: float
    pattern: str = "push"
    port: int = 47000
    iterations: int | None = None
    duration_s: float | None = None
    pace: bool = False  # kernel-pace senders at rate_bps (no shaped bottleneck needed, e.g. loopback)
    # payload share of the bytes on the wire: with headers counted (TCP_PAYLOAD_SHARE), M seconds of
    # communication put exactly M seconds of frames on a link of rate_bps, as the model assumes
    payload_share: float = 1.0
    window_bytes: int | None = None  # clamp each connection's TCP window (bytes in flight per flow)
    slack_s: float = 0.0  # communication starts this long before the compute ends (overlap)
    shift_file: str | None = None  # CASSINI shift orders the workers follow (leveller.jobs.control)
    # (seconds after the start, new compute seconds): the compute time changes mid-run, e.g. a phase of
    # training with another model shape; what re-profiling is for
    compute_changes: tuple[tuple[float, float], ...] = ()

    def __post_init__(self) -> None:
        check_job_name(self.name)
        if not self.workers:
            raise UserError("--worker: at least one worker is required")
        if self.pattern not in PATTERNS:
            raise UserError(f"--pattern {self.pattern!r}: allowed values are {', '.join(PATTERNS)}")
        for field, value in (("--compute", self.compute_s), ("--comm", self.comm_s)):
            if not (math.isfinite(value) and 0 <= value <= 3600):
                raise UserError(f"{field} {value!r}: must be a number of seconds in [0, 3600]")
        if self.comm_s > 0 and len(self.workers) < 2:
            raise UserError(f"--comm {self.comm_s}: communication needs at least 2 workers, got 1")
        if not 1024 <= self.port <= 65535 - len(self.workers):
            raise UserError(f"--port {self.port}: must leave room for one port per worker in 1024..65535")
        if not (math.isfinite(self.payload_share) and 0 < self.payload_share <= 1):
            raise UserError(f"--payload-share {self.payload_share!r}: must be in (0, 1]")
        if self.window_bytes is not None and not 4096 <= self.window_bytes <= 1 << 30:
            raise UserError(f"--window {self.window_bytes!r}: must be 4096..{1 << 30} bytes")
        if not (math.isfinite(self.slack_s) and 0 <= self.slack_s <= self.compute_s):
            raise UserError(f"--slack {self.slack_s!r}: must be in [0, --compute={self.compute_s!r}] seconds "
                            "(communication can start at most at the start of the compute)")
        last = 0.0
        for at, compute in self.compute_changes:
            if not (math.isfinite(at) and at > last and math.isfinite(compute) and 0 <= compute <= 3600):
                raise UserError(f"--compute-change {at:g}:{compute:g}: expected SECONDS:C with SECONDS > 0, "
                                "increasing from one change to the next, and C in [0, 3600]")
            last = at
        if self.iterations is None and self.duration_s is None:
            raise UserError("give --iterations or --duration (network traffic must be bounded in time)")
        if self.iterations is not None and self.iterations < 1:
            raise UserError(f"--iterations {self.iterations}: must be >= 1")
        if self.duration_s is not None and not (math.isfinite(self.duration_s) and 0 < self.duration_s <= 86400):
            raise UserError(f"--duration {self.duration_s}: must be in (0, 86400] seconds")

    @property
    def bytes_per_iteration(self) -> int:
        """Bytes each sending worker moves per iteration: M seconds at the bottleneck rate
        (times the payload share, when frame headers are to be counted in those M seconds)."""
        return int(round(self.comm_s * self.rate_bps / 8 * self.payload_share))

    @property
    def wait_s(self) -> float:
        """How long one iteration's communication can wait without stalling the next compute:
        it starts ``slack_s`` before the compute ends and takes ``comm_s`` alone."""
        return max(0.0, self.slack_s - self.comm_s)

    @property
    def ideal_s(self) -> float:
        """Iteration time alone: the compute, plus the communication the slack cannot hide."""
        return self.compute_s + max(0.0, self.comm_s - self.slack_s)

    def endpoint(self, rank: int) -> tuple[str, int]:
        """The (address, port) worker ``rank`` listens on: base port + rank, so workers may share a host."""
        return self.workers[rank].address, self.port + rank
