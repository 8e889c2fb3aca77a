"""The network simulator's inputs as `leveller simulate network` spells them (policies, seconds, disturbances,
the network with its jobs or trace), checked with errors that name the option before any simulation starts."""

from __future__ import annotations

import math
from typing import Any

from leveller.errors import UserError
from leveller.model.limits import POLICIES as ALL


def parse_policies(text: str) -> list[str]:
    names = list(ALL) if text == "all" else [p.strip() for p in text.split(",") if p.strip()]
    bad = [p for p in names if p not in ALL]
    if bad or not names:
        raise UserError(f"--policy {text!r}: unknown policy {bad[0] if bad else text!r}; "
                        f"allowed: {', '.join(ALL)}, a comma list of them, or all")
    if len(set(names)) != len(names):
        raise UserError(f"--policy {text!r}: a policy is listed twice")
    return names


def parse_seconds(option: str, text: str | None, allow_zero: bool) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        rule = ">= 0" if allow_zero else "> 0"
        raise UserError(f"{option} = {text!r} is invalid; a number of seconds {rule}")
    return value


def parse_disturb(text: str, net: Any) -> Any:
    """``LINK:START:SECONDS`` into an engine Disturbance, the link checked against the network."""
    from leveller.sim.network.engine import Disturbance

    link, _, rest = text.partition(":")
    start, _, seconds = rest.partition(":")
    try:
        d = Disturbance(link, float(start), float(seconds))
        ok = math.isfinite(d.start) and d.start >= 0 and math.isfinite(d.seconds) and d.seconds > 0
    except ValueError:
        ok = False
    if not ok:
        raise UserError(f"--disturb {text!r}: expected LINK:START:SECONDS with START >= 0 and SECONDS > 0 "
                        "(e.g. --disturb h1>s1:60:30)")
    if link not in net.index:
        raise UserError(f"--disturb {text!r}: {link!r} is not a directed link of {net.name} "
                        f"(e.g. {', '.join(net.links[:4])})")
    return d


def prepare(args: Any) -> tuple[Any, list[Any], Any]:
    """Network, jobs and placer, all validated before any simulation starts."""
    from leveller.sim.network.jobs import check_paths, load_jobs
    from leveller.sim.network.topology import load_network

    net = load_network(args.topology)
    if bool(args.jobs) == bool(args.trace):
        raise UserError("give exactly one of --jobs FILE or --trace synthetic:KEY=V,... / contended:KEY=V,...")
    placer = None
    if args.jobs:
        jobs = load_jobs(args.jobs, list(net.nics))
        check_paths(jobs, net)
    else:
        from leveller.sim.network.trace import TRACE_KINDS

        if args.trace.partition(":")[0] not in TRACE_KINDS:
            raise UserError(f"--trace {args.trace!r}: allowed: " + ", ".join(f"{k}:KEY=V,..." for k in TRACE_KINDS)
                            + " (a trace file: synthetic:arrivals=lingjun|philly|helios,file=PATH)")
        from leveller.sim.network.trace import synthetic

        spec = args.trace
        if args.seed is not None:
            spec = spec + ("," if ":" in spec else ":") + f"seed={args.seed}"
        jobs, placer = synthetic(spec, net)
    return net, jobs, placer
