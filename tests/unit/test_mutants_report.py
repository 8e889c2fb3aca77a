"""scripts/mutants.py's report: the figures `make mutants` holds each package to (issue 26's targets)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "mutants.py"


def load() -> ModuleType:
    """The script as a module, its survivors' diffs stubbed (they need mutmut and a mutants/ tree)."""
    spec = importlib.util.spec_from_file_location("mutants_script", SCRIPT)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.diff_of = lambda name: f"-old {name}\n+new"  # type: ignore[attr-defined]  # report() looks it up by name
    return mod


def row(text: str, pkg: str) -> list[str]:
    line = next(ln for ln in text.splitlines() if ln.startswith(f"| {pkg} |"))
    return [cell.strip() for cell in line.strip("|").split("|")]


def core(n_killed: int, n_timeout: int, n_survived: int, n_equivalent: int, n_unchecked: int) -> dict[str, str]:
    st: dict[str, str] = {}
    kinds = [("killed", n_killed), ("timeout", n_timeout), ("survived", n_survived),
             ("eqv", n_equivalent), ("not checked", n_unchecked)]
    for kind, n in kinds:
        for i in range(n):
            st[f"leveller.core.rate.x_{kind.replace(' ', '_')}__mutmut_{i}"] = \
                "survived" if kind == "eqv" else kind
    return st


def test_package_of_groups_core_and_model_whole_and_the_rest_by_module() -> None:
    m = load()
    assert m.package_of("leveller.core.levels.x_prune__mutmut_3") == "leveller.core"
    assert m.package_of("leveller.model.job.x_f__mutmut_1") == "leveller.model"
    assert m.package_of("leveller.sim.link.x_run__mutmut_9") == "leveller.sim.link"
    assert m.package_of("leveller.rpc.schema.x_g__mutmut_2") == "leveller.rpc.schema"


def test_timeouts_count_as_killed_equivalents_and_unchecked_leave_the_denominator() -> None:
    m = load()
    st = core(n_killed=90, n_timeout=5, n_survived=5, n_equivalent=7, n_unchecked=3)
    equivalent = {n: "why" for n in st if "_eqv__" in n}
    text, ok = m.report(st, equivalent)
    # 95 killed (90 + 5 timeouts) of 110 - 7 equivalent - 3 not checked = 100: exactly the 95 % target.
    assert row(text, "leveller.core") == ["leveller.core", "110", "95", "7", "5", "0", "3", "95.0% (target met)"]
    assert ok
    assert "## Surviving in leveller.core (5)" in text
    assert text.count("### leveller.core.rate.x_survived__mutmut_") == 5
    assert "-old leveller.core.rate.x_survived__mutmut_4\n+new" in text  # each survivor with its diff


def test_one_survivor_more_misses_the_target_and_fails() -> None:
    m = load()
    st = core(n_killed=89, n_timeout=5, n_survived=6, n_equivalent=7, n_unchecked=3)
    equivalent = {n: "why" for n in st if "_eqv__" in n}
    text, ok = m.report(st, equivalent)
    assert row(text, "leveller.core")[-1] == "94.0% (below 95%)"
    assert not ok


def test_an_equivalent_listed_mutant_that_a_test_kills_counts_as_killed() -> None:
    m = load()
    st = {"leveller.sim.link.x_run__mutmut_1": "killed", "leveller.sim.link.x_run__mutmut_2": "survived"}
    text, ok = m.report(st, {"leveller.sim.link.x_run__mutmut_1": "stale reason"})
    assert row(text, "leveller.sim.link")[:6] == ["leveller.sim.link", "2", "1", "0", "1", "0"]
    assert row(text, "leveller.sim.link")[-1] == "50.0% (below 90%)"
    assert not ok


def test_a_package_with_nothing_checked_is_not_run_not_a_pass_or_a_failure() -> None:
    m = load()
    st = {"leveller.sim.timeline.x_f__mutmut_1": "not checked"}
    text, ok = m.report(st, {})
    assert row(text, "leveller.sim.timeline")[-1] == "0.0% (not run)"
    assert ok


def test_equivalent_file_reads_name_and_reason_and_skips_comments(tmp_path: Path) -> None:
    m = load()
    f = tmp_path / "eq.txt"
    f.write_text("# header\n\nleveller.core.a.x_f__mutmut_1  same value either way\nleveller.core.a.x_f__mutmut_2\n")
    assert m.load_equivalent(f) == {"leveller.core.a.x_f__mutmut_1": "same value either way",
                                    "leveller.core.a.x_f__mutmut_2": ""}
    assert m.load_equivalent(tmp_path / "missing.txt") == {}


def test_listed_equivalents_that_are_killed_or_gone_are_reported_out_of_date() -> None:
    m = load()
    st = {"leveller.core.a.x_f__mutmut_1": "killed", "leveller.core.a.x_f__mutmut_2": "survived",
          "leveller.core.a.x_f__mutmut_3": "timeout"}
    equivalent = {"leveller.core.a.x_f__mutmut_1": "r", "leveller.core.a.x_f__mutmut_2": "r",
                  "leveller.core.old.x_g__mutmut_9": "r"}
    text, ok = m.report(st, equivalent)
    assert "## Out of date in tests/mutants-equivalent.txt (2)" in text
    assert "2 entries of tests/mutants-equivalent.txt are out of date" in text.split("\n## ")[0]  # what main prints
    assert "- leveller.core.a.x_f__mutmut_1 (killed)" in text
    assert "- leveller.core.old.x_g__mutmut_9 (no such mutant)" in text
    assert "mutmut_2 (" not in text and "mutmut_3 (" not in text  # a true equivalent, and an unlisted kill
    assert ok  # a stale entry is a chore, not a miss: the figures already count the mutant as killed
