"""Live: the agent as deploy/systemd/leveller-agent.service runs it. Its ExecStart (the installed
executable replaced by this venv's, the --config file by one for a veth testbed) is started through
`setpriv` with exactly the unit's CapabilityBoundingSet / AmbientCapabilities and NoNewPrivileges,
the rest dropped, as systemd does for a root service with those lines, and under a seccomp filter
equivalent to the unit's SystemCallFilter (tests/helpers/seccomp.py; any other system call kills
it): the running agent holds those capabilities and nothing else, stays within the unit's
MemoryMax and TasksMax, a controller ranks its job, and the job's packets carry their
DSCP on the wire; a clean stop (the unit's KillSignal) removes its filter. Without one of the
capabilities the unit grants for the datapath (CAP_BPF, CAP_NET_ADMIN) the agent exits at once,
nonzero, saying what failed, and leaves nothing attached.

The agent runs inside the sender's namespace (`ip netns exec` before the capabilities are
dropped), as a unit's agent runs in its host's namespace: --netns would need CAP_SYS_ADMIN (setns),
which the unit does not grant. Capabilities, the system call filter and the memory and task bounds
only: the unit's other sandboxing (ProtectSystem, ...) is checked by systemd-analyze
(tests/unit/test_systemd_units.py), not reproduced here."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from configparser import ConfigParser, SectionProxy
from pathlib import Path

import pytest

from tests.helpers import seccomp

from .support import DSCP_TOP, JOB_PORT, SECRET, Proc, job_on_the_wire, wait_until

pytestmark = pytest.mark.privileged

UNIT = Path(__file__).resolve().parents[2] / "deploy" / "systemd" / "leveller-agent.service"
INSTALLED = "/opt/leveller/bin/leveller"  # where deploy/systemd/README.md installs the package
CTL_PORT = 50051  # the controller listens on the sender namespace's loopback: any port is free there
# linux/capability.h, by number (CapEff etc. in /proc/PID/status are masks of these bits)
CAPS = ("CAP_CHOWN CAP_DAC_OVERRIDE CAP_DAC_READ_SEARCH CAP_FOWNER CAP_FSETID CAP_KILL CAP_SETGID CAP_SETUID "
        "CAP_SETPCAP CAP_LINUX_IMMUTABLE CAP_NET_BIND_SERVICE CAP_NET_BROADCAST CAP_NET_ADMIN CAP_NET_RAW "
        "CAP_IPC_LOCK CAP_IPC_OWNER CAP_SYS_MODULE CAP_SYS_RAWIO CAP_SYS_CHROOT CAP_SYS_PTRACE CAP_SYS_PACCT "
        "CAP_SYS_ADMIN CAP_SYS_BOOT CAP_SYS_NICE CAP_SYS_RESOURCE CAP_SYS_TIME CAP_SYS_TTY_CONFIG CAP_MKNOD "
        "CAP_LEASE CAP_AUDIT_WRITE CAP_AUDIT_CONTROL CAP_SETFCAP CAP_MAC_OVERRIDE CAP_MAC_ADMIN CAP_SYSLOG "
        "CAP_WAKE_ALARM CAP_BLOCK_SUSPEND CAP_AUDIT_READ CAP_PERFMON CAP_BPF CAP_CHECKPOINT_RESTORE").split()


def service() -> SectionProxy:
    cp = ConfigParser(strict=False, interpolation=None)
    cp.optionxform = str  # type: ignore[assignment,method-assign]
    cp.read_string(UNIT.read_text())
    return cp["Service"]


def unit_caps() -> tuple[set[str], set[str]]:
    """The unit's (bounding set, ambient set)."""
    svc = service()
    bounding, ambient = set(svc["CapabilityBoundingSet"].split()), set(svc["AmbientCapabilities"].split())
    assert bounding and ambient <= bounding <= set(CAPS), (bounding, ambient)
    return bounding, ambient


