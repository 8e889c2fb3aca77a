"""Live: the container image `make image` builds (scripts/build-image.sh, deploy/container/Containerfile).
It holds the installed wheel with its CO-RE object and no compiler; run under podman as a host runs it
(docs/operations.md, "Container image"): the host's network, only the capabilities the systemd unit
grants (deploy/systemd/leveller-agent.service: CapabilityBoundingSet), no new privileges, a read-only
root, bpffs, the cgroup tree and /run/leveller mounted, the unit's memory and task bounds, its stop
signal. On a veth pair, the container's agent, ranked by a controller, marks the job's packets and the
DSCP shows on the wire; SIGINT to `podman run` stops it cleanly (no filter left).

"The host's network" of the emulated host: podman runs with --network=host inside the sender's network
namespace (nsenter --net, which keeps the host's mounts: `ip netns exec` would remount /sys without
its bpffs and cgroup mounts). The image is not built here: `make image` (which .ci/run calls) builds it;
without it the tests skip, and under LEVELLER_REQUIRE_PRIVILEGED=1 (CI) a skip fails."""

from __future__ import annotations

import os
import re
import resource
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from .support import DSCP_TOP, SECRET, Proc, cgroup2_mount, job_on_the_wire, wait_until
from .test_agent_unit_caps import CTL_PORT, grantable, names, service, size_bytes, unit_caps, write_config

pytestmark = pytest.mark.privileged

ROOT = Path(__file__).resolve().parents[2]
VERSION = re.search(r'^version = "(.+)"$', (ROOT / "pyproject.toml").read_text(), re.M).group(1)  # type: ignore[union-attr]
IMAGE = os.environ.get("LEVELLER_IMAGE", f"localhost/leveller:{VERSION}")  # scripts/build-image.sh's default
LOCK_DIR = Path("/run/leveller")  # leveller.agent.claim.LOCK_DIR, the unit's RuntimeDirectory
# what would compile C (or BPF) in the image: drivers, compilers proper, assemblers and linkers
COMPILERS = ("gcc", "cc", "c++", "g++", "clang", "clang-14", "clang-16", "tcc", "cc1", "as", "ld", "llc")
PROBE = r"""
import os, sys
found = []
for top in ("/usr", "/bin", "/sbin", "/opt", "/lib"):
    for d, _, files in os.walk(top):
        for f in files:
            name = os.path.basename(f)
            if name in sys.argv[1:] or name.startswith(("gcc-", "x86_64-linux-gnu-gcc", "clang-", "llvm-")):
                found.append(os.path.join(d, f))
print("compilers:", sorted(found))
try:
    import bcc  # noqa: F401
    print("bcc: importable")
except ImportError:
    print("bcc: absent")
import leveller.agent.bpfsource as s
o = s.core_object()
print("object:", o.path, o.why)
"""


def host_options() -> list[str]:
    """What this host needs of `podman run` (docs/operations.md): on a hybrid cgroup host (cgroup v1 with
    cgroup2 beside it, as here) runc, as crun refuses it; resource limits within this process's own hard
    limits, as podman's defaults (nofile 1048576, ...) need CAP_SYS_RESOURCE, which this host withholds
    (runc's nproc limit also stays within the 32768 podman's runtime runs with here)."""
    opts = [] if cgroup2_mount() == Path("/sys/fs/cgroup") else ["--runtime=runc"]
    nofile, nproc = resource.getrlimit(resource.RLIMIT_NOFILE)[1], resource.getrlimit(resource.RLIMIT_NPROC)[1]
    nproc = min(nproc if nproc != resource.RLIM_INFINITY else 32768, 32768)
    return [*opts, f"--ulimit=nofile={nofile}:{nofile}", f"--ulimit=nproc={nproc}:{nproc}"]


@pytest.fixture(scope="module")
def podman() -> str:
    path = shutil.which("podman")
    if path is None:
        pytest.skip("podman missing: make system installs it (scripts/setup-system.sh)")
    if subprocess.run([path, "image", "exists", IMAGE], timeout=60).returncode != 0:
        pytest.skip(f"no image {IMAGE}: build it with `make image` (.ci/run does)")
    return path


