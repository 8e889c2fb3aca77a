"""The live runs' processes write their JSON lines to one file and their stderr to another.

gRPC logs lines such as ``I1202 ... fork_posix.cc:71] Other threads are currently calling into gRPC``
on stderr; when stderr shared the agent's ``--json`` file, a reader of that file failed on them (CI).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from leveller.experiments.shared.policy_run import _process, _wait_for, stderr_path

CHILD = ("import json, sys\n"
         "print(json.dumps({'t': 1.0}), flush=True)\n"
         "print('I1202 fork_posix.cc:71] Other threads are currently calling into gRPC', file=sys.stderr, flush=True)\n"
         "print(json.dumps({'t': 2.0}), flush=True)\n")


def test_stdout_holds_only_the_json_lines_and_stderr_is_beside_it(tmp_path: Path) -> None:
    out = tmp_path / "agent-h1.jsonl"
    with _process([sys.executable, "-c", CHILD], out, tmp_path) as proc:
        proc.wait(timeout=30)
    assert [json.loads(line)["t"] for line in out.read_text().splitlines()] == [1.0, 2.0]
    assert stderr_path(out) == tmp_path / "agent-h1.stderr"
    assert "fork_posix.cc" in stderr_path(out).read_text()


def test_a_process_that_exits_early_is_reported_with_its_stderr(tmp_path: Path) -> None:
    out = tmp_path / "controller.jsonl"
    with _process([sys.executable, "-c", "import sys; sys.exit('--listen: address in use')"], out, tmp_path) as proc:
        proc.wait(timeout=30)
        with pytest.raises(RuntimeError, match=r"controller: a process exited \(1\): --listen: address in use"):
            _wait_for("controller", lambda: False, [proc], [out], timeout=5)
