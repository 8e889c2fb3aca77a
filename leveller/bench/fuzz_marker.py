"""Fuzz the loaded marker (bpf/flow_marker.c) with BPF_PROG_TEST_RUN and check every frame.

The real program is compiled and loaded by bcc exactly as the agent does
(leveller.agent.datapath.load_detached, attached nowhere); its DSCP maps get a
realistic flow set through the agent's own Datapath.set_dscp (plus a few raw
invalid marks through Datapath.write_dscp), and frames from leveller.bench.fuzz_packets run through it one
by one. Each result is checked by leveller.bench.fuzz_oracle, which decides
from the frame's bytes alone what the program must do. Frames go in chunks;
most chunks run under a valid lease, every fifth one (the second, seventh, ...)
with the lease ended (deadline 0, or a deadline just passed), when nothing may
change. After each chunk the counter maps are read and compared, flow by flow
and (flow, DSCP the frame left with) by (flow, DSCP), with the frames and
bytes the oracle counted, then emptied.

Needs root (BPF). Nothing is attached to any interface; the program and its
maps go away with the process (and are unloaded on return, also on Ctrl-C).
"""

from __future__ import annotations

import errno
import ipaddress
import random
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from leveller.agent import libbpf
from leveller.agent.flow_structs import DSCP_KEY_FORMAT, DSCP_STATS_FORMAT, KEY_FORMAT, STATS_FORMAT, key_records
from leveller.bench.fuzz_oracle import CHECKS, ETH_HLEN, Flow, check, expect, frame_dscp, kernel_takes
from leveller.bench.fuzz_packets import KINDS, FlowPlan, FrameStream, plan_flows
from leveller.model.flow import FlowKey, flow_key

LEASE_S = 3600.0  # a lease that runs through any chunk
CHUNK = 2048  # frames between two counter checks
STATS_ENTRIES = 8192  # counter map size: far above the flows of one chunk, so the LRU never evicts
LEASE_ENDED_EVERY = 5  # chunk i runs with the lease ended when i % 5 == 1
MAX_EXAMPLES = 10
Progress = Callable[[int, int], None]  # (frames run, violations so far)


@dataclass
class Tally:
    """Per kind: frames the program ran, how many it rewrote / counted, broken invariants,
    frames the kernel refused before the program (too short for a test run)."""

    packets: int = 0
    marked: int = 0
    counted: int = 0
    violations: int = 0
    refused: int = 0

    def to_json(self) -> dict[str, int]:
        return {"packets": self.packets, "marked": self.marked, "counted": self.counted,
                "violations": self.violations, "refused": self.refused}


@dataclass
class FuzzResult:
    packets: int
    seed: int
    elapsed_s: float
    kernel_ns: int
    by_kind: dict[str, Tally]
    by_check: Counter[str]
    by_lease: dict[str, Tally]
    flows: dict[str, int]
    counter_mismatches: int = 0
    examples: list[dict[str, Any]] = field(default_factory=list)
    loader: str = ""  # which loader loaded the program (libbpf, bcc)

    @property
    def violations(self) -> int:
        """Frames that broke an invariant plus flows whose counters came out wrong."""
        return sum(t.violations for t in self.by_kind.values()) + self.counter_mismatches

    def to_json(self) -> dict[str, Any]:
        return {
            "packets": self.packets,
            "violations": self.violations,
            "by_kind": {k: t.to_json() for k, t in self.by_kind.items()},
            "packets_per_s": round(self.packets / self.elapsed_s, 1) if self.elapsed_s > 0 else 0.0,
            "by_check": {c: self.by_check.get(c, 0) for c in CHECKS},
            "by_lease": {k: t.to_json() for k, t in self.by_lease.items()},
            "refused_by_kernel": sum(t.refused for t in self.by_kind.values()),
            "kernel_ns_per_packet": round(self.kernel_ns / self.packets, 1) if self.packets else 0.0,
            "elapsed_s": round(self.elapsed_s, 2),
            "seed": self.seed,
            "flows": self.flows,
            "examples": self.examples,
            "loader": self.loader,
        }


def _flow_key(f: Flow) -> FlowKey:
    return flow_key(ipaddress.ip_address(f[1]), ipaddress.ip_address(f[2]), f[3], f[4], f[5])


def _flow_of_key(raw: bytes) -> Flow:
    src, dst, sport, dport, proto, version = KEY_FORMAT.unpack(raw)
    n = 4 if version == 4 else 16
    return version, src[:n], dst[:n], sport, dport, proto


