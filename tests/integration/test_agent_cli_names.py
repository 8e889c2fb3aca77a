"""`leveller agent` as root with names that try to leave the run directory (issue 10, Medium 7).

`--dev ../../../<dir>/victim` used to make the agent create a directory in /run/leveller, lock
<dir>/victim.lock and delete it on the way out; a deeper variant created directories outside the run
directory. Every such name must be refused, naming the option, before any file is touched.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from leveller.agent.claim import LOCK_DIR

pytestmark = pytest.mark.privileged


def _agent(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "leveller.cli", "agent", "--controller", "127.0.0.1:9",
                           "--duration", "20", *args], capture_output=True, text=True, timeout=60,
                          env={"LEVELLER_SECRET": "names-test-secret-0123456789", "PATH": "/usr/bin:/bin"})


def _run_dir() -> set[str]:
    return {p.name for p in LOCK_DIR.iterdir()} if LOCK_DIR.exists() else set()


@pytest.mark.parametrize("variant,option", [
    ("{tmp}/victim", "--dev"), ("{tmp}/deep/er/victim", "--dev"), ("x", "--netns"), ("x", "--host")])
def test_names_leaving_the_run_directory_are_refused_before_any_file_operation(
        tmp_path: Path, variant: str, option: str) -> None:
    victim = tmp_path / "victim.lock"
    victim.write_text("precious")
    (tmp_path / "j.log").write_text("")
    escape = "../../../.." + str(tmp_path)  # /run/leveller/agent-host-.. then up to /, then down here
    before = _run_dir()
    args = ["--log", str(tmp_path / "j.log")]
    if option == "--dev":
        args += ["--dev", variant.format(tmp=escape)]
    elif option == "--netns":
        args += ["--dev", "lo", "--netns", escape + "/victim"]
    else:
        args += ["--host", "a/b"]
    try:
        out = _agent(*args)
        assert victim.exists() and victim.read_text() == "precious", out.stderr
        assert sorted(p.name for p in tmp_path.iterdir()) == ["j.log", "victim.lock"]  # nothing created here
        assert _run_dir() == before  # nor in the run directory
        assert out.returncode == 2, out.stdout + out.stderr
        assert f"error: {option}" in out.stderr and "Traceback" not in out.stderr, out.stderr
    finally:  # what the old code left behind, so a failing run does not leave it on the machine
        for leftover in _run_dir() - before:
            if leftover.startswith("agent-") and (LOCK_DIR / leftover).is_dir():
                (LOCK_DIR / leftover).rmdir()
