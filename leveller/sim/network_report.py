"""What `leveller simulate network` shows of its results: tables (rich renderables; the command prints them)."""

from __future__ import annotations

from typing import Any


def network_output(results: list[Any], note: str, args: Any) -> list[Any]:
    """What `leveller simulate network` prints without --json: R per policy (and per job, up to 20 jobs)."""
    from rich.table import Table

    shown: list[Any] = [f"[dim]{note}[/dim]"]
    table = Table(title=f"{args.topology}, K = {args.levels}" + (f", tau = {args.tau} s" if "leveller" in
                                                                    args.policy or args.policy == "all" else ""))
    for col in ("policy", "jobs", "min R", "p10 R", "avg R", "GPU util", "events", "wall s"):
        table.add_column(col, justify="right")
    def fmt(v: float | None) -> str:
        return "-" if v is None else f"{v:.3f}"

    for r in results:
        s = r.summary()
        table.add_row(r.policy, str(len(r.rates)), fmt(s["min"]), fmt(s["p10"]), fmt(s["avg"]),
                      f"{s['gpu_utilization']:.3f}", str(s["events"]), f"{s['wall_seconds']:.1f}")
    shown.append(table)
    if len(results[0].jobs) <= 20:
        jobs = Table(title="R per job")
        jobs.add_column("job")
        for r in results:
            jobs.add_column(r.policy, justify="right")
        for i, j in enumerate(results[0].jobs):
            jobs.add_row(j.name, *["-" if r.jobs[i].rate is None else f"{r.jobs[i].rate:.3f}" for r in results])
        shown.append(jobs)
    if args.plot:
        shown.append(f"plots written to {args.plot}/")
    return shown