def _flow_text(f: Flow) -> str:
    return _flow_key(f).label()


def load_marker(plan: FlowPlan, loader: str = "auto") -> Any:
    """The program loaded (not attached) with the plan's DSCP marks: mapped flows through the
    agent's Datapath.set_dscp, invalid marks written raw with Datapath.write_dscp (set_dscp refuses
    them); each flow gets a slot and its mark in the mmap'd mark array, as the agent's flows do."""
    from leveller.agent.datapath import load_detached

    dp = load_detached(max_flows=STATS_ENTRIES, max_marked_flows=len(plan.mapped) + len(plan.inert), loader=loader)
    try:
        dp.set_dscp({_flow_key(f): d for f, d in plan.mapped.items()})
        dp.write_dscp(key_records([_flow_key(f) for f in plan.inert]),
                      np.fromiter(plan.inert.values(), dtype=np.uint8, count=len(plan.inert)))
    except BaseException:
        dp.detach()
        raise
    return dp


def _set_lease(dp: Any, running: bool, chunk: int) -> None:
    if running:
        dp.set_lease(LEASE_S)
    elif chunk // LEASE_ENDED_EVERY % 2:
        dp.set_lease_deadline(time.monotonic_ns() - 1)  # ran out a moment ago
    else:
        dp.set_lease(0)  # no lease at all


def _read_and_clear_stats(dp: Any) -> dict[Flow, tuple[int, int, int]]:
    """flow -> (bytes, packets, last_seen_ns) of every counter entry; the map is empty afterwards."""
    rows = libbpf.map_lookup_all(dp._stats_fd, KEY_FORMAT.size, STATS_FORMAT.size, STATS_ENTRIES)
    if rows:
        libbpf.map_delete_batch(dp._stats_fd, b"".join(k for k, _ in rows), len(rows))
    out = {}
    for k, v in rows:
        nbytes, packets, last_seen, _cgroup = STATS_FORMAT.unpack(v)
        out[_flow_of_key(k)] = (nbytes, packets, last_seen)
    return out


def _read_and_clear_dscp_stats(dp: Any) -> dict[tuple[Flow, int], tuple[int, int]]:
    """(flow, DSCP sent with) -> (bytes, packets) of every per-DSCP counter entry; emptied afterwards."""
    rows = libbpf.map_lookup_all(dp._dscp_stats_fd, DSCP_KEY_FORMAT.size, DSCP_STATS_FORMAT.size,
                                 dp.max_dscp_stats)
    if rows:
        libbpf.map_delete_batch(dp._dscp_stats_fd, b"".join(k for k, _ in rows), len(rows))
    out = {}
    for k, v in rows:
        flow, dscp = DSCP_KEY_FORMAT.unpack(k)
        out[(_flow_of_key(flow), dscp)] = DSCP_STATS_FORMAT.unpack(v)
    return out


