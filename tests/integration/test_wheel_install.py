"""The package works where it is installed. From a copy of the source tree an sdist is built, and from
that sdist a wheel (as pip does with a release): the sdist carries the eBPF sources, the CO-RE object
built from them (bpf/Makefile) and the RDMA shim's sources, and the shim builds from it (`make -C shim`,
shim/README.md); the wheel holds the top-level packages `leveller` and `sdn` and nothing else (design
card: sdn/ is a top-level directory of the repo), and the eBPF sources and object as package data
(leveller/_bpf, found by leveller.agent.bpfsource). Installed into a fresh venv outside the checkout,
`leveller sdn --help` runs from it and (root) its agent, with its controller, marks a job's flow on a
veth pair, the DSCP seen on the wire: compiled by bcc (--loader bcc), and, on a host where no compiler
and no kernel headers can be reached, from the CO-RE object through libbpf, whose kernel lease ends
the marks after the agent is killed with SIGKILL."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from .support import DSCP_TOP, ENV, JOB_PORT, Proc, free_port, job_on_the_wire, json_lines, wait_until

ROOT = Path(__file__).resolve().parents[2]
SITE = Path(sys.prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
TOP_LEVEL = {"leveller", "sdn"}  # the design card's sdn/ stays a top-level package (the lead's decision)


@dataclass(frozen=True)
class Built:
    sdist: Path
    wheel: Path
    venv: Path


def tracked(*paths: str) -> list[str]:
    """The checkout's files (tracked, or new and not ignored) under ``paths``."""
    return subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", *paths], cwd=ROOT,
                          capture_output=True, text=True, check=True).stdout.split()


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """sdist from a copy of the tree, the wheel built from that sdist, and a fresh venv with the wheel
    installed (no deps: the project venv's site-packages is appended to its path by a .pth file; the
    editable install there is not, its finder's .pth is not read)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    for f in tracked():
        if (ROOT / f).is_file():
            (src / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, src / f)
    dist = tmp / "dist"
    name = subprocess.run([sys.executable, "-c", "import sys; from setuptools import build_meta as b; "
                           "print(b.build_sdist(sys.argv[1]))", str(dist)], cwd=src, capture_output=True,
                          text=True, check=True, timeout=300).stdout.split()[-1]
    sdist = dist / name
    # --no-index: the build and the install below need nothing from an index, and never wait for one
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(sdist), "--no-build-isolation", "--no-deps",
                    "--no-index", "-q", "-w", str(dist)], check=True, cwd=tmp, timeout=300)
    wheel = next(dist.glob("leveller-*.whl"))
    venv = tmp / "venv"
    # no pip of its own (ensurepip installs one for seconds): this interpreter's pip installs into it
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    vsite = next((venv / "lib").glob("python*/site-packages"))
    bcc = [line for line in (SITE / "leveller-bcc.pth").read_text().split() if line.startswith("/")] \
        if (SITE / "leveller-bcc.pth").exists() else []
    (vsite / "zz-deps.pth").write_text("\n".join([str(SITE), *bcc]) + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--no-deps",
                    "--no-index", "-q", str(wheel)], check=True, timeout=300)
    return Built(sdist, wheel, venv)


def run(venv: Path, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(argv, cwd=venv, env=env, capture_output=True, text=True, timeout=timeout)


def test_the_sdist_carries_the_bpf_and_shim_sources_and_the_shim_builds_from_it(built: Built,
                                                                                 tmp_path: Path) -> None:
    with tarfile.open(built.sdist) as tar:
        root = tar.getnames()[0].split("/")[0]
        names = {n.removeprefix(root + "/") for n in tar.getnames()}
        assert {"bpf/flow_marker.c", "bpf/flow_marker.h", "bpf/Makefile", "bpf/build/flow_marker.bpf.o",
                "bpf/build/flow_marker.bpf.sha256"} <= names
        assert "bpf/build/vmlinux.h" not in names  # the build host's kernel types: dumped at build time only
        shim = set(tracked("shim"))
        assert "shim/Makefile" in shim and "shim/README.md" in shim and shim <= names, sorted(shim - names)
        tar.extractall(tmp_path, filter="data")
    if shutil.which("gcc") is None:
        pytest.fail("gcc is needed to build the shim (scripts/setup-system.sh installs it)")
    out = subprocess.run(["make", "-s", "-C", str(tmp_path / root / "shim")], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    lib = tmp_path / root / "shim" / "build" / "libleveller_shim.so"
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True,
                             check=True).stdout.split()
    assert {"ibv_create_qp", "ibv_modify_qp", "dlsym"} <= set(symbols)  # the interposed entry points


def test_the_wheel_holds_only_the_leveller_and_sdn_packages_and_the_bpf_sources(built: Built) -> None:
    with zipfile.ZipFile(built.wheel) as whl:
        names = whl.namelist()
        info = {n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")}
        assert len(info) == 1
        top = {n.split("/")[0] for n in names} - info
        assert top == TOP_LEVEL, sorted(top)  # no tests, bench, scripts, bpf, shim, stray modules
        assert set(whl.read(f"{info.pop()}/top_level.txt").decode().split()) == TOP_LEVEL
    assert {f"leveller/_bpf/{n}" for n in ("flow_marker.c", "flow_marker.h", "flow_marker.bpf.o",
                                           "flow_marker.bpf.sha256")} <= set(names)


def test_the_installed_agent_finds_its_bpf_source_and_object_in_the_package(built: Built) -> None:
    out = run(built.venv, str(built.venv / "bin" / "python"), "-c",
              "import leveller.agent.datapath as d, leveller.agent.bpfsource as s; print(d.SOURCE); "
              "o = s.core_object(); print(o.path); print(o.why)")
    assert out.returncode == 0, out.stderr
    source, obj = (Path(line) for line in out.stdout.splitlines()[:2])
    assert source.is_relative_to(built.venv) and source.parts[-2:] == ("_bpf", "flow_marker.c")
    # the object is there and built from exactly the sources beside it: the agent will load it
    assert obj.is_relative_to(built.venv) and obj.parts[-2:] == ("_bpf", "flow_marker.bpf.o"), out.stdout
    assert obj.read_bytes()[:4] == b"\x7fELF"


def test_leveller_sdn_help_runs_from_the_wheel(built: Built) -> None:
    out = run(built.venv, str(built.venv / "bin" / "leveller"), "sdn", "--help")
    assert out.returncode == 0 and "--of-port" in out.stdout, out.stderr


@pytest.mark.privileged
def test_the_installed_agent_compiling_with_bcc_marks_a_jobs_flow_on_a_veth_pair(built: Built,
                                                                                 tmp_path: Path) -> None:
    from leveller.agent.datapath import attached_filters, has_clsact

    leveller = str(built.venv / "bin" / "leveller")
    port = free_port()
    with job_on_the_wire(tmp_path, "lvw") as (pair, wire, log):
        with Proc(tmp_path / "controller.out", [leveller, "controller", "--listen", f"127.0.0.1:{port}",
                                                "--tau", "0.3", "--lease", "1.5"], env=ENV) as ctl, \
                Proc(tmp_path / "agent.out", [leveller, "agent", "--controller", f"127.0.0.1:{port}", "--host", "ha",
                                              "--log", str(log), "--job-ports", f"live={JOB_PORT}-{JOB_PORT + 1}",
                                              "--ideal-time", "live=0.2", "--dev", pair.if_a, "--netns", pair.ns_a,
                                              "--interval", "0.2", "--loader", "bcc"], env=ENV) as ag:
            wait_until(lambda: wire.last_dscp == DSCP_TOP, 40,
                       lambda: f"the job's packets carry DSCP {DSCP_TOP}; agent: {ag.output()} "
                       f"controller: {ctl.output()}")
            assert ag.interrupt() == 0, ag.output()
            assert "eBPF datapath loaded with bcc" in ag.text(), ag.output()
        assert attached_filters(pair.if_a, pair.ns_a) == [] and not has_clsact(pair.if_a, pair.ns_a)


# A host with no compiler and no kernel headers: in a mount namespace of its own, empty read-only file systems
# over the kernel headers (/lib/modules/*/build and source, /usr/src, where they link to) and over LLVM's
# directory (clang, the clang and LLVM libraries bcc's libbcc loads), PATH the system's only; then the command.
NO_TOOLCHAIN = ('for d in /lib/modules/*/build /lib/modules/*/source /usr/lib/llvm-*; do '
                'if [ -d "$d" ]; then mount -t tmpfs -o ro,size=64k none "$d"; fi; done; '
                'mount -t tmpfs -o ro,size=64k none /usr/src; exec "$@"')
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
LEASE_S = 1.5  # the controller's --lease below
PROBE = """
import glob, os, shutil
print(shutil.which("clang"), shutil.which("clang-14"), shutil.which("gcc") is not None)
print(sorted(glob.glob("/lib/modules/*/build/*") + glob.glob("/lib/modules/*/source/*") + os.listdir("/usr/src")))
try:
    import bcc
    print("bcc imported")
