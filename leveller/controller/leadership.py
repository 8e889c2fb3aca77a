"""Who may decide: one leader per epoch, and a leader that stops before its etcd lease can run out.

Controllers started with ``--etcd`` campaign for one key (``<prefix>leader``, leveller.controller.hastate)
attached to an etcd lease of ``ttl_s`` seconds. The one whose create-if-absent transaction succeeds leads;
its **epoch** is the key's create revision (etcd's global revision counter: every later election gets a
larger one). The others are standbys and answer reports with :class:`NotLeader` naming the leader, which
the agents follow (leveller.rpc.failover).

Safety does not rest on etcd noticing a dead leader in time but on the leader's own clock: etcd can
expire a lease no earlier than TTL after it received the grant or keep-alive request, which is after
the controller *sent* it. So after a grant or keep-alive sent at monotonic time ``t`` and answered with
TTL ``g``, the leader may decide until ``t + g - guard_s`` and not a moment later, whatever happens to
the later keep-alives (lost, slow, refused). A successor can only be elected once the key is gone, i.e.
after the lease expired: the two never decide at the same time, up to clock-rate drift over one TTL
(which ``guard_s`` covers). Late replies on the wire are handled by the agents' epoch fence
(leveller.agent.fencing). Pure: the caller passes every time in.
"""

from __future__ import annotations

from dataclasses import dataclass

NOT_LEADER = "not the leader; "
LEADER_IS = NOT_LEADER + "the leader is "
NO_LEADER = NOT_LEADER + "no leader is elected now"
DEFAULT_GUARD_FRACTION = 0.2  # of the TTL: margin for clock-rate drift and the step in flight
MIN_GUARD_S = 0.2


class NotLeader(Exception):
    """A request to a controller that is not the leader; ``leader`` is the leader's address if known.
    Its text is what the RPC layer sends (FAILED_PRECONDITION) and :func:`leader_in` reads back."""

    def __init__(self, leader: str | None) -> None:
        super().__init__(LEADER_IS + leader if leader else NO_LEADER)
        self.leader = leader


def leader_in(details: str) -> str | None:
    """The leader's address in a NotLeader message (None if it names none or is no such message)."""
    if not details.startswith(LEADER_IS):
        return None
    address = details[len(LEADER_IS):].strip()
    return address or None


def guard_for(ttl_s: float) -> float:
    """The default guard: 20% of the TTL, at least 0.2 s (and less than the TTL)."""
    return min(max(DEFAULT_GUARD_FRACTION * ttl_s, MIN_GUARD_S), 0.5 * ttl_s)


@dataclass
class Leadership:
    """This controller's view of the election (not thread-safe: leveller.controller.ha holds a lock).

    ``role`` is "leader", "standby" or "unknown" (etcd unreachable); ``epoch`` the current leader's epoch
    (0 while none is known); ``leader`` its address; ``valid_until`` the monotonic time up to which this
    controller, as leader, may decide."""

    ttl_s: float
    guard_s: float | None = None
    role: str = "unknown"
    epoch: int = 0
    leader: str | None = None
    valid_until: float = 0.0
    elections: int = 0  # times this controller won

    def __post_init__(self) -> None:
        if not self.ttl_s >= 1:
            raise ValueError(f"ttl_s must be >= 1 (etcd leases are whole seconds), got {self.ttl_s!r}")
        if self.guard_s is None:
            self.guard_s = guard_for(self.ttl_s)
        if not 0 <= self.guard_s < self.ttl_s:
            raise ValueError(f"guard_s must be in [0, ttl_s), got {self.guard_s!r}")

    def _until(self, sent_at: float, granted_ttl: float) -> float:
        assert self.guard_s is not None
        return sent_at + min(granted_ttl, self.ttl_s) - self.guard_s

    def won(self, epoch: int, address: str, sent_at: float, granted_ttl: float) -> None:
        """The campaign succeeded with the election key created at revision ``epoch``; the lease was
        granted by a request sent at ``sent_at`` with TTL ``granted_ttl``."""
        if epoch <= 0:
            raise ValueError(f"epoch must be > 0, got {epoch!r}")
        self.role, self.epoch, self.leader = "leader", epoch, address
        self.valid_until = self._until(sent_at, granted_ttl)
        self.elections += 1

    def renewed(self, sent_at: float, granted_ttl: float) -> None:
        """A keep-alive sent at ``sent_at`` was answered with TTL ``granted_ttl`` (<= 0: the lease is gone,
        leadership lost at once)."""
        if self.role != "leader":
            return
        if granted_ttl <= 0:
            self.lost(None, 0)
            return
        self.valid_until = max(self.valid_until, self._until(sent_at, granted_ttl))

    def lost(self, leader: str | None, epoch: int) -> None:
        """Another controller leads (``leader`` at ``epoch``), or none does (None, 0)."""
        self.role = "standby" if leader else "unknown"
        self.leader, self.epoch, self.valid_until = leader, epoch, 0.0

    def follower(self, leader: str | None, epoch: int) -> None:
        """What a standby read from etcd: the current leader and its epoch (None, 0: no leader)."""
        if self.role == "leader":
            return
        self.lost(leader, epoch)

    def may_decide(self, now: float) -> bool:
        """True if this controller leads and its lease cannot have expired at etcd by ``now``."""
        return self.role == "leader" and now < self.valid_until

    def check(self, now: float, address: str) -> int:
        """This leader's epoch if it may decide at ``now``; NotLeader naming the leader otherwise (None
        while this controller's own leadership is in doubt: its lease may be expiring)."""
        if self.may_decide(now):
            return self.epoch
        leader = self.leader if self.role == "standby" and self.leader != address else None
        raise NotLeader(leader)
