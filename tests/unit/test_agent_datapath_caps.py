"""leveller.agent.datapath.missing_capabilities: which of the capabilities loading and attaching the
tc program needs a process lacks, read from its /proc status (here: written files)."""

from __future__ import annotations

from pathlib import Path

import pytest

from leveller.agent.datapath import missing_capabilities


def _status(tmp_path: Path, bits: list[int]) -> Path:
    eff = sum(1 << b for b in bits)
    path = tmp_path / "status"
    path.write_text(f"Name:\tleveller\nCapInh:\t0000000000000000\nCapEff:\t{eff:016x}\nCapBnd:\t000001ffffffffff\n")
    return path


@pytest.mark.parametrize(("bits", "missing"), [
    ([12, 39], []),  # CAP_NET_ADMIN + CAP_BPF: the agent unit's set
    ([12, 21], []),  # CAP_SYS_ADMIN covers CAP_BPF (kernels before 5.8 know only it)
    ([12], ["CAP_BPF"]),
    ([39], ["CAP_NET_ADMIN"]),
    ([21], ["CAP_NET_ADMIN"]),
    ([], ["CAP_BPF", "CAP_NET_ADMIN"]),
    ([0, 1, 2, 24], ["CAP_BPF", "CAP_NET_ADMIN"]),  # other capabilities do not count
])
def test_missing_capabilities_names_what_the_effective_set_lacks(tmp_path: Path, bits: list[int],
                                                                 missing: list[str]) -> None:
    assert missing_capabilities(_status(tmp_path, bits)) == missing