class _Fuzz:
    """One fuzz run's state: the loaded program, the oracle's inputs and the tallies."""

    def __init__(self, dp: Any, plan: FlowPlan, seed: int) -> None:
        self.dp, self.fd = dp, dp.program_fd
        self.marks = plan.marks()
        self.stream = FrameStream(plan, seed)
        self.by_kind = {k: Tally() for k in KINDS}
        self.by_lease = {"running": Tally(), "ended": Tally()}
        self.by_check: Counter[str] = Counter()
        self.examples: list[dict[str, Any]] = []
        self.kernel_ns = 0
        self.counter_mismatches = 0

    @property
    def violations(self) -> int:
        return sum(t.violations for t in self.by_kind.values()) + self.counter_mismatches

    def note(self, kind: str, names: list[str], running: bool, **detail: Any) -> None:
        self.by_check.update(names)
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append({"kind": kind, "checks": names, "lease": "running" if running else "ended",
                                  **detail})

    def chunk(self, n: int, running: bool) -> None:
        """Run n frames (the kernel taking them) under the given lease state, then check the counters."""
        lease = self.by_lease["running" if running else "ended"]
        expected: dict[Flow, list[int]] = defaultdict(lambda: [0, 0])
        by_dscp: dict[tuple[Flow, int], list[int]] = defaultdict(lambda: [0, 0])
        kinds_of: dict[Flow, str] = {}
        t_first = time.monotonic_ns()
        ran = 0
        while ran < n:
            kind, frame, segs = self.stream.next()
            tally = self.by_kind[kind]
            takes = kernel_takes(frame)
            ctx = libbpf.skb_context(segs, max(1, (len(frame) - ETH_HLEN) // segs)) if segs else None
            try:
                res = libbpf.prog_test_run(self.fd, frame, ctx=ctx)
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                tally.refused += 1
                if takes:  # the kernel refused a frame the fuzz believes it takes
                    tally.violations += 1
                    self.note(kind, ["test_run_input"], running, frame=frame.hex())
                continue
            ran += 1
            self.kernel_ns += res.duration_ns
            exp = expect(frame, self.marks, running, segs)
            broken = check(frame, res.data, res.retval, exp, running)
            if not takes:
                broken.append("test_run_input")
            marked = res.data != frame
            for t in (tally, lease):
                t.packets += 1
                t.marked += marked
                t.counted += exp.flow is not None
                t.violations += bool(broken)
            if exp.flow is not None:
                for acc in (expected[exp.flow], by_dscp[(exp.flow, frame_dscp(frame) if exp.dscp is None
                                                          else exp.dscp)]):
                    acc[0] += exp.count_bytes
                    acc[1] += exp.count_packets
                kinds_of.setdefault(exp.flow, kind)
            if broken:
                self.note(kind, broken, running, frame=frame.hex(), out=res.data.hex())
        self._check_counters(expected, kinds_of, t_first, time.monotonic_ns(), running)
        self._check_dscp_counters(by_dscp, kinds_of, running)

    def _check_dscp_counters(self, expected: dict[tuple[Flow, int], list[int]], kinds_of: dict[Flow, str],
                             running: bool) -> None:
        got = _read_and_clear_dscp_stats(self.dp)
        for key in set(expected) | set(got):
            want, have = expected.get(key), got.get(key)
            if want is None or have is None or tuple(have) != tuple(want):
                self.counter_mismatches += 1
                self.note(kinds_of.get(key[0], "?"), ["dscp_counters"], running, flow=_flow_text(key[0]),
                          dscp=key[1], expected=None if want is None else {"bytes": want[0], "packets": want[1]},
                          counted=None if have is None else {"bytes": have[0], "packets": have[1]})

    def _check_counters(self, expected: dict[Flow, list[int]], kinds_of: dict[Flow, str], t_first: int,
                        t_last: int, running: bool) -> None:
        got = _read_and_clear_stats(self.dp)
        for flow in set(expected) | set(got):
            want, have = expected.get(flow), got.get(flow)
            if (want is None or have is None or (have[0], have[1]) != (want[0], want[1])
                    or not t_first <= have[2] <= t_last):
                self.counter_mismatches += 1
                self.note(kinds_of.get(flow, "?"), ["counters"], running, flow=_flow_text(flow),
                          expected=None if want is None else {"bytes": want[0], "packets": want[1]},
                          counted=None if have is None else {"bytes": have[0], "packets": have[1],
                                                             "last_seen_ns": have[2]})


def run_fuzz(packets: int, seed: int, progress: Progress | None = None, loader: str = "auto") -> FuzzResult:
    """Run ``packets`` frames (not counting those the kernel refuses up front) through the marker, loaded
    with ``loader`` (leveller.agent.bpfload)."""
    plan = plan_flows(random.Random(seed))
    flows = {"mapped_ipv4": sum(1 for f in plan.mapped if f[0] == 4),
             "mapped_ipv6": sum(1 for f in plan.mapped if f[0] == 6), "invalid_marks": len(plan.inert)}
    chunk_size = max(1, min(CHUNK, packets // 8))
    dp = load_marker(plan, loader)
    used = dp.loader_used
    try:
        fuzz = _Fuzz(dp, plan, seed)
        done, chunk = 0, 0
        t0 = time.perf_counter()
        while done < packets:
            running = chunk % LEASE_ENDED_EVERY != 1
            _set_lease(dp, running, chunk)
            n = min(chunk_size, packets - done)
            fuzz.chunk(n, running)
            done += n
            chunk += 1
            if progress is not None:
                progress(done, fuzz.violations)
        elapsed = time.perf_counter() - t0
    finally:
        dp.detach()
    return FuzzResult(done, seed, elapsed, fuzz.kernel_ns, fuzz.by_kind, fuzz.by_check, fuzz.by_lease, flows,
                      fuzz.counter_mismatches, fuzz.examples, used)
