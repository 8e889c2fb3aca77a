"""Replay protection for reports: every report carries (run, seq) under the HMAC signature.

An agent process picks a random ``run`` id when it starts and numbers its reports
``seq`` = 1, 2, ... The controller remembers, per host, the run, sequence number and
signed send time of the last report it accepted, and refuses any report that is not
newer:

- same run: ``seq`` must be larger than the last one (a captured report replayed later,
  or delivered late, carries an old number);
- another run: the report must have been signed later than the last accepted one (a
  restarted agent signs with its current clock; a replayed report of an earlier run was
  signed before the report that superseded it).

Only reports change the controller's state; Status and Watch requests are read-only and
carry no number. The sending side is leveller.rpc.transport.ControllerClient (one run id
per client, i.e. per agent process).

The signature's freshness window (leveller.rpc.auth.MAX_SKEW_S) bounds what needs to be
remembered: once ``now`` is more than that past a host's last accepted send time, every
report signed before it is refused by auth anyway, so the entry is dropped. At most
``max_hosts`` entries are kept (the oldest goes first), so memory stays bounded however
many host names are seen. Limits: the memory is in-process (after a controller restart,
a report signed in the last MAX_SKEW_S can be replayed until the agent's next report
supersedes it), and an agent restarted with its clock set back must wait until its clock
passes the last accepted send time. With ``leveller controller --etcd`` the leader keeps the marks
in etcd and a new leader restores them (``restore``) with its election time as the floor, so no
report is accepted across controllers or restarts (leveller.controller.ha).
"""

from __future__ import annotations

import re
import secrets
import threading
from collections import OrderedDict
from dataclasses import dataclass

from leveller.rpc.auth import MAX_SKEW_S

RUN_RE = re.compile(r"[0-9a-f]{16,64}")
MAX_SEQ = 2**63 - 1
DEFAULT_MAX_HOSTS = 100_000


def new_run_id() -> str:
    """A random run id (64 bits, hex) for one agent process."""
    return secrets.token_hex(8)


class ReplayError(Exception):
    """A report that is not newer than the last one accepted from its host."""


@dataclass(frozen=True)
class _Last:
    run: str
    seq: int
    sent_at: float


class ReplayGuard:
    """Per-host memory of the newest accepted (run, seq, signed time); thread-safe."""

    def __init__(self, window_s: float = MAX_SKEW_S, max_hosts: int = DEFAULT_MAX_HOSTS) -> None:
        if not window_s > 0 or max_hosts < 1:
            raise ValueError(f"window_s must be > 0 and max_hosts >= 1, got {window_s!r}, {max_hosts!r}")
        self.window_s, self.max_hosts = window_s, max_hosts
        self._last: OrderedDict[str, _Last] = OrderedDict()  # least recently accepted first
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._last)

    def admit(self, host: str, run: str, seq: int, sent_at: float, now: float) -> None:
        """Record the report as the newest of ``host``, or raise ReplayError (nothing recorded then)."""
        with self._lock:
            self._expire(now)
            last = self._last.get(host)
            if last is not None:
                if run == last.run and seq <= last.seq:
                    raise ReplayError(f"report {seq} of run {run} from host {host!r} is not newer than report "
                                      f"{last.seq} already accepted: a replayed or late copy")
                if run != last.run and sent_at <= last.sent_at:
                    raise ReplayError(f"report of run {run} from host {host!r} was signed at {sent_at:.6f}, not "
                                      f"after the last accepted report (run {last.run}, signed at "
                                      f"{last.sent_at:.6f}): a replay of an earlier run, or this host's clock "
                                      "went back")
            self._last[host] = _Last(run, seq, max(sent_at, last.sent_at) if last else sent_at)
            self._last.move_to_end(host)
            while len(self._last) > self.max_hosts:
                self._last.popitem(last=False)

    def marks(self) -> dict[str, tuple[str, int, float]]:
        """host -> (run, seq, signed time) of its newest accepted report (what an elected controller keeps in
        etcd, leveller.controller.ha)."""
        with self._lock:
            return {h: (m.run, m.seq, m.sent_at) for h, m in self._last.items()}

    def restore(self, host: str, run: str, seq: int, sent_at: float) -> None:
        """Remember ``host``'s newest accepted report as (run, seq, sent_at) unless a newer one is known: a
        new leader's marks from etcd. Run "" matches no agent, so every report must then be signed after
        ``sent_at``."""
        with self._lock:
            last = self._last.get(host)
            if last is not None and last.sent_at >= sent_at:
                return
            self._last[host] = _Last(run, seq, sent_at)
            self._last.move_to_end(host)
            while len(self._last) > self.max_hosts:
                self._last.popitem(last=False)

    def _expire(self, now: float) -> None:
        while self._last:
            host, last = next(iter(self._last.items()))
            if now - last.sent_at <= self.window_s:
                return
            del self._last[host]
