"""RDMA shim harness: build the C parts, run the verbs program under the shim, measure QP resurrection.

Runs the verbs test program (tests/shim/verbs_stream.c) under
LD_PRELOAD=shim/build/libleveller_shim.so against the FAKE verbs provider
(tests/shim/fake_verbs.c; there is no RDMA NIC here). Used by
`leveller bench shim` and by the shim's tests (build_all, StreamRun,
parse_fake_log).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leveller.errors import UserError

ROOT = Path(__file__).resolve().parents[2]
SHIM_DIR = ROOT / "shim"
SHIM_LIB = SHIM_DIR / "build" / "libleveller_shim.so"
FAKE_SRC = ROOT / "tests" / "shim"


# ---- harness shared with tests/unit/test_shim*.py --------------------------

class BuildError(RuntimeError):
    """The C parts (shim, fake provider, verbs program) could not be built."""


def build_all(out: Path) -> Path:
    """Build the shim (shim/build) and the fake + verbs programs into ``out``."""
    missing = [tool for tool in ("gcc", "make") if shutil.which(tool) is None]
    if missing:
        raise BuildError(f"the RDMA shim needs {' and '.join(missing)} on PATH "
                         "(Debian: apt-get install gcc make libibverbs-dev)")
    if not Path("/usr/include/infiniband/verbs.h").exists():
        raise BuildError("the RDMA shim needs the verbs headers /usr/include/infiniband/verbs.h "
                         "(Debian: apt-get install libibverbs-dev)")
    if not (FAKE_SRC / "Makefile").exists():
        raise BuildError(f"{FAKE_SRC} is missing: run from a LEVELLER source checkout")
    for args in (["make", "-s", "-C", str(SHIM_DIR)], ["make", "-s", "-C", str(FAKE_SRC), f"O={out}"]):
        proc = subprocess.run(args, capture_output=True, text=True)
        if proc.returncode != 0:
            raise BuildError(f"{' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return out


@dataclass
class LogLine:
    """One line of the fake provider's log: kind and key=value fields."""

    kind: str
    fields: dict[str, str]


def parse_fake_log(path: Path) -> list[LogLine]:
    """The fake provider's log (LEVELLER_FAKE_LOG) as LogLines."""
    if not path.exists():
        return []
    out = []
    for raw in path.read_text().splitlines():
        kind, _, rest = raw.partition(" ")
        out.append(LogLine(kind, {k: v.strip('"') for k, v in re.findall(r'(\w+)=("[^"]*"|\S+)', rest)}))
    return out


class StreamRun:
    """The verbs program streaming QP A -> QP B under the shim, until stop()."""

    def __init__(self, build: Path, workdir: Path, mode: str = "linked", job: str = "jobA", fail: str = "",
                 extra_args: list[str] | None = None, preload: bool = True,
                 extra_env: dict[str, str] | None = None) -> None:
        self.log = workdir / "fake.log"
        self.sock = workdir / "leveller-shim-test.sock"
        env = dict(os.environ, LD_LIBRARY_PATH=str(build / "fake"), LEVELLER_JOB=job,
                   LEVELLER_FAKE_LOG=str(self.log), LEVELLER_SHIM_SOCK=str(self.sock), LEVELLER_FAKE_FAIL=fail)
        env.update(extra_env or {})
        env.pop("LD_PRELOAD", None)
        if preload:
            env["LD_PRELOAD"] = str(SHIM_LIB)
        self.proc = subprocess.Popen([str(build / f"verbs_stream_{mode}"), *(extra_args or [])],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=env, text=True)
        assert self.proc.stdout is not None
        first = self.proc.stdout.readline()
        if not first.startswith(("READY", "INIT")):
            self.kill()
            raise BuildError(f"verbs program did not start: {first!r}")
        self.ids: dict[str, Any] = json.loads(first.split(" ", 1)[1])

    def wait_ready(self) -> None:
        """After --pause-before-rtr-ms: wait until the QPs are connected."""
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("READY"):
            raise BuildError(f"verbs program did not connect: {line!r}")

    def stop(self, timeout: float = 30.0) -> dict[str, Any]:
        """Stop streaming and return the program's summary (it waits for every message)."""
        out, err = self.proc.communicate("stop\n", timeout=timeout)
        lines = [ln for ln in out.splitlines() if ln.startswith("{")]
        if not lines:
            raise BuildError(f"verbs program gave no summary; stdout={out!r} stderr={err!r}")
        return json.loads(lines[-1])

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()


# ---- the benchmark ---------------------------------------------------------

def _stats(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]
    return {"median": statistics.median(ordered), "p99": p99, "max": ordered[-1], "n": len(ordered)}


def run(changes: int, mode: str, window: int, size: int,
        progress: Callable[[str], None] = lambda _msg: None) -> dict[str, Any]:
    """Measure resurrection pauses; returns the JSON-able result."""
    from leveller.agent.shim_control import ShimClient

    with tempfile.TemporaryDirectory(prefix="leveller-bench-shim-") as tmp:
        tmpdir = Path(tmp)
        progress("building the shim and the fake verbs provider")
        build = build_all(tmpdir / "build")
        stream = StreamRun(build, tmpdir, mode=mode, extra_args=["--window", str(window), "--size", str(size),
                                                                  "--max-seconds", "600"])
        try:
            client = ShimClient(stream.sock)
            roles = {"sender": stream.ids["qp_a"], "receiver": stream.ids["qp_b"]}
            pauses: dict[str, list[float]] = {r: [] for r in roles}
            drains: dict[str, list[float]] = {r: [] for r in roles}
            failures: list[str] = []
            for i in range(changes):
                if i % 20 == 0:
                    progress(f"traffic-class change {i + 1}/{changes}")
                tc = 32 * (1 + i % 7)
                for role, qpn in roles.items():
                    (res,) = client.set_traffic_class(tc, qp=qpn)
                    if not res.ok:
                        failures.append(f"{role} QP {qpn}: {res.error}")
                        continue
                    pauses[role].append(res.pause_us)
                    drains[role].append(res.drain_us)
            progress("stopping the stream")
            summary = stream.stop()
        finally:
            stream.kill()
    if failures:
        raise UserError(f"{len(failures)} traffic-class changes failed, first: {failures[0]}")
    intact = (summary["errors"] == 0 and summary["in_order"] and summary["received"] == summary["posted"])
    return {
        "mode": mode, "changes_per_qp": changes, "window": window, "size": size,
        "pause_us": {r: _stats(v) for r, v in pauses.items()},
        "drain_us": {r: _stats(v) for r, v in drains.items()},
        "messages": summary["posted"], "messages_intact": intact, "max_gap_ms": summary["max_gap_ms"],
        "provider": "fake (tests/shim/fake_verbs.c)",
    }
