"""Shared test policy.

Hypothesis runs without its per-example deadline: on a noisy 2-core machine (CI, burners,
mutmut's trampolines) one example stalled 527 ms against the default 200 ms and failed a correct
test; the algorithms' speed is measured by the benchmarks, not by tests.

Tests marked ``privileged`` need root (namespaces, BPF, OVS). Without root
they skip, unless LEVELLER_REQUIRE_PRIVILEGED=1 (set by .ci/run), under
which any skip at all is turned into a failure: CI must run everything.

`make test` runs the integration tests with ``--reruns 1`` (pytest-rerunfailures, as Open vSwitch's
``make check RECHECK=yes``): a failed one runs once more, a second failure fails the run, and every
rerun is listed at the end with its first failure's message. A rerun is a defect report, not a pass.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

settings.register_profile("leveller", deadline=None)
settings.load_profile("leveller")

REQUIRE_PRIVILEGED = os.environ.get("LEVELLER_REQUIRE_PRIVILEGED") == "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.geteuid() == 0:
        return
    for item in items:
        if "privileged" in item.keywords:
            item.add_marker(pytest.mark.skip(reason="needs root (namespaces, BPF, OVS)"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if REQUIRE_PRIVILEGED and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.longrepr = f"skipped under LEVELLER_REQUIRE_PRIVILEGED=1 (a skip is a failure in CI): {reason}"


def first_failure(report: pytest.TestReport) -> str:
    """The one-line message of a failed report (its crash line, else the last line of its text)."""
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return str(crash.message).splitlines()[0] if crash.message else ""
    lines = str(report.longreprtext or report.longrepr).strip().splitlines()
    return lines[-1] if lines else ""


class RerunLog:
    """Collects the attempts pytest-rerunfailures ran again and lists them at the end of the run."""

    def __init__(self) -> None:
        self.reruns: list[tuple[str, str]] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.outcome == "rerun":  # this attempt failed and the test runs again
            self.reruns.append((report.nodeid, first_failure(report)))

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.reruns:
            terminalreporter.section("tests that needed a rerun (each a defect to fix, not a pass)")
            for nodeid, message in self.reruns:
                terminalreporter.write_line(f"RERUN {nodeid}: first failure: {message}")


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(RerunLog(), "leveller-rerun-log")


@pytest.fixture(scope="session")
def shim_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The RDMA shim (shim/build), the FAKE verbs provider and the test programs, built once per session."""
    from leveller.bench.shim import BuildError, build_all

    try:
        return build_all(tmp_path_factory.mktemp("shim-build"))
    except BuildError as exc:
        pytest.fail(str(exc))
