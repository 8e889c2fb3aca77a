"""Interface, namespace and host names are checked before any file operation (issue 10, Medium 7)."""

from __future__ import annotations

from pathlib import Path

import pytest

from leveller.agent.claim import claim_device, lock_path
from leveller.agent.names import check_ifname, check_netns
from leveller.errors import UserError


@pytest.mark.parametrize("name", ["eth0", "h1-eth0", "x" * 15, "veth.12", "br_0@x", "é" * 7])
def test_names_the_kernel_accepts(name: str) -> None:
    assert check_ifname(name) == name


@pytest.mark.parametrize("name,why", [
    ("", "1-15 bytes"), ("x" * 16, "16 bytes"), ("é" * 8, "16 bytes"),  # IFNAMSIZ counts bytes
    (".", "not '.'"), ("..", "not '.'"), ("a/b", "'/'"), ("../../tmp/x", "'/'"), ("eth0:1", "':'"),
    ("a b", "' '"), ("a\tb", r"'\t'"), ("a\x00b", r"'\x00'"),
])
def test_names_the_kernel_refuses_name_the_rule(name: str, why: str) -> None:
    with pytest.raises(UserError, match="--dev") as err:
        check_ifname(name)
    assert why in str(err.value), str(err.value)


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "../x", "n s", "x" * 65])
def test_bad_namespace_names(name: str) -> None:
    with pytest.raises(UserError, match="--netns"):
        check_netns(name)


def test_lock_files_stay_directly_in_the_lock_directory(tmp_path: Path) -> None:
    assert lock_path("eth0", "h1", tmp_path) == tmp_path / "agent-h1:eth0.lock"
    assert lock_path("eth0", None, tmp_path) == tmp_path / "agent:eth0.lock"
    with pytest.raises(UserError, match="--netns"):
        lock_path("eth0", "../../etc", tmp_path)


@pytest.mark.parametrize("dev", ["../../../x/victim", "../victim", "a/../../victim"])
def test_a_traversing_name_creates_and_removes_nothing(tmp_path: Path, dev: str) -> None:
    locks = tmp_path / "run"
    locks.mkdir()
    victim = tmp_path / "victim.lock"
    victim.write_text("precious")
    with pytest.raises(UserError, match="--dev"):
        with claim_device(dev, None, lock_dir=locks):
            pass
    assert victim.read_text() == "precious"
    assert list(locks.iterdir()) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["run", "victim.lock"]
