"""Chaos: the leveller pair on the live cluster while its parts are killed and restarted on a schedule.

The demo's orchestration runs unchanged (leveller.experiments.shared.cluster + leveller.experiments.shared.policy_run):
one switch with OVS driven by the SDN app, a controller, an agent with its eBPF
marker on every host of a job, and the paper's pair (C:M = 1:1 from h1, 1:2 from
h2, both to h4) under `leveller`. First an undisturbed run (the baseline), then
the same run while a FaultDriver, entered as the run's background, kills parts
with SIGKILL and starts them again: ovs-vswitchd (restarted on its database:
bridges, ports and queues are kept, the SDN app reinstalls the rules), the SDN
app (on its API port), the controller and one agent (with the command line and
output file they had). With a fault on controllers on etcd in the schedule (leader,
etcd, partition) each run has its own three etcd members in a namespace and two
controllers, the run's own and a standby (leveller.experiments.chaos.ha); the agents are
given both. A capture on h4's eth0 records the DSCP of every job
packet (leveller.experiments.chaos.wire); the controller's decisions and the jobs' iteration
logs come from the run. leveller.experiments.chaos.check turns them into recovery times
and stale-mark violations. Afterwards the cluster is torn down and checked for
leftovers: namespaces, processes naming the run's directories (OVS, SDN app,
controller, agents, job workers), the directories under /run/leveller, and BPF
programs of the agents' marker still loaded.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from leveller.experiments.chaos.check import (
    HA_TARGETS,
    Fault,
    Struck,
    epoch_regressions,
    parse_schedule,
    recovery,
    stale_marks,
    takeover,
)
from leveller.experiments.chaos.ha import HA_TTL_S, HaSet, decision_times, ha_controllers
from leveller.experiments.demo.scenario import plan
from leveller.experiments.shared.cluster import PIDS_FILE, DemoCluster, record_pid
from leveller.experiments.shared.policy_run import LiveSettings, RunOutput, run_policy
from leveller.experiments.shared.procstat import cmdline, leftovers, role_of
from leveller.experiments.shared.star import LEVELS, RECEIVER
from leveller.procs import pid_alive, stop_pid

EXAMPLE, POLICY = "pair", "leveller"
MARK_WAIT_S = 3.0
Note = Callable[[str], None]
Progress = Callable[[float], None]


def _quiet(_: Any) -> None:
    return None


def marker_programs() -> set[int]:
    """Ids of loaded BPF programs of the agents' marker (bpftool), to spot any a run leaves behind."""
    from leveller.agent.datapath import PROGRAM_NAME

    out = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"bpftool prog show failed: {out.stderr.strip()}")
    # bpftool cuts names to the kernel's 15 characters
    return {int(p["id"]) for p in json.loads(out.stdout or "[]") if p.get("name") == PROGRAM_NAME[:15]}


