"""Runs of the churn experiment on the live leaf-spine: the same arrivals under every policy.

One cluster (leveller.experiments.shared.cluster.DemoCluster: testbed + SDN app, up once for the
whole experiment). Per policy: `leveller controller` (the policy, paths from the SDN app, the
catalog's shapes of every job of the run, the profiler finds each job's ideal time) and one
`leveller agent` per host with its registration socket (`--socket`) and no job flag at all, both
started before the first job and stopped after the last; then the arrivals: each job starts at its
time, its workers in a cgroup of their own, registering with their hosts' agents by themselves,
and leaves when its iterations are done (or at the end of the run). Everything is recorded: the
jobs' iteration logs, the controller's decisions, the agents' reports (flows, marks).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from leveller.experiments.churn.plan import Arrival, ChurnSettings, PolicyRecord, draw, leafspine, shape_args
from leveller.experiments.shared.cluster import DemoCluster
from leveller.experiments.shared.measure import parse_logs
from leveller.experiments.shared.policy_run import (
    WINDOW_BYTES,
    _cli,
    _port_open,
    _process,
    _wait_for,
    free_port,
    run_work,
)

Note = Callable[[str], None]
Progress = Callable[[str, float], None]  # (policy, fraction of its run done)


def _quiet(*_: object) -> None:
    return None


def _json_lines(path: Path) -> list[dict[str, Any]]:
    out = []
    if path.exists():
        for line in path.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue
    return out


class _Cgroups:
    """One cgroup v2 directory per job under a root made for the run; removed at the end."""

    def __init__(self, tag: str) -> None:
        from leveller.agent.peers import cgroup2_mount

        self.root = Path(cgroup2_mount()) / f"leveller-churn-{tag}-{secrets.token_hex(3)}"
        self.root.mkdir()

    def make(self, job: str) -> Path:
        path = self.root / job
        path.mkdir()
        return path

    @staticmethod
    def remove(path: Path, timeout_s: float = 5.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:  # a process that just exited may linger a moment
                if time.monotonic() > deadline:
                    return
                time.sleep(0.1)

    def close(self) -> None:
        if self.root.exists():
            for child in self.root.iterdir():
                if child.is_dir():
                    self.remove(child)
            self.remove(self.root)


def _run_job(cluster: DemoCluster, a: Arrival, work: Path, sockets: dict[str, Path], cgroups: _Cgroups,
             deadline: float, settings: ChurnSettings, failures: dict[str, str], exits: dict[str, float]) -> None:
    """One job from its arrival to its last iteration (or ``deadline``), its cgroup removed after; ``exits``
    gets the time its last worker process had exited (the job's end for its marks)."""
    from leveller.jobs.launcher import JobRun
    from leveller.jobs.spec import TCP_PAYLOAD_SHARE, RunConfig, WorkerPlace

    cgroup = cgroups.make(a.name)
    try:
        workers = tuple(WorkerPlace(cluster.ip(h), cluster.netns(h), agent_sock=str(sockets[h]), cgroup=str(cgroup))
                        for h in a.hosts)
        spec = RunConfig(a.name, workers, a.compute_s, a.comm_s, settings.link_mbps * 1e6, pattern="ring",
                         port=a.port, iterations=a.iterations, duration_s=max(1.0, deadline - time.time()),
                         payload_share=TCP_PAYLOAD_SHARE, window_bytes=WINDOW_BYTES, slack_s=a.slack_s)
        with JobRun(spec, log=str(work / f"{a.name}.log")) as run:
            results = run.wait(grace_s=15)
        exits[a.name] = time.time()
        failed = [w for w in results if w.returncode not in (0, None) and w.iterations == 0]
        if failed:
            failures[a.name] = f"worker {failed[0].rank} exit {failed[0].returncode}: {failed[0].stderr[-300:]}"
    except Exception as exc:  # one job that cannot start is recorded; the others go on
        failures[a.name] = f"{type(exc).__name__}: {exc}"
    finally:
        _Cgroups.remove(cgroup)


def run_policy(cluster: DemoCluster, policy: str, arrivals: Sequence[Arrival], settings: ChurnSettings,
               progress: Progress = _quiet) -> PolicyRecord:
    """The arrivals under ``policy`` with the controller and agents up from before the first to after the last."""
    work, secret = run_work(cluster, f"churn-{policy}")
    port = free_port()
    bound = str(settings.duration_s + 120)  # every process ends by itself even if we vanish
    ctl_argv = _cli("controller", "--listen", f"127.0.0.1:{port}", "--secret-file", str(secret),
                    "--policy", policy, "--levels", str(settings.levels), "--tau", str(settings.tau_s),
                    "--lease", str(settings.lease_s), "--stale-after", str(settings.stale_after_s),
                    "--paths", f"sdn:{cluster.run_dir}", "--on-iteration", "--json", "--duration", bound,
                    *shape_args(arrivals))
    hosts = sorted(h.name for h in cluster.testbed.topology.hosts)
    sockets = {h: work / "agents" / h / "agent.sock" for h in hosts}
    ctl_out = work / "controller.jsonl"
    outs = {h: work / f"agent-{h}.jsonl" for h in hosts}
    cgroups = _Cgroups(f"{cluster.name}-{policy}")
    record = PolicyRecord(policy, 0.0, 0.0)
    try:
        with contextlib.ExitStack() as stack:
            ctl = stack.enter_context(_process(ctl_argv, ctl_out, cluster.work_dir))
            _wait_for("controller", lambda: _port_open(port), [ctl], [ctl_out])
            agents = []
            for h in hosts:
                sockets[h].parent.mkdir(parents=True, exist_ok=True)
                argv = _cli("agent", "--controller", f"127.0.0.1:{port}", "--secret-file", str(secret),
                            "--host", h, "--dev", "eth0", "--netns", cluster.netns(h), "--socket", str(sockets[h]),
                            "--interval", str(settings.interval_s), "--poll", str(settings.poll_s),
                            "--duration", bound, "--json", "--shift-dir", str(work))
                agents.append(stack.enter_context(_process(argv, outs[h], cluster.work_dir)))
            _wait_for("agents", lambda: all(s.exists() for s in sockets.values()), agents, list(outs.values()),
                      timeout=60)
            record.t_start = time.time()
            deadline = record.t_start + settings.duration_s
            threads = []
            for a in arrivals:
                while time.time() < record.t_start + a.at:
                    progress(policy, (time.time() - record.t_start) / settings.duration_s)
                    time.sleep(min(0.25, max(0.0, record.t_start + a.at - time.time())))
                t = threading.Thread(target=_run_job, args=(cluster, a, work, sockets, cgroups, deadline, settings,
                                                            record.failures, record.exits),
                                     name=f"job-{a.name}", daemon=True)
                t.start()
                threads.append(t)
            while time.time() < deadline:
                progress(policy, (time.time() - record.t_start) / settings.duration_s)
                time.sleep(0.25)
            for t in threads:
                t.join(timeout=30)
            record.t_end = time.time()
            time.sleep(settings.lease_s + 1)  # the agents report the last jobs' ends and marks going
        progress(policy, 1.0)
    finally:
        cgroups.close()
    lines: list[str] = []
    for a in arrivals:
        log = work / f"{a.name}.log"
        if log.exists():
            lines += log.read_text(errors="replace").splitlines()
    record.logs = parse_logs(lines)
    record.decisions = _json_lines(ctl_out)
    record.agent_lines = {h: _json_lines(outs[h]) for h in hosts}
    return record


def run_churn(settings: ChurnSettings, policies: Sequence[str], name: str, note: Note = _quiet,
              progress: Progress = _quiet) -> tuple[list[Arrival], list[PolicyRecord]]:
    """Every policy on the same arrivals, on one cluster (see the module doc)."""
    if os.geteuid() != 0:
        from leveller.errors import UserError

        raise UserError("experiment churn needs root (namespaces, OVS, BPF, cgroups)")
    topo = leafspine(settings.levels, settings.link_mbps)
    arrivals = draw(settings.duration_s, settings.mean_arrival_s, settings.mean_iterations, settings.seed, topo)
    records = []
    with DemoCluster(name, progress=note, topology=topo) as cluster:
        for policy in policies:
            note(f"{policy}: {len(arrivals)} jobs arrive over {settings.duration_s:g} s")
            records.append(run_policy(cluster, policy, arrivals, settings, progress))
    return arrivals, records
