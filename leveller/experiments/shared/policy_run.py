"""One policy run on the live cluster: controller + one agent per host + the jobs, then R.

Everything is a real process: `leveller controller` (policy, tau, paths from the
SDN app), `leveller agent` per host of a job (eBPF datapath on the host's eth0
inside its namespace, iteration logs, flow attribution by port, CASSINI shift
files, the overlap rule with ``LiveSettings.overlap``), and the job emulator's
workers in the host namespaces. Jobs are :class:`~leveller.experiments.demo.scenario.LiveJob`:
any hosts of the cluster's topology, push or ring. Processes are stopped on exit, error or Ctrl-C;
each pid is recorded so a crashed demo's processes are stopped at the next start.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from leveller.experiments.shared.cluster import DemoCluster, record_pid
from leveller.experiments.shared.jobs import LiveJob
from leveller.experiments.shared.measure import JobLog, ideal_from_alone, measured_rate, parse_logs
from leveller.experiments.shared.star import LEVELS
from leveller.procs import stop_pid

if TYPE_CHECKING:
    from leveller.jobs.spec import RunConfig

Tick = Callable[[float], None]  # fraction of the run done
# Bytes in flight per flow: two flows sharing a level stay below the switch's 100-packet queue, so
# strict priority delays a starved flow without losses and RTOs (the paper's classes are lossless).
WINDOW_BYTES = 64 * 1024


def _noop(_: float) -> None:
    return None


@dataclass(frozen=True)
class LiveSettings:
    unit_s: float = 0.25  # seconds per model time unit
    seconds: float = 60.0  # length of one policy run
    tau_s: float = 0.1  # controller decision period
    interval_s: float = 0.1  # agent report period (and at once when an iteration ends)
    poll_s: float = 0.01  # agents read the job logs this often
    lease_s: float = 2.0
    stale_after_s: float = 1.0
    alone_s: float = 10.0  # profiling run per job shape
    levels: int = LEVELS  # switch priority levels the controller uses (the testbed's queues)
    overlap: bool = False  # agents apply the overlap rule (jobs with slack announce their windows)
    controller_args: tuple[str, ...] = ()  # more `leveller controller` flags (e.g. the switching rule)
    agent_args: tuple[str, ...] = ()  # more `leveller agent` flags (e.g. phase-aligned demotion)


@dataclass
class RunOutput:
    """What one run produced: the job logs, the controller's decisions, the measurement window."""

    logs: dict[str, JobLog]
    decisions: list[dict[str, Any]]
    t_start: float
    t_end: float
    rates: dict[str, float] = field(default_factory=dict)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "leveller.cli", *args]


def stderr_path(out: Path) -> Path:
    """Where a process whose stdout is ``out`` writes its stderr (``agent-h1.jsonl`` -> ``agent-h1.stderr``)."""
    return out.with_suffix(".stderr")


