"""The chaos experiment's schedule and verdicts, from what the live run recorded. Pure: times are arguments.

A schedule is ``TARGET@AT+DOWN,...``: kill TARGET (SIGKILL) AT seconds after the
jobs started, start it again DOWN seconds later. Targets: ``ovs`` (ovs-vswitchd),
``sdn`` (the SDN app), ``controller``, ``agent`` (the agent of the first job's
sender) or ``agent:HOST``; and with controllers on etcd (leveller.experiments.chaos.ha):
``leader`` (the elected controller), ``etcd`` (one member of three) and
``partition`` (the leader cut from etcd, not from the agents, for DOWN seconds).

What the run records, all on the wall clock: the controller's decisions (times),
runs of packets on the wire with one DSCP (per sending host), iteration ends per
job, and when each fault struck and ended. From those:

- stale marks: a rewritten DSCP (not 0) on the wire needs a decision of the
  controller at most one lease before (the agents keep levels no longer), and
  none may come from a host whose agent was killed later than one lease after
  the kill, until the agent is back (its BPF program ends the marks itself);
- recovery: after a fault ended, the first moment by which the controller
  decided again, every job finished an iteration, and a marked packet was seen
  (from the agent's host for an agent fault);
- with controllers on etcd (:func:`takeover`): which controller decided before and
  after the fault, how long after it struck another one decided, the longest time
  without any decision and without any marked packet on the wire, and (partition)
  how long the cut leader went on deciding; :func:`epoch_regressions`: an agent that
  held levels of an older leader epoch after a newer one.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from leveller.errors import UserError

HA_TARGETS = ("leader", "etcd", "partition")  # controllers on etcd (leveller.experiments.chaos.ha)
TARGETS = ("ovs", "sdn", "controller", "agent", *HA_TARGETS)
DEFAULT_SCHEDULE = "ovs@12+3,sdn@30+3,controller@48+4,agent@66+4"  # 4 s: twice the lease
MARGIN_S = 0.3  # capture stamps vs decision log lines: queueing on the way, log after the step
_ITEM = re.compile(r"^(?P<target>[a-z]+)(?::(?P<host>[a-z][a-z0-9-]*))?@(?P<at>[0-9.]+)\+(?P<down>[0-9.]+)$")


@dataclass(frozen=True)
class Fault:
    target: str  # ovs, sdn, controller, agent
    at_s: float  # seconds after the jobs started
    down_s: float  # how long it stays dead
    host: str | None = None  # the agent's host

    @property
    def label(self) -> str:
        return f"{self.target}:{self.host}" if self.host else self.target


def parse_schedule(text: str, duration_s: float, hosts: Sequence[str], default_host: str,
                   min_gap_s: float = 5.0) -> list[Fault]:
    """Faults of ``--schedule`` in time order; UserError naming the item and what is allowed.
    Faults may not overlap, each leaves ``min_gap_s`` to recover before the next and the end."""
    faults = []
    for item in (i.strip() for i in text.split(",")):
        m = _ITEM.match(item)
        if m is None or m["target"] not in TARGETS:
            raise UserError(f"--schedule {text!r}: {item!r} is not TARGET@AT+DOWN with TARGET one of "
                            f"{', '.join(TARGETS)} (agent:HOST for another agent), e.g. controller@20+3")
        if m["host"] and m["target"] != "agent":
            raise UserError(f"--schedule: {item!r}: only agent takes a host")
        host = (m["host"] or default_host) if m["target"] == "agent" else None
        if host is not None and host not in hosts:
            raise UserError(f"--schedule: {item!r}: no agent runs on host {host!r}; hosts: {', '.join(hosts)}")
        try:
            at, down = float(m["at"]), float(m["down"])
        except ValueError:
            raise UserError(f"--schedule: {item!r}: AT and DOWN are seconds") from None
        if not 0 < down <= 60:
            raise UserError(f"--schedule: {item!r}: DOWN must be in (0, 60] seconds")
        faults.append(Fault(m["target"], at, down, host))
    faults.sort(key=lambda f: f.at_s)
    if any(f.target in HA_TARGETS for f in faults) and any(f.target == "controller" for f in faults):
        raise UserError(f"--schedule {text!r}: controller does not go with {', '.join(HA_TARGETS)} (controllers "
                        "on etcd: kill the elected one with leader)")
    if faults[0].at_s < min_gap_s:
        raise UserError(f"--schedule: {faults[0].label}@{faults[0].at_s:g}: the first fault must come at least "
                        f"{min_gap_s:g} s after the start (an undisturbed warm-up)")
    for f, nxt in zip(faults, faults[1:] + [None]):
        end = nxt.at_s if nxt is not None else duration_s
        if f.at_s + f.down_s + min_gap_s > end:
            what = f"the next fault ({nxt.label}@{nxt.at_s:g})" if nxt else f"the end of the run ({duration_s:g} s)"
            raise UserError(f"--schedule: {f.label}@{f.at_s:g}+{f.down_s:g} leaves less than {min_gap_s:g} s to "
                            f"recover before {what}")
    return faults


@dataclass(frozen=True)
class Segment:
    """Consecutive packets from one host with one DSCP: [start, end] on the wall clock."""

    host: str
    dscp: int
    start: float
    end: float


@dataclass(frozen=True)
class Struck:
    """A fault as it happened (wall clock)."""

    fault: Fault
    killed: float
    restarted: float


def _uncovered(start: float, end: float, covers: Sequence[tuple[float, float]]) -> float | None:
    """The first time in [start, end] outside every interval of ``covers`` (sorted, merged); None if none."""
    t = start
    for a, b in covers[max(0, bisect.bisect_right(covers, (t, float("inf"))) - 1):]:
        if b < t:
            continue
        if a > t:
            return t
        if b >= end:
            return None
        t = b  # covered up to b; the next interval starts after b (merged)
    return t


def _merge(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def stale_marks(segments: Sequence[Segment], decisions: Sequence[float], struck: Sequence[Struck],
                lease_s: float, margin_s: float = MARGIN_S) -> list[dict[str, object]]:
    """Marked packets that outlived a lease (empty: none). Each: host, DSCP, when, and why it is stale."""
    fresh = _merge((d, d + lease_s + margin_s) for d in decisions)
    out: list[dict[str, object]] = []
    for s in segments:
        if s.dscp == 0:
            continue
        t = _uncovered(s.start, s.end, fresh)
        if t is not None:
            last = max((d for d in decisions if d <= t), default=None)
            out.append({"host": s.host, "dscp": s.dscp, "t": t, "why": "no decision within the lease before" + (
                f" (last one {t - last:.2f} s earlier)" if last is not None else " (none yet)")})
    for k in struck:
        if k.fault.target != "agent":
            continue
        lo, hi = k.killed + lease_s + margin_s, k.restarted
        for s in segments:
            if s.host == k.fault.host and s.dscp != 0 and s.start < hi and s.end > lo:
                out.append({"host": s.host, "dscp": s.dscp, "t": max(s.start, lo),
                            "why": f"its agent was killed {max(s.start, lo) - k.killed:.2f} s earlier "
                                   f"(lease {lease_s:g} s)"})
    return sorted(out, key=lambda v: float(v["t"]))  # type: ignore[arg-type]


def recovery(k: Struck, until: float, decisions: Sequence[float], iteration_ends: Mapping[str, Sequence[float]],
             segments: Sequence[Segment]) -> dict[str, float | None]:
    """When the system was back after fault ``k`` (looking up to ``until``, the next fault or the end):
    seconds from the restart to the last of: a decision, an iteration end of every job, a marked
    packet (from the killed agent's host for an agent fault). None where one never came."""
    after = k.restarted

    def first(times: Iterable[float]) -> float | None:
        return min((t for t in times if after <= t <= until), default=None)

    parts = {"decision": first(decisions)}
    for job, ends in sorted(iteration_ends.items()):
        parts[f"iteration {job}"] = first(ends)
    host = k.fault.host if k.fault.target == "agent" else None
    parts["marks"] = first(max(s.start, after) for s in segments
                           if s.dscp != 0 and s.end >= after and (host is None or s.host == host))
    missing = [name for name, t in parts.items() if t is None]
    back = None if missing else max(t for t in parts.values() if t is not None)
    return {"recovered_s": None if back is None else round(back - after, 3),
            "outage_s": None if back is None else round(back - k.killed, 3),
            "missing": ", ".join(missing) or None,  # type: ignore[dict-item]
            **{f"{name}_s": None if t is None else round(t - after, 3) for name, t in parts.items()}}


def _gap(start: float, end: float, times: Sequence[float]) -> float:
    """The longest interval in [start, end] that holds none of ``times`` (sorted)."""
    inside = [t for t in times if start <= t <= end]
    edges = [start, *inside, end]
    return max(b - a for a, b in zip(edges, edges[1:]))


def takeover(k: Struck, until: float, decisions: Mapping[str, Sequence[float]], leader: str | None,
             segments: Sequence[Segment]) -> dict[str, object]:
    """A fault on controllers on etcd: ``decisions`` per controller name (sorted times), ``leader`` the one
    that led when ``k`` struck. From the strike to ``until``: who decided last, how long until a decision
    of another controller (None: none), the longest stretch without a decision (from the last one before
    the strike) and without a marked packet on the wire (any host); for a partition, how long after the
    cut the cut leader still decided."""
    every = sorted(t for ts in decisions.values() for t in ts)
    before = max((t for t in every if t <= k.killed), default=k.killed)
    after = {name: [t for t in ts if k.killed < t <= until] for name, ts in decisions.items()}
    others = [t for name, ts in after.items() if name != leader for t in ts]
    last = max(((ts[-1], name) for name, ts in after.items() if ts), default=(None, None))[1]
    marked = _merge((s.start, s.end) for s in segments if s.dscp != 0 and s.end >= k.killed and s.start <= until)
    unmarked, t = 0.0, k.killed
    for a, b in marked:
        unmarked, t = max(unmarked, a - t), max(t, b)
    unmarked = max(unmarked, until - t)
    out: dict[str, object] = {
        "leader_before": leader, "leader_after": last,
        "takeover_s": round(min(others) - k.killed, 3) if others else None,
        "decision_gap_s": round(_gap(before, until, every), 3),
        "unmarked_s": round(unmarked, 3)}
    if k.fault.target == "partition" and leader is not None:
        cut = [t for t in after.get(leader, []) if t <= k.restarted]
        out["cut_leader_decided_s"] = round(cut[-1] - k.killed, 3) if cut else 0.0
    return out


def epoch_regressions(epochs: Mapping[str, Sequence[tuple[float, int]]]) -> list[dict[str, object]]:
    """Per host, (time, leader epoch of the levels in hand) in time order -> every time an agent held
    levels of an older epoch than it had held before (empty: none)."""
    out: list[dict[str, object]] = []
    for host, seq in sorted(epochs.items()):
        newest = 0
        for t, e in seq:
            if e < newest:
                out.append({"host": host, "t": t, "epoch": e, "after": newest})
            newest = max(newest, e)
    return out
