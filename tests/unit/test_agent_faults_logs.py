"""A replaced log must not take the agent down (issue 26, High 4).

While the agent followed its logs, a log replaced by a directory, a symlink loop or a unix socket
crashed it (IsADirectoryError, ELOOP, ENXIO from agent/rate_tracker.py), removing every mark on the
host; a log symlinked to /dev/zero kept it reading zeros at 12% of a core. Now a log that is not a
regular file (or a FIFO, which the tailer follows on purpose) is skipped and counted like a bad line
(field "log" of the agent's rejections, once each time it goes bad), and read again once it is a
log again.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from leveller.agent.metrics import Rejections
from leveller.agent.rate_tracker import LogTailer, RateTracker
from leveller.agent.service import Agent
from leveller.jobs.logline import format_line
from tests.helpers.fakes import RecordingEnforcer

T0 = 1_700_000_000.0


def make_dir(path: Path) -> None:
    path.mkdir()


def make_loop(path: Path) -> None:
    path.symlink_to(path.name)  # a link to itself: ELOOP


def make_socket(path: Path) -> None:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.listen(1)
    SOCKETS.append(s)


def make_dev_zero(path: Path) -> None:
    path.symlink_to("/dev/zero")


SOCKETS: list[socket.socket] = []
BAD: dict[str, Callable[[Path], None]] = {"directory": make_dir, "symlink loop": make_loop,
                                          "unix socket": make_socket, "/dev/zero": make_dev_zero}


@pytest.fixture(autouse=True)
def _close_sockets() -> Iterator[None]:
    yield
    while SOCKETS:
        SOCKETS.pop().close()


def agent_for(log: Path) -> tuple[Agent, LogTailer, RateTracker]:
    tailer, tracker = LogTailer(str(log)), RateTracker()
    agent = Agent("h1", [(tailer, tracker)], None, RecordingEnforcer())  # type: ignore[arg-type]
    return agent, tailer, tracker


def counts(agent: Agent) -> int:
    assert isinstance(agent.rejected, Rejections)
    return agent.rejected.counts["log"]


@pytest.mark.parametrize("kind", list(BAD))
def test_a_log_replaced_while_followed_is_skipped_counted_and_read_again_once_fixed(tmp_path: Path,
                                                                                     kind: str) -> None:
    log = tmp_path / "job.log"
    log.write_text(format_line("gpt", 0, T0) + "\n")
    agent, tailer, tracker = agent_for(log)
    with log.open("a") as f:
        f.write(format_line("gpt", 1, T0 + 1) + "\n")
    agent.poll_logs(T0 + 2)
    assert tracker.jobs["gpt"].iterations == 1
    log.unlink()
    BAD[kind](log)
    for _ in range(5):
        agent.poll_logs(T0 + 3)  # the agent stays up; one bad log is one rejection, not one per poll
    assert counts(agent) == 1, agent.rejected.counts  # type: ignore[union-attr]
    assert tailer.long_lines == 0  # nothing was read from it (no megabytes of zeros)
    if log.is_dir() and not log.is_symlink():
        log.rmdir()
    else:
        log.unlink()
    log.write_text(format_line("gpt", 0, T0) + "\n" + format_line("gpt", 5, T0 + 5) + "\n")
    agent.poll_logs(T0 + 6)
    assert tracker.jobs["gpt"].iterations == 5  # the new log is followed from its start
    log.unlink()
    BAD[kind](log)
    agent.poll_logs(T0 + 7)  # the file read to its end, the path leads elsewhere: closed
    agent.poll_logs(T0 + 7)
    assert counts(agent) == 2  # gone bad again: counted again


@pytest.mark.parametrize("kind", list(BAD))
def test_a_log_that_is_bad_from_the_start_is_skipped_and_counted(tmp_path: Path, kind: str) -> None:
    log = tmp_path / "job.log"
    BAD[kind](log)
    agent, tailer, _ = agent_for(log)  # the tailer opens the log at once: that must not raise either
    agent.poll_logs(T0)
    agent.poll_logs(T0)
    assert counts(agent) == 1 and tailer.long_lines == 0


def test_the_rejection_names_the_log_and_what_it_is(tmp_path: Path) -> None:
    seen: list[tuple[str, str]] = []
    (tmp_path / "a.log").mkdir()
    tailer = LogTailer(str(tmp_path / "a.log"))
    tailer.on_reject = lambda field, message: seen.append((field, message))
    tailer.poll()
    (tmp_path / "b.log").symlink_to("/dev/zero")
    other = LogTailer(str(tmp_path / "b.log"))
    other.on_reject = lambda field, message: seen.append((field, message))
    assert other.poll() == []
    assert [f for f, _ in seen] == ["log", "log"]
    assert "a.log" in seen[0][1] and "directory" in seen[0][1]
    assert "b.log" in seen[1][1] and "character device" in seen[1][1]
    assert tailer.bad_logs == other.bad_logs == 1


def test_a_fifo_is_still_followed(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    agent, _, tracker = agent_for(fifo)
    fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    try:
        os.write(fd, (format_line("gpt", 0, T0) + "\n" + format_line("gpt", 2, T0 + 1) + "\n").encode())
        agent.poll_logs(T0 + 2)
    finally:
        os.close(fd)
    assert tracker.jobs["gpt"].iterations == 2 and counts(agent) == 0
