"""Live: `leveller agent --phase-demotion --rto-min-ms 10` on a real job between two namespaces, with a
controller: the job's packets get their level, a host route toward the job's peer gets the lower RTO minimum
(the subnet's route is left as it was), and when the agent is SIGKILLed the host route and the keeper are
gone."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from .support import (
    DSCP_TOP,
    ENV,
    JOB_PORT,
    controller,
    free_port,
    job_on_the_wire,
    json_lines,
    leveller_proc,
    wait_until,
)

pytestmark = pytest.mark.privileged


def route_metrics(ns: str, network: str) -> dict[str, int]:
    from pyroute2 import NetNS

    with NetNS(ns, flags=0) as ipr:
        for msg in ipr.route("dump", family=2, table=254):
            if msg.get_attr("RTA_DST") == network:
                metrics = msg.get_attr("RTA_METRICS")
                return dict(metrics["attrs"]) if metrics else {}
    raise AssertionError(f"no route to {network} in {ns}")


def host_routes(ns: str) -> dict[str, dict[str, int]]:
    """The keeper's host routes in ``ns`` (protocol 76): destination -> metrics."""
    from pyroute2 import NetNS

    from leveller.agent.rto_min import RTPROT_LEVELLER

    with NetNS(ns, flags=0) as ipr:
        return {m.get_attr("RTA_DST"): dict((m.get_attr("RTA_METRICS") or {"attrs": []})["attrs"])
                for m in ipr.route("dump", family=2, proto=RTPROT_LEVELLER)}


def keepers(ns: str) -> list[int]:
    """Pids of route keepers working in ``ns``."""
    out = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"leveller.agent.rto_min" in argv and ns.encode() in argv:
            out.append(int(proc.name))
    return out


def test_the_agent_tunes_the_route_toward_its_job_peer_and_its_death_puts_it_back(tmp_path: Path) -> None:
    port = free_port()
    with job_on_the_wire(tmp_path, "lvk") as (pair, wire, log):
        network = str(pair.ip_a).rsplit(".", 1)[0] + ".0"
        assert route_metrics(pair.ns_a, network) == {}
        with controller(tmp_path, port) as ctl, \
                leveller_proc(tmp_path / "agent.out", "agent", "--controller", f"127.0.0.1:{port}", "--host", "ha",
                              "--log", str(log), "--job-ports", f"live={JOB_PORT}-{JOB_PORT + 1}",
                              "--ideal-time", "live=0.2", "--dev", pair.if_a, "--netns", pair.ns_a,
                              "--interval", "0.2", "--json", "--phase-demotion", "--demote-wait-max", "0.5",
                              "--rto-min-ms", "10", env=ENV) as ag:
            wait_until(lambda: wire.last_dscp == DSCP_TOP, 40,
                       lambda: f"the job's packets carry DSCP {DSCP_TOP}; agent: {ag.output()} "
                       f"controller: {ctl.output()}")
            peer = str(pair.ip_b)
            wait_until(lambda: host_routes(pair.ns_a).get(peer, {}).get("RTAX_RTO_MIN") == 10, 20,
                       lambda: f"a host route toward {peer}: {host_routes(pair.ns_a)} agent: {ag.output()}")
            assert route_metrics(pair.ns_a, network) == {}
            lines = json_lines(tmp_path / "agent.out")
            assert lines and all("held" in line for line in lines)
            running = keepers(pair.ns_a)
            assert len(running) == 1, running
            ag.p.send_signal(signal.SIGKILL)
            ag.p.wait(10)
            killed = time.monotonic()
            wait_until(lambda: host_routes(pair.ns_a) == {}, 10,
                       lambda: f"the host route deleted after the agent died: {host_routes(pair.ns_a)}")
            wait_until(lambda: not keepers(pair.ns_a), 10, "the keeper exits")
            assert time.monotonic() - killed < 1.5  # well within the controller's lease (1.5 s)
