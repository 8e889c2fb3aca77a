"""DSCP -> HTB class classifiers on switch egress ports, for datapaths that ignore
OpenFlow set_queue (OVS userspace). Commands come from leveller.core.qos as data;
this module only runs them and checks they are still in place (OVS may rebuild a
port's qdisc, e.g. after ovs-vswitchd restarts).

It also widens the burst of the HTB root class. OVS's linux-htb gives its root class
1:fffe (the port's rate, which every queue borrows from) a burst of one MTU and has no
setting for it; it sets it again on every reconfiguration. HTB keeps at most a burst of
tokens, so a dequeue later than one packet's time at the port rate (a timer on a busy
or virtualised CPU) loses that link time: the port delivers less than its rate. The
queues' own burst comes from OVSDB (leveller.core.qos.HTB_BURST_S); the root gets the
largest of theirs."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass

from leveller.core.qos import HTB_ROOT_MINOR, LevelMap, htb_root_burst, tc_dscp_filters

_CLASS = re.compile(r"^class htb 1:([0-9a-f]+) [^\n]*\n\s*Sent (\d+) bytes (\d+) pkt \(dropped (\d+),[^\n]*\n"
                    r"\s*backlog ([0-9.]+)([KMG]?)b (\d+)p", re.M)
_SIZE = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}  # tc prints a round size as e.g. 1Mb
MAX_QUEUE_CLASS = 64  # OVS queues are classes 1:1..; its root class is 1:fffe (HTB_ROOT_MINOR)


def _bytes(number: str, unit: str) -> int:
    """A size as tc prints it (``number`` and its unit letter, before the "b") in bytes."""
    return int(float(number) * _SIZE[unit])


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
_HTB_CLASS = re.compile(r"^class htb 1:([0-9a-f]+) (?:root|parent 1:[0-9a-f]+)(?: leaf \S+)? .*?\brate (\S+) "
                        r"ceil (\S+) .*?\bburst ([0-9.]+)([KMG]?)b/\d+ mpu (\d+)b cburst ([0-9.]+)([KMG]?)b/", re.M)


@dataclass(frozen=True)
class HtbClass:
    """What `tc -d class show` prints of one HTB class: rates as tc prints them (tc parses them back
    unchanged), bursts in bytes."""

    rate: str
    ceil: str
    burst: int
    cburst: int
    mpu: int


def parse_htb_classes(text: str) -> dict[int, HtbClass]:
    """Class minor -> its rates and bursts, from `tc -d class show dev D` (1:fffe is OVS's root)."""
    return {int(m.group(1), 16): HtbClass(m.group(2), m.group(3), _bytes(m.group(4), m.group(5)),
                                          _bytes(m.group(7), m.group(8)), int(m.group(6)))
            for m in _HTB_CLASS.finditer(text)}


def root_burst_change(dev: str, text: str) -> list[str] | None:
    """The `tc class change` that gives the root class 1:fffe of `dev` the largest burst of its
    queues, or None when there is nothing to widen: no root, no queue, or no queue burst more than
    twice the root's (queues left at OVS's default of about one MTU; tc prints a burst rounded)."""
    classes = parse_htb_classes(text)
    root = classes.pop(HTB_ROOT_MINOR, None)
    widest = max((c.cburst for c in classes.values()), default=0)
    if root is None or widest <= 2 * min(root.burst, root.cburst):
        return None
    if root.rate != root.ceil:
        return None  # not OVS's root (it gives it one rate): not ours to change
    return htb_root_burst(dev, root.rate, widest, root.mpu)


def ensure_root_burst(dev: str) -> bool:
    """Widen the root class's burst of `dev` to its queues' (see the module's docstring); True if it did."""
    proc = subprocess.run(["tc", "-d", "class", "show", "dev", dev], capture_output=True, text=True)
    argv = root_burst_change(dev, proc.stdout) if proc.returncode == 0 else None
    if argv is None:
        return False
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")
    return True


def ensure_filters(dev: str, level_map: LevelMap) -> str:
    """Install the DSCP classifier on `dev` unless exactly the expected number is there.
    Returns INSTALLED when (re)installed, KEPT when already in place, NO_QDISC when the port has no
    HTB yet (OVS creates it a moment after the port: traffic through it is not yet prioritised).
    The root class's burst is widened on the way (``ensure_root_burst``)."""
    if not htb_present(dev):
        return NO_QDISC
    ensure_root_burst(dev)
    cmds = tc_dscp_filters(dev, level_map)
    if installed_filters(dev) == len(cmds) - 1:  # every add of the classifier (the first argv flushes)
        return KEPT
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
                              "backlog_bytes": _bytes(m.group(5), m.group(6)),
                              "backlog_packets": int(m.group(7))}
    return out


def class_stats(dev: str) -> dict[int, dict[str, int]]:
    """The HTB class counters of `dev` now, per OVS queue (empty if the port has no HTB): what the
    queues really took on the userspace datapath, where the tc classifiers do the queueing."""
    proc = subprocess.run(["tc", "-s", "class", "show", "dev", dev], capture_output=True, text=True)
    return parse_class_stats(proc.stdout) if proc.returncode == 0 else {}
