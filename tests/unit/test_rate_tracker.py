"""Rate tracker: iteration counting from log lines, custom patterns, and following real files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from leveller.agent.rate_tracker import LogTailer, RateTracker
from leveller.agent.service import Agent
from leveller.errors import UserError
from leveller.jobs.logline import format_line
from tests.helpers.fakes import RecordingEnforcer


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


def _big_log(path: Path, megabytes: int, t0: float) -> None:
    """A log of ``megabytes`` MB: the job's start line, iteration lines, and iteration 123456 last."""
    block = "".join(format_line("big", i, t0 + i * 0.001) + "\n" for i in range(1, 10001)).encode()
    with open(path, "wb") as f:
        f.write((format_line("big", 0, t0) + "\n").encode())
        while f.tell() < megabytes << 20:
            f.write(block)  # iterations 1..10000 again: the tracker keeps the largest
        f.write((format_line("big", 123456, t0 + 500.0) + "\n").encode())


def test_a_100_mb_backlog_is_not_replayed_and_memory_stays_bounded(tmp_path: Path) -> None:
    """Low 12: the agent used to read a log's whole backlog at once (504 MB RSS, 11.5 s without a report).
    By default it starts at the end, after reading both ends of the file: the job's start line at the
    top, its latest count at the bottom."""
    import tracemalloc

    from leveller.agent.rate_tracker import EDGE_BYTES

    path = tmp_path / "big.log"
    _big_log(path, 100, 1000.0)
    tracker = RateTracker()
    tracemalloc.start()
    try:
        tail = LogTailer(str(path))
        lines = tail.poll()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, f"{peak / 2**20:.1f} MiB for one poll of a 100 MB log"
    assert 0 < sum(len(x) + 1 for x in lines) <= 2 * EDGE_BYTES  # both ends only, not the backlog
    tracker.feed_all(lines, now=2000.0)
    # the start from the top, the latest count from the bottom: R is right from the first report
    assert (tracker.jobs["big"].iterations, tracker.jobs["big"].start_time) == (123456, 1000.0)
    with open(path, "a") as f:
        f.write(format_line("big", 123457, 1600.0) + "\n")
    assert tail.poll() == [format_line("big", 123457, 1600.0)]  # then only what is new
    tail.close()


def test_reading_a_backlog_from_the_start_takes_bounded_steps(tmp_path: Path) -> None:
    import tracemalloc

    from leveller.agent.rate_tracker import MAX_LINE_BYTES

    path = tmp_path / "big.log"
    _big_log(path, 100, 1000.0)
    tail = LogTailer(str(path), from_start=True, max_read=1 << 20)
    sizes, peaks = [], []
    tracemalloc.start()
    try:
        for i in range(5):
            tracemalloc.reset_peak()
            lines = tail.poll()
            peaks.append(tracemalloc.get_traced_memory()[1])
            sizes.append(sum(len(x) + 1 for x in lines))
            if i == 0:
                assert lines[0] == format_line("big", 0, 1000.0)  # from the first line
            del lines
    finally:
        tracemalloc.stop()
    assert max(peaks) < 6 << 20, f"{max(peaks) / 2**20:.1f} MiB for one poll"
    # one MiB read per poll, plus the end of a line begun in the previous one
    assert all(0 < size <= (1 << 20) + MAX_LINE_BYTES for size in sizes), sizes
    assert tail.behind  # more to come at the next poll
    tail.close()


def test_an_overlong_line_is_skipped_and_counted_once(tmp_path: Path) -> None:
    path = tmp_path / "long.log"
    path.write_text("")
    tail = LogTailer(str(path), max_read=4096, max_line=1024)
    with open(path, "a") as f:
        f.write("before\n" + "x" * 3000)  # a line longer than max_line, not finished yet
    assert tail.poll() == ["before"]
    with open(path, "a") as f:
        f.write("y" * 3000)
    assert tail.poll() == []  # still inside it: nothing buffered beyond max_line
    with open(path, "a") as f:
        f.write("z\nafter\n" + "w" * 2000 + "\nlast\n")
    assert tail.poll() == ["after", "last"]
    assert tail.long_lines == 2 and tail._partial == b""
    tail.close()


