"""Limits and names of the domain, each written once.

Every layer that checks or offers one of these (the wire schema, the agent's
log reader, the CLI's choices, the switch configuration) imports it from here.
"""

from __future__ import annotations

import re

MAX_LEVELS = 8  # switch priority levels (8 queues / traffic classes on common switches)
MAX_JOBS = 1024  # jobs in one report
MAX_FLOWS = 65536  # flows in one report or reply
MAX_RECENT = 256  # recent iteration end times in one job report
MAX_DSCP_BYTES = 4 * MAX_FLOWS  # (flow, DSCP) byte counters in one report (a flow uses a few DSCPs)
# One gRPC message (report, reply, status page): a report at every limit here (MAX_FLOWS flows between IPv6
# addresses, MAX_DSCP_BYTES counters, MAX_JOBS jobs of MAX_RECENT iterations, 64-character names, the largest
# numbers) is 33.8 MB as JSON, so MAX_FLOWS is reachable; 4 MiB (gRPC's default) held 38,696 flows at most.
MAX_MESSAGE_BYTES = 40 << 20
DSCP_MAX = 63  # a DSCP is 6 bits
MAX_ITERATIONS = 2**53  # exactly representable as a float: R stays exact
MAX_FUTURE_S = 300.0  # a time further in the future than this is refused (clock or data error)
MAX_IDEAL_S = 86400.0  # an ideal iteration time above one day is a unit or data error (and would make R explode)
MIN_WEIGHT, MAX_WEIGHT = 0.001, 1000.0  # operator weights of a job (leveller ranks by R / weight)
MAX_COUNTER = 2**63 - 1  # byte counters, epochs, plans
MIN_TAU_S, MAX_TAU_S = 0.01, 3600.0  # controller decision period (shorter busy-loops; --on-iteration for events)
MAX_LEASE_S = 86400.0  # the longest lease a reply may carry (agents refuse longer ones)

NAME_RULE = "1-64 characters from letters, digits, _ . : -"
NAME_PATTERN = re.compile(r"[A-Za-z0-9_.:-]{1,64}")  # host and job names
NETNS_PATTERN = re.compile(r"[A-Za-z0-9_.-]{1,64}")  # network namespace names (and not "." or "..")

POLICIES = ("fair", "crux", "leveller", "cassini")  # every policy leveller.core.policies builds
PAPER_POLICIES = ("fair", "crux", "leveller")  # the three the paper's worked examples compare
DEFAULT_POLICY = "leveller"
MODES = ("enforce", "shadow")  # controller --mode: apply the levels, or only compute and report them
