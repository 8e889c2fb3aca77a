"""Build, inspect and tear down the emulated cluster (one Testbed = one topology).

Layout on the machine, for testbed NAME:
- `lvtb-NAME-sw`: a network namespace holding every switch: one OVS bridge per
  switch (a private ovs-vswitchd runs in it) and the switch-side veth ends
  `<switch>-p<port>`; OpenFlow port numbers follow the topology model.
- `lvtb-NAME-<host>`: one namespace per host with `eth0` (fixed MAC, address,
  static ARP entries for every other host, egress at the link rate through the same strict-priority
  queues as a switch port, by DSCP: `host_egress`).
- the run directory (default /run/leveller/NAME): state file, OVS database,
  sockets, pidfiles and logs. Nothing is created in the root namespace.

Every switch egress port gets K strict-priority queues (OVSDB QoS linux-htb), each queue below
the top with a guaranteed floor of the link (`Testbed.up(floor=...)`, default
leveller.core.qos.DEFAULT_FLOOR; 0 = the paper's pure strict priority).
With the userspace datapath, ovs-vswitchd's one send socket gets room for every packet the ports'
queues hold (leveller.testbed.sndbuf; with the default it dropped packets beyond about 92 queued in
all, whatever their priority). TX checksum offload is disabled on all veth ends (the userspace datapath does
not fill checksums in). `down` removes everything `up` recorded, also after a
crash, and is safe to run twice.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from leveller.core.qos import DEFAULT_FLOOR, check_floor, default_level_map, queue_configs, tc_host_queues
from leveller.core.topology import Topology, topology_from_dict
from leveller.errors import UserError
from leveller.testbed import sndbuf
from leveller.testbed.ovs import OvsInstance, bridge_commands, kernel_datapath_available, pid_alive, run, stop_pid
from leveller.testbed.state import DEFAULT_BASE, State, check_name, default_run_dir, load_state

OF_PORT = 6653
SWITCH_QUEUE_PACKETS = 100
HOST_TCP_CC = "reno"  # loss-based; a netns may only pick from tcp_allowed_congestion_control
Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    return None


def port_name(switch: str, port: int) -> str:
    return f"{switch}-p{port}"


class Testbed:
    """Handle on a testbed's run directory; `Testbed.up(...)` builds one."""

    __test__ = False  # not a pytest class

    def __init__(self, name: str, run_dir: Path | str | None = None) -> None:
        self.name = check_name(name)
        self.run_dir = Path(run_dir) if run_dir else default_run_dir(name)

    # ---- queries -------------------------------------------------------------------------
    @property
    def state(self) -> State:
        state = load_state(self.run_dir)
        if state is None:
            raise UserError(f"testbed {self.name!r} is not up (no state in {self.run_dir})")
        return state

    @property
    def topology(self) -> Topology:
        return topology_from_dict(self.state.topology)

    @property
    def ovs(self) -> OvsInstance:
        return OvsInstance(self.run_dir / "ovs", self.state.switch_netns)

    def netns(self, host: str) -> str:
        try:
            return self.state.host_netns[host]
        except KeyError:
            raise UserError(f"host = {host!r} is not in testbed {self.name!r}") from None

    def exec_argv(self, host: str, argv: list[str]) -> list[str]:
        """argv that runs `argv` inside a host's namespace."""
        return ["ip", "netns", "exec", self.netns(host), *argv]

    def status(self) -> dict[str, Any]:
        state = self.state
        topo = topology_from_dict(state.topology)
        ovs = OvsInstance(self.run_dir / "ovs", state.switch_netns)
        return {
            "name": self.name, "run_dir": str(self.run_dir), "phase": state.phase,
            "datapath_type": state.datapath_type, "switch_netns": state.switch_netns,
            "controller": state.controller, "levels": topo.levels, "queue_floor": state.queue_floor,
            "hosts": {h.name: {"netns": state.host_netns[h.name], "ip": h.ip, "mac": h.mac,
                               "switch": topo.host_link(h.name).b} for h in topo.hosts},
            "switches": [s.name for s in topo.switches],
            "dpids": {s.name: s.dpid for s in topo.switches},
            "links": [{"a": lk.a, "b": lk.b, "rate_mbps": lk.rate_mbps} for lk in topo.links],
            "processes": {d: ovs.alive(d) for d in ("ovsdb-server", "ovs-vswitchd")}
            | {"sdn": bool(state.sdn_pid and pid_alive(state.sdn_pid, str(self.run_dir)))},
            "forwarding": self.forwarding(),
        }

    def forwarding(self) -> dict[str, Any]:
        """Whether the switches forward: every bridge is fail-secure, so it drops every packet
        until an OpenFlow controller (the SDN app) is connected and has installed flows.
        {"on": bool, "reason": str, "switches": {name: {"connected": bool | None, "flows": int | None}}};
        None where Open vSwitch could not be asked (its daemons are down)."""
        state = self.state
        ovs = OvsInstance(self.run_dir / "ovs", state.switch_netns)
        names = [s.name for s in topology_from_dict(state.topology).switches]
        switches: dict[str, dict[str, Any]] = {n: {"connected": None, "flows": None} for n in names}
        if not (ovs.alive("ovsdb-server") and ovs.alive("ovs-vswitchd")):
            return {"on": False, "reason": "Open vSwitch is not running (`leveller testbed up` restarts it)",
                    "switches": switches}
        connected = _controllers_connected(ovs)
        for n in names:
            switches[n]["connected"] = connected.get(n, False)
            try:
                switches[n]["flows"] = int(ovs.ofctl(n, "dump-aggregate").split("flow_count=")[1].split()[0])
            except (RuntimeError, IndexError, ValueError):
                pass
        off_line = [n for n, s in switches.items() if not s["connected"]]
        no_flows = [n for n, s in switches.items() if not s["flows"]]
        if len(off_line) == len(names):
            reason = ("no SDN app attached: the switches drop every packet (start it with "
                      f"`leveller testbed up --name {self.name}`)")
        elif off_line:
            reason = f"switches without the SDN app: {', '.join(off_line)}"
        elif no_flows:
            reason = f"no flows installed on {', '.join(no_flows)}"
        else:
            reason = f"SDN app attached to all {len(names)} switches"
        return {"on": not off_line and not no_flows, "reason": reason, "switches": switches}

    # ---- lifecycle -----------------------------------------------------------------------
    @classmethod
    def up(cls, topo: Topology, name: str, run_dir: Path | str | None = None,
           datapath_type: str | None = None, progress: Progress = _quiet, qos: bool = True,
           floor: float = DEFAULT_FLOOR) -> Testbed:
        """Build the testbed; if it is already up with the same topology and floor, repair and reuse it
        (restart dead OVS daemons). Anything half-built is removed on failure. `qos=False`
        leaves the switch ports without queues (to configure them from outside). `floor`: the share
        of each link guaranteed to every queue below the top (leveller.core.qos.queue_configs; 0 =
        the paper's pure strict priority, where a demoted TCP flow starves)."""
        floor = check_floor(floor, topo.levels)
        tb = cls(name, run_dir)
        existing = load_state(tb.run_dir)
        if existing is not None:
            same = existing.topology == topo.to_dict()
            if existing.phase == "up" and same and existing.queue_floor == floor:
                progress("already up: checking daemons")
                tb.repair()
                return tb
            if existing.phase == "up" and same:
                raise UserError(f"testbed {name!r} is up in {tb.run_dir} with queue floor "
                                f"{existing.queue_floor:g}, not {floor:g}; run `leveller testbed down --name "
                                f"{name}` first or use floor = {existing.queue_floor:g}")
            raise UserError(f"testbed {name!r} already exists in {tb.run_dir} (phase {existing.phase}, "
                            f"{'same' if same else 'different'} topology); "
                            f"run `leveller testbed down --name {name}` first")
        if tb.run_dir.exists() and any(tb.run_dir.iterdir()):
            raise UserError(f"run directory {tb.run_dir} exists and is not a testbed's; "
                            "choose another --run-dir or --name")
        from pyroute2 import netns as pnetns

        prefix = f"lvtb-{name}-"
        wanted = [prefix + "sw"] + [prefix + h.name for h in topo.hosts]
        clash = sorted(set(wanted) & set(pnetns.listnetns()))
        if clash:
            raise UserError(f"network namespace {clash[0]!r} exists but testbed {name!r} has no state; "
                            f"remove it (ip netns del {clash[0]}) or pick another --name")
        dp = datapath_type or ("system" if kernel_datapath_available() else "netdev")
        tb.run_dir.mkdir(parents=True, exist_ok=True)
        state = State(name=name, run_dir=str(tb.run_dir), topology=topo.to_dict(), datapath_type=dp,
                      switch_netns=prefix + "sw", host_netns={h.name: prefix + h.name for h in topo.hosts},
                      controller=f"tcp:127.0.0.1:{OF_PORT}", queue_floor=floor)
        state.save()
        try:
            _build(tb, state, topo, progress, qos)
        except BaseException:
            progress("build failed: removing what was created")
            tb.down()
            raise
        return tb

    def repair(self) -> None:
        """Restart OVS daemons that died; OVSDB still holds bridges, ports, QoS, controller."""
        ovs = self.ovs
        ovs.start_db()
        restarted = not ovs.alive("ovs-vswitchd")
        ovs.start_vswitchd()
        if restarted:
            widen_switch_send_buffer(ovs, self.topology, self.state.datapath_type)

    def down(self, progress: Progress = _quiet) -> bool:
        """Remove every process, namespace and file `up` made. Returns False if nothing was up."""
        from pyroute2 import netns as pnetns

        state = load_state(self.run_dir)
        if state is None:
            existed = self.run_dir.exists()
            if existed and not (self.run_dir / "ovs").exists() and any(self.run_dir.iterdir()):
                raise UserError(f"{self.run_dir} has no testbed state; not deleting it")
            shutil.rmtree(self.run_dir, ignore_errors=True)
            _rmdir_base(self.run_dir)
            return existed
        if state.sdn_pid:
            progress("stopping the SDN app")
            stop_pid(state.sdn_pid, str(self.run_dir))
        progress("stopping Open vSwitch")
        OvsInstance(self.run_dir / "ovs", state.switch_netns).stop()
        present = set(pnetns.listnetns())
        for ns in reversed(state.created_netns):
            if ns in present:
                progress(f"removing namespace {ns}")
                pnetns.remove(ns)
        shutil.rmtree(self.run_dir, ignore_errors=True)
        _rmdir_base(self.run_dir)
        return True

    # ---- SDN app as a managed process ------------------------------------------------------
    def start_sdn(self, api_port: int = 0, timeout: float = 30.0, extra: list[str] | None = None,
                  wait_forwarding: bool = False) -> int:
        """Start `leveller sdn` for this testbed in the background (recorded for `down`);
        wait until its API answers (and with `wait_forwarding`, until every switch is
        connected and has flows). Returns the pid."""
        state = self.state
        if state.sdn_pid and pid_alive(state.sdn_pid, str(self.run_dir)):
            if wait_forwarding:
                self._wait_forwarding(time.monotonic() + timeout)
            return state.sdn_pid
        info = self.run_dir / "sdn.json"
        info.unlink(missing_ok=True)
        log = open(self.run_dir / "sdn.log", "ab")
        proc = subprocess.Popen([sys.executable, "-m", "leveller.cli", "sdn", "--testbed", self.name,
                                 "--run-dir", str(self.run_dir), "--api", f"127.0.0.1:{api_port}", *(extra or [])],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        log.close()
        state.sdn_pid = proc.pid
        state.save()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"leveller sdn exited ({proc.returncode}); see {self.run_dir / 'sdn.log'}")
            if info.exists():
                if wait_forwarding:
                    self._wait_forwarding(deadline)
                return proc.pid
            time.sleep(0.1)
        raise RuntimeError(f"leveller sdn did not start in {timeout} s; see {self.run_dir / 'sdn.log'}")

    def _wait_forwarding(self, deadline: float) -> None:
        while True:
            fwd = self.forwarding()
            if fwd["on"]:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the SDN app runs but forwarding is off ({fwd['reason']}); "
                                   f"see {self.run_dir / 'sdn.log'}")
            time.sleep(0.2)

    def stop_sdn(self) -> None:
        state = self.state
        if state.sdn_pid:
            stop_pid(state.sdn_pid, str(self.run_dir))
            state.sdn_pid = None
            state.save()

    def __enter__(self) -> Testbed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()