def test_counting_patterns_do_not_count_the_head_of_a_log_joined_late(tmp_path: Path) -> None:
    path = tmp_path / "count.log"
    path.write_text("step\n" * 40000)  # 200 KB of history
    tail = LogTailer(str(path), edge_bytes=0)
    assert tail.poll() == []
    with open(path, "a") as f:
        f.write("step\nstep\n")
    tr = RateTracker(r"^step$", default_job="c")
    tr.feed_all(tail.poll(), now=5.0)
    assert tr.jobs["c"].iterations == 1  # first line seen = start; one iteration since


def test_a_line_being_written_when_joining_late_is_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "mid.log"
    history = "".join(format_line("m", i, 1000.0 + i) + "\n" for i in range(5000))  # > 2 x 64 KiB
    path.write_text(history + "leveller-iter job=m rank=0 it")  # the writer is in the middle of a line
    tail = LogTailer(str(path))
    tr = RateTracker()
    tr.feed_all(tail.poll(), now=7000.0)
    assert (tr.jobs["m"].start_time, tr.jobs["m"].iterations) == (1000.0, 4999)
    with open(path, "a") as f:
        f.write("er=5000 t=6000.0\n")
    assert tail.poll() == ["leveller-iter job=m rank=0 iter=5000 t=6000.0"]  # not a fragment
    tail.close()


# --- a job restarted in its log (issue 26, finding 17: one restarted in a truncated or replaced log kept its old
# iteration count) ------------------------------------------------------------------------------------------------

T0 = 1_700_000_000.0


def _agent(log: Path) -> tuple[Agent, RateTracker]:
    tailer, tracker = LogTailer(str(log)), RateTracker()
    return Agent("h1", [(tailer, tracker)], None, RecordingEnforcer()), tracker  # type: ignore[arg-type]


def _lines(*items: tuple[int, float]) -> str:
    return "".join(format_line("gpt", n, t) + "\n" for n, t in items)


def _restart_truncated(log: Path) -> None:
    with log.open("r+") as f:  # same inode, size down (the job's launcher opened it with O_TRUNC)
        f.truncate(0)


def _restart_replaced(log: Path) -> None:
    log.unlink()  # another inode under the same path


@pytest.mark.parametrize("restart", [_restart_truncated, _restart_replaced], ids=["truncated", "replaced"])
def test_a_job_restarted_in_its_log_starts_a_new_run(tmp_path: Path, restart: object) -> None:
    log = tmp_path / "job.log"
    log.write_text("")
    agent, tracker = _agent(log)
    with log.open("a") as f:
        f.write(_lines(*((n, T0 + n) for n in range(10))))
    agent.poll_logs(T0 + 10)
    assert tracker.jobs["gpt"].iterations == 9 and tracker.jobs["gpt"].start_time == T0
    restart(log)  # type: ignore[operator]
    agent.poll_logs(T0 + 11)
    with log.open("a") as f:
        f.write(_lines((0, T0 + 100), (1, T0 + 101)))
    agent.poll_logs(T0 + 102)
    agent.poll_logs(T0 + 102)  # a replaced log is found at the poll after the old one's end
    p = tracker.jobs["gpt"]
    assert (p.iterations, p.start_time) == (1, T0 + 100), (p.iterations, p.start_time)
    assert [n for n, _ in p.recent] == [1]


def test_a_job_that_goes_on_counting_after_logrotate_keeps_its_run(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text("")
    agent, tracker = _agent(log)
    with log.open("a") as f:
        f.write(_lines(*((n, T0 + n) for n in range(10))))
    agent.poll_logs(T0 + 10)
    os.rename(log, tmp_path / "job.log.1")  # logrotate: the job reopens a new file and goes on counting
    agent.poll_logs(T0 + 11)
    log.write_text(_lines((10, T0 + 12), (11, T0 + 13)))
    agent.poll_logs(T0 + 14)
    agent.poll_logs(T0 + 14)
    p = tracker.jobs["gpt"]
    assert (p.iterations, p.start_time) == (11, T0)


def test_a_restart_is_counted_once_per_truncation(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text(_lines((0, T0)))
    tailer = LogTailer(str(log), from_start=True)
    assert tailer.poll() and tailer.restarts == 0
    _restart_truncated(log)
    tailer.poll()
    tailer.poll()
    assert tailer.restarts == 1
