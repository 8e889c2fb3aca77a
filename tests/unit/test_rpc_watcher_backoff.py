"""LevelsWatcher's loop: failures back off ``retry_s`` and are reported, a reply clears the error and
is handed on, and close() ends the loop also in the middle of a back-off."""

from __future__ import annotations

import socket

import grpc
import pytest

from leveller.codec import SchemaError
from leveller.rpc.push import LevelsWatcher
from leveller.rpc.schema import LevelsReply
from tests.helpers.wait import wait_until

SECRET = b"watcher-backoff-secret-0123456789"
REPLY = LevelsReply(epoch=3, lease_s=10.0, dscp_by_level=(0, 8), flows=())


class Unavailable(grpc.RpcError):
    def __str__(self) -> str:
        return "controller unavailable"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_failures_back_off_and_a_reply_clears_the_error() -> None:
    got: list[LevelsReply] = []
    w = LevelsWatcher("127.0.0.1:1", SECRET, "h1", got.append, lambda: [], wait_s=1.0, retry_s=0.25)
    script: list[object] = [Unavailable(), SchemaError("epoch", "bad"), ValueError("no"), REPLY]
    waits: list[float] = []
    errors_seen: list[str | None] = []

    def poll_once() -> LevelsReply:
        errors_seen.append(w.last_error)
        item = script.pop(0)
        if isinstance(item, Exception):
            raise item
        return item  # type: ignore[return-value]

    def on_levels(reply: LevelsReply) -> None:
        got.append(reply)
        w._stop.set()  # one reply is enough: end the loop

    real_wait = w._stop.wait

    def wait(timeout: float) -> bool:
        waits.append(timeout)
        return real_wait(0)

    w.poll_once = poll_once  # type: ignore[method-assign]
    w.on_levels = on_levels
    w._stop.wait = wait  # type: ignore[method-assign]
    w._loop()
    assert waits == [0.25, 0.25, 0.25]  # one back-off per failure, none after the reply
    assert errors_seen[1] == "Unavailable: controller unavailable"
    assert errors_seen[2].startswith("FieldError: epoch") and errors_seen[3] == "ValueError: no"
    assert got == [REPLY] and w.last_error is None
    w.close()


def test_a_watcher_of_a_dead_controller_keeps_retrying_and_closes_during_its_back_off() -> None:
    w = LevelsWatcher(f"127.0.0.1:{closed_port()}", SECRET, "h1", lambda r: None, lambda: [], wait_s=0.5,
                      retry_s=60.0)
    w.start()
    wait_until(lambda: w.last_error is not None, 10, "the first call to fail")  # now in a 60 s back-off
    assert "StatusCode.UNAVAILABLE" in w.last_error
    w.close()  # joins for at most wait_s + 1 s: only returns with the thread gone if the back-off was cut short
    assert not w._thread.is_alive()


def test_wait_is_bounded() -> None:
    for bad in (0, -1.0, 1e9):
        with pytest.raises(ValueError, match="wait_s must be in"):
            LevelsWatcher("127.0.0.1:1", SECRET, "h1", lambda r: None, lambda: [], wait_s=bad)
