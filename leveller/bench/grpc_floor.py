"""The floor under a pushed decision: a bare gRPC long-poll reply on this machine, no work at all.

A server method waits for an event and answers a few bytes; a client in
another process (as an agent is) calls it in a loop. Latency = the event set
in the server -> the client's call returned, both wall clock on one host.
``leveller bench levels`` prints it next to its own "wake" + "send" stages
(the same path with our reply building, encoding and signatures), so the
part of a decision's milliseconds that gRPC itself takes is measured in the
same run, not assumed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from concurrent import futures

SERVICE, METHOD = "leveller.bench.Floor", "Wait"


def _client(address: str, n: int) -> None:
    import grpc

    with grpc.insecure_channel(address) as channel:
        call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(f"/{SERVICE}/{METHOD}")
        out = []
        for _ in range(n):
            call(b"{}", timeout=10)
            out.append(time.time())
    print(json.dumps(out), flush=True)


def measure(samples: int = 100, gap_s: float = 0.02) -> list[float]:
    """Milliseconds from the server's event to the other process's return, per sample."""
    import grpc

    wake, waiting = threading.Event(), threading.Event()

    def wait(body: bytes, context: grpc.ServicerContext) -> bytes:
        waiting.set()
        wake.wait(10)
        wake.clear()
        return b'{"epoch":1}'

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        SERVICE, {METHOD: grpc.unary_unary_rpc_method_handler(wait)}),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    proc = subprocess.Popen([sys.executable, "-m", "leveller.bench.grpc_floor", f"127.0.0.1:{port}", str(samples)],
                            stdout=subprocess.PIPE, text=True)
    try:
        sets = []
        for _ in range(samples):
            if not waiting.wait(10):
                raise RuntimeError("the gRPC floor client did not call: benchmark invalid")
            waiting.clear()
            time.sleep(gap_s)  # sporadic, as decisions are
            sets.append(time.time())
            wake.set()
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        server.stop(grace=None)
    returned = json.loads(out)
    return [(r - s) * 1e3 for s, r in zip(sets, returned)]


if __name__ == "__main__":
    _client(sys.argv[1], int(sys.argv[2]))
