"""`leveller switch-config`: SONiC / EOS / OVS renderings of the level -> DSCP -> queue map.

Golden files (tests/golden/switch_config/) were checked line by line against the vendors'
documentation once; here they guard against regressions. LEVELLER_UPDATE_GOLDEN=1 rewrites
them (then review the diff). The other tests state the expected mapping literally or check
properties over arbitrary level maps.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from leveller.cli import main
from leveller.core.qos import (
    DEFAULT_FLOOR,
    LevelMap,
    default_level_map,
    dscp_levels,
    htb_root_burst,
    level_map_from_dict,
    queue_configs,
    tc_dscp_filters,
)
from leveller.switchconfig import eos, ovs, sonic
from leveller.testbed.ovs import bridge_commands

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "switch_config"
CASES = {
    "sonic-k4.json": "--vendor sonic --levels 4 --ports Ethernet0,Ethernet4",
    "sonic-k2.json": "--vendor sonic --levels 2 --ports Ethernet8",
    "eos-k4.txt": "--vendor eos --levels 4 --ports Ethernet1,Ethernet2/1",
    "eos-k7.txt": "--vendor eos --levels 7 --ports Port-Channel10",
    "ovs-k4-tc.sh": "--vendor ovs --levels 4 --ports s1-p1 --rate-mbps 50 --queue-mode tc",
    "ovs-k2-set_queue.sh": "--vendor ovs --levels 2 --ports eth1,eth2 --bridge br-fabric",
}
TABLES = ["DSCP_TO_TC_MAP", "TC_TO_QUEUE_MAP", "SCHEDULER", "QUEUE", "PORT_QOS_MAP"]


def cli(capsys: pytest.CaptureFixture[str], args: str) -> tuple[int, str, str]:
    code = main(["switch-config", *shlex.split(args)])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("name", sorted(CASES))
def test_output_matches_reviewed_golden_file(capsys, name):
    code, out, _ = cli(capsys, CASES[name])
    assert code == 0
    path = GOLDEN / name
    if os.environ.get("LEVELLER_UPDATE_GOLDEN"):
        path.write_text(out)
    assert out == path.read_text()


def strict_json(text: str) -> dict:
    """json.loads that fails on a key given twice in one object (plain json keeps the last)."""
    def pairs(items: list[tuple[str, object]]) -> dict:
        keys = [k for k, _ in items]
        dup = {k for k in keys if keys.count(k) > 1}
        assert not dup, f"duplicate keys {dup}"
        return dict(items)
    return json.loads(text, object_pairs_hook=pairs)


@pytest.mark.parametrize("json_flag", ["", " --json"])
def test_sonic_tables_at_top_level_every_dscp_once(capsys, json_flag):
    code, out, _ = cli(capsys, "--vendor sonic --levels 4 --ports Ethernet0,Ethernet4" + json_flag)
    db = strict_json(out)
    assert code == 0 and list(db) == TABLES
    dscp = db["DSCP_TO_TC_MAP"]["LEVELLER"]
    assert sorted(dscp, key=int) == [str(d) for d in range(64)]
    # the SDN app's default map for K=4: DSCP 0, 8, 16, 24 carry levels 0..3; all else -> class 0
    assert {d: tc for d, tc in dscp.items() if tc != "0"} == {"8": "1", "16": "2", "24": "3"}
    assert dscp["0"] == dscp["46"] == dscp["63"] == "0"
    assert db["TC_TO_QUEUE_MAP"] == {"LEVELLER": {"0": "0", "1": "1", "2": "2", "3": "3"}}
    assert db["SCHEDULER"] == {"LEVELLER_STRICT": {"type": "STRICT"}}
    assert set(db["QUEUE"]) == {f"Ethernet{p}|{q}" for p in (0, 4) for q in range(4)}
    assert all(v == {"scheduler": "LEVELLER_STRICT"} for v in db["QUEUE"].values())
    assert db["PORT_QOS_MAP"] == {p: {"dscp_to_tc_map": "LEVELLER", "tc_to_queue_map": "LEVELLER"}
                                  for p in ("Ethernet0", "Ethernet4")}


@st.composite
def level_maps(draw: st.DrawFn) -> LevelMap:
    k = draw(st.integers(1, 8))
    dscp = draw(st.lists(st.integers(0, 63), min_size=k, max_size=k, unique=True))
    queue = sorted(draw(st.lists(st.integers(0, k - 1), min_size=k, max_size=k)))
    return level_map_from_dict({"dscp": dscp, "queue": queue})


@given(level_maps())
def test_sonic_maps_every_level_to_its_queue_and_the_rest_to_the_lowest(m):
    db = sonic.render(m, ("Ethernet0",))
    dscp, tcq = db["DSCP_TO_TC_MAP"]["LEVELLER"], db["TC_TO_QUEUE_MAP"]["LEVELLER"]
    assert sorted(map(int, dscp)) == list(range(64))
    for level, d in enumerate(m.dscp):
        assert int(tcq[dscp[str(d)]]) == m.queue[level]
    for d in set(range(64)) - set(m.dscp):
        assert dscp[str(d)] == "0" and int(tcq["0"]) == m.queue[0]
    assert {int(k.split("|")[1]) for k in db["QUEUE"]} == set(m.queue)


def eos_dscp_classes(lines: list[str]) -> list[tuple[int, int]]:
    out = []
    for line in lines:
        match = re.fullmatch(r"qos map dscp ([0-9 ]+) to traffic-class ([0-9])", line)
        if match:
            out += [(int(d), int(match.group(2))) for d in match.group(1).split()]
    return out


@given(level_maps().filter(lambda m: m.levels <= eos.MAX_LEVELS))
def test_eos_maps_each_dscp_once_and_each_class_to_its_queue(m):
    lines = eos.render(m, ("Ethernet1",))
    pairs = eos_dscp_classes(lines)
    assert sorted(d for d, _ in pairs) == list(range(64))
    tx = {int(a): int(b) for a, b in re.findall(r"^qos map traffic-class (\d) to tx-queue (\d)$", "\n".join(lines),
                                               re.M)}
    cls = dict(pairs)
    for level, d in enumerate(m.dscp):
        assert tx[cls[d]] == m.queue[level]
    assert all(cls[d] == 0 for d in set(range(64)) - set(m.dscp))
    strict = re.findall(r"^   tx-queue (\d)\n      priority strict$", "\n".join(lines), re.M)
    assert sorted(map(int, strict)) == sorted(set(m.queue))


def test_eos_profile_applied_to_each_port():
    text = "\n".join(eos.render(default_level_map(2), ("Ethernet1", "Ethernet2/1")))
    assert "interface Ethernet1\n   service-profile LEVELLER" in text
    assert "interface Ethernet2/1\n   service-profile LEVELLER" in text
    assert "qos profile LEVELLER\n   qos trust dscp" in text


@given(level_maps())
def test_dscp_levels_agree_with_the_sdn_queue_rule(m):
    levels = dscp_levels(m)
    assert [m.queue[levels[d]] for d in range(64)] == [m.queue_for_dscp(d) for d in range(64)]


@pytest.mark.parametrize("floor", [0.0, DEFAULT_FLOOR])  # the paper's strict priority, the testbed's default
def test_ovs_uses_the_testbeds_own_commands(floor):
    m = default_level_map(4)
    cmds = ovs.commands(m, ("s1-p1", "s1-p2"), 50, "tc", "br0", floor)
    vsctl = [c.argv for c in cmds if c.argv[0] == "ovs-vsctl"]
    testbed = bridge_commands("s1", 1, "netdev", "tcp:127.0.0.1:6653",
                              [("s1-p1", 1, queue_configs(4, 50, floor)), ("s1-p2", 2, queue_configs(4, 50, floor))])
    for argv in vsctl:  # each port's QoS rows are a slice of the testbed's transaction
        body = list(argv[1:])
        assert any(testbed[i:i + len(body)] == body for i in range(len(testbed)))
    tc = [list(c.argv) for c in cmds if c.argv[0] == "tc"]
    # what sdn/tcmap installs: the classifiers, then the root class's burst widened to the queues' 10 ms
    # of 50 Mbit/s (62,500 bytes; OVS leaves one MTU there)
    assert tc == [*tc_dscp_filters("s1-p1", m), htb_root_burst("s1-p1", "50000000bit", 62_500),
                  *tc_dscp_filters("s1-p2", m), htb_root_burst("s1-p2", "50000000bit", 62_500)]
    assert [c.check for c in cmds if c.argv[0] == "tc"] == ([False] + [True] * 11) * 2
    assert "other-config:burst=500000" in " ".join(vsctl[0])  # the queues' burst, in bits


def test_ovs_leaves_bursts_to_the_switch_without_a_rate():
    cmds = ovs.commands(default_level_map(2), ("eth1",), None, "tc", "br0")
    assert not any("burst" in " ".join(c.argv) for c in cmds)


def test_ovs_queue_rows_give_higher_levels_smaller_htb_priority():
    args = ovs.port_qos_args("eth1", queue_configs(3, 100), "qos0")
    prio = dict(re.findall(r"--id=@qos0_(\d) create Queue .*?other-config:priority=(\d)", " ".join(args)))
    # ovs-vswitchd.conf.db(5): smaller priority served first; queue 3 is TCP's control packets, before every level
    assert prio == {"0": "3", "1": "2", "2": "1", "3": "0"}
    assert "other-config:max-rate=100000000" in args
    unlimited = ovs.port_qos_args("eth1", queue_configs(3, None, floor=0.0), "q")
    assert not any("max-rate" in a for a in unlimited)


def test_ovs_set_queue_flows_match_the_apps_table_zero(capsys):
    code, out, _ = cli(capsys, "--vendor ovs --levels 3 --ports eth1 --json")
    data = json.loads(out)
    flows = [c["argv"][-1] for c in data["commands"] if c["argv"][0] == "ovs-ofctl"]
    assert code == 0 and data["queue_mode"] == "set_queue" and data["level_map"]["dscp"] == [0, 8, 16]
    assert [c["argv"][:5] for c in data["commands"] if c["argv"][0] == "ovs-ofctl"] == \
        [["ovs-ofctl", "-O", "OpenFlow13", "add-flow", "br0"]] * 7
    assert flows == [f"cookie=0x8000000000000000,table=0,priority=100,eth_type={eth},ip_dscp={d},"
                     f"actions=set_queue:{q},goto_table:1" for d, q in ((0, 0), (8, 1), (16, 2))
                     for eth in ("0x0800", "0x86dd")] + \
        ["cookie=0x8000000000000000,table=0,priority=0,actions=goto_table:1"]
    assert data["text"].startswith("#!/bin/sh\n")


def test_without_ports_renders_an_example_port_and_says_so(capsys):
    code, out, err = cli(capsys, "--vendor sonic --levels 2")
    assert code == 0 and set(json.loads(out)["PORT_QOS_MAP"]) == {"Ethernet0"}
    assert "--ports" in err


@pytest.mark.parametrize("args, flag", [
    ("--vendor sonic --levels 0", "--levels 0"),
    ("--vendor ovs --levels 9", "--levels 9"),
    ("--vendor eos --levels 8", "--levels 8"),
    ("--vendor sonic --levels 2 --ports eth0", "--ports 'eth0'"),
    ("--vendor sonic --levels 2 --ports Ethernet0,Ethernet0", "given twice"),
    ("--vendor sonic --levels 2 --ports Ethernet0,,Ethernet4", "empty port name"),
    ("--vendor eos --levels 2 --ports Ethernet1/x", "--ports 'Ethernet1/x'"),
    ("--vendor ovs --levels 2 --ports a/b", "--ports 'a/b'"),
    ("--vendor ovs --levels 2 --ports abcdefghijklmnop", "--ports 'abcdefghijklmnop'"),
    ("--vendor sonic --levels 2 --rate-mbps 100", "--rate-mbps: only for --vendor ovs"),
    ("--vendor ovs --levels 2 --rate-mbps 0", "--rate-mbps 0"),
    ("--vendor ovs --levels 2 --queue-mode tc --bridge br0", "--bridge: only with --queue-mode set_queue"),
])
def test_bad_input_is_one_line_naming_the_flag(capsys, args, flag):
    code, out, err = cli(capsys, args)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and flag in err and "Traceback" not in err


@pytest.mark.parametrize("args", ["--vendor junos --levels 2", "--vendor sonic --levels two"])
def test_argparse_refusals_name_the_flag(capsys, args):
    with pytest.raises(SystemExit) as exc:
        main(["switch-config", *shlex.split(args)])
    assert exc.value.code == 2
    assert ("--vendor" if "junos" in args else "--levels") in capsys.readouterr().err


def test_help_teaches_with_examples(capsys):
    with pytest.raises(SystemExit):
        main(["switch-config", "--help"])
    out = capsys.readouterr().out
    assert "examples:" in out and "leveller switch-config --vendor sonic" in out and "--queue-mode" in out
