#!/usr/bin/env python3
"""`make mutants`: run mutmut over core, the model, the link simulator and the wire validation, then report.

mutmut (configured in pyproject.toml, [tool.mutmut]) mutates the files named there and runs, per
mutant, the unit tests that reach the mutated function. This script runs it, groups the outcome
per package and writes mutants/report.md: killed / survived / equivalent / no tests / timeout per
package, then every surviving mutant with its diff. Survivors that cannot be told apart from the
original by any test are listed with the reason in tests/mutants-equivalent.txt
(`<mutant name>  <reason>` per line) and counted as equivalent, not as survivors.

Exit status 1 when a package kills fewer of its non-equivalent mutants than its target (TARGETS: core 95 %,
the model, the wire validation, the link simulator and its timeline 90 %).

Usage: scripts/mutants.py [--no-run | --survivors] [--only GLOB ...] [--children N] [--test-timeout S]
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import re
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MUTMUT = [sys.executable, "-m", "mutmut"]
EQUIVALENT = ROOT / "tests" / "mutants-equivalent.txt"
REPORT = ROOT / "mutants" / "report.md"
# Packages with a kill target (issue 26: core >= 95 %, the link simulator and its timeline >= 90 %; the model
# and the wire validation >= 90 % since issue 13: the field checks live in leveller.model, rpc.schema converts
# the wire to the model with them).
TARGETS = {"leveller.core": 0.95, "leveller.model": 0.90, "leveller.rpc.schema": 0.90,
           "leveller.sim.link": 0.90, "leveller.sim.timeline": 0.90}
KILLED = {"killed", "timeout", "segfault", "caught by type check"}


def package_of(mutant: str) -> str:
    """`leveller.core.rate.x_f__mutmut_3` -> `leveller.core` (and `leveller.model`); `leveller.sim.link...` stays."""
    parts = mutant.split(".")
    if parts[1] in ("core", "model"):
        return f"leveller.{parts[1]}"
    return ".".join(parts[:3])


def load_equivalent(path: Path = EQUIVALENT) -> dict[str, str]:
    """Mutant name -> why no test can tell it from the original."""
    out: dict[str, str] = {}
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, reason = line.partition(" ")
            out[name] = reason.strip()
    return out


def statuses() -> dict[str, str]:
    """Every mutant mutmut knows of -> its status ('killed', 'survived', 'no tests', ...)."""
    text = subprocess.run(MUTMUT + ["results", "--all", "true"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout
    out = {}
    for line in text.splitlines():
        m = re.match(r"\s*(\S+): (.+)$", line)
        if m:
            out[m.group(1)] = m.group(2).strip()
    return out


def source_of(mutant: str) -> str:
    """`leveller.core.rate.x_f__mutmut_3` -> `leveller/core/rate.py` (the mutated module's file)."""
    module = mutant.rsplit(".", 1)[0]
    return module.replace(".", "/") + ".py"


def diff_of(mutant: str) -> str:
    """The mutant's diff, read in this process (`mutmut show` per mutant costs a second each)."""
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    try:
        return "\n".join(get_diff_for_mutant(mutant, path=source_of(mutant)).splitlines()[2:])
    except Exception as exc:  # a diff is a courtesy of the report, never its failure
        return f"(no diff: {exc})"


def report(status: dict[str, str], equivalent: dict[str, str]) -> tuple[str, bool]:
    """The markdown report and whether every package with a target met it."""
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    survivors: dict[str, list[str]] = defaultdict(list)
    for name, st in sorted(status.items()):
        pkg = package_of(name)
        if st in KILLED:
            st = "killed"
        elif st in ("survived", "no tests") and name in equivalent:
            st = "equivalent"
        elif st in ("survived", "no tests", "suspicious"):
            survivors[pkg].append(name)
        counts[pkg][st] += 1
    ok = True
    lines = ["# Mutation testing (make mutants)", "",
             "| package | mutants | killed | equivalent | survived | no tests | other | killed % |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for pkg in sorted(counts):
        c = counts[pkg]
        total = sum(c.values())
        other = total - c["killed"] - c["equivalent"] - c["survived"] - c["no tests"]
        live = total - c["equivalent"] - c["not checked"]
        pct = c["killed"] / live if live else 0.0
        target = TARGETS.get(pkg)
        if not live:  # nothing checked: not run (--only) or mutmut failed; no figure to hold to a target
            mark = " (not run)"
        else:
            mark = "" if target is None else (" (target met)" if pct >= target else f" (below {target:.0%})")
            ok = ok and (target is None or pct >= target)
        lines.append(f"| {pkg} | {total} | {c['killed']} | {c['equivalent']} | {c['survived']} | "
                     f"{c['no tests']} | {other} | {pct:.1%}{mark} |")
    lines += ["", "killed % = killed / (mutants - equivalent - not checked). Equivalent mutants and why: "
              "tests/mutants-equivalent.txt.", ""]
    stale = sorted(n for n in equivalent if n not in status or status[n] in KILLED)
    if stale and status:  # mutmut renumbers a function's mutants when its code changes: keep the list honest
        lines += [f"{len(stale)} entries of tests/mutants-equivalent.txt are out of date: listed below.", "",
                  f"## Out of date in tests/mutants-equivalent.txt ({len(stale)})", "",
                  "Listed as equivalent, but killed or no longer a mutant (its function changed); "
                  "remove or re-check:", ""]
        lines += [f"- {n} ({status.get(n, 'no such mutant')})" for n in stale] + [""]
    for pkg in sorted(survivors):
        lines += [f"## Surviving in {pkg} ({len(survivors[pkg])})", ""]
        for name in survivors[pkg]:
            lines += [f"### {name} ({status[name]})", "", "```diff", diff_of(name).strip(), "```", ""]
    return "\n".join(lines) + "\n", ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-run", action="store_true", help="only write the report from the last run")
    ap.add_argument("--survivors", action="store_true",
                    help="run only the mutants that survived the last run (after adding tests)")
    ap.add_argument("--only", action="append", default=[], metavar="GLOB",
                    help="run only the mutants whose names match (e.g. 'leveller.core.*'); repeatable")
    ap.add_argument("--children", type=int, default=os.cpu_count() or 2, help="parallel mutants")
    ap.add_argument("--test-timeout", type=int, default=180, metavar="S",
                    help="fail a test of a mutant after S s (default 180; the slowest unit test in the selection "
                         "takes about 80 s). A mutant that makes a test loop for ever is then killed in minutes, "
                         "not after the suite's 600 s timeout")
    args = ap.parse_args(argv)
    if not args.no_run:
        names = [n for n, st in statuses().items() if st in ("survived", "no tests", "suspicious")] \
            if args.survivors else []
        if args.only:
            names = [n for n in names if any(fnmatch.fnmatch(n, g) for g in args.only)] \
                if args.survivors else list(args.only)
        if names or not args.survivors:  # no survivor left to rerun: nothing to run (an empty list runs all)
            # mutmut exits non-zero when mutants survive; the report decides.
            env = dict(os.environ, PYTEST_TIMEOUT=str(args.test_timeout))  # pytest-timeout: env over the ini
            subprocess.run(MUTMUT + ["run", "--max-children", str(args.children), *names], cwd=ROOT, env=env)
    os.chdir(ROOT)
    text, ok = report(statuses(), load_equivalent())
    REPORT.parent.mkdir(exist_ok=True)
    REPORT.write_text(text)
    print(text.split("\n## ")[0])  # the table, and the count of out-of-date entries if any
    print(f"report: {REPORT.relative_to(ROOT)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
