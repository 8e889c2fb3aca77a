"""The demo's cluster as one context manager: testbed + SDN app up on entry, all down on exit.

A leftover of a crashed demo (same testbed name) is removed first: processes the
demo recorded in its pid file (controller, agents), then the testbed itself
(`Testbed.down` removes namespaces, OVS and the SDN app, and with the
namespaces every tc filter and BPF program the agents attached).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from leveller.core.qos import DEFAULT_FLOOR, check_floor
from leveller.core.topology import Topology, topology_from_dict
from leveller.experiments.shared.star import topology_dict
from leveller.locking import exclusive
from leveller.procs import stop_pid
from leveller.testbed.cluster import Testbed
from leveller.testbed.state import DEFAULT_BASE, check_name

PIDS_FILE = "demo-pids.json"
RTO_MIN_MS = 50  # see DemoCluster._tune_hosts
Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    return None


def demo_run_dir(name: str) -> Path:
    return DEFAULT_BASE / check_name(name)


def record_pid(run_dir: Path, pid: int) -> None:
    """Remember a process the demo started (so the next start can stop it after a crash)."""
    path = run_dir / PIDS_FILE
    pids = json.loads(path.read_text()) if path.exists() else []
    pids.append(pid)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(pids))
    tmp.replace(path)


def stop_recorded(run_dir: Path) -> int:
    """Stop every recorded process still running (its command line names ``run_dir``, the work dir)."""
    path = run_dir / PIDS_FILE
    if not path.exists():
        return 0
    pids = json.loads(path.read_text())
    for pid in pids:
        stop_pid(int(pid), str(run_dir))
    path.unlink(missing_ok=True)
    return len(pids)


class DemoCluster:
    """Testbed with the SDN app; ``with DemoCluster(...) as c:``. The topology is the demo's
    (h1, h2, h3 -> h4 on s1) unless one is given (e.g. a preset of leveller.core.topology).
    ``floor``: the share of each link guaranteed to every queue below the top (None: the
    testbed's default, leveller.core.qos.DEFAULT_FLOOR; 0: the paper's pure strict priority)."""

    def __init__(self, name: str = "demo", run_dir: Path | None = None, progress: Progress = _quiet,
                 topology: Topology | None = None, floor: float | None = None) -> None:
        self.name = check_name(name)
        self.topology = topology if topology is not None else topology_from_dict(topology_dict())
        self.floor = DEFAULT_FLOOR if floor is None else check_floor(floor, self.topology.levels)
        self.run_dir = Path(run_dir) if run_dir else demo_run_dir(name)
        self.progress = progress
        self.testbed = Testbed(self.name, self.run_dir)
        # the demo's own files (secret, logs, process outputs, pid file): next to the testbed's
        # run directory, never inside it (`testbed down` owns that one)
        self.work_dir = self.run_dir.parent / f"{self.run_dir.name}.work"
        self._lock_stack = contextlib.ExitStack()

    def cleanup_leftovers(self) -> bool:
        """Remove what a crashed earlier demo left; True if there was anything."""
        stopped = stop_recorded(self.work_dir) if self.work_dir.exists() else 0
        was_up = self.testbed.down(progress=self.progress)
        shutil.rmtree(self.work_dir, ignore_errors=True)
        return bool(stopped) or was_up

    def _lock(self) -> None:
        """One demo per name at a time: a second one would tear the first one's testbed down."""
        path = self.run_dir.parent / f"{self.run_dir.name}.demo-lock"
        self._lock_stack.enter_context(exclusive(
            path, lambda holder: f"another demo with testbed name {self.name!r} is running (pid {holder}); "
                                 "wait for it or pick another --name"))

    def _unlock(self) -> None:
        self._lock_stack.close()

    def __enter__(self) -> DemoCluster:
        self._lock()
        try:
            self._up()
        except BaseException:
            self._unlock()
            raise
        return self

    def _up(self) -> None:
        if self.cleanup_leftovers():
            self.progress("removed the leftovers of an earlier demo")
        self.progress("building the testbed")
        self.testbed = Testbed.up(self.topology, self.name, self.run_dir, progress=self.progress, floor=self.floor)
        try:
            self.work_dir.mkdir(parents=True, exist_ok=True)
            self._tune_hosts()
            self.progress("starting the SDN app")
            self.testbed.start_sdn()
            self._wait_switches()
        except BaseException:
            self.close()
            raise

    def _tune_hosts(self) -> None:
        """Datacenter TCP settings in every host namespace (they go away with it): long-lived
        training connections keep their window across the compute phase (no slow start after
        idle), and a lost segment is resent after RTO_MIN_MS, not Linux's WAN default of 200 ms
        (datacenters lower it against incast; here a 200 ms stall is a third of an iteration). Not
        lower: a flow that strict priority holds in a switch queue longer than its RTO times out
        spuriously and backs off; on Figure 9 live (docs/switching.md) 10 ms gave LEVELLER 0.38-0.39
        (paper's rule) and 0.42-0.44 (all remedies), 50 ms 0.42 and 0.43-0.46."""
        from leveller.procs import run

        topo = self.testbed.topology
        for host in self.testbed.state.host_netns:
            run(self.testbed.exec_argv(host, ["sysctl", "-qw", "net.ipv4.tcp_slow_start_after_idle=0"]))
            run(self.testbed.exec_argv(host, ["ip", "route", "replace", topo.subnet, "dev", "eth0",
                                              "src", topo.host(host).ip, "rto_min", f"{RTO_MIN_MS}ms"]))

    def _wait_switches(self, timeout: float = 30.0) -> None:
        """Until every switch is connected to the SDN app and its queues prioritise by DSCP: a run that
        started before a port's classifier was in place would measure its first seconds unprioritised."""
        from sdn.client import SdnClient

        client = SdnClient.for_run_dir(self.run_dir)
        deadline = time.monotonic() + timeout
        health: dict = {}
        while time.monotonic() < deadline:
            try:
                health = client.health()
                if health["switches"] and all(health["switches"].values()) and health["queues"]["ready"]:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"switches not connected to the SDN app, or their queues not ready, in {timeout:.0f} s: "
                           f"{health}")

    def netns(self, host: str) -> str:
        return self.testbed.netns(host)

    def ip(self, host: str) -> str:
        return self.testbed.topology.host(host).ip

    def close(self) -> None:
        try:
            stop_recorded(self.work_dir)
            shutil.rmtree(self.work_dir, ignore_errors=True)
        finally:
            self.testbed.down(progress=self.progress)

    def __exit__(self, *exc: object) -> None:
        try:
            self.close()
        finally:
            self._unlock()

