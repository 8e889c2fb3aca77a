"""The package works where it is installed. From a copy of the source tree an sdist is built, and from
that sdist a wheel (as pip does with a release): the sdist carries the eBPF sources and the RDMA
shim's, and the shim builds from it (`make -C shim`, shim/README.md); the wheel holds the top-level
packages `leveller` and `sdn` and nothing else (design card: sdn/ is a top-level directory of the
repo), and the eBPF sources as package data (leveller/_bpf, found by leveller.agent.bpfsource).
Installed into a fresh venv outside the checkout, `leveller sdn --help` runs from it and (root) its
agent, with its controller, loads the BPF program and marks a job's flow on a veth pair: the DSCP is
seen on the wire."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from .support import DSCP_TOP, ENV, JOB_PORT, Proc, free_port, job_on_the_wire, wait_until

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
        assert {"bpf/flow_marker.c", "bpf/flow_marker.h"} <= names
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
    assert "leveller/_bpf/flow_marker.c" in names and "leveller/_bpf/flow_marker.h" in names


def test_the_installed_agent_finds_its_bpf_source_in_the_package(built: Built) -> None:
    out = run(built.venv, str(built.venv / "bin" / "python"), "-c",
              "import leveller.agent.datapath as d; print(d.SOURCE); print(d.SOURCE.read_text()[:100])")
    assert out.returncode == 0, out.stderr
    source = Path(out.stdout.splitlines()[0])
    assert source.is_relative_to(built.venv) and source.parts[-2:] == ("_bpf", "flow_marker.c")


def test_leveller_sdn_help_runs_from_the_wheel(built: Built) -> None:
    out = run(built.venv, str(built.venv / "bin" / "leveller"), "sdn", "--help")
    assert out.returncode == 0 and "--of-port" in out.stdout, out.stderr


@pytest.mark.privileged
def test_the_installed_agent_marks_a_jobs_flow_on_a_veth_pair(built: Built, tmp_path: Path) -> None:
    from leveller.agent.datapath import attached_filters, has_clsact

    leveller = str(built.venv / "bin" / "leveller")
    port = free_port()
    with job_on_the_wire(tmp_path, "lvw") as (pair, wire, log):
        with Proc(tmp_path / "controller.out", [leveller, "controller", "--listen", f"127.0.0.1:{port}",
                                                "--tau", "0.3", "--lease", "1.5"], env=ENV) as ctl, \
                Proc(tmp_path / "agent.out", [leveller, "agent", "--controller", f"127.0.0.1:{port}", "--host", "ha",
                                              "--log", str(log), "--job-ports", f"live={JOB_PORT}-{JOB_PORT + 1}",
                                              "--ideal-time", "live=0.2", "--dev", pair.if_a, "--netns", pair.ns_a,
                                              "--interval", "0.2"], env=ENV) as ag:
            wait_until(lambda: wire.last_dscp == DSCP_TOP, 40,
                       lambda: f"the job's packets carry DSCP {DSCP_TOP}; agent: {ag.output()} "
                       f"controller: {ctl.output()}")
            assert ag.interrupt() == 0, ag.output()
        assert attached_filters(pair.if_a, pair.ns_a) == [] and not has_clsact(pair.if_a, pair.ns_a)
