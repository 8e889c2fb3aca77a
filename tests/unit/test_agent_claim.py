"""leveller.agent.claim: the lock files of agents on one machine (issue 26: `a-b`/`c` and `a`/`b-c` shared one)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.mark.parametrize(("one", "other"), [(("c", "a-b"), ("b-c", "a")), (("eth0", "host"), ("eth0", None)),
                                            (("x-y", "n"), ("y", "n-x"))])
def test_two_interfaces_never_share_a_lock_file(tmp_path: Path, one: tuple[str, str | None],
                                                 other: tuple[str, str | None]) -> None:
    from leveller.agent.claim import lock_path
    from leveller.locking import exclusive

    a, b = lock_path(*one, tmp_path), lock_path(*other, tmp_path)
    assert a != b and a.parent == b.parent == tmp_path
    with exclusive(a, lambda pid: f"busy {pid}"), exclusive(b, lambda pid: f"busy {pid}"):
        pass  # both agents run: neither is refused as "another agent runs there"