def test_the_image_holds_the_wheel_with_its_core_object_and_no_compiler(podman: str) -> None:
    out = subprocess.run([podman, "run", "--rm", *host_options(), "--network=none",
                          "--entrypoint", "/opt/leveller/bin/python", IMAGE, "-c", PROBE, *COMPILERS],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "compilers: []", lines[0]
    assert lines[1] == "bcc: absent", lines[1]  # the agent can only load the CO-RE object here
    path = lines[2].split()[1]
    assert path.startswith("/opt/leveller/lib/python3") and path.endswith("/leveller/_bpf/flow_marker.bpf.o"), lines[2]
    # the entry point is the installed CLI, with the agent, the controller and the SDN app
    for command in ("agent", "controller", "sdn"):
        res = subprocess.run([podman, "run", "--rm", *host_options(), "--network=none", IMAGE, command, "--help"],
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 0 and "usage: leveller " + command in res.stdout, (command, res.stdout, res.stderr)


def podman_argv(podman: str, name: str, tmp: Path, config: Path) -> list[str]:
    """`podman run` of the image's agent as docs/operations.md gives it, the unit's capabilities and bounds."""
    svc = service()
    bounding, ambient = unit_caps()
    assert ambient == bounding  # a container's root holds its capabilities: one list for both
    bounding = grantable(bounding)  # less what this host withholds from its own root (CAP_SYS_RESOURCE here)
    return [podman, "run", "--rm", *host_options(), "--name", name, "--network=host", "--cgroupns=host",
            "--cap-drop=all", *(f"--cap-add={c}" for c in sorted(bounding)), "--security-opt=no-new-privileges",
            "--security-opt=seccomp=unconfined",  # podman's default profile denies bpf() (EPERM); see the docs
            "--read-only", f"--memory={size_bytes(svc['MemoryMax'])}", f"--pids-limit={svc['TasksMax']}",
            f"--stop-signal={svc['KillSignal']}",
            "-v", "/sys/fs/bpf:/sys/fs/bpf", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:ro",
            "-v", f"{LOCK_DIR}:{LOCK_DIR}",
            "-v", f"{tmp}:{tmp}:ro",  # the job's log, the agent's config and secret
            IMAGE, "agent", "--config", str(config)]


@pytest.fixture
def container(podman: str) -> Iterator[str]:
    """A unique container name; the container is gone at the end whatever happened."""
    name = f"leveller-test-{secrets.token_hex(4)}"
    try:
        yield name
    finally:
        subprocess.run([podman, "rm", "--force", "--ignore", "--time", "5", name], capture_output=True, timeout=60)


def test_the_agents_container_marks_the_jobs_packets_on_the_wire(podman: str, container: str,
                                                                tmp_path: Path) -> None:
    from leveller.agent.datapath import attached_filters, has_clsact

    LOCK_DIR.mkdir(mode=0o755, exist_ok=True)
    tmp_path.chmod(0o755)
    with job_on_the_wire(tmp_path, "lvp") as (pair, wire, log):
        config = write_config(tmp_path, pair.if_a, log, f"127.0.0.1:{CTL_PORT}")
        net = ["nsenter", f"--net=/run/netns/{pair.ns_a}"]
        with Proc(tmp_path / "controller.out",
                  [*net, sys.executable, "-m", "leveller.cli", "controller", "--listen", f"127.0.0.1:{CTL_PORT}",
                   "--tau", "0.3", "--lease", "1.5"], env={"LEVELLER_SECRET": SECRET}) as ctl, \
                Proc(tmp_path / "agent.out", [*net, *podman_argv(podman, container, tmp_path, config)]) as ag:
            wait_until(lambda: wire.last_dscp == DSCP_TOP, 90,
                       lambda: f"the job's packets carry DSCP {DSCP_TOP}; agent: {ag.output()} "
                       f"controller: {ctl.output()}")
            assert "eBPF datapath loaded with libbpf (CO-RE object /opt/leveller/" in ag.text(), ag.output()
            inspect = subprocess.run([podman, "inspect", "--format", "{{.State.Pid}}", container],
                                     capture_output=True, text=True, timeout=60)
            assert inspect.returncode == 0, inspect.stderr
            status = Path(f"/proc/{inspect.stdout.strip()}/status").read_text()
            eff = int(re.search(r"^CapEff:\s+(\w+)$", status, re.M).group(1), 16)  # type: ignore[union-attr]
            assert names(eff) == grantable(unit_caps()[0]), hex(eff)  # the unit's, as many as the host has
            assert re.search(r"^NoNewPrivs:\s+1$", status, re.M), status
            assert ag.interrupt(30) == 0, ag.output()  # podman passes SIGINT on; the agent clears its marks
        assert attached_filters(pair.if_a, pair.ns_a) == [] and not has_clsact(pair.if_a, pair.ns_a)
    left = subprocess.run([podman, "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True,
                           timeout=60).stdout.split()
    assert container not in left  # --rm: nothing left behind
