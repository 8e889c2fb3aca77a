"""sdn.tcmap keeps the DSCP -> HTB classifiers on switch ports, against a fake `tc` on PATH.

FakeTc keeps per-device state (is there an HTB root, which filters) in a JSON file and answers
`tc qdisc show`, `tc filter show/add/del` as iproute2 does for what tcmap reads. The real tc on
real OVS ports is exercised by the privileged tests (tests/integration/test_sdn_priority.py).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from leveller.core.qos import default_level_map
from sdn import tcmap

FAKE_TC = r'''#!{python}
import json, sys
state_file = {state!r}
state = json.load(open(state_file))
args = sys.argv[1:]
state["calls"].append(args)
dev = args[args.index("dev") + 1] if "dev" in args else None
port = state["devs"].get(dev)
def done(code=0, out="", err=""):
    json.dump(state, open(state_file, "w"))
    sys.stdout.write(out); sys.stderr.write(err); sys.exit(code)
if port is None:
    done(1, err=f'Cannot find device "{{dev}}"\n')
if args[:2] == ["qdisc", "show"]:
    done(0, "qdisc htb 1: root refcnt 2 r2q 10 default 0x1\n" if port["htb"] else "qdisc noqueue 0: root\n")
if args[:2] == ["filter", "show"]:
    if not port["htb"]:
        done(2, err="Error: Parent Qdisc doesn't exists.\n")
    lines = []
    for f in port["filters"]:
        lines += ["filter parent 1: protocol ip pref %s u32 chain 0" % f[0],
                  "filter parent 1: protocol ip pref %s u32 chain 0 fh 800::800 order 2048 key ht 800 bkt 0 "
                  "flowid %s not_in_hw" % (f[0], f[1]),
                  "  match 00b80000/00fc0000 at 0"]
    done(0, "\n".join(lines) + "\n")
if args[:3] == ["-d", "class", "show"]:
    done(0, port.get("classes", ""))
if args[:2] == ["class", "change"]:
    port["changed"] = args
    done(0)
if args[:2] == ["filter", "del"]:
    port["filters"] = []
    done(0)
if args[:2] == ["filter", "add"]:
    if port.get("refuse_add"):
        done(2, err="RTNETLINK answers: Operation not permitted\n")
    port["filters"].append([args[args.index("prio") + 1], args[args.index("flowid") + 1]])
    done(0)
done(1, err="unexpected tc call\n")
'''


class FakeTc:
    def __init__(self, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.state_file = tmp / "tc-state.json"
        self.devs: dict[str, dict] = {}
        self.save([])
        bindir = tmp / "bin"
        bindir.mkdir()
        tc = bindir / "tc"
        tc.write_text(FAKE_TC.format(python=sys.executable, state=str(self.state_file)))
        tc.chmod(0o755)
        monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")

    def save(self, calls: list) -> None:
        self.state_file.write_text(json.dumps({"devs": self.devs, "calls": calls}))

    def port(self, dev: str, htb: bool, filters: int = 0, refuse_add: bool = False, classes: str = "") -> None:
        self.devs[dev] = {"htb": htb, "filters": [[str(i + 1), f"1:{i + 1}"] for i in range(filters)],
                          "refuse_add": refuse_add, "classes": classes}
        self.save([])

    def state(self) -> dict:
        return json.loads(self.state_file.read_text())


@pytest.fixture
def tc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeTc:
    return FakeTc(tmp_path, monkeypatch)


LM = default_level_map(4)


def test_counts_classifier_rules_not_lines(tc: FakeTc) -> None:
    tc.port("p1", htb=True, filters=3)
    tc.port("p2", htb=False)
    assert tcmap.installed_filters("p1") == 3  # each rule prints three lines; one has the flowid
    assert tcmap.installed_filters("p2") is None  # no HTB: no such parent
    assert tcmap.installed_filters("nosuch") is None
    assert tcmap.htb_present("p1") and not tcmap.htb_present("p2") and not tcmap.htb_present("nosuch")


def test_installs_one_rule_per_level_on_a_port_that_lost_them(tc: FakeTc) -> None:
    tc.port("p1", htb=True, filters=1)  # e.g. OVS rebuilt the qdisc and one stale filter is left
    assert tcmap.ensure_filters("p1", LM) == tcmap.INSTALLED
    st = tc.state()
    # TCP's control packets to the control queue 4 (class 1:5), IPv4 and IPv6; then one rule per level, IPv4, IPv6
    assert st["devs"]["p1"]["filters"] == [["1", "1:5"], ["2", "1:5"]] + \
        [[str(p), f"1:{(p - 3) % 4 + 1}"] for p in range(3, 11)]
    assert st["calls"][-11][:2] == ["filter", "del"]  # old ones removed first: no duplicate rules


def test_leaves_a_port_alone_when_it_is_fine_or_has_no_htb_yet(tc: FakeTc) -> None:
    tc.port("ok", htb=True, filters=10)
    tc.port("bare", htb=False)
    assert tcmap.ensure_filters("ok", LM) == tcmap.KEPT
    assert tcmap.ensure_filters("bare", LM) == tcmap.NO_QDISC  # not prioritising yet: the app's health says so
    writes = [c for c in tc.state()["calls"] if c[:2] in (["filter", "add"], ["filter", "del"])]
    assert writes == []


def test_a_refused_rule_is_an_error_naming_the_command_and_the_reason(tc: FakeTc) -> None:
    tc.port("p1", htb=True, refuse_add=True)
    with pytest.raises(RuntimeError, match=r"tc filter add dev p1 .*Operation not permitted"):
        tcmap.ensure_filters("p1", LM)


# `tc -d class show` of a 50 Mbit/s port as OVS 3.1 builds it (iproute2 6.1): the root with one MTU of burst,
# the queues with the OVSDB burst of 500,000 bits (62,500 bytes)
OVS_ROOT = ("class htb 1:fffe root rate 50Mbit ceil 50Mbit linklayer ethernet burst 1500b/1 mpu 60b "
            "cburst 1500b/1 mpu 60b level 7 \n")
QUEUE = ("class htb 1:{q} parent 1:fffe prio {p} quantum 1500 rate 50Kbit ceil 50Mbit linklayer ethernet "
         "burst {b}/1 mpu 60b cburst {b}/1 mpu 60b level 0 \n")


def queues(first: str = "62500b", rest: str = "62500b") -> str:
    """The four queues' lines; class 1:1's burst `first`, the others' `rest` (as tc prints sizes)."""
    return "".join(QUEUE.format(q=q, p=4 - q, b=first if q == 1 else rest) for q in range(1, 5))


