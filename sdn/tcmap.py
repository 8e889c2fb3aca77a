"""DSCP -> HTB class classifiers on switch egress ports, for datapaths that ignore
OpenFlow set_queue (OVS userspace). Commands come from leveller.core.qos as data;
this module only runs them and checks they are still in place (OVS may rebuild a
port's qdisc, e.g. after ovs-vswitchd restarts)."""

from __future__ import annotations

import subprocess

from leveller.core.qos import LevelMap, tc_dscp_filters


def installed_filters(dev: str) -> int | None:
    """Number of u32 classifier rules under HTB root 1: on `dev`; None if no such qdisc."""
    proc = subprocess.run(["tc", "filter", "show", "dev", dev, "parent", "1:"], capture_output=True, text=True)
    if proc.returncode != 0:
        return None
    return sum(1 for line in proc.stdout.splitlines() if "flowid" in line)


def htb_present(dev: str) -> bool:
    proc = subprocess.run(["tc", "qdisc", "show", "dev", dev], capture_output=True, text=True)
    return proc.returncode == 0 and "htb 1: root" in proc.stdout


def ensure_filters(dev: str, level_map: LevelMap) -> bool:
    """Install the DSCP classifier on `dev` unless exactly the expected number is there.
    Returns True when (re)installed, False when already fine or the port has no HTB yet."""
    if not htb_present(dev) or installed_filters(dev) == level_map.levels:
        return False
    cmds = tc_dscp_filters(dev, level_map)
    subprocess.run(cmds[0], capture_output=True)  # may find nothing to delete
    for argv in cmds[1:]:
        proc = subprocess.run(argv, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: {proc.stderr.strip()}")
    return True
