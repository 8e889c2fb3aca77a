"""Start the W worker processes of a job (in their namespaces), follow their output, stop them.

Everything started is stopped on exit, error or Ctrl-C (``JobRun`` is a
context manager). A worker inside a namespace is started as
``ip netns exec NS python -m leveller.jobs.worker ...``; any other wrapper
(``cgexec``, ``sudo -u``) can be given as a command prefix.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from leveller.errors import UserError
from leveller.jobs.spec import RunConfig

LineHandler = Callable[[int, str], None]


def worker_argv(spec: RunConfig, rank: int, deadline: float | None, log: str | None,
                prefix: Sequence[str] = (), python: str = sys.executable, started_at: float = 0.0) -> list[str]:
    """The command line that starts worker ``rank`` (namespace prefix first)."""
    place = spec.workers[rank]
    argv = list(prefix)
    if place.netns:
        argv = ["ip", "netns", "exec", place.netns, *argv]
    if place.cgroup:  # entered before the namespace: `ip netns exec` remounts /sys, and the cgroup tree with it
        argv = ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', place.cgroup, *argv]
    argv += [python, "-m", "leveller.jobs.worker", "--job", spec.name, "--rank", str(rank),
             "--pattern", spec.pattern, "--compute", repr(spec.compute_s),
             "--bytes", str(spec.bytes_per_iteration)]
    for i in range(len(spec.workers)):
        addr, port = spec.endpoint(i)
        argv += ["--endpoint", f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"]
    if spec.iterations is not None:
        argv += ["--iterations", str(spec.iterations)]
    if deadline is not None:
        argv += ["--deadline", f"{deadline:.3f}"]
    if log:
        argv += ["--log", log]
    if place.agent_sock:
        argv += ["--agent-sock", place.agent_sock]
    if spec.pace:
        argv += ["--pace", repr(spec.rate_bps)]
    if spec.window_bytes:
        argv += ["--window", str(spec.window_bytes)]
    if spec.slack_s > 0:
        argv += ["--slack", repr(spec.slack_s), "--wait", repr(spec.wait_s)]
    if spec.shift_file:
        argv += ["--shift-file", spec.shift_file]
    for at, compute in spec.compute_changes:
        argv += ["--compute-change", f"{started_at + at:.3f}:{compute!r}"]
    return argv


@dataclass
class WorkerResult:
    """Outcome of one worker process."""

    rank: int
    returncode: int | None
    iterations: int
    stderr: str = ""
    sent: int | None = None
    received: int | None = None


@dataclass
class JobRun:
    """A running job; use as a context manager so every worker is stopped on exit."""

    spec: RunConfig
    log: str | None = None
    prefix: Sequence[str] = ()
    on_line: LineHandler | None = None
    procs: list[subprocess.Popen[str]] = field(default_factory=list)
    iterations: list[int] = field(default_factory=list)
    started_at: float = 0.0
    deadline: float | None = None
    _threads: list[threading.Thread] = field(default_factory=list)
    _stderr: list[list[str]] = field(default_factory=list)
    _done: dict[int, dict[str, str]] = field(default_factory=dict)

    def __enter__(self) -> JobRun:
        self.started_at = time.time()
        self.deadline = self.started_at + self.spec.duration_s if self.spec.duration_s else None
        n = len(self.spec.workers)
        self.iterations = [0] * n
        self._stderr = [[] for _ in range(n)]
        try:
            for rank in range(n):
                argv = worker_argv(self.spec, rank, self.deadline, self.log, self.prefix,
                                   started_at=self.started_at)
                try:
                    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                except FileNotFoundError as exc:
                    raise UserError(f"cannot start worker {rank}: {exc.filename!r} not found "
                                    f"(command: {shlex.join(argv)})") from None
                self.procs.append(proc)
                for stream, target in ((proc.stdout, self._stdout_reader(rank)),
                                       (proc.stderr, self._stderr[rank].append)):
                    t = threading.Thread(target=self._pump, args=(stream, target), daemon=True)
                    t.start()
                    self._threads.append(t)
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _stdout_reader(self, rank: int) -> Callable[[str], None]:
        def handle(line: str) -> None:
            parts = dict(p.split("=", 1) for p in line.split()[1:] if "=" in p)
            if line.startswith("leveller-iter") and parts.get("iter", "").isdigit():
                self.iterations[rank] = max(self.iterations[rank], int(parts["iter"]))
            elif line.startswith("leveller-done"):
                self._done[rank] = parts
                return
            if self.on_line:
                self.on_line(rank, line)
        return handle

    @staticmethod
    def _pump(stream: object, target: Callable[[str], None]) -> None:
        for line in stream:  # type: ignore[attr-defined]
            target(line.rstrip("\n"))

    def wait(self, grace_s: float = 30.0) -> list[WorkerResult]:
        """Wait for all workers (the deadline plus ``grace_s`` at most); a failed worker stops the rest."""
        limit = (self.deadline + grace_s) if self.deadline else None
        while any(p.poll() is None for p in self.procs):
            if any(p.poll() not in (None, 0) for p in self.procs):
                break
            if limit is not None and time.time() > limit:
                break
            time.sleep(0.05)
        self.stop()
        for t in self._threads:
            t.join(timeout=2)
        results = []
        for r, p in enumerate(self.procs):
            done = self._done.get(r, {})
            results.append(WorkerResult(r, p.returncode, self.iterations[r], "\n".join(self._stderr[r]),
                                        int(done["sent"]) if "sent" in done else None,
                                        int(done["received"]) if "received" in done else None))
        return results

    def stop(self) -> None:
        """Terminate every worker still running (then kill after 3 s)."""
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=3)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
