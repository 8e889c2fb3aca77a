"""pytest plugin for `make mutants` only: run a mutant's tests fastest first.

mutmut stops at the first failing test (-x), so a killed mutant costs the time of the tests
before the one that kills it. Durations come from mutmut's own stats run (mutmut-stats.json in
the mutants/ directory it runs from); unknown tests keep their place at the end.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    stats = Path("mutmut-stats.json")
    if not stats.exists():
        return
    durations = json.loads(stats.read_text()).get("duration_by_test", {})
    items.sort(key=lambda item: durations.get(item.nodeid, float("inf")))
