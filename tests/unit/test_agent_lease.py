"""Lease arithmetic (pure, time as an argument)."""

from __future__ import annotations

import pytest

from leveller.agent.lease import Lease


def test_lease_expires_once_after_its_duration() -> None:
    lease = Lease()
    assert not lease.valid(0.0) and not lease.expire_if_due(0.0)  # never granted: nothing to clear
    lease.renew(10.0, 3.0)
    assert lease.valid(12.9) and not lease.expire_if_due(12.9)
    assert not lease.valid(13.0)
    assert lease.expire_if_due(13.0)
    assert not lease.expire_if_due(20.0)  # only once
    lease.renew(20.0, 1.0)
    assert lease.valid(20.5)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan")])
def test_lease_refuses_non_positive_duration(bad: float) -> None:
    with pytest.raises(ValueError):
        Lease().renew(0.0, bad)
