"""A grpc.aio server on an event loop of its own thread, driven from synchronous code.

Why not ``grpc.server`` (a thread per call): with 1,000 agents reporting every
second, its Python machinery (an RPC state, a condition and a future per call,
handed from a polling thread to a pool of workers that all contend for the
interpreter lock) cost the controller more than the reports themselves, and a
decision step holding the interpreter made every worker wait behind it. Here
one event loop runs the Python part of every call in one thread: a report is
decoded and answered inline (a fraction of a millisecond), and only blocking
work (the Watch long-poll, the status of 100,000 flows) goes to a small thread
pool (``blocking``). ``leveller bench controller`` measures the difference.

Handlers are ``async def handler(body: bytes, context) -> bytes``; synchronous
code they call ends a call with ``raise Refused(code, details)`` (the loop
turns it into ``context.abort``). ``stop`` and ``wait_for_termination`` behave
as those of ``grpc.Server``, from any thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from concurrent import futures
from typing import Any, TypeVar

import grpc

T = TypeVar("T")
Handler = Callable[[bytes, Any], Awaitable[bytes]]
MessageHandler = Callable[[bytes, Any], bytes]


class Refused(Exception):
    """End the call with a gRPC status ``code`` and ``details`` (nothing else is sent)."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code, self.details = code, details


def method(handler: Handler) -> grpc.RpcMethodHandler:
    """A unary-unary method of raw bytes whose ``Refused`` becomes the call's status."""

    async def call(body: bytes, context: Any) -> bytes:
        try:
            return await handler(body, context)
        except Refused as exc:
            await context.abort(exc.code, exc.details)
            raise  # abort raises; never reached

    return grpc.unary_unary_rpc_method_handler(call)


def stream_method(handler: MessageHandler) -> grpc.RpcMethodHandler:
    """A stream-stream method of raw bytes answering each request message in order with
    ``handler(message, context)``, on the loop; a ``Refused`` ends the stream with its status."""

    async def call(requests: Any, context: Any) -> Any:
        async for message in requests:
            try:
                reply = handler(message, context)
            except Refused as exc:
                await context.abort(exc.code, exc.details)
                raise  # abort raises; never reached
            yield reply

    return grpc.stream_stream_rpc_method_handler(call)


CALL_POLL_S = 0.5  # how often a ``call`` waiting for the loop checks that the loop still runs
DRAIN_S = 2.0  # longest wait for the calls a stop cancelled to end (they take a few loop turns)


async def _finish_calls(timeout_s: float) -> None:
    """Let every call the server's stop ended run its last steps, then cancel what still runs.

    ``grpc.aio.Server.stop`` returns while a cancelled stream's task still has a loop turn to go; a loop
    closed under it leaves the task pending, and its collection prints "Task was destroyed but it is
    pending!" and a GeneratorExit traceback later, into whatever runs then."""
    me = asyncio.current_task()
    for _ in range(2):  # wait, then cancel and wait again
        tasks = [t for t in asyncio.all_tasks() if t is not me and not t.done()]
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=timeout_s)
        for task in pending:
            task.cancel()


class LoopServer:
    """grpc.aio.Server on a private event loop thread, plus a pool for blocking work."""

    def __init__(self, options: Sequence[tuple[str, Any]], blocking_threads: int) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="grpc-loop", daemon=True)
        self._thread.start()
        self.blocking = futures.ThreadPoolExecutor(max_workers=blocking_threads, thread_name_prefix="grpc-blocking")
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        try:
            self.server: grpc.aio.Server = self.run(self._create(list(options)))
        except BaseException:
            self._shutdown_loop()
            raise

    @staticmethod
    async def _create(options: list[tuple[str, Any]]) -> grpc.aio.Server:
        return grpc.aio.server(options=options)

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float = 30.0) -> T:
        """Run ``coro`` on the server's loop and return its result (from another thread)."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s)

    def call(self, fn: Callable[[], T]) -> T:
        """``fn()`` on the loop's thread, between the callbacks of the calls it serves, from any thread;
        its result or its exception. The controller runs the Python pieces of a decision step here: one
        thread then holds the interpreter, instead of two trading it (leveller.controller.service). Once
        the loop has stopped, ``fn()`` runs in the caller's thread."""
        if threading.current_thread() is self._thread:
            return fn()
        done: futures.Future[T] = futures.Future()

        def run() -> None:
            if done.set_running_or_notify_cancel():
                try:
                    done.set_result(fn())
                except BaseException as exc:  # handed to the caller
                    done.set_exception(exc)
        try:
            self._loop.call_soon_threadsafe(run)
        except RuntimeError:  # the loop is closed
            return fn()
        while True:
            try:
                return done.result(timeout=CALL_POLL_S)
            except futures.TimeoutError:
                if self._thread.is_alive():
                    continue
                if done.cancel():  # the loop ended before running it
                    return fn()
                return done.result(timeout=0)  # it ended with the loop's last callbacks

    def call_soon(self, fn: Callable[[], object]) -> None:
        """Run ``fn()`` on the server's loop soon (from any thread; cheap: it only queues it). Nothing
        once the loop is closed: the calls ``fn`` would serve ended with it (a controller stepping on after
        its server stopped raised here, from the push path's listener)."""
        try:
            self._loop.call_soon_threadsafe(fn)
        except RuntimeError:  # closed
            pass

    async def in_pool(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in the blocking pool, awaited from a handler."""
        return await asyncio.get_running_loop().run_in_executor(self.blocking, fn, *args)

    def start(self) -> None:
        self.run(self.server.start())

    def stop(self, grace: float | None) -> threading.Event:
        """Stop accepting calls, cancel those still running after ``grace`` seconds (None: at once), end the
        loop and the pool. Returns an event that is set once everything stopped (as grpc.Server.stop)."""
        with self._lock:
            if not self._stopped.is_set():
                try:
                    self.run(self.server.stop(grace), timeout_s=(grace or 0) + 30)
                    self.run(_finish_calls(DRAIN_S), timeout_s=2 * DRAIN_S + 5)
                finally:
                    self._shutdown_loop()
                    self._stopped.set()
        return self._stopped

    def _shutdown_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self._loop.close()
        self.blocking.shutdown(wait=False, cancel_futures=True)

    def wait_for_termination(self, timeout: float | None = None) -> bool:
        """True once stopped; False if ``timeout`` seconds passed first."""
        return self._stopped.wait(timeout)
