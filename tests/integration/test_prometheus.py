"""A real Prometheus (Debian's, installed by `make`) scraping a live controller and a live agent.

Two emulated jobs send over a veth pair; the agent counts their flows on the real eBPF
datapath and the controller (K=2) ranks them every tau. Prometheus runs from its own
temporary directory on loopback with a 1 s scrape interval and the scrape settings of
examples/prometheus/prometheus.yml. Checked over its HTTP API: the R and level series
carry exactly the values the controller decided (its --json lines), the lower-R job's
flows on the top level; the agent's lease and reports are there; `promtool check metrics`
passes on both endpoints; every expression of the Grafana dashboard evaluates and the
ones over metrics with samples return data.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.dashboard import dashboard_exprs

from .support import Proc, free_port, leveller_proc, wait_until

pytestmark = pytest.mark.privileged
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "prometheus" / "prometheus.yml"
SECRET = "prometheus-test-secret-0123456789"
PORTS = {"fast": 47810, "slow": 47820}
IDEAL = {"fast": 0.1, "slow": 0.4}  # same real speed: R(slow) is about 4 x R(fast), so fast gets the top level
# series that exist only after an event (a labelled counter with no child yet)
EVENT_ONLY = {"leveller_requests_rejected_total", "leveller_agent_rejected_total"}


def http(url: str, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.read().decode()


def scrape_config(ctl_port: int, agent_port: int) -> str:
    """The example configuration with this test's targets and a 1 s scrape interval."""
    text = EXAMPLE.read_text()
    text = text.replace("localhost:9109", f"127.0.0.1:{ctl_port}").replace("localhost:9110", f"127.0.0.1:{agent_port}")
    return re.sub(r"(scrape|evaluation)_interval: \d+s", r"\1_interval: 1s", text)


