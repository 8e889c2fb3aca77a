"""The one progress bar of the long commands (simulations, benchmarks, live experiments), on stderr.

    with Bar(["{task.description:<30}", "bar", "elapsed", "remaining"], total=300) as bar:
        bar.part("leveller", 0.5, weight=60)   # weighted parts: completed = the sum of fraction x weight
        bar.note("waiting for the lock")       # the description (cut to the first column's width)
        bar.print("a line above the bar")

Columns: a rich TextColumn template, or one of "bar", "elapsed", "remaining", "count" (done / total),
"percent". By default the bar shows only on a terminal; elsewhere (a pipe, a log file, --json) every
call is a no-op apart from ``print``, which then prints to stderr as is. rich is imported only when
a bar is shown.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any


class Bar:
    """A progress bar on stderr (see the module doc). ``show``: True, False, or None = on a terminal."""

    def __init__(self, columns: Sequence[str], total: float = 1.0, description: str = "", *,
                 transient: bool = True, show: bool | None = None, log_path: bool = True,
                 **fields: Any) -> None:
        from rich.console import Console

        self.console = Console(stderr=True, log_path=log_path)
        self.shown = self.console.is_terminal if show is None else show
        self.columns, self.total, self.description = list(columns), total, description
        self.transient, self.fields = transient, fields
        width = re.search(r"description:[<>^]?(\d+)", self.columns[0]) if self.columns else None
        self.width = int(width.group(1)) if width else None
        self.parts: dict[str, float] = {}
        self._progress: Any = None
        self._task: Any = None

    def __enter__(self) -> Bar:
        if not self.shown:
            return self
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        named: dict[str, Callable[[], Any]] = {
            "bar": BarColumn, "elapsed": TimeElapsedColumn, "remaining": TimeRemainingColumn,
            "count": MofNCompleteColumn, "percent": lambda: TextColumn("{task.percentage:>3.0f}%")}
        cols = [named[c]() if c in named else TextColumn(c) for c in self.columns]
        self._progress = Progress(*cols, console=self.console, transient=self.transient)
        self._progress.start()
        self._task = self._progress.add_task(self.description, total=self.total, **self.fields)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    def update(self, **kw: Any) -> None:
        """rich's Progress.update of the one task (completed=, total=, description=, fields)."""
        if self._progress is not None:
            self._progress.update(self._task, **kw)

    def note(self, message: str) -> None:
        """Show ``message`` as the bar's description (cut to the first column's width)."""
        self.update(description=message[:self.width] if self.width else message)

    def part(self, what: str, fraction: float, weight: float = 1.0) -> None:
        """Part ``what`` of weight ``weight`` is ``fraction`` done: the bar shows the sum, and ``what``."""
        self.parts[what] = fraction * weight
        self.update(completed=sum(self.parts.values()), description=what[:self.width] if self.width else what)

    def print(self, text: str) -> None:
        """A line above the bar (stderr), or just on stderr without one."""
        (self._progress.console if self._progress is not None else self.console).print(text)

    def log(self, text: str) -> None:
        """A logged line above the bar, only while the bar shows."""
        if self._progress is not None:
            self._progress.console.log(text)
