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

    def port(self, dev: str, htb: bool, filters: int = 0, refuse_add: bool = False) -> None:
        self.devs[dev] = {"htb": htb, "filters": [[str(i + 1), f"1:{i + 1}"] for i in range(filters)],
                          "refuse_add": refuse_add}
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
    assert st["devs"]["p1"]["filters"] == [[str(p), f"1:{(p - 1) % 4 + 1}"] for p in range(1, 9)]  # IPv4, IPv6
    assert st["calls"][-9][:2] == ["filter", "del"]  # old ones removed first: no duplicate rules


def test_leaves_a_port_alone_when_it_is_fine_or_has_no_htb_yet(tc: FakeTc) -> None:
    tc.port("ok", htb=True, filters=8)
    tc.port("bare", htb=False)
    assert tcmap.ensure_filters("ok", LM) == tcmap.KEPT
    assert tcmap.ensure_filters("bare", LM) == tcmap.NO_QDISC  # not prioritising yet: the app's health says so
    writes = [c for c in tc.state()["calls"] if c[:2] in (["filter", "add"], ["filter", "del"])]
    assert writes == []


def test_a_refused_rule_is_an_error_naming_the_command_and_the_reason(tc: FakeTc) -> None:
    tc.port("p1", htb=True, refuse_add=True)
    with pytest.raises(RuntimeError, match=r"tc filter add dev p1 .*Operation not permitted"):
        tcmap.ensure_filters("p1", LM)