def _controllers_connected(ovs: OvsInstance) -> dict[str, bool]:
    """Bridge name -> whether its OpenFlow controller connection is up (from OVSDB)."""
    def rows(table: str, columns: str) -> list[list[Any]]:
        out = json.loads(ovs.vsctl("--format=json", "--data=json", f"--columns={columns}", "list", table))
        return list(out["data"])

    connected = {uuid[1]: flag is True for uuid, flag in rows("Controller", "_uuid,is_connected")}
    result = {}
    for name, ctl in rows("Bridge", "name,controller"):
        uuids = [ctl[1]] if ctl[0] == "uuid" else [u[1] for u in ctl[1]]  # one uuid, or a set of them
        result[name] = bool(uuids) and all(connected.get(u, False) for u in uuids)
    return result


def _rmdir_base(run_dir: Path) -> None:
    """Remove /run/leveller when our run directory was its last entry."""
    if run_dir.parent == DEFAULT_BASE:
        try:
            DEFAULT_BASE.rmdir()
        except OSError:
            pass


def host_shaper(rate_mbps: float) -> list[str]:
    """The tc command that shapes a host's eth0 egress to its link rate with no priority (a TBF, 20 ms
    of queue): the hosts of a testbed built without queues (`Testbed.up(qos=False)`)."""
    burst = max(64_000, int(rate_mbps * 1e6 / 8 * 0.002))
    return ["tc", "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", f"{rate_mbps}mbit",
            "burst", str(burst), "latency", "20ms"]


