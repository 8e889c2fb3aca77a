"""leveller.agent.shim_control and shim/control.c: one lease bound, 60 s.

Issue 26, finding 10 (the lease part; the socket's mode 0600 came with the high findings): any
client of the shim's socket could give a QP a class with a one-day lease. A lease is now at most the
agent's own bound, 60 s (the agent renews at every report), in the shim and in the agent alike."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from leveller.agent import shim_control
from leveller.bench.shim import StreamRun
from leveller.errors import UserError

CONTROL_C = Path(__file__).resolve().parents[2] / "shim" / "control.c"


def test_the_shim_and_the_agent_have_one_lease_bound() -> None:
    m = re.search(r"#define LEASE_MAX_MS (\d+)L", CONTROL_C.read_text())
    assert m is not None and int(m.group(1)) == shim_control.LEASE_MAX_MS == 60_000


def test_the_shim_refuses_a_lease_beyond_the_agents(shim_build: Path, tmp_path: Path) -> None:
    run = StreamRun(shim_build, tmp_path)
    try:
        a = run.ids["qp_a"]
        client = shim_control.ShimClient(run.sock)
        for ms in (86_400_000, 60_001):  # EF for a day: refused, nothing changed
            reply = client.request({"op": "set_tc", "qp": a, "tc": 184, "lease_ms": ms})
            assert reply["ok"] is False and "'lease_ms' must be an integer 1..60000" in reply["error"], reply
            assert "'ms'" in client.request({"op": "lease", "ms": ms})["error"]
        listing = client.request({"op": "list"})
        assert listing["lease_ms_left"] is None and {q["tc"] for q in listing["qps"]} == {0}
        (res,) = client.set_traffic_class(184, qp=a, lease_ms=60_000)  # the bound itself is fine
        assert res.ok
        with pytest.raises(UserError, match="1..60000"):
            client.set_traffic_class(184, qp=a, lease_ms=60_001)  # and the agent never asks for more
        assert client.lease(0) is True
        run.stop()
    finally:
        run.kill()