@contextlib.contextmanager
def _process(argv: list[str], out: Path, work_dir: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``argv`` with stdout in ``out`` and stderr beside it (gRPC's own log lines stay out of the
    JSON lines: the agent's once broke a reader); on exit SIGINT (clean shutdown), then kill."""
    with open(out, "wb") as fh, open(stderr_path(out), "wb") as err:
        proc = subprocess.Popen(argv, stdout=fh, stderr=err, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    record_pid(work_dir, proc.pid)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                stop_pid(proc.pid, str(work_dir))
                proc.wait()


def _wait_for(what: str, ready: Callable[[], bool], procs: Sequence[subprocess.Popen[bytes]],
              outputs: Sequence[Path], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        for p, out in zip(procs, outputs):
            if p.poll() is not None:
                err = stderr_path(out)
                tail = (out.read_text() + (err.read_text() if err.exists() else ""))[-800:]
                raise RuntimeError(f"{what}: a process exited ({p.returncode}): {tail}")
        time.sleep(0.1)
    raise RuntimeError(f"{what}: not ready after {timeout:.0f} s")


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def run_config(cluster: DemoCluster, job: LiveJob, seconds: float, shift_file: Path | None = None,
               compute_changes: tuple[tuple[float, float], ...] = ()) -> RunConfig:
    """The job emulator's run configuration of ``job`` on the cluster (its shape converted at the wire)."""
    from leveller.jobs.spec import TCP_PAYLOAD_SHARE, RunConfig, WorkerPlace

    workers = tuple(WorkerPlace(cluster.ip(h), cluster.netns(h)) for h in job.hosts)
    shape = job.shape
    return RunConfig(job.name, workers, float(shape.compute), float(shape.comm), job.rate_mbps * 1e6,
                     pattern=job.pattern, port=job.port, duration_s=seconds, payload_share=TCP_PAYLOAD_SHARE,
                     window_bytes=WINDOW_BYTES, slack_s=float(shape.slack),
                     shift_file=str(shift_file) if shift_file else None,
                     compute_changes=compute_changes)


def _run_jobs(cluster: DemoCluster, jobs: Sequence[LiveJob], log_dir: Path, seconds: float, tick: Tick,
              shift_dir: Path | None = None,
              compute_changes: Mapping[str, tuple[tuple[float, float], ...]] | None = None
              ) -> tuple[dict[str, JobLog], float, float]:
    """Start every job at once, wait for the end; returns the logs and the common window.
    ``compute_changes``: job -> (seconds after its start, new compute seconds)."""
    from leveller.jobs.control import shift_path
    from leveller.jobs.launcher import JobRun

    paths = {j.name: log_dir / f"{j.name}.log" for j in jobs}
    changes = compute_changes or {}
    with contextlib.ExitStack() as stack:
        runs = [stack.enter_context(JobRun(run_config(cluster, j, seconds,
                                                      shift_path(shift_dir, j.name) if shift_dir else None,
                                                      changes.get(j.name, ())),
                                           log=str(paths[j.name])))
                for j in jobs]
        t_start = min(r.started_at for r in runs)
        t_end = min(r.deadline for r in runs if r.deadline is not None)
        while time.time() < t_end:
            tick(min(1.0, (time.time() - t_start) / seconds))
            time.sleep(0.25)
        for j, r in zip(jobs, runs):
            results = r.wait(grace_s=15)
            failed = [w for w in results if w.returncode not in (0, None) and w.iterations == 0]
            if failed:
                raise RuntimeError(f"job {j.name} failed: worker {failed[0].rank} exit {failed[0].returncode}: "
                                   f"{failed[0].stderr.strip()[-500:]}")
    tick(1.0)
    lines: list[str] = []
    for p in paths.values():
        if p.exists():
            lines += p.read_text().splitlines()
    return parse_logs(lines), t_start, t_end


def profile_alone(cluster: DemoCluster, job: LiveJob, settings: LiveSettings, tick: Tick = _noop,
                  tag: str | None = None) -> float:
    """Ideal iteration time of ``job``: the job runs alone on the testbed (whole links, any
    priority is the top one), median iteration time via leveller.core.profiling."""
    log_dir = cluster.work_dir / (tag or f"alone-{job.name}")
    log_dir.mkdir(parents=True, exist_ok=True)
    logs, _, _ = _run_jobs(cluster, [job], log_dir, settings.alone_s, tick)
    if job.name not in logs:
        raise RuntimeError(f"profiling {job.name} alone: no iteration lines in {log_dir}")
    return ideal_from_alone(logs[job.name])


def run_work(cluster: DemoCluster, tag: str) -> tuple[Path, Path]:
    """The run's work directory (made) and the cluster's shared secret file (made once, mode 0600)."""
    work = cluster.work_dir / tag
    work.mkdir(parents=True, exist_ok=True)
    secret = cluster.work_dir / "secret"
    if not secret.exists():
        secret.write_text(os.urandom(24).hex())
        secret.chmod(0o600)
    return work, secret


def run_policy(cluster: DemoCluster, tag: str, policy: str, jobs: Sequence[LiveJob], ideal: dict[str, float],
               settings: LiveSettings, tick: Tick = _noop,
               background: Callable[[], contextlib.AbstractContextManager[Any]] | None = None,
               controller_args: Sequence[str] = (),
               port: int | None = None, declare_ideal: bool = True,
               compute_changes: Mapping[str, tuple[tuple[float, float], ...]] | None = None) -> RunOutput:
    """One run of ``jobs`` under ``policy`` with the whole system live; R measured from the logs.
    The agents' JSON lines (flow byte counters over time) are in ``<work>/<tag>/agent-<host>.jsonl``, their
    stderr in ``agent-<host>.stderr`` (the controller's: ``controller.jsonl``, ``controller.stderr``).
    ``background()`` is entered just before the jobs start and left after they end (e.g. traffic that
    disturbs them); ``controller_args`` go to `leveller controller` (listening on ``port``, default a
    free one); without ``declare_ideal`` the agents declare no ideal time (the controller profiles the
    jobs); ``compute_changes``: job -> (seconds after its start, new compute seconds)."""
    work, secret = run_work(cluster, tag)
    port = port or free_port()
    bound = str(settings.seconds + 60)  # every process ends by itself even if we vanish
    ctl_argv = _cli("controller", "--listen", f"127.0.0.1:{port}", "--secret-file", str(secret),
                    "--policy", policy, "--levels", str(settings.levels), "--tau", str(settings.tau_s),
                    "--lease", str(settings.lease_s), "--stale-after", str(settings.stale_after_s),
                    "--paths", f"sdn:{cluster.run_dir}", "--on-iteration", "--json", "--duration", bound)
    for j in jobs:
        ctl_argv += ["--job-shape", j.shape_arg]
    ctl_argv += [*settings.controller_args, *controller_args]
    logs = {j.name: work / f"{j.name}.log" for j in jobs}
    with contextlib.ExitStack() as stack:
        ctl_out = work / "controller.jsonl"
        ctl = stack.enter_context(_process(ctl_argv, ctl_out, cluster.work_dir))
        _wait_for("controller", lambda: _port_open(port), [ctl], [ctl_out])
        agents, outs = [], []
        for host in sorted({h for j in jobs for h in j.hosts}):
            mine = [j for j in jobs if host in j.hosts]
            argv = _cli("agent", "--controller", f"127.0.0.1:{port}", "--secret-file", str(secret),
                        "--host", host, "--dev", "eth0", "--netns", cluster.netns(host),
                        "--interval", str(settings.interval_s), "--poll", str(settings.poll_s),
                        "--duration", bound, "--json", "--shift-dir", str(work))
            if settings.overlap:
                argv.append("--overlap")
            argv += settings.agent_args
            for j in mine:
                argv += ["--log", str(logs[j.name]), "--job-ports", j.ports]
                if declare_ideal:
                    argv += ["--ideal-time", f"{j.name}={ideal[j.name]:.6f}"]
            out = work / f"agent-{host}.jsonl"
            agents.append(stack.enter_context(_process(argv, out, cluster.work_dir)))
            outs.append(out)
        _wait_for("agents", lambda: all(o.exists() and o.stat().st_size > 0 for o in outs), agents, outs)
        if background is not None:
            stack.enter_context(background())
        job_logs, t_start, t_end = _run_jobs(cluster, jobs, work, settings.seconds, tick, shift_dir=work,
                                             compute_changes=compute_changes)
    decisions = []
    for line in ctl_out.read_text().splitlines():
        try:
            decisions.append(json.loads(line))
        except ValueError:
            continue
    result = RunOutput(job_logs, decisions, t_start, t_end)
    for j in jobs:
        if j.name not in job_logs:
            raise RuntimeError(f"{tag}: job {j.name} logged no iterations (see {logs[j.name]})")
        result.rates[j.name] = measured_rate(job_logs[j.name], ideal[j.name], t_end)
    return result