@contextlib.contextmanager
def prometheus(tmp: Path, config: str) -> Iterator[str]:
    """A Prometheus server on a free loopback port with its data in ``tmp``; yields its base URL."""
    exe = shutil.which("prometheus")
    assert exe, "prometheus is not installed (make setup installs Debian's prometheus)"
    (tmp / "prometheus.yml").write_text(config)
    check = subprocess.run(["promtool", "check", "config", str(tmp / "prometheus.yml")], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with Proc(tmp / "prometheus.out", [exe, f"--config.file={tmp / 'prometheus.yml'}",
                                       f"--storage.tsdb.path={tmp / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
                                       "--storage.tsdb.retention.time=1h", "--log.level=warn"]) as proc:
        def ready() -> bool:
            try:
                return "Ready" in http(f"{url}/-/ready", 1)
            except OSError:
                return False
        wait_until(ready, 30, lambda: f"prometheus ready; output: {proc.output()}", step_s=0.2)
        yield url
        assert proc.alive(), proc.output()


def query(url: str, expr: str, at: float | None = None) -> list[dict[str, Any]]:
    """Instant query (evaluated at time ``at`` if given) over the HTTP API."""
    params = {"query": expr} | ({"time": f"{at:.3f}"} if at is not None else {})
    body = json.loads(http(f"{url}/api/v1/query?" + urllib.parse.urlencode(params)))
    assert body["status"] == "success", body
    return body["data"]["result"]


def decisions(ctl: Proc) -> list[dict[str, Any]]:
    return [json.loads(line) for line in ctl.out.read_text().splitlines() if line.startswith("{")]


def test_prometheus_scrapes_controller_and_agent(tmp_path: Path) -> None:
    from leveller.jobs.launcher import JobRun
    from leveller.jobs.spec import RunConfig, WorkerPlace
    from leveller.testbed.vethpair import VethPair

    ctl_port, ctl_metrics, agent_metrics = free_port(), free_port(), free_port()
    env = {"LEVELLER_SECRET": SECRET}
    with contextlib.ExitStack() as stack:
        pair = stack.enter_context(VethPair(prefix="lvpm"))
        logs = {}
        for job, port in PORTS.items():
            logs[job] = tmp_path / f"{job}.log"
            spec = RunConfig(job, (WorkerPlace(str(pair.ip_b), pair.ns_b), WorkerPlace(str(pair.ip_a), pair.ns_a)),
                             compute_s=0.05, comm_s=0.05, rate_bps=50e6, port=port, duration_s=60.0, pace=True)
            stack.enter_context(JobRun(spec, log=str(logs[job])))
        ctl = stack.enter_context(leveller_proc(
            tmp_path / "controller.out", "controller", "--listen", f"127.0.0.1:{ctl_port}", "--tau", "0.5",
            "--levels", "2", "--metrics-port", str(ctl_metrics), "--json", env=env))
        agent = stack.enter_context(leveller_proc(
            tmp_path / "agent.out", "agent", "--controller", f"127.0.0.1:{ctl_port}", "--host", "ha",
            *[a for job in PORTS for a in ("--log", f"{job}={logs[job]}")],
            *[a for job, port in PORTS.items() for a in ("--job-ports", f"{job}={port}-{port + 1}")],
            *[a for job, t in IDEAL.items() for a in ("--ideal-time", f"{job}={t}")],
            "--dev", pair.if_a, "--netns", pair.ns_a, "--interval", "0.5", "--metrics-port", str(agent_metrics),
            env=env))
        url = stack.enter_context(prometheus(tmp_path, scrape_config(ctl_metrics, agent_metrics)))

        def levels_seen() -> list[dict[str, Any]] | None:
            result = query(url, "leveller_flow_level")
            return result if {r["metric"]["job"] for r in result} == set(PORTS) else None
        wait_until(levels_seen, 45, lambda: f"level series of both jobs in Prometheus; controller: "
                   f"{ctl.output()[-800:]} agent: {agent.output()[-800:]}")
        # rate() windows need two samples of every target
        wait_until(lambda: all(float(r["value"][1]) >= 2 for r in query(url, "count_over_time(up[1m])"))
                   and len(query(url, "up")) == 2, 30, "two scrapes of each target")

        targets = {r["metric"]["instance"]: r["value"][1] for r in query(url, "up")}
        assert targets == {f"127.0.0.1:{ctl_metrics}": "1", f"127.0.0.1:{agent_metrics}": "1"}

        # R: each job's value in Prometheus is one the controller decided (exact float: both sides print repr)
        at = time.time() - 0.5  # one evaluation time for every query below
        rates = {r["metric"]["job"]: float(r["value"][1]) for r in query(url, "leveller_job_rate", at)}
        levels = {(r["metric"]["flow"], r["metric"]["job"]): int(r["value"][1])
                  for r in query(url, "leveller_flow_level", at)}
        # the decision behind a scraped value reaches the controller's stdout a moment later
        decided = wait_until(lambda: (lambda d: d if all(rate in {x["rates"].get(job) for x in d}
                                                         for job, rate in rates.items()) else None)(decisions(ctl)),
                             10, lambda: f"the scraped rates {rates} among the controller's decisions")
        for job, rate in rates.items():
            assert rate in {d["rates"].get(job) for d in decided}, (job, rate, decided[-3:])
        assert set(rates) == set(PORTS) and rates["fast"] < rates["slow"]
        for (flow, job), level in levels.items():
            assert level in {d["levels"].get(flow) for d in decided}, (flow, level)
            assert level == (1 if job == "fast" else 0)  # the lower-R job's flows on the top level
        assert float(query(url, "min(leveller_job_rate)", at)[0]["value"][1]) == min(rates.values())
        assert float(query(url, "avg(leveller_job_rate)", at)[0]["value"][1]) == pytest.approx(sum(rates.values()) / 2)
        assert float(query(url, "leveller_decisions_total")[0]["value"][1]) >= 5

        # the agent: a live lease and successful reports, scraped from its own endpoint
        lease = query(url, "leveller_agent_lease_seconds_left")
        assert lease and lease[0]["metric"]["job"] == "leveller-agent" and float(lease[0]["value"][1]) > 0
        assert float(query(url, 'leveller_agent_reports_total{outcome="ok"}')[0]["value"][1]) >= 3

        # promtool lints both live endpoints
        for port in (ctl_metrics, agent_metrics):
            text = http(f"http://127.0.0.1:{port}/metrics")
            lint = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
            assert lint.returncode == 0 and not lint.stdout.strip() and not lint.stderr.strip(), \
                f":{port}: {lint.stdout}{lint.stderr}"

        # the Grafana dashboard: every expression is valid PromQL here and shows data
        for expr in dashboard_exprs():
            result = query(url, expr)
            if not EVENT_ONLY & set(re.findall(r"leveller_\w+", expr)):
                assert result, f"dashboard expression returns nothing: {expr}"
