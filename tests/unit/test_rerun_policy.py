"""`make test` reruns a failed integration test once and lists it (tests/conftest.py's RerunLog);
unit tests never rerun, and a test that fails twice fails the run."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

FLAKY = '''
from pathlib import Path

def test_flaky(tmp_path_factory):
    mark = Path(__file__).with_suffix(".once")
    if not mark.exists():
        mark.touch()
        assert 1 == 2, "first failure message here"

def test_always():
    assert 0, "fails every time"
'''


def test_a_rerun_is_listed_with_its_first_failure_and_a_second_failure_fails(tmp_path: Path) -> None:
    (tmp_path / "test_flaky_probe.py").write_text(FLAKY)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
                           "--reruns", "1", str(tmp_path / "test_flaky_probe.py")],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    out = proc.stdout
    assert proc.returncode == 1, out
    assert "test_flaky_probe.py::test_flaky: first failure: AssertionError: first failure message here" in out
    assert "test_flaky_probe.py::test_always: first failure: AssertionError: fails every time" in out
    assert re.search(r"1 failed, 1 passed, 2 rerun", out), out


def test_only_the_integration_tests_rerun_in_make_test() -> None:
    lines = [line for line in (ROOT / "Makefile").read_text().splitlines() if "-m pytest" in line]
    unit = [line for line in lines if "tests/unit" in line and "--ignore" not in line]
    integration = [line for line in lines if "--ignore=tests/unit" in line]
    assert unit and integration
    assert all("--reruns" not in line for line in unit)
    assert all("--reruns 1" in line for line in integration)
