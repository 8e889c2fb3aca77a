"""A private Open vSwitch instance: its own ovsdb-server and ovs-vswitchd.

Every file (database, pidfiles, logs, unix sockets, bridge management sockets)
lives under `rundir`; ovs-vswitchd runs inside the testbed's switch network
namespace, so its datapath and bridge devices (e.g. the userspace datapath's
`ovs-netdev` tap) never collide with a system OVS or another testbed. A system
OVS is never contacted: every command names this instance's sockets.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from leveller.core.qos import QueueConfig
from leveller.errors import UserError
from leveller.procs import pid_alive, run, stop_pid
from leveller.switchconfig.ovs import port_qos_args

SCHEMA_CANDIDATES = ("/usr/share/openvswitch/vswitch.ovsschema", "/usr/local/share/openvswitch/vswitch.ovsschema")
DAEMONS = ("ovsdb-server", "ovs-vswitchd")
# ovs-vswitchd plays the switch: one userspace thread forwards every emulated link, and a switch
# never waits for the hosts' CPUs. At the default nice level, under two CPU burners, two jobs that
# fit the link when they alternate ran at R 0.77-0.83 with CASSINI's shifts and drifted back into each
# other (overlap 0.28, unshifted 0.37); at -10, R 0.89-0.90 and overlap 0.084-0.088 (unshifted
# 0.24-0.28), as on a quiet machine (test_live_cassini). Its threads inherit the level.
SWITCH_NICE = -10


def kernel_datapath_available() -> bool:
    """True when the openvswitch kernel module is loaded (else use the userspace datapath)."""
    return Path("/sys/module/openvswitch").is_dir()


@dataclass
class OvsInstance:
    rundir: Path
    netns: str

    @property
    def db_sock(self) -> str:
        return f"unix:{self.rundir / 'db.sock'}"

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        for var in ("OVS_RUNDIR", "OVS_DBDIR", "OVS_LOGDIR"):
            env[var] = str(self.rundir)
        return env

    def pidfile(self, daemon: str) -> Path:
        return self.rundir / f"{daemon}.pid"

    def pid(self, daemon: str) -> int | None:
        try:
            return int(self.pidfile(daemon).read_text().strip())
        except (OSError, ValueError):
            return None

    def alive(self, daemon: str) -> bool:
        pid = self.pid(daemon)
        return pid is not None and pid_alive(pid, str(self.rundir))

    def create_db(self) -> None:
        schema = next((s for s in SCHEMA_CANDIDATES if Path(s).exists()), None)
        if schema is None:
            raise UserError("Open vSwitch schema not found: install openvswitch-switch (make setup)")
        self.rundir.mkdir(parents=True, exist_ok=True)
        db = self.rundir / "conf.db"
        if not db.exists():
            run(["ovsdb-tool", "create", str(db), schema], env=self.env)

    def start_db(self) -> None:
        if self.alive("ovsdb-server"):
            return
        run(["ovsdb-server", str(self.rundir / "conf.db"), f"--remote=punix:{self.rundir / 'db.sock'}",
             f"--pidfile={self.pidfile('ovsdb-server')}", "--detach", "--no-chdir",
             f"--log-file={self.rundir / 'ovsdb-server.log'}",
             f"--unixctl={self.rundir / 'ovsdb-server.ctl'}"], env=self.env)
        self.vsctl("--no-wait", "init")
        # Few threads: the testbed shares 2 cores with the traffic it carries.
        self.vsctl("--no-wait", "set", "Open_vSwitch", ".", "other_config:n-handler-threads=1",
                   "other_config:n-revalidator-threads=1")

    def start_vswitchd(self) -> None:
        """Start (or restart after a crash) ovs-vswitchd in the switch namespace."""
        if self.alive("ovs-vswitchd"):
            return
        run(["nice", "-n", str(SWITCH_NICE), "ip", "netns", "exec", self.netns, "ovs-vswitchd", self.db_sock,
             f"--pidfile={self.pidfile('ovs-vswitchd')}", "--detach", "--no-chdir",
             f"--log-file={self.rundir / 'ovs-vswitchd.log'}",
             f"--unixctl={self.rundir / 'ovs-vswitchd.ctl'}"], env=self.env)

    def stop(self) -> None:
        for daemon in reversed(DAEMONS):
            pid = self.pid(daemon)
            if pid is not None:
                stop_pid(pid, str(self.rundir))

    def vsctl(self, *args: str, timeout: float = 30) -> str:
        return run(["ovs-vsctl", f"--db={self.db_sock}", f"--timeout={int(timeout)}", *args],
                   env=self.env, timeout=timeout + 5).stdout

    def ofctl(self, bridge: str, *args: str) -> str:
        """ovs-ofctl against this instance's bridge management socket (OpenFlow 1.3)."""
        return run(["ovs-ofctl", "-O", "OpenFlow13", *args[:1], f"unix:{self.rundir / (bridge + '.mgmt')}",
                    *args[1:]], env=self.env).stdout

    def appctl(self, *args: str) -> str:
        return run(["ovs-appctl", "-t", str(self.rundir / "ovs-vswitchd.ctl"), *args], env=self.env).stdout


def bridge_commands(bridge: str, dpid: int, datapath_type: str, controller: str,
                    ports: list[tuple[str, int, list[QueueConfig]]]) -> list[str]:
    """ovs-vsctl arguments (one transaction) for a bridge, its numbered ports and
    strict-priority linux-htb queues on every port (`leveller switch-config --vendor ovs`
    renders the same QoS rows). `ports` = (name, ofport, queues); no queues: no QoS."""
    args = ["--may-exist", "add-br", bridge, "--", "set", "bridge", bridge,
            f"datapath_type={datapath_type}", "protocols=OpenFlow13", "fail_mode=secure",
            f"other-config:datapath-id={dpid:016x}", "other-config:disable-in-band=true",
            "--", "--id=@ctl", "create", "Controller", f"target=\"{controller}\"", "max_backoff=1000",
            "--", "set", "bridge", bridge, "controller=@ctl"]
    for i, (name, ofport, queues) in enumerate(ports):
        args += ["--", "--may-exist", "add-port", bridge, name, "--", "set", "Interface", name,
                 f"ofport_request={ofport}"]
        if queues:
            args += port_qos_args(name, queues, f"qos{i}")
    return args