except (ImportError, OSError) as exc:
    print("no bcc:", type(exc).__name__)
"""  # what can be reached where the agent runs: no clang (gcc stays: it is no BPF compiler), no headers, no bcc


def without_toolchain(*argv: str) -> list[str]:
    """``argv`` run where no compiler and no kernel headers can be reached (unshare and sh exec: same pid)."""
    return ["unshare", "--mount", "--propagation", "private", "sh", "-ec", NO_TOOLCHAIN, "sh", *argv]


@pytest.mark.privileged
def test_without_compiler_or_headers_the_installed_agent_loads_the_core_object_and_its_lease_outlives_it(
        built: Built, tmp_path: Path) -> None:
    from leveller.agent.claim import lock_path
    from leveller.agent.datapath import attached_filters

    python, leveller = str(built.venv / "bin" / "python"), str(built.venv / "bin" / "leveller")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")} | ENV | {"PATH": SYSTEM_PATH}
    probe = subprocess.run(without_toolchain(python, "-c", PROBE), capture_output=True, text=True, env=env,
                           cwd=built.venv, timeout=60)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.splitlines()[:3] == ["None None True", "[]", "no bcc: OSError"], probe.stdout  # hidden

    port, metrics_port = free_port(), free_port()
    with job_on_the_wire(tmp_path, "lvc") as (pair, wire, log):
        try:
            with Proc(tmp_path / "controller.out", [leveller, "controller", "--listen", f"127.0.0.1:{port}",
                                                    "--tau", "0.3", "--lease", str(LEASE_S)], env=env) as ctl, \
                    Proc(tmp_path / "agent.out", without_toolchain(
                        leveller, "agent", "--controller", f"127.0.0.1:{port}", "--host", "ha", "--log", str(log),
                        "--job-ports", f"live={JOB_PORT}-{JOB_PORT + 1}", "--ideal-time", "live=0.2",
                        "--dev", pair.if_a, "--netns", pair.ns_a, "--interval", "0.2", "--json",
                        "--metrics-port", str(metrics_port)), env=env) as ag:
                wait_until(lambda: wire.last_dscp == DSCP_TOP, 40,
                           lambda: f"the job's packets carry DSCP {DSCP_TOP}; agent: {ag.output()} "
                           f"controller: {ctl.output()}")
                assert "eBPF datapath loaded with libbpf (CO-RE object " in ag.text(), ag.output()
                lines = json_lines(tmp_path / "agent.out")
                assert lines and all(line["loader"] == "libbpf" for line in lines), lines[-1:]
                with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
                    metrics = r.read().decode()
                assert re.search(r'^leveller_agent_datapath_loader\{loader="libbpf"\} 1\.0$', metrics, re.M), metrics
                ag.kill()  # SIGKILL: the agent's tc filter, program and maps stay; only the kernel's lease acts
                killed_at = time.time()
                assert "leveller_egress" in {f["name"] for f in attached_filters(pair.if_a, pair.ns_a)}
                cleared_at = wire.first_after(killed_at, 0, timeout_s=LEASE_S + 10)
                assert cleared_at is not None, "the dead agent's marks never ended"
                limit = killed_at + LEASE_S + 1.0
                packets = wire.packets
                wait_until(lambda: time.time() > limit + 1.0 and wire.packets > packets + 50, 30,
                           "the job's packets after the limit")
                late = [(round(t - killed_at, 3), d) for t, d in list(wire.changes) if t > limit and d != 0]
                assert cleared_at <= limit and not late, (cleared_at - killed_at, late)
                assert ctl.alive()  # the controller went on deciding: only the kernel ended the marks
        finally:
            lock_path(pair.if_a, pair.ns_a).unlink(missing_ok=True)  # the killed agent's lock (nobody holds it)