def host_egress(rate_mbps: float, levels: int, floor: float = DEFAULT_FLOOR, dev: str = "eth0") -> list[list[str]]:
    """The tc commands that make a host's eth0 egress a NIC with strict-priority queues at its link
    rate (leveller.core.qos.tc_host_queues: a switch port's queues, by the default DSCP of each level).
    With a FIFO there instead, the ranks of several jobs on one host shared its link equally whatever
    their levels: in the churn experiment a job at the top of the order profiled 1.0-3.3x its time
    alone, by how many other jobs its hosts ran."""
    return tc_host_queues(dev, default_level_map(levels), rate_mbps, floor, SWITCH_QUEUE_PACKETS)


def tc_batch(ns: str, cmds: list[list[str]]) -> None:
    """Run `tc` argv lists in namespace `ns` as one `tc -batch` (one process per host, not one per command)."""
    script = "".join(" ".join(argv[1:]) + "\n" for argv in cmds)
    done = subprocess.run(["ip", "netns", "exec", ns, "tc", "-batch", "-"], input=script, text=True,
                          capture_output=True, timeout=30, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"tc -batch in {ns} failed (exit {done.returncode}): {done.stderr.strip()}")


# A frame no host stack takes (IEEE local experimental ethertype 0x88b5), sent once to open the
# userspace switch's send socket so its buffer can be set before any traffic.
_OPENING_FRAME = "ffffffffffff" + "020000000000" + "88b5" + "00" * 46


