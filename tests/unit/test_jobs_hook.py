"""The iteration hook writes the log line the rate tracker parses."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from leveller.jobs.hook import IterationReporter, process_start_time
from leveller.jobs.logline import DEFAULT_PATTERN, format_line


def test_reporter_lines_match_default_pattern() -> None:
    lines: list[str] = []
    clock = iter([5.0, 6.5, 8.0]).__next__
    rep = IterationReporter("gpt", 3, lines.append, clock=clock, start_time=1.0)
    assert rep.iteration_done() == 1
    assert rep.iteration_done() == 2
    parsed = [re.search(DEFAULT_PATTERN, line) for line in lines]
    assert [(m.group("job"), int(m.group("iter")), float(m.group("t"))) for m in parsed if m] == [
        ("gpt", 0, 1.0), ("gpt", 1, 5.0), ("gpt", 2, 6.5)]
    assert all(line.endswith("\n") and "rank=3" in line for line in lines)


def test_format_line_rejects_bad_values() -> None:
    with pytest.raises(ValueError):
        format_line("j", -1, 1.0)
    with pytest.raises(ValueError):
        format_line("j", 1, float("nan"))


def test_process_start_time_of_a_fresh_process() -> None:
    before = time.time()
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(2)"])
    try:
        started = process_start_time(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    assert before - 1.0 <= started <= time.time() + 1.0


def test_one_line_hook_in_a_real_process(tmp_path: Path) -> None:
    log = tmp_path / "it.log"
    env = dict(os.environ, LEVELLER_JOB="bert", RANK="2", LEVELLER_ITER_LOG=str(log))
    env.pop("LEVELLER_RANK", None)
    code = "from leveller.jobs.hook import iteration_done\nfor _ in range(3): iteration_done()"
    t0 = time.time()
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60)
    lines = log.read_text().splitlines()
    found = [re.search(DEFAULT_PATTERN, line) for line in lines]
    assert [int(m.group("iter")) for m in found if m and m.group("job") == "bert"] == [0, 1, 2, 3]
    assert all("rank=2" in line for line in lines)
    start = float(found[0].group("t"))  # type: ignore[union-attr]
    assert t0 - 1.0 <= start <= float(found[-1].group("t")) + 0.05  # type: ignore[union-attr]
