"""`leveller bench agent-start` reads the agent's own log line to time the datapath's load: the line is
found in output written with the agent's logging format, and its time stamp read back to the millisecond."""

from __future__ import annotations

import io
import logging
import time

import pytest

from leveller.bench.agent_start import loaded_at, run
from leveller.errors import UserError


def test_the_agents_log_line_is_found_and_its_time_read_back() -> None:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    # the format leveller.agent.app.run_agent configures
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    log = logging.getLogger("leveller.agent.datapath")
    log.addHandler(handler)
    old = log.level
    log.setLevel(logging.INFO)
    try:
        before = time.time()
        log.info("eBPF datapath loaded with %s (CO-RE object %s)", "libbpf", "/x/flow_marker.bpf.o")
        after = time.time()
    finally:
        log.removeHandler(handler)
        log.setLevel(old)
    found = loaded_at("agent starting\n" + out.getvalue())
    assert found is not None and found[1] == "libbpf"
    assert before - 0.002 <= found[0] <= after + 0.002  # asctime keeps milliseconds
    assert loaded_at("leveller.agent INFO something else\n") is None


@pytest.mark.parametrize("samples, loaders, message", [
    (0, ("libbpf",), "--samples=0"),
    (2, ("libbpf", "libbpf"), "at most once"),
    (2, ("auto",), "--loaders auto"),
    (2, ("clang",), "--loaders 'clang'"),
])
def test_bad_options_are_user_errors(samples: int, loaders: tuple[str, ...], message: str) -> None:
    with pytest.raises(UserError, match=message):
        run(samples, loaders)
