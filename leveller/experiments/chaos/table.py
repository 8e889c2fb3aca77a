"""The chaos experiment's report as tables on the terminal (rich)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def print_report(report: dict[str, Any], out: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(file=sys.stdout)
    table = Table(title=f"chaos: the pair under leveller, {report['duration_s']:g} s, schedule {report['schedule']}")
    for col in ("fault", "at s", "down s", "recovered s", "decision s", "iterations s", "marks s"):
        table.add_column(col, justify="left" if col == "fault" else "right")

    def fmt(v: Any) -> str:
        return "never" if v is None else f"{v:.2f}"

    for f in report["faults"]:
        iters = [v for k, v in f.items() if k.startswith("iteration ")]
        table.add_row(f["fault"], f"{f['at_s']:.1f}", f"{f['down_s']:.1f}", fmt(f["recovered_s"]),
                      fmt(f["decision_s"]), fmt(None if None in iters else max(iters, default=None)),
                      fmt(f["marks_s"]), style=None if f["recovered_s"] is not None else "red")
    console.print(table)
    console.print("recovered: seconds from the restart until the controller decided, every job finished an "
                  "iteration and marked packets were back (the last of the three)")
    if report.get("ha"):
        _print_ha(console, report)
    chaos, base = report["chaos"], report["baseline"]
    line = f"min R under faults {chaos['min']:.3f} ({', '.join(f'{j} {r:.3f}' for j, r in chaos['rates'].items())})"
    if base:
        line += f"; undisturbed {base['min']:.3f}: ratio {report['min_r_ratio']:.3f}"
    console.print(line)
    stale = report["stale_marks"]
    console.print(f"stale marks: {'none' if not stale else len(stale)} in {report['packets']} job packets seen on "
                  f"h4 (lease {report['settings']['lease_s']:g} s)")
    for v in stale[:5]:
        console.print(f"  [red]{v['host']} DSCP {v['dscp']} at {v['t']:.2f} s[/]: {v['why']}")
    console.print(f"RDMA queue pairs: not checked ({report['qp']['why']})")
    for e in report["fault_errors"]:
        console.print(f"[red]fault not injected[/]: {e}")
    clean = report["cleanup"]
    console.print("teardown: nothing left (namespaces, processes, /run/leveller, BPF programs)" if clean["clean"] else
                  f"[red]teardown left[/]: {json.dumps({k: v for k, v in clean.items() if k != 'clean'})}")
    console.print(f"verdict: [bold]{report['verdict']}[/]; report in {out / 'chaos.json'}"
                  + (f", plot in {report['plot']}" if report.get("plot") else ""))


def ha_rows(report: dict[str, Any]) -> list[list[str]]:
    """The faults on controllers on etcd, one row each (the columns of HA_COLUMNS)."""
    def fmt(v: Any) -> str:
        return "-" if v is None else f"{v:.2f}"

    rows = []
    for f in report["faults"]:
        if "takeover_s" not in f:
            continue
        rows.append([f["fault"], f"{f['at_s']:.1f}", f"{f['down_s']:.1f}",
                     f"{f['leader_before'] or '-'} -> {f['leader_after'] or '-'}", fmt(f["takeover_s"]),
                     fmt(f.get("cut_leader_decided_s")), fmt(f["decision_gap_s"]), fmt(f["unmarked_s"]),
                     fmt(f["recovered_s"]) if f["recovered_s"] is not None else "never"])
    return rows


HA_COLUMNS = ("fault", "at s", "down s", "leader", "takeover s", "cut leader decided s", "longest no-decision s",
              "longest unmarked s", "recovered s")


def _print_ha(console: Any, report: dict[str, Any]) -> None:
    from rich.table import Table

    ha = report["ha"]
    table = Table(title=f"controllers on etcd ({', '.join(ha['controllers'])}, TTL {ha['ttl_s']} s, tau "
                        f"{report['settings']['tau_s']:g} s, agent lease {report['settings']['lease_s']:g} s)")
    for col in HA_COLUMNS:
        table.add_column(col, justify="left" if col in ("fault", "leader") else "right")
    for row in ha_rows(report):
        table.add_row(*row)
    console.print(table)
    console.print(f"takeover: from the fault until another controller decided; longest unmarked: no marked packet "
                  f"on the wire (before the first fault: {ha['unmarked_before_faults_s']:.2f} s, the jobs' compute "
                  f"phases); decisions per controller {ha['decisions']}")
    regress = ha["epoch_regressions"]
    console.print("agents on an older leader epoch after a newer one: " + ("none" if not regress else
                  f"[red]{len(regress)}[/] (first: {regress[0]})"))