def widen_switch_send_buffer(ovs: OvsInstance, topo: Topology, datapath_type: str,
                             timeout: float = 10.0) -> int:
    """With the userspace datapath, give ovs-vswitchd's one send socket room for every packet the
    switch ports' queues hold (leveller.testbed.sndbuf: otherwise it drops packets beyond about 92
    queued in all, whatever their priority). Returns the buffer in bytes (0 for the kernel datapath)."""
    if datapath_type != "netdev":
        return 0
    pid = ovs.pid("ovs-vswitchd")
    if pid is None:
        raise RuntimeError("ovs-vswitchd is not running")
    ports = sum(len(topo.switch_ports(s.name)) for s in topo.switches)
    need = sndbuf.needed_bytes(ports * (topo.levels + 1) * SWITCH_QUEUE_PACKETS)
    sw = topo.switches[0]
    port = topo.switch_ports(sw.name)[0][0]
    deadline = time.monotonic() + timeout
    while True:
        got = sndbuf.widen(pid, need)
        if got:
            if min(got) < need:
                raise RuntimeError(f"ovs-vswitchd's send buffer is {min(got)} bytes after setting {need}")
            return min(got)
        if time.monotonic() > deadline:
            raise RuntimeError(f"ovs-vswitchd (pid {pid}) opened no send socket within {timeout:g} s")
        ovs.ofctl(sw.name, "packet-out", f"in_port=controller packet={_OPENING_FRAME} actions=output:{port}")
        time.sleep(0.1)


