"""DSCP -> HTB class classifiers on switch egress ports, for datapaths that ignore
OpenFlow set_queue (OVS userspace). Commands come from leveller.core.qos as data;
this module only runs them and checks they are still in place (OVS may rebuild a
port's qdisc, e.g. after ovs-vswitchd restarts)."""

from __future__ import annotations

import re
import subprocess

from leveller.core.qos import LevelMap, tc_dscp_filters

_CLASS = re.compile(r"^class htb 1:([0-9a-f]+) [^\n]*\n\s*Sent (\d+) bytes (\d+) pkt \(dropped (\d+),[^\n]*\n"
                    r"\s*backlog ([0-9.]+)([KMG]?)b (\d+)p", re.M)
_SIZE = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}  # tc prints a round backlog as e.g. 1Mb
MAX_QUEUE_CLASS = 64  # OVS queues are classes 1:1..; its root class is 1:fffe


def installed_filters(dev: str) -> int | None:
    """Number of u32 classifier rules under HTB root 1: on `dev`; None if no such qdisc."""
    proc = subprocess.run(["tc", "filter", "show", "dev", dev, "parent", "1:"], capture_output=True, text=True)
    if proc.returncode != 0:
        return None
    return sum(1 for line in proc.stdout.splitlines() if "flowid" in line)


def htb_present(dev: str) -> bool:
    proc = subprocess.run(["tc", "qdisc", "show", "dev", dev], capture_output=True, text=True)
    return proc.returncode == 0 and "htb 1: root" in proc.stdout


INSTALLED, KEPT, NO_QDISC = "installed", "kept", "no-qdisc"  # what ensure_filters found and did


def ensure_filters(dev: str, level_map: LevelMap) -> str:
    """Install the DSCP classifier on `dev` unless exactly the expected number is there.
    Returns INSTALLED when (re)installed, KEPT when already in place, NO_QDISC when the port has no
    HTB yet (OVS creates it a moment after the port: traffic through it is not yet prioritised)."""
    if not htb_present(dev):
        return NO_QDISC
    if installed_filters(dev) == 2 * level_map.levels:  # IPv4 and IPv6 per level
        return KEPT
    cmds = tc_dscp_filters(dev, level_map)
    subprocess.run(cmds[0], capture_output=True)  # flush; may find nothing to delete
    for argv in cmds[1:]:
        proc = subprocess.run(argv, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: {proc.stderr.strip()}")
    return INSTALLED


def parse_class_stats(text: str) -> dict[int, dict[str, int]]:
    """OVS queue -> counters from `tc -s class show` of a port's HTB classes (class 1:(q+1) = queue q):
    bytes and packets sent, packets dropped, bytes and packets queued now."""
    out: dict[int, dict[str, int]] = {}
    for m in _CLASS.finditer(text):
        minor = int(m.group(1), 16)
        if 1 <= minor <= MAX_QUEUE_CLASS:
            out[minor - 1] = {"bytes": int(m.group(2)), "packets": int(m.group(3)), "drops": int(m.group(4)),
                              "backlog_bytes": int(float(m.group(5)) * _SIZE[m.group(6)]),
                              "backlog_packets": int(m.group(7))}
    return out


def class_stats(dev: str) -> dict[int, dict[str, int]]:
    """The HTB class counters of `dev` now, per OVS queue (empty if the port has no HTB): what the
    queues really took on the userspace datapath, where the tc classifiers do the queueing."""
    proc = subprocess.run(["tc", "-s", "class", "show", "dev", dev], capture_output=True, text=True)
    return parse_class_stats(proc.stdout) if proc.returncode == 0 else {}
