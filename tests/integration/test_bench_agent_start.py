"""`leveller bench agent-start`, the short CI run: one agent start per loader on a veth pair, each timed
from the process start to its datapath's log line and to the first marked packet at the receiver; the
bench refuses a run where the agent says it loaded with another loader than asked."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.privileged


def test_one_start_per_loader_is_timed() -> None:
    proc = subprocess.run([sys.executable, "-m", "leveller.cli", "bench", "agent-start", "--samples", "1", "--json"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["samples"] == 1 and set(doc["loaders"]) == {"libbpf", "bcc"}
    for name, d in doc["loaders"].items():
        loaded, mark = d["runs"]["loaded_s"][0], d["runs"]["first_mark_s"][0]
        assert 0 < loaded < mark < 60, (name, d)  # loaded before anything could be marked
        assert d["first_mark_s"]["median"] == mark