@dataclass
class FaultDriver:
    """Context manager: from entry, kill each fault's target at its time and restart it ``down_s`` later
    (a thread); ``struck`` records when. On exit a target still down is started again and every
    process it started is stopped (SIGTERM, then SIGKILL)."""

    cluster: DemoCluster
    faults: list[Fault]
    note: Note = _quiet
    # host -> its packets carry a mark now: an agent is killed while it marks (up to MARK_WAIT_S late),
    # so that the check that its marks end with the lease has marks to watch
    marked: Callable[[str], bool] | None = None
    marked_at_kill: dict[int, bool] = field(default_factory=dict)  # fault index -> whether it was
    ha: HaSet | None = None  # controllers on etcd (set per run): the leader, etcd and partition faults
    leaders: dict[int, str | None] = field(default_factory=dict)  # fault index -> the controller leading then
    struck: list[Struck] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    t0: float = 0.0
    _started: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _down: tuple[Fault, float, Any] | None = None  # the fault in progress: (fault, killed at, restart)

    def __enter__(self) -> FaultDriver:
        self.t0 = time.time()
        self._thread = threading.Thread(target=self._loop, name="chaos-faults", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        if self._down is not None:  # the run ended while a part was down: bring it back for the teardown
            fault, killed, restart = self._down
            restart()
            self.struck.append(Struck(fault, killed, time.time()))
        for proc in self._started:
            stop_pid(proc.pid, str(self.cluster.work_dir))  # SIGTERM: an agent clears its marks and BPF
            proc.wait()

    def _loop(self) -> None:
        for fault in self.faults:
            if self._stop.wait(max(0.0, self.t0 + fault.at_s - time.time())):
                return
            if fault.target == "agent" and self.marked is not None:
                deadline = time.time() + MARK_WAIT_S
                while not self.marked(str(fault.host)) and time.time() < deadline:
                    if self._stop.wait(0.02):
                        return
                self.marked_at_kill[len(self.struck)] = self.marked(str(fault.host))
            try:
                restart = self._kill(fault)
            except Exception as exc:  # recorded in the report; the run goes on
                self.errors.append(f"{fault.label}: kill failed: {type(exc).__name__}: {exc}")
                continue
            killed = time.time()
            self._down = (fault, killed, restart)
            self.note(f"killed {fault.label}; back in {fault.down_s:g} s")
            if self._stop.wait(fault.down_s):
                return  # __exit__ restarts it
            try:
                restart()
            except Exception as exc:
                self.errors.append(f"{fault.label}: restart failed: {type(exc).__name__}: {exc}")
            self._down = None
            self.struck.append(Struck(fault, killed, time.time()))
            self.note(f"restarted {fault.label}")

    # ---- one target each: kill it now, return how to start it again --------------------------------
    def _kill(self, fault: Fault) -> Callable[[], None]:
        if fault.target in HA_TARGETS:
            return self._kill_ha(fault)
        tb = self.cluster.testbed
        if fault.target == "ovs":
            ovs = tb.ovs
            _sigkill(ovs.pid("ovs-vswitchd"), str(ovs.rundir))
            return ovs.start_vswitchd
        if fault.target == "sdn":
            api = json.loads((tb.run_dir / "sdn.json").read_text())["api"]
            _sigkill(tb.state.sdn_pid, str(tb.run_dir))
            port = int(api.rsplit(":", 1)[1])

            def start_sdn() -> None:
                tb.start_sdn(api_port=port)  # the same API port: the controller's client still finds it
            return start_sdn
        role = "controller" if fault.target == "controller" else f"agent-{fault.host}"
        pid = self._service_pid(role)
        argv = cmdline(pid)
        out = os.readlink(f"/proc/{pid}/fd/1")
        _sigkill(pid, str(self.cluster.work_dir))
        return lambda: self._start(argv, out)

    def _kill_ha(self, fault: Fault) -> Callable[[], None]:
        """leader: SIGKILL the elected controller; etcd: SIGKILL etcd's raft leader member; partition: cut
        the elected controller from etcd. Returns how to undo it."""
        if self.ha is None:
            raise RuntimeError(f"{fault.target}: the run has no controllers on etcd")
        etcd = self.ha.etcd
        found = etcd.leader()
        name = found[0] if found else None
        self.leaders[len(self.struck)] = name
        if fault.target == "etcd":
            member = etcd.raft_leader()
            etcd.kill(member)
            return lambda: etcd.start(member)
        if name is None:
            raise RuntimeError("no controller leads")
        if fault.target == "partition":
            i = int(name[1:])
            etcd.cut(i)
            return lambda: etcd.heal(i)
        pid = self._service_pid("controller", name)
        argv = cmdline(pid)
        out = os.readlink(f"/proc/{pid}/fd/1")
        _sigkill(pid, str(self.cluster.work_dir))
        return lambda: self._start(argv, out)  # it joins as a standby

    def _service_pid(self, role: str, name: str | None = None) -> int:
        """The running process of a service of the run (recorded in the demo's pid file); with ``name``,
        the one started with ``--name NAME``."""
        pids = json.loads((self.cluster.work_dir / PIDS_FILE).read_text())
        for pid in reversed(pids):
            argv = cmdline(pid)
            if role_of(argv) == role and pid_alive(pid, str(self.cluster.work_dir)) and (
                    name is None or (("--name" in argv[:-1]) and argv[argv.index("--name") + 1] == name)):
                return int(pid)
        raise RuntimeError(f"no running {role} process{f' named {name}' if name else ''} of this run")

    def _start(self, argv: list[str], out: str) -> None:
        with open(out, "ab") as fh:
            proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        record_pid(self.cluster.work_dir, proc.pid)
        self._started.append(proc)


def _sigkill(pid: int | None, marker: str) -> None:
    """SIGKILL a process of ours (``marker`` in its command line) and wait until it is gone."""
    if pid is None or not pid_alive(pid, marker):
        raise RuntimeError(f"process {pid} is not running")
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while pid_alive(pid, marker) and time.monotonic() < deadline:
        time.sleep(0.02)
    stop_pid(pid, marker, grace=0.1)  # (no-op once gone)


def _r_summary(rates: dict[str, float]) -> dict[str, Any]:
    return {"rates": {j: round(r, 4) for j, r in rates.items()}, "min": round(min(rates.values()), 4)}


def run_chaos(duration_s: float, schedule: str, name: str = "chaos", baseline: bool = True,
              run_dir: Path | None = None, progress: Progress = _quiet, note: Note = _quiet,
              plot: Path | None = None) -> dict[str, Any]:
    """Baseline run (unless ``baseline`` is False), then the chaos run; returns the report (and draws
    the run into ``plot``, a PNG, if given)."""
    from leveller.experiments.chaos.wire import DscpSegments

    jobs = plan(EXAMPLE)
    hosts = sorted({j.sender for j in jobs} | {RECEIVER})
    faults = parse_schedule(schedule, duration_s, hosts, jobs[0].sender)
    ha_mode = any(f.target in HA_TARGETS for f in faults)
    settings = LiveSettings(seconds=duration_s)
    # R is compared between two runs of the same jobs: ideal times from the model, no profiling run
    ideal = {j.name: j.seconds(settings.unit_s).ideal for j in jobs}
    live = [j.live(settings.unit_s) for j in jobs]
    cluster = DemoCluster(name, run_dir, progress=note)
    markers = [cluster.run_dir, cluster.work_dir, cluster.run_dir.parent / f"{cluster.run_dir.name}.demo-lock"]
    programs_before = marker_programs()
    runs = 2 if baseline else 1
    report: dict[str, Any] = {}

    def run(tag: str, tick: Progress, background: Any = None,
            driver: FaultDriver | None = None) -> tuple[RunOutput, dict[str, list[float]]]:
        """One run; the decision times per controller."""
        if not ha_mode:
            out = run_policy(cluster, tag, POLICY, live, ideal, settings, tick, background=background)
            return out, {"controller": decision_times([json.dumps(d) for d in out.decisions])}
        with ha_controllers(cluster, tag, settings, live) as ha:
            if driver is not None:
                driver.ha = ha
            out = run_policy(cluster, tag, POLICY, live, ideal, ha.settings(settings), tick, background=background,
                             controller_args=ha.controller_args(0), port=ha.ports[0])
            return out, ha.decisions()

    with cluster:
        base = None
        if baseline:
            note("undisturbed run")
            base, _ = run("baseline", lambda f: progress(f / runs))
        ports = (min(j.port for j in jobs), max(j.port for j in jobs) + 1)
        wire = DscpSegments(cluster.netns(RECEIVER), "eth0", cluster.ip(RECEIVER), ports,
                            {cluster.ip(h): h for h in hosts})
        driver = FaultDriver(cluster, faults, note, marked=wire.marked)

        @contextlib.contextmanager
        def disturb() -> Iterator[None]:
            with wire, driver:
                yield

        note("run under faults")
        out, by_ctl = run("chaos", lambda f: progress((runs - 1 + f) / runs), disturb, driver)
        segments = wire.segments()
        epochs = agent_epochs(cluster.work_dir / "chaos", hosts) if ha_mode else {}
        note("tearing down")
    left = leftovers(cluster.name, markers)
    left_programs = sorted(marker_programs() - programs_before)
    decisions = sorted(t for ts in by_ctl.values() for t in ts)
    ends = {j.name: sorted(out.logs[j.name].ends.values()) for j in jobs}
    t0 = out.t_start
    faults_out = []
    for i, k in enumerate(driver.struck):
        until = driver.struck[i + 1].killed if i + 1 < len(driver.struck) else out.t_end
        faults_out.append({"fault": k.fault.label, "at_s": round(k.killed - t0, 2),
                           "down_s": round(k.restarted - k.killed, 2),
                           **({"marking_when_killed": driver.marked_at_kill[i]} if i in driver.marked_at_kill else {}),
                           **recovery(k, until, decisions, ends, segments),
                           **(takeover(k, until, by_ctl, driver.leaders.get(i), segments)
                              if k.fault.target in HA_TARGETS else {})})
    stale = stale_marks(segments, decisions, driver.struck, settings.lease_s)
    chaos = _r_summary(out.rates)
    report = {
        "duration_s": duration_s, "schedule": schedule,
        "baseline": _r_summary(base.rates) if base else None,
        "chaos": chaos,
        "min_r_ratio": round(chaos["min"] / _r_summary(base.rates)["min"], 4) if base else None,
        "faults": faults_out,
        "fault_errors": driver.errors,
        "stale_marks": [{**v, "t": round(float(v["t"]) - t0, 3)} for v in stale],  # type: ignore[arg-type]
        "packets": wire.packets,
        "marked_packets_seen": any(s.dscp != 0 for s in segments),
        "decisions": len(decisions),
        "qp": {"checked": False, "why": "the pair's jobs use TCP: no RDMA queue pair and no shim in this run"},
        "cleanup": {"clean": not any(left.values()) and not left_programs, **left, "bpf_programs": left_programs},
        "settings": {"example": EXAMPLE, "policy": POLICY, "levels": LEVELS, "tau_s": settings.tau_s,
                     "lease_s": settings.lease_s, "unit_s": settings.unit_s},
    }
    if ha_mode:
        first = driver.struck[0].killed if driver.struck else out.t_end
        report["ha"] = {"ttl_s": HA_TTL_S, "controllers": sorted(by_ctl),
                        "decisions": {n: len(ts) for n, ts in by_ctl.items()},
                        # the same measure as each fault's unmarked_s, before the first fault (jobs computing)
                        "unmarked_before_faults_s": takeover(Struck(faults[0], t0 + 5, first), first, by_ctl, None,
                                                             segments)["unmarked_s"],
                        "epoch_regressions": [{**r, "t": round(float(r["t"]) - t0, 3)}  # type: ignore[arg-type]
                                              for r in epoch_regressions(epochs)]}
    report["verdict"] = verdict(report)
    if plot is not None:
        from leveller.experiments.chaos.plot import plot_chaos

        plot_chaos(plot, out, base, ideal, driver.struck, faults_out, segments, decisions)
        report["plot"] = str(plot)
    return report


def agent_epochs(work: Path, hosts: Sequence[str]) -> dict[str, list[tuple[float, int]]]:
    """Per host, (time, leader epoch of the levels in hand) of each of its agent's --json lines."""
    out: dict[str, list[tuple[float, int]]] = {}
    for host in hosts:
        path = work / f"agent-{host}.jsonl"
        if not path.exists():
            continue
        seq = []
        for line in path.read_text(errors="replace").splitlines():
            try:
                d = json.loads(line)
            except ValueError:
                continue
            if isinstance(d, dict) and d.get("ok") and "t" in d:
                seq.append((float(d["t"]), int(d.get("leader_epoch", 0))))
        out[host] = seq
    return out


def verdict(report: dict[str, Any]) -> str:
    """"ok", or what went wrong: faults not recovered, stale marks, driver errors, leftovers."""
    problems = []
    lost = [f["fault"] for f in report["faults"] if f["recovered_s"] is None]
    if lost:
        problems.append(f"not recovered after {', '.join(lost)}")
    if report["stale_marks"]:
        problems.append(f"{len(report['stale_marks'])} stale mark(s)")
    if report["fault_errors"]:
        problems.append(f"{len(report['fault_errors'])} fault(s) not injected")
    if not report["marked_packets_seen"]:
        problems.append("no marked packet seen (the capture or the marker did not work)")
    if not report["cleanup"]["clean"]:
        problems.append("teardown left something")
    ha = report.get("ha") or {}
    if ha.get("epoch_regressions"):
        problems.append(f"{len(ha['epoch_regressions'])} agent step(s) on an older leader epoch")
    late = [f["fault"] for f in report["faults"] if f.get("cut_leader_decided_s", 0) > ha.get("ttl_s", 0)]
    if late:
        problems.append("the cut leader decided longer than its TTL")
    return "ok" if not problems else "; ".join(problems)
