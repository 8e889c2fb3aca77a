"""The wheel works where it is installed: built from a copy of the source tree, installed into a fresh
venv outside the checkout, it carries the eBPF sources as package data (leveller/_bpf, found by
leveller.agent.bpfsource), `leveller sdn --help` runs from it, and (root) its agent's BPF program
compiles and marks crafted packets (`leveller bench fuzz-marker`, BPF_PROG_TEST_RUN)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SITE = Path(sys.prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel installed (no deps: the project venv's site-packages is appended to
    its path by a .pth file; the editable install there is not, its finder's .pth is not read)."""
    tmp = tmp_path_factory.mktemp("wheel")
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    src = tmp / "src"
    for f in files:
        if (ROOT / f).is_file():
            (src / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, src / f)
    dist = tmp / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-build-isolation", "--no-deps", "-q",
                    "-w", str(dist)], check=True, cwd=tmp, timeout=300)
    wheel = next(dist.glob("leveller-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "leveller/_bpf/flow_marker.c" in names and "leveller/_bpf/flow_marker.h" in names
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    vsite = next((venv / "lib").glob("python*/site-packages"))
    bcc = [line for line in (SITE / "leveller-bcc.pth").read_text().split() if line.startswith("/")] \
        if (SITE / "leveller-bcc.pth").exists() else []
    (vsite / "zz-deps.pth").write_text("\n".join([str(SITE), *bcc]) + "\n")
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--no-deps", "-q", str(wheel)],
                   check=True, timeout=300)
    return venv


def run(venv: Path, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(argv, cwd=venv, env=env, capture_output=True, text=True, timeout=timeout)


def test_the_installed_agent_finds_its_bpf_source_in_the_package(installed: Path) -> None:
    out = run(installed, str(installed / "bin" / "python"), "-c",
              "import leveller.agent.datapath as d; print(d.SOURCE); print(d.SOURCE.read_text()[:100])")
    assert out.returncode == 0, out.stderr
    source = Path(out.stdout.splitlines()[0])
    assert source.is_relative_to(installed) and source.parts[-2:] == ("_bpf", "flow_marker.c")


def test_leveller_sdn_help_runs_from_the_wheel(installed: Path) -> None:
    out = run(installed, str(installed / "bin" / "leveller"), "sdn", "--help")
    assert out.returncode == 0 and "--of-port" in out.stdout, out.stderr


@pytest.mark.privileged
def test_the_installed_bpf_program_marks_packets(installed: Path) -> None:
    out = run(installed, str(installed / "bin" / "leveller"), "bench", "fuzz-marker", "--packets", "200",
              "--seed", "3", "--json", timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["packets"] == 200 and result["violations"] == 0, result
