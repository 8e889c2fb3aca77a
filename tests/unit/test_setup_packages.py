"""What the project's tests and docs tell podman to run with, the project's own setup installs.

A fresh CI machine failed test_container_image with 'default OCI runtime "runc" not found': the
test and docs/operations.md name `--runtime=runc` on hybrid-cgroup hosts, and scripts/setup-system.sh
installed crun only (the machine the test was written on had runc from elsewhere)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def setup_packages() -> set[str]:
    text = (ROOT / "scripts" / "setup-system.sh").read_text()
    block = re.search(r"^PACKAGES=\((.*?)^\)", text, re.S | re.M)
    assert block, "scripts/setup-system.sh has no PACKAGES=( ... ) list"
    return {word for line in block.group(1).splitlines() for word in line.split("#", 1)[0].split()}


def test_every_container_runtime_named_is_installed_by_setup() -> None:
    named = set()
    for path in (ROOT / "tests" / "integration" / "test_container_image.py", ROOT / "docs" / "operations.md"):
        named |= set(re.findall(r"--runtime[= ](\w+)", path.read_text()))
    assert named, "no --runtime named any more: update this test"
    assert named <= setup_packages(), f"runtimes named but not installed by setup-system: {named - setup_packages()}"


def test_the_package_list_parses() -> None:
    packages = setup_packages()
    assert {"podman", "crun", "openvswitch-switch"} <= packages
