"""Topology files: whatever a file holds, `leveller sdn --topology FILE` ends with exit 2 and one line
naming the problem, never a traceback (issue 10, low 13)."""

from __future__ import annotations

from pathlib import Path

import pytest

from leveller.cli import main
from leveller.testbed.topofile import load_topology


@pytest.mark.parametrize("content,needle", [
    (b"hosts = [\xff\xfe]\n", "not UTF-8 text (byte 9 is 0xff)"),
    (b"x = " + b"[" * 100_000 + b"]" * 100_000 + b"\n", "nested too deeply"),
    (b"x = " + b"{a = " * 50_000 + b"1" + b"}" * 50_000 + b"\n", "nested too deeply"),
    (b"hosts = 'unterminated\n", "not valid TOML"),
    (b"hosts = " + b"[" * 300 + b"]" * 300 + b"\nswitches = [{name = 's1'}]\nlinks = []\n", "hosts[0]"),
])
def test_bad_topology_files_exit_2_with_the_problem_named(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         content: bytes, needle: str) -> None:
    path = tmp_path / "topo.toml"
    path.write_bytes(content)
    assert main(["sdn", "--topology", str(path)]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err and len(err) < 600, err[:600]


def test_a_directory_is_not_a_topology_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sdn", "--topology", str(tmp_path)]) == 2
    assert "cannot read it" in capsys.readouterr().err


def test_fig9_example_is_the_topology_the_fig9_experiment_builds() -> None:
    """docs/switching.md measures Figure 9's bottleneck on examples/topologies/dumbbell-fig9.toml:
    it must stay the dumbbell `experiment tenants --fig9` runs on."""
    from leveller.experiments.tenants.plan import dumbbell

    root = Path(__file__).resolve().parents[2]
    assert load_topology(str(root / "examples/topologies/dumbbell-fig9.toml")).to_dict() == dumbbell().to_dict()
