"""Rate tracker: iteration counting from log lines, custom patterns, and following real files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from leveller.agent.rate_tracker import LogTailer, RateTracker
from leveller.errors import UserError
from leveller.jobs.logline import format_line


def test_default_pattern_counts_max_iteration_across_ranks() -> None:
    tr = RateTracker()
    lines = [format_line("a", 0, 100.0, 0), format_line("a", 0, 100.2, 1),
             format_line("a", 1, 101.0, 0), format_line("a", 1, 101.1, 1),
             format_line("a", 2, 102.0, 1), format_line("b", 0, 101.5), "unrelated noise iter=99"]
    assert tr.feed_all(lines, now=500.0) == {"a", "b"}
    a, b = tr.jobs["a"], tr.jobs["b"]
    assert (a.iterations, a.start_time, a.last_time) == (2, 100.0, 102.0)
    assert list(a.recent) == [(1, 101.0), (2, 102.0)]
    assert (b.iterations, b.start_time) == (0, 101.5)


def test_rate_uses_core_formula() -> None:
    tr = RateTracker()
    tr.feed_all([format_line("a", 0, 100.0), format_line("a", 5, 110.0)], now=0)
    # R = 5 iterations x 1 s ideal / 10 s elapsed
    assert tr.jobs["a"].rate(ideal_time=1.0, now=110.0) == pytest.approx(0.5)
    assert tr.jobs["a"].rate(ideal_time=1.0, now=99.0) is None


def test_pattern_without_iter_counts_lines_and_uses_read_time() -> None:
    tr = RateTracker(r"Epoch \d+ step \d+ loss", default_job="bert")
    tr.feed("Epoch 0 step 0 loss 3.2", now=10.0)  # first match = start
    tr.feed("something else", now=11.0)
    tr.feed("Epoch 0 step 1 loss 3.1", now=12.0)
    tr.feed("Epoch 0 step 2 loss 3.0", now=14.0)
    p = tr.jobs["bert"]
    assert (p.iterations, p.start_time, p.last_time) == (2, 10.0, 14.0)


def test_named_iter_group_in_a_framework_log() -> None:
    tr = RateTracker(r"\| epoch \d+ \| step (?P<iter>\d+)/\d+", default_job="gpt")
    for n, now in ((0, 5.0), (3, 9.0), (2, 9.5), (7, 20.0)):
        tr.feed(f"2026-01-01 | epoch 1 | step {n}/1000 | lr 3e-4", now=now)
    assert tr.jobs["gpt"].iterations == 7
    assert tr.jobs["gpt"].start_time == 5.0


@pytest.mark.parametrize("pattern,default,msg", [
    ("(unclosed", "j", "not a valid regular expression"),
    (r"step (?P<step>\d+)", "j", "unknown named groups"),
    (r"step (?P<iter>\d+)", None, "no \\(\\?P<job>"),
])
def test_bad_patterns_are_user_errors(pattern: str, default: str | None, msg: str) -> None:
    with pytest.raises(UserError, match=msg):
        RateTracker(pattern, default_job=default)


def test_non_finite_time_is_ignored() -> None:
    tr = RateTracker(r"job=(?P<job>\w+) iter=(?P<iter>\d+) t=(?P<t>\S+)")
    assert tr.feed("job=a iter=1 t=inf", now=1.0) is None
    assert "a" not in tr.jobs


def test_tailer_follows_appends_partial_lines_truncation_and_rotation(tmp_path: Path) -> None:
    path = tmp_path / "job.log"
    tail = LogTailer(str(path))
    assert tail.poll() == []  # not created yet
    with open(path, "a") as f:
        f.write("one\ntw")
    assert tail.poll() == ["one"]
    with open(path, "a") as f:
        f.write("o\nthree\n")
    assert tail.poll() == ["two", "three"]
    path.write_text("x\n")  # truncated and rewritten
    assert tail.poll() == ["x"]
    os.rename(path, tmp_path / "job.log.1")  # rotated
    with open(tmp_path / "job.log.1", "a") as f:
        f.write("last-of-old\n")
    path.write_text("first-of-new\n")
    assert tail.poll() == ["last-of-old"]
    assert tail.poll() == ["first-of-new"]
    tail.close()


def test_tailer_reads_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    tail = LogTailer(str(fifo))
    assert tail.poll() == []
    fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    os.write(fd, (format_line("a", 0, 1.0) + "\n" + format_line("a", 1, 2.0) + "\n").encode())
    tr = RateTracker()
    tr.feed_all(tail.poll(), now=3.0)
    os.close(fd)
    assert tr.jobs["a"].iterations == 1
    tail.close()
