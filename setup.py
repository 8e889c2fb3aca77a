"""setuptools hook (the project is configured in pyproject.toml): a wheel carries the eBPF program.

The agent loads the CO-RE object bpf/build/flow_marker.bpf.o with libbpf (built once by bpf/Makefile:
clang and bpftool at build time, nothing at run time) and falls back to compiling bpf/flow_marker.c with
bcc. bpf/ sits next to leveller/ in the checkout, so ``build_py`` copies bpf/*.c, bpf/*.h, the object
and its digest file (the sha256 of the sources it was built from) into the built package as
leveller/_bpf/, where leveller.agent.bpfsource finds them with importlib.resources. The object is built
first unless one built from the same sources is there already (an sdist carries it, so a wheel built
from the sdist needs no clang). ``sdist`` builds it too; MANIFEST.in puts it, the sources, bpf/Makefile
and the RDMA shim's sources (`make -C shim`, shim/README.md) into the sdist. An editable install reads
the checkout's bpf/ directly. LEVELLER_WITHOUT_BPF_OBJECT=1 builds without the object (its agent then
needs bcc and kernel headers).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent
BPF = HERE / "bpf"
OBJECT = BPF / "build" / "flow_marker.bpf.o"
DIGEST = BPF / "build" / "flow_marker.bpf.sha256"


def _digest() -> str:
    """sha256 of flow_marker.c followed by flow_marker.h (leveller.agent.bpfsource.source_digest)."""
    h = hashlib.sha256()
    for name in ("flow_marker.c", "flow_marker.h"):
        h.update((BPF / name).read_bytes())
    return h.hexdigest()


def _fresh() -> bool:
    try:
        return OBJECT.is_file() and DIGEST.read_text().split()[0] == _digest()
    except (OSError, IndexError):
        return False


def ensure_object() -> bool:
    """The CO-RE object built from the sources next to it (False: built without, as asked)."""
    if os.environ.get("LEVELLER_WITHOUT_BPF_OBJECT") == "1":
        return False
    if _fresh():
        return True
    if not (BPF / "Makefile").is_file():
        raise SystemExit(f"{OBJECT} is missing and bpf/Makefile is not here to build it")
    proc = subprocess.run(["make", "-s", "-C", str(BPF)], capture_output=True, text=True)
    if proc.returncode != 0 or not _fresh():
        raise SystemExit(f"building the CO-RE object {OBJECT} failed (clang, bpftool, libbpf-dev and the kernel's "
                         f"BTF in /sys/kernel/btf/vmlinux are needed: scripts/setup-system.sh; or set "
                         f"LEVELLER_WITHOUT_BPF_OBJECT=1 for a package whose agent compiles with bcc):\n"
                         f"{proc.stdout}{proc.stderr}")
    return True


class BuildPyWithBpf(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        dest = Path(self.build_lib) / "leveller" / "_bpf"
        dest.mkdir(parents=True, exist_ok=True)
        sources = sorted(BPF.glob("*.[ch]"))
        if not any(s.name == "flow_marker.c" for s in sources):
            raise SystemExit("bpf/flow_marker.c is missing: the agent cannot mark without it")
        for src in sources:
            shutil.copyfile(src, dest / src.name)
        if ensure_object():
            for built in (OBJECT, DIGEST):
                shutil.copyfile(built, dest / built.name)


class SdistWithBpf(sdist):
    def run(self) -> None:
        ensure_object()  # MANIFEST.in includes it
        super().run()


setup(cmdclass={"build_py": BuildPyWithBpf, "sdist": SdistWithBpf})
