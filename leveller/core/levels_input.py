"""The input of `leveller levels` as arrays: jobs with their R, flows with their links.

    {"jobs": {"<job>": {"rate": R}}, "flows": {"<flow>": {"job": "<job>", "links": ["<link>", ...]}}}

``parse_input`` checks a decoded document (errors name the field) and interns it into integer ids in
one pass, with no object per flow (at 100,000 flows every microsecond per flow is 0.1 s);
leveller.core.levels.decide_levels decides its levels.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Any, NoReturn

from leveller.core.policies import JobView
from leveller.model.errors import UserError

MAX_FLOWS = 1_000_000  # more is refused before any work (the decision would outgrow a tau)


@dataclass
class LevelsInput:
    """FILE as arrays: flow i is ``names[i]`` of job ``jobs[job[i]]``, crossing the links listed in the
    incidence (``inc_flow[e]`` crosses link ``inc_link[e]``, ``link_names`` by id)."""

    jobs: list[Any]  # JobView, in file order
    names: list[str]
    job: list[int]
    inc_flow: list[int]
    inc_link: list[int]
    link_names: list[str]

    def links_of(self, i: int) -> list[str]:
        """Links of flow i (the incidence is in flow order)."""
        lo, hi = bisect.bisect_left(self.inc_flow, i), bisect.bisect_right(self.inc_flow, i)
        return [self.link_names[lk] for lk in self.inc_link[lo:hi]]


def parse_input(data: Any, max_flows: int = MAX_FLOWS) -> LevelsInput:
    """Validate the structure (errors name the field) and intern it into integer ids; more than
    ``max_flows`` flows are refused before any other work."""
    if not isinstance(data, dict):
        raise UserError(f"top level must be an object with keys 'jobs' and 'flows', got {type(data).__name__}")
    jobs_in, flows_in = data.get("jobs"), data.get("flows")
    if not isinstance(jobs_in, dict) or not jobs_in:
        raise UserError("'jobs' must be a non-empty object {\"<job>\": {\"rate\": R}}")
    if not isinstance(flows_in, dict):
        raise UserError("'flows' must be an object {\"<flow>\": {\"job\": \"<job>\", \"links\": [...]}}")
    if len(flows_in) > max_flows:
        raise UserError(f"'flows' has {len(flows_in)} flows; at most {max_flows} are decided in one run")
    jobs = []
    for name, spec in jobs_in.items():
        rate = spec.get("rate") if isinstance(spec, dict) else None
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate) or rate < 0:
            raise UserError(f"jobs.{name}.rate must be a number >= 0 (progress rate R), got {rate!r}")
        jobs.append(JobView(name=name, rate=rate))
    job_index = {name: i for i, name in enumerate(jobs_in)}
    link_ids: dict[str, int] = {}
    names, job, inc_flow, inc_link = list(flows_in), [], [], []
    for i, spec in enumerate(flows_in.values()):
        # one pass, no object per flow: at 100,000 flows every microsecond here is 0.1 s
        j = job_index.get(spec.get("job")) if type(spec) is dict and type(spec.get("job")) is str else None
        links = spec.get("links") if type(spec) is dict else None
        if j is None or type(links) is not list or not links:
            _flow_error(names[i], spec, jobs_in)
        job.append(j)
        for link in links:
            if type(link) is not str or not link:
                _flow_error(names[i], spec, jobs_in)
            inc_flow.append(i)
            inc_link.append(link_ids.setdefault(link, len(link_ids)))
    return LevelsInput(jobs, names, job, inc_flow, inc_link, list(link_ids))


def _flow_error(name: str, spec: Any, jobs_in: dict[str, Any]) -> NoReturn:
    """Raise the UserError that names what is wrong with flows.<name>."""
    if not isinstance(spec, dict):
        raise UserError(f"flows.{name} must be an object with 'job' and 'links', got {spec!r}")
    job = spec.get("job")
    if not isinstance(job, str) or job not in jobs_in:
        known = ", ".join(list(jobs_in)[:20]) + (", ..." if len(jobs_in) > 20 else "")
        raise UserError(f"flows.{name}.job: {job!r} is not a job in 'jobs' (known: {known})")
    raise UserError(f"flows.{name}.links must be a non-empty list of link names (strings), got {spec.get('links')!r}")
