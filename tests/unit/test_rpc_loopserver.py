"""leveller.rpc.loopserver: the grpc.aio server on its own loop thread, driven from synchronous code."""

from __future__ import annotations

import socket
import threading
import time

import grpc
import pytest

from leveller.rpc.loopserver import LoopServer, Refused, method
from leveller.rpc.transport import serve
from tests.helpers.rpc import RecordingHandler


def _loop_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name == "grpc-loop")


def test_refused_becomes_the_status_and_blocking_work_does_not_hold_the_loop() -> None:
    server = LoopServer([], blocking_threads=2)
    release = threading.Event()

    async def slow(body: bytes, context: object) -> bytes:
        return await server.in_pool(lambda: release.wait(10) and b"late")

    async def fast(body: bytes, context: object) -> bytes:
        if body == b"no":
            raise Refused(grpc.StatusCode.PERMISSION_DENIED, "not you")
        return body[::-1]

    server.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "t.S", {"Slow": method(slow), "Fast": method(fast)}),))
    port = server.server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            pending = ch.unary_unary("/t.S/Slow").future(b"")
            t0 = time.monotonic()
            assert ch.unary_unary("/t.S/Fast")(b"abc", timeout=5) == b"cba"  # while Slow waits in the pool
            assert time.monotonic() - t0 < 3
            with pytest.raises(grpc.RpcError) as err:
                ch.unary_unary("/t.S/Fast")(b"no", timeout=5)
            assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED and err.value.details() == "not you"
            release.set()
            assert pending.result(timeout=5) == b"late"
    finally:
        done = server.stop(grace=None)
    assert done.is_set() and server.wait_for_termination(0)
    assert server.stop(grace=1) is done  # twice: nothing more to do


def test_a_port_in_use_is_an_error_and_leaves_no_server_running() -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    before = _loop_threads()
    try:
        with pytest.raises((OSError, RuntimeError)):
            serve(RecordingHandler(), f"127.0.0.1:{taken.getsockname()[1]}", b"secret-0123456789abcdef")
    finally:
        taken.close()
    assert _loop_threads() == before


def test_stop_ends_the_loop_thread() -> None:
    before = _loop_threads()
    server, _port = serve(RecordingHandler(), "127.0.0.1:0", b"secret-0123456789abcdef")
    assert _loop_threads() == before + 1
    server.stop(grace=0.5).wait()
    assert _loop_threads() == before


def test_call_runs_on_the_loop_thread_hands_back_result_or_error_and_falls_back_once_stopped() -> None:
    server = LoopServer([], blocking_threads=1)
    try:
        assert server.call(lambda: threading.current_thread().name) == "grpc-loop"
        assert server.call(lambda: server.call(lambda: 7)) == 7  # from the loop itself: no deadlock

        def fail() -> None:
            raise ValueError("piece failed")
        with pytest.raises(ValueError, match="piece failed"):
            server.call(fail)
    finally:
        server.stop(grace=None)
    assert server.call(threading.current_thread) is threading.current_thread()  # no loop left: here
