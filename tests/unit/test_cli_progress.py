"""leveller.commands.progress.Bar: the one progress bar of the long commands."""

from __future__ import annotations

import pytest

from leveller.commands.progress import Bar


def test_without_a_terminal_the_bar_is_silent_but_print_still_prints(capsys: pytest.CaptureFixture[str]) -> None:
    with Bar(["{task.description:<10}", "bar", "elapsed"], total=10) as bar:
        assert not bar.shown
        bar.part("alone", 0.5, weight=4)
        bar.note("a long description")
        bar.log("only above a bar")
        bar.print("a line")
    out, err = capsys.readouterr()
    assert out == "" and err == "a line\n"


def test_weighted_parts_add_up_and_descriptions_are_cut() -> None:
    with Bar(["{task.description:<8}", "bar", "count", "percent", "remaining", "{task.fields[n]} n"], total=10,
             show=True, n=0) as bar:
        bar.part("profiling j1", 1.0, weight=4)
        bar.part("run leveller", 0.5, weight=6)
        bar.part("profiling j1", 0.5, weight=4)  # the same part again: replaced, not added
        task = bar._progress.tasks[0]
        assert task.completed == 5.0
        assert task.description == "profilin"  # the latest part, cut to the first column's width
        bar.update(n=3)
        assert task.fields["n"] == 3