QUEUES = queues()


def test_parses_rates_as_printed_and_bursts_in_bytes() -> None:
    classes = tcmap.parse_htb_classes(OVS_ROOT + queues(first="61Kb") + QUEUE.format(q="a", p=0, b="1Mb"))
    assert classes[0xFFFE] == tcmap.HtbClass("50Mbit", "50Mbit", 1500, 1500, 60)
    assert classes[1] == tcmap.HtbClass("50Kbit", "50Mbit", 61 * 1024, 61 * 1024, 60)
    assert classes[2].burst == 62_500 and classes[0xA].cburst == 1024**2
    assert sorted(classes) == [1, 2, 3, 4, 0xA, 0xFFFE]


def test_widens_the_root_burst_to_the_widest_queue_burst() -> None:
    text = OVS_ROOT + queues(first="90000b")  # queue 0 (class 1:1) is the widest
    assert tcmap.root_burst_change("s1-p1", text) == [
        "tc", "class", "change", "dev", "s1-p1", "parent", "1:", "classid", "1:fffe", "htb", "rate", "50Mbit",
        "ceil", "50Mbit", "burst", "90000", "cburst", "90000", "mpu", "60"]


def test_leaves_the_root_alone_when_there_is_nothing_to_widen() -> None:
    wide_root = OVS_ROOT.replace("1500b", "61Kb")  # widened before; tc prints 62,500 rounded to 61Kb
    assert tcmap.root_burst_change("p", wide_root + QUEUES) is None
    default_queues = queues("1564b", "1564b")  # queues at OVS's default (no OVSDB burst)
    assert tcmap.root_burst_change("p", OVS_ROOT + default_queues) is None
    assert tcmap.root_burst_change("p", QUEUES) is None  # no root class
    assert tcmap.root_burst_change("p", OVS_ROOT) is None  # no queue
    other = OVS_ROOT.replace("ceil 50Mbit", "ceil 100Mbit")  # not the root OVS builds: someone else's
    assert tcmap.root_burst_change("p", other + QUEUES) is None


def test_ensure_filters_widens_the_root_burst_of_a_port_ovs_rebuilt(tc: FakeTc) -> None:
    tc.port("p1", htb=True, filters=10, classes=OVS_ROOT + QUEUES)
    assert tcmap.ensure_filters("p1", LM) == tcmap.KEPT
    changed = tc.state()["devs"]["p1"]["changed"]
    assert changed[changed.index("burst") + 1] == "62500" and changed[changed.index("cburst") + 1] == "62500"
    tc.port("p2", htb=True, filters=10, classes=OVS_ROOT.replace("1500b", "61Kb") + QUEUES)
    assert tcmap.ensure_filters("p2", LM) == tcmap.KEPT
    assert "changed" not in tc.state()["devs"]["p2"]
