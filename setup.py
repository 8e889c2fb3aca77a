"""setuptools hook (the project is configured in pyproject.toml): a wheel carries the eBPF C sources.

The agent compiles bpf/flow_marker.c at start (bcc); bpf/ sits next to leveller/ in the checkout, so
``build_py`` copies bpf/*.c and bpf/*.h into the built package as leveller/_bpf/, where
leveller.agent.bpfsource finds them with importlib.resources. MANIFEST.in puts them (and the RDMA shim's
sources: ``make -C shim`` builds it, see shim/README.md) into the sdist, so a wheel built from the sdist
has them too. An editable install reads the checkout's bpf/ directly.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class BuildPyWithBpf(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        dest = Path(self.build_lib) / "leveller" / "_bpf"
        dest.mkdir(parents=True, exist_ok=True)
        sources = sorted((HERE / "bpf").glob("*.[ch]"))
        if not any(s.name == "flow_marker.c" for s in sources):
            raise SystemExit("bpf/flow_marker.c is missing: the agent cannot mark without it")
        for src in sources:
            shutil.copyfile(src, dest / src.name)


setup(cmdclass={"build_py": BuildPyWithBpf})
