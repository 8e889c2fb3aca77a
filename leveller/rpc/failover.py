"""Several controllers for one agent: report to the one that answers, move on when it stops answering.

``leveller agent --controller a:50051,b:50051`` gives the agent a list of
controllers run with the same secret and settings. Each report goes to the
*active* one (the first of the list at start); when a call to it fails (no
connection, no answer within the timeout, a reply that fails its signature),
the same report goes to the next one in the list, cycling, and the first that
answers becomes the active one. The agent stays with it until it fails in turn
(no fail-back: a controller that comes back starts with an empty registry).

A standby needs no state from the active controller: the decision is a function
of the agents' latest reports (leveller.controller.registry), so once the
agents report to it, it decides what the active one would have decided.

Replay protection (leveller.rpc.replay) spans the controllers: one run id and
one sequence counter for all of them, so every controller sees this agent's
reports numbered in increasing order, with gaps where another controller got
them. A report captured on its way to one controller and replayed to another
is refused there as soon as that one has seen a later report of the run.

A refused report (INVALID_ARGUMENT, RESOURCE_EXHAUSTED) is not retried
elsewhere: every controller applies the same rules.

Controllers on etcd (``leveller controller --etcd``) elect one leader; a standby answers
FAILED_PRECONDITION "not the leader; the leader is X" (leveller.controller.leadership), and when X
is one of this client's addresses the same report goes to X next, which then stays the active one
(fail-back included: the agents follow whoever leads). X is the leader's ``--advertise`` address, so
give the agents the same spelling in ``--controller``.
"""

from __future__ import annotations

import ipaddress
import itertools
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import grpc

from leveller.controller.leadership import leader_in
from leveller.errors import UserError
from leveller.model.limits import MAX_MESSAGE_BYTES
from leveller.rpc.replay import new_run_id
from leveller.rpc.schema import LevelsReply, Report
from leveller.rpc.transport import ControllerClient, RpcFailure

MAX_CONTROLLERS = 16
SINGLE_TIMEOUT_S = 5.0  # one controller: nothing to move to, wait for a slow one
FAILOVER_TIMEOUT_S = 1.0  # several: a controller that does not answer within 1 s is left for the next
REFUSED = (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED)  # same answer everywhere


def parse_addresses(text: str, option: str = "--controller") -> tuple[str, ...]:
    """``HOST:PORT[,HOST:PORT...]`` (IPv6 as ``[ADDR]:PORT``) -> the addresses in order; UserError
    naming ``option`` and the bad item otherwise."""
    items = [item.strip() for item in text.split(",")]
    if not 1 <= len(items) <= MAX_CONTROLLERS:
        raise UserError(f"{option} {text!r}: give 1 to {MAX_CONTROLLERS} controllers, HOST:PORT,HOST:PORT,...")
    for item in items:
        host, sep, port = item.rpartition(":")
        bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        ok = bool(sep and bare) and port.isdigit() and 1 <= int(port) <= 65535
        if ok and host.startswith("["):
            try:
                ok = ipaddress.ip_address(bare).version == 6
            except ValueError:
                ok = False
        elif ok:
            ok = ":" not in bare and all(c.isalnum() or c in ".-_" for c in bare)
        if not ok:
            raise UserError(f"{option} {text!r}: {item!r} is not HOST:PORT (port 1-65535; IPv6 as [ADDR]:PORT)")
    dup = next((a for a in items if items.count(a) > 1), None)
    if dup is not None:
        raise UserError(f"{option} {text!r}: {dup!r} is given twice")
    return tuple(items)


class FailoverClient:
    """A ControllerClient per address, one active at a time (see the module docstring); thread-safe.

    ``active`` is the address of the controller that answered last (the first one before any
    answer); ``failovers`` counts moves from one controller to another after a failure."""

    def __init__(self, addresses: Iterable[str], secret: bytes | None, timeout_s: float | None = None,
                 clock: Callable[[], float] = time.time, max_message_bytes: int = MAX_MESSAGE_BYTES,
                 tls: Any = None) -> None:
        self.addresses = tuple(addresses)
        if not self.addresses:
            raise ValueError("at least one controller address is needed")
        if timeout_s is None:
            timeout_s = SINGLE_TIMEOUT_S if len(self.addresses) == 1 else FAILOVER_TIMEOUT_S
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
        self.timeout_s = timeout_s
        self.run = new_run_id()
        seq = itertools.count(1)  # shared: every controller sees this run's reports in increasing order
        self.clients = [ControllerClient(a, secret, timeout_s, clock, max_message_bytes, run=self.run, seq=seq, tls=tls)
                        for a in self.addresses]
        self.failovers = 0
        self.last_errors: dict[str, str] = {}  # address -> why its last call failed
        self._index = 0
        self._lock = threading.Lock()

    @property
    def active(self) -> str:
        return self.addresses[self._index]

    def report(self, report: Report, known_jobs: Iterable[str] | None = None) -> LevelsReply:
        """Send ``report`` to the active controller, else to the next ones in turn (RpcFailure naming
        every controller's error if none answers)."""
        jobs = None if known_jobs is None else frozenset(known_jobs)
        return self._first_answer(lambda c: c.report(report, known_jobs=jobs))

    def status(self) -> dict[str, Any]:
        """The status of the first controller that answers, active first; ``"controller"`` names it. A
        standby on etcd that names a leader in this client's list is passed over for that leader."""
        out = {**self._first_answer(lambda c: c.status()), "controller": self.active}
        ha = out.get("ha") or {}
        leader = ha.get("leader")
        if ha.get("role") != "leader" and leader in self.addresses and leader != out["controller"]:
            try:
                out = {**self.clients[self.addresses.index(leader)].status(), "controller": leader}
            except RpcFailure:
                pass  # the standby's view (it names the leader) is still worth showing
        return out

    def _first_answer(self, call: Callable[[ControllerClient], Any]) -> Any:
        with self._lock:  # one call at a time: the sequence numbers leave in order
            errors: list[tuple[str, RpcFailure]] = []
            order = [(self._index + k) % len(self.clients) for k in range(len(self.clients))]
            tried: set[int] = set()
            while order:
                i = order.pop(0)
                if i in tried:
                    continue
                tried.add(i)
                try:
                    out = call(self.clients[i])
                except RpcFailure as exc:
                    if exc.code in REFUSED:
                        raise
                    self.last_errors[self.addresses[i]] = str(exc)
                    errors.append((self.addresses[i], exc))
                    # a standby (controllers on etcd) names the leader: ask it next
                    leader = leader_in(exc.details) if exc.code == grpc.StatusCode.FAILED_PRECONDITION else None
                    if leader in self.addresses:
                        order.insert(0, self.addresses.index(leader))
                    continue
                if i != self._index:
                    self._index = i
                    self.failovers += 1
                self.last_errors.pop(self.addresses[i], None)
                return out
        if len(errors) == 1:
            raise errors[0][1]
        raise RpcFailure(errors[-1][1].code, "no controller answered: " + "; ".join(f"{a}: {e}" for a, e in errors))

    def close(self) -> None:
        for c in self.clients:
            c.close()

    def __enter__(self) -> FailoverClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