def grantable(caps: set[str]) -> set[str]:
    """``caps`` less those this process cannot pass on (not in its own bounding set: a container may
    withhold some, e.g. CAP_SYS_RESOURCE). Capabilities only add permissions, so an agent that works
    with fewer than the unit grants works with the unit's set; the datapath's two must be there."""
    own = proc_caps(os.getpid())["CapBnd"]
    assert isinstance(own, set) and {"CAP_BPF", "CAP_NET_ADMIN"} <= own, own
    return caps & own


def names(mask: int) -> set[str]:
    return {name for bit, name in enumerate(CAPS) if mask >> bit & 1}


def proc_caps(pid: int) -> dict[str, object]:
    """CapInh/CapPrm/CapEff/CapBnd/CapAmb as sets of names, and NoNewPrivs, of a running process."""
    out: dict[str, object] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key.startswith("Cap"):
            out[key] = names(int(value, 16))
        elif key == "NoNewPrivs":
            out[key] = int(value)
    return out


def running_python(pid: int) -> bool:
    """The process runs the venv's Python (`ip netns exec`, the seccomp launcher and setpriv exec their
    command, no fork: the pid is the agent's once it got there)."""
    try:
        return os.readlink(f"/proc/{pid}/exe") == os.path.realpath(sys.executable)
    except OSError:
        return False