def _ns_exec(ns: str, *argv: str) -> None:
    run(["ip", "netns", "exec", ns, *argv])


def _build(tb: Testbed, state: State, topo: Topology, progress: Progress, qos: bool = True) -> None:
    from pyroute2 import NetNS
    from pyroute2 import netns as pnetns

    sw_ns = state.switch_netns
    progress("creating namespaces")
    for ns in [sw_ns, *state.host_netns.values()]:
        state.created_netns.append(ns)
        state.save()
        pnetns.create(ns)
        with NetNS(ns) as ipr:
            ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")
    for ns in state.host_netns.values():
        # no IPv6 chatter to the controller; loss-based TCP (the machine default may be BBR,
        # which shares a FIFO queue unfairly over seconds)
        _ns_exec(ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1",
                 f"net.ipv4.tcp_congestion_control={HOST_TCP_CC}")

    progress("creating links")
    switch_ifaces: list[str] = []
    with NetNS(sw_ns) as sw:
        for link in topo.links:
            a_host = link.a in state.host_netns
            b_host = link.b in state.host_netns
            if a_host or b_host:
                host, switch, port = (link.a, link.b, link.b_port) if a_host else (link.b, link.a, link.a_port)
                ifname = port_name(switch, port)
                sw.link("add", ifname=ifname, kind="veth",
                        peer={"ifname": "eth0", "net_ns_fd": state.host_netns[host]})
                switch_ifaces.append(ifname)
            else:
                a_if, b_if = port_name(link.a, link.a_port), port_name(link.b, link.b_port)
                sw.link("add", ifname=a_if, kind="veth", peer={"ifname": b_if})
                switch_ifaces += [a_if, b_if]
        for ifname in switch_ifaces:
            # a shallow switch buffer (HTB leaf FIFOs take this length): TCP flows sharing a
            # queue converge to fair shares in seconds instead of sitting in 1000 packets
            sw.link("set", index=sw.link_lookup(ifname=ifname)[0], txqlen=SWITCH_QUEUE_PACKETS, state="up")
    for ifname in switch_ifaces:
        _ns_exec(sw_ns, "ethtool", "-K", ifname, "tx", "off")

    progress("configuring hosts")
    for h in topo.hosts:
        ns = state.host_netns[h.name]
        prefixlen = int(topo.subnet.split("/")[1])
        with NetNS(ns) as ipr:
            idx = ipr.link_lookup(ifname="eth0")[0]
            ipr.link("set", index=idx, address=h.mac)
            ipr.addr("add", index=idx, address=h.ip, prefixlen=prefixlen)
            ipr.link("set", index=idx, state="up")
            for other in topo.hosts:
                if other.name != h.name:
                    ipr.neigh("add", dst=other.ip, lladdr=other.mac, ifindex=idx, state="permanent")
        _ns_exec(ns, "ethtool", "-K", "eth0", "tx", "off")
        rate = topo.host_link(h.name).rate_mbps
        if qos:
            tc_batch(ns, host_egress(rate, topo.levels, state.queue_floor))
        else:
            _ns_exec(ns, *host_shaper(rate))

    progress("starting Open vSwitch")
    ovs = OvsInstance(tb.run_dir / "ovs", sw_ns)
    ovs.create_db()
    ovs.start_db()
    ovs.start_vswitchd()
    for s in topo.switches:
        progress(f"configuring switch {s.name}")
        ports = [(port_name(s.name, port), port,
                  queue_configs(topo.levels, rate, state.queue_floor) if qos else [])
                 for port, _, rate in topo.switch_ports(s.name)]
        ovs.vsctl(*bridge_commands(s.name, s.dpid, state.datapath_type, state.controller, ports), timeout=60)
    widen_switch_send_buffer(ovs, topo, state.datapath_type)
    state.phase = "up"
    state.save()
    (tb.run_dir / "topology.json").write_text(json.dumps(topo.to_dict(), indent=1))
