"""`leveller job`: real worker processes over loopback TCP; what the command prints and returns."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.net import free_port_block


def job(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "leveller.cli", "job", *argv], capture_output=True, text=True,
                          timeout=timeout)


def test_json_summary_counts_iterations_and_bytes(tmp_path: Path) -> None:
    log = tmp_path / "j.log"
    # 2 workers, push: rank 1 sends 0.02 s x 8 Mbit/s = 20,000 bytes per iteration to rank 0
    res = job("--name", "j1", "--worker", "127.0.0.1", "--worker", "127.0.0.1", "--compute", "0.02",
              "--comm", "0.02", "--rate", "8M", "--iterations", "5", "--port", str(free_port_block(2)),
              "--log", str(log), "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["job"] == "j1" and out["workers"] == 2 and out["ok"] is True
    assert out["iterations"] == [5, 5] and out["bytes_per_iteration"] == 20_000
    assert out["bytes_sent"] == [0, 100_000] and out["bytes_received"] == [100_000, 0]
    assert out["ideal_iteration_time_s"] == pytest.approx(0.04)
    assert out["iteration_time_s"] >= 0.02  # at least the compute sleep; the pace itself is the emulator's test
    lines = [line for line in log.read_text().splitlines() if "rank=0" in line]
    assert [int(re.search(r"iter=(\d+)", line).group(1)) for line in lines] == list(range(6))  # iter=0..5


def test_lines_go_to_stdout_and_the_summary_to_stderr() -> None:
    res = job("--name", "j2", "--worker", "127.0.0.1", "--worker", "127.0.0.1", "--compute", "0.01",
              "--comm", "0.01", "--rate", "8M", "--iterations", "3", "--port", str(free_port_block(2)))
    assert res.returncode == 0, res.stderr
    iters = [line for line in res.stdout.splitlines() if line.startswith("leveller-iter job=j2 rank=0 ")]
    assert len(iters) == 4
    assert re.search(r"job j2: iterations per worker \[3, 3\], mean iteration \d\.\d{3} s \(ideal 0\.020 s\)",
                     res.stderr)


def test_a_failing_worker_is_an_error_naming_it() -> None:
    # Worker 1's address cannot be bound here: it exits, the job is stopped and reported.
    res = job("--name", "j3", "--worker", "127.0.0.1", "--worker", "192.0.2.1", "--compute", "0.01",
              "--comm", "0.01", "--rate", "8M", "--duration", "30", "--port", str(free_port_block(2)), "--json")
    assert res.returncode == 2
    assert res.stderr.startswith("leveller job: error: job j3 failed: worker 1 exit 1: ")
    assert "Cannot assign requested address" in res.stderr and "(then stopped worker 0)" in res.stderr
    assert json.loads(res.stdout)["ok"] is False


@pytest.mark.parametrize("argv,needle", [
    (["--worker", "localhost"], "'localhost' is not an IP address"),
    (["--worker", "127.0.0.1", "--rate", "fast"], "--rate 'fast' is not a positive bit rate"),
    (["--worker", "127.0.0.1", "--rate", "0M"], "--rate '0M' is not a positive bit rate"),
])
def test_bad_arguments_are_one_error_line(argv: list[str], needle: str) -> None:
    res = job("--name", "j4", "--compute", "0.01", "--comm", "0.01", "--iterations", "1", *argv, timeout=60)
    assert res.returncode == 2 and needle in res.stderr and "Traceback" not in res.stderr, res.stderr