def status_field(pid: int, name: str) -> int:
    """A number of /proc/PID/status (VmHWM in kB, Threads, Seccomp)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{name}:"):
            return int(line.split()[1])
    raise AssertionError(f"no {name} in /proc/{pid}/status")


def size_bytes(value: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(value[:-1]) * units[value[-1]] if value[-1] in units else int(value)


def unit_argv(config: Path, bounding: set[str], ambient: set[str]) -> list[str]:
    """The unit's ExecStart with this venv's executable and ``config``, under setpriv holding exactly
    ``bounding`` (permitted and effective follow from it for root: inheritable | bounding at exec) and
    ``ambient``, with no_new_privs (NoNewPrivileges=yes)."""
    setpriv = shutil.which("setpriv")
    assert setpriv, "setpriv (util-linux) is needed to start the agent with the unit's capabilities"
    svc = service()
    argv = shlex.split(svc["ExecStart"])
    assert argv[0] == INSTALLED and argv[1] == "agent" and argv[2:] == ["--config", "/etc/leveller/agent.toml"], argv
    assert svc.get("User", "root") == "root" and svc["NoNewPrivileges"] == "yes"
    leveller = Path(sys.prefix) / "bin" / "leveller"
    assert leveller.exists(), f"{leveller}: install the project into its venv first (make venv)"

    def spec(caps: set[str]) -> str:
        return ",".join(["-all", *(f"+{c.removeprefix('CAP_').lower()}" for c in sorted(caps))])

    argv = [setpriv, "--no-new-privs", f"--inh-caps={spec(bounding)}", f"--ambient-caps={spec(ambient)}",
            f"--bounding-set={spec(bounding)}", "--", str(leveller), "agent", "--config", str(config)]
    why = seccomp.available()
    assert why is None, f"the unit's SystemCallFilter cannot be applied here: {why}"
    return seccomp.filtered(svc["SystemCallFilter"], argv)  # any other system call kills the agent (SIGSYS)


def write_config(tmp: Path, dev: str, log: Path, controller: str) -> Path:
    secret = tmp / "secret"
    secret.write_text(SECRET)
    secret.chmod(0o600)
    config = tmp / "agent.toml"
    config.write_text(f'controller = "{controller}"\nhost = "ha"\ninterval = 0.2\nlog = ["{log}"]\n'
                      f'job_ports = ["live={JOB_PORT}-{JOB_PORT + 1}"]\nideal_time = ["live=0.2"]\n'
                      f'dev = "{dev}"\nsecret_file = "{secret}"\n')
    return config


def test_the_agent_with_only_its_units_capabilities_marks_the_jobs_packets(tmp_path: Path) -> None:
    from leveller.agent.datapath import attached_filters, has_clsact

    unit_bounding, unit_ambient = unit_caps()
    assert unit_bounding == {"CAP_BPF", "CAP_NET_ADMIN", "CAP_SYS_RESOURCE"}  # what issue 28 grants the agent
    bounding, ambient = grantable(unit_bounding), grantable(unit_ambient)
    with job_on_the_wire(tmp_path, "lvu") as (pair, wire, log):
        ns_exec = ["ip", "netns", "exec", pair.ns_a]
        config = write_config(tmp_path, pair.if_a, log, f"127.0.0.1:{CTL_PORT}")
        with Proc(tmp_path / "controller.out",
                  [*ns_exec, sys.executable, "-m", "leveller.cli", "controller", "--listen", f"127.0.0.1:{CTL_PORT}",
                   "--tau", "0.3", "--lease", "1.5"], env={"LEVELLER_SECRET": SECRET}) as ctl, \
                Proc(tmp_path / "agent.out", [*ns_exec, *unit_argv(config, bounding, ambient)]) as ag:
            # `ip netns exec` and setpriv exec (no fork): the pid is the agent's
            wait_until(lambda: not ag.alive() or running_python(ag.p.pid), 20, "setpriv to start the agent")
            assert ag.alive(), ag.output()
            caps = proc_caps(ag.p.pid)
            assert {k: v for k, v in caps.items() if k != "CapInh"} == {
                "CapPrm": bounding, "CapEff": bounding, "CapBnd": bounding, "CapAmb": ambient, "NoNewPrivs": 1}, caps
            wait_until(lambda: wire.last_dscp == DSCP_TOP, 40,
                       lambda: f"the job's packets carry DSCP {DSCP_TOP}; agent: {ag.output()} "
                       f"controller: {ctl.output()}")
            assert ag.alive() and proc_caps(ag.p.pid) == caps  # nothing regained on the way
            # the CO-RE object passes the verifier with these capabilities alone (no CAP_PERFMON, CAP_SYS_ADMIN)
            assert "eBPF datapath loaded with libbpf" in ag.output(), ag.output()
            # under the unit's SystemCallFilter (seccomp mode 2) and well within its MemoryMax and TasksMax
            svc = service()
            assert status_field(ag.p.pid, "Seccomp") == 2
            peak = status_field(ag.p.pid, "VmHWM") << 10
            assert peak < size_bytes(svc["MemoryMax"]) // 2, f"peak RSS {peak >> 20} MiB"
            assert status_field(ag.p.pid, "Threads") < int(svc["TasksMax"]) // 4
            assert ag.interrupt() == 0, ag.output()
        assert attached_filters(pair.if_a, pair.ns_a) == [] and not has_clsact(pair.if_a, pair.ns_a)


@pytest.mark.parametrize("dropped", ["CAP_BPF", "CAP_NET_ADMIN"])
def test_without_one_of_its_capabilities_the_agent_fails_clearly(tmp_path: Path, dropped: str) -> None:
    from leveller.agent.datapath import attached_filters, has_clsact
    from leveller.testbed.vethpair import VethPair

    bounding, ambient = (grantable(caps) for caps in unit_caps())
    assert dropped in bounding
    log = tmp_path / "job.log"
    log.write_text("")
    with VethPair(prefix="lvu") as pair:  # no controller: the agent attaches its datapath before reporting
        config = write_config(tmp_path, pair.if_a, log, f"127.0.0.1:{CTL_PORT}")
        with Proc(tmp_path / "agent.out", ["ip", "netns", "exec", pair.ns_a,
                                           *unit_argv(config, bounding - {dropped}, ambient - {dropped})]) as ag:
            try:
                code = ag.p.wait(60)
            except subprocess.TimeoutExpired:
                raise AssertionError(f"the agent without {dropped} still runs after 60 s: {ag.output()}") from None
            out = ag.output()
            # one line saying what failed and what is missing (the CLI's user error: exit 2), no traceback
            assert code == 2 and "Traceback" not in out, out
            error = [line for line in out.splitlines() if line.startswith("leveller agent: error: ")]
            assert len(error) == 1 and "flow_marker" in error[0] and dropped in error[0], out
        assert attached_filters(pair.if_a, pair.ns_a) == [] and not has_clsact(pair.if_a, pair.ns_a)
