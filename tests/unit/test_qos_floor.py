"""The floor of the queues below the top: leveller.core.qos, `leveller switch-config --floor` per vendor,
and the emulated testbed's queues. Every expected figure is worked out by hand in the test."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from leveller.cli import main
from leveller.core.qos import DEFAULT_FLOOR, QueueConfig, check_floor, default_level_map, queue_configs
from leveller.core.topology import preset
from leveller.errors import UserError
from leveller.switchconfig import eos, ovs, sonic
from leveller.testbed.cluster import Testbed
from leveller.testbed.state import State, load_state

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "switch_config"


def cli(capsys: pytest.CaptureFixture[str], args: str) -> tuple[int, str, str]:
    code = main(["switch-config", *shlex.split(args)])
    out, err = capsys.readouterr()
    return code, out, err


# ---- leveller.core.qos ------------------------------------------------------------------------------

def test_default_floor_is_five_percent() -> None:
    assert DEFAULT_FLOOR == 0.05


def test_lower_queues_get_the_floor_and_the_top_the_rest() -> None:
    # 50 Mbit/s, K = 4, floor 5%: queues 0..2 get 2.5 Mbit/s each, the control queue 4 (TCP's ACKs) 5% too
    # and the top 50 - 7.5 - 2.5 = 40 Mbit/s; every ceiling the link, burst 10 ms of it (500,000 bits), HTB
    # priority 4..1 for the levels (the top served first of them) and 0 for the control queue
    assert queue_configs(4, 50, 0.05) == [QueueConfig(0, 4, 2_500_000, 50_000_000, 500_000),
                                          QueueConfig(1, 3, 2_500_000, 50_000_000, 500_000),
                                          QueueConfig(2, 2, 2_500_000, 50_000_000, 500_000),
                                          QueueConfig(3, 1, 40_000_000, 50_000_000, 500_000),
                                          QueueConfig(4, 0, 2_500_000, 50_000_000, 500_000)]
    assert queue_configs(4, 50) == queue_configs(4, 50, DEFAULT_FLOOR)
    # 1 Gbit/s, K = 2, floor 0.3: 300, 650 and the control queue's 50 Mbit/s
    assert [q.min_rate_bps for q in queue_configs(2, 1000, 0.3)] == [300_000_000, 650_000_000, 50_000_000]


def test_floor_zero_is_todays_pure_strict_priority() -> None:
    # a token guaranteed rate, a thousandth of the link (50 kbit/s), never below OVS's 12 kbit/s
    # (the control queue keeps its 5 % of a known rate)
    assert [q.min_rate_bps for q in queue_configs(4, 50, 0.0)] == [50_000] * 4 + [2_500_000]
    assert [q.min_rate_bps for q in queue_configs(3, None, 0.0)] == [12_000] * 4


def test_one_queue_has_nothing_below_it() -> None:
    assert queue_configs(1, 50, 0.05) == queue_configs(1, 50, 0.0) == [
        QueueConfig(0, 1, 50_000, 50_000_000, 500_000), QueueConfig(1, 0, 2_500_000, 50_000_000, 500_000)]
    assert queue_configs(1, None, 0.05) == [QueueConfig(0, 1, 12_000, None, None),
                                            QueueConfig(1, 0, 12_000, None, None)]


def test_a_tiny_floor_is_raised_to_what_ovs_takes() -> None:
    # 1% of 1 Mbit/s is 10 kbit/s; OVS raises any min-rate below 12 kbit/s, so the config says 12 kbit/s
    # (the control queue: 5% of 1 Mbit/s, 50 kbit/s, out of the top's share)
    assert [q.min_rate_bps for q in queue_configs(2, 1, 0.01)] == [12_000, 938_000, 50_000]


@pytest.mark.parametrize("floor, levels", [
    (-0.01, 4), (1 / 3, 4), (0.34, 4), (0.5, 3), (1.0, 2), (1.0, 1), (float("nan"), 2), (float("inf"), 2),
    (True, 2), ("0.05", 2), (None, 2)])
def test_bad_floor_is_refused_naming_field_value_and_rule(floor, levels) -> None:
    with pytest.raises(UserError) as exc:
        queue_configs(levels, 50, floor)
    msg = str(exc.value)
    assert msg.startswith(f"floor = {floor!r} is invalid") and "a number >= 0" in msg
    assert ("(levels - 1) x floor < 1" in msg) if levels > 1 else ("floor < 1" in msg)


def test_floor_at_the_limit() -> None:
    assert check_floor(0.33, 4) == 0.33  # 3 x 0.33 = 0.99 < 1
    assert check_floor(0, 8) == 0.0 and isinstance(check_floor(0, 8), float)
    with pytest.raises(UserError, match=r"--floor = 0.2 is invalid; .* floor < 0.1429 for 8 levels"):
        check_floor(0.2, 8, "--floor")


def test_a_floor_needs_the_rate() -> None:
    with pytest.raises(UserError, match=r"floor = 0.05 needs the port rate"):
        queue_configs(2, None, 0.05)


# ---- SONiC --------------------------------------------------------------------------------------------

def test_sonic_floor_is_a_strict_scheduler_with_cir_on_the_lower_queues(capsys) -> None:
    code, out, _ = cli(capsys, "--vendor sonic --levels 4 --ports Ethernet0,Ethernet4 --floor 0.05 "
                               "--rate-mbps 100000")
    db = json.loads(out)
    assert code == 0 and list(db) == ["DSCP_TO_TC_MAP", "TC_TO_QUEUE_MAP", "SCHEDULER", "QUEUE", "PORT_QOS_MAP"]
    # 5% of 100 Gbit/s = 5 Gbit/s = 625,000,000 bytes/s
    assert db["SCHEDULER"] == {"LEVELLER_STRICT": {"type": "STRICT"},
                               "LEVELLER_FLOOR": {"type": "STRICT", "meter_type": "bytes", "cir": "625000000"}}
    assert db["QUEUE"] == {f"Ethernet{p}|{q}": {"scheduler": "LEVELLER_FLOOR" if q < 3 else "LEVELLER_STRICT"}
                           for p in (0, 4) for q in range(4)}
    assert db["DSCP_TO_TC_MAP"] == sonic.render(default_level_map(4), ("Ethernet0",))["DSCP_TO_TC_MAP"]


def test_sonic_floor_needs_the_port_speed(capsys) -> None:
    code, out, err = cli(capsys, "--vendor sonic --levels 2 --floor 0.05")
    assert code == 2 and out == "" and "--floor 0.05" in err and "--rate-mbps" in err
    # 25 Gbit/s x 10% = 2.5 Gbit/s = 312,500,000 bytes/s
    db = sonic.render(default_level_map(2), ("Ethernet8",), 0.1, 25_000)
    assert db["SCHEDULER"]["LEVELLER_FLOOR"]["cir"] == "312500000"
    assert db["QUEUE"] == {"Ethernet8|0": {"scheduler": "LEVELLER_FLOOR"},
                           "Ethernet8|1": {"scheduler": "LEVELLER_STRICT"}}


# ---- EOS ----------------------------------------------------------------------------------------------

def test_eos_floor_guarantees_a_percent_to_every_tx_queue_below_the_top(capsys) -> None:
    code, out, _ = cli(capsys, "--vendor eos --levels 4 --ports Ethernet1 --floor 0.05")
    assert code == 0
    blocks = dict(re.findall(r"^   tx-queue (\d)\n((?:      .*\n)+)", out, re.M))
    assert blocks == {"0": "      priority strict\n      bandwidth guaranteed percent 5\n",
                      "1": "      priority strict\n      bandwidth guaranteed percent 5\n",
                      "2": "      priority strict\n      bandwidth guaranteed percent 5\n",
                      "3": "      priority strict\n"}
    assert "--floor 0.05)" in out.splitlines()[0]


def test_eos_floor_is_a_whole_percent() -> None:
    assert "      bandwidth guaranteed percent 12" in eos.render(default_level_map(2), ("Ethernet1",), 0.12)
    with pytest.raises(UserError, match=r"--floor 0.025: EOS guarantees whole percents"):
        eos.render(default_level_map(2), ("Ethernet1",), 0.025)


# ---- OVS ----------------------------------------------------------------------------------------------

def test_ovs_floor_is_the_lower_queues_min_rate(capsys) -> None:
    code, out, _ = cli(capsys, "--vendor ovs --levels 4 --ports s1-p1 --rate-mbps 50 --floor 0.05 "
                               "--queue-mode tc --json")
    data = json.loads(out)
    assert code == 0 and data["floor"] == 0.05
    [vsctl] = [" ".join(c["argv"]) for c in data["commands"] if c["argv"][0] == "ovs-vsctl"]
    # queues 0..2: 5% of 50 Mbit/s = 2.5 Mbit/s; queue 3 (the top level, HTB priority 1): 40 Mbit/s; queue 4
    # (TCP's control packets, HTB priority 0, served first): 2.5 Mbit/s
    rows = re.findall(r"--id=@qos0_(\d) create Queue other-config:min-rate=(\d+) other-config:max-rate=(\d+) "
                      r"other-config:burst=\d+ other-config:priority=(\d)", vsctl)
    assert rows == [("0", "2500000", "50000000", "4"), ("1", "2500000", "50000000", "3"),
                    ("2", "2500000", "50000000", "2"), ("3", "40000000", "50000000", "1"),
                    ("4", "2500000", "50000000", "0")]
    assert "--floor 0.05" in data["text"].splitlines()[2] and "min-rate 40000000 bit/s" in data["text"]


def test_ovs_floor_needs_the_rate(capsys) -> None:
    code, out, err = cli(capsys, "--vendor ovs --levels 2 --ports eth1 --floor 0.05")
    assert code == 2 and out == "" and "--floor 0.05" in err and "--rate-mbps" in err
    with pytest.raises(UserError, match="--rate-mbps"):
        ovs.commands(default_level_map(2), ("eth1",), None, "tc", "br0", 0.05)


# ---- every vendor ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, args", [
    ("sonic-k4.json", "--vendor sonic --levels 4 --ports Ethernet0,Ethernet4"),
    ("eos-k4.txt", "--vendor eos --levels 4 --ports Ethernet1,Ethernet2/1"),
    ("ovs-k4-tc.sh", "--vendor ovs --levels 4 --ports s1-p1 --rate-mbps 50 --queue-mode tc"),
    ("ovs-k2-set_queue.sh", "--vendor ovs --levels 2 --ports eth1,eth2 --bridge br-fabric"),
])
def test_floor_zero_renders_todays_output_exactly(capsys, name, args) -> None:
    code, out, _ = cli(capsys, args + " --floor 0")
    assert code == 0 and out == (GOLDEN / name).read_text()


@pytest.mark.parametrize("args, says", [
    ("--vendor ovs --levels 4 --rate-mbps 50 --floor 0.4", "--floor = 0.4 is invalid"),
    ("--vendor eos --levels 2 --floor -0.1", "--floor = -0.1 is invalid"),
    ("--vendor sonic --levels 3 --rate-mbps 100 --floor 0.5", "--floor = 0.5 is invalid"),
    ("--vendor sonic --levels 2 --rate-mbps 100", "--rate-mbps: only for --vendor ovs"),
    ("--vendor eos --levels 2 --rate-mbps 100 --floor 0.05", "--rate-mbps: only for --vendor ovs"),
])
def test_bad_floor_options_are_one_line_naming_the_flag(capsys, args, says) -> None:
    code, out, err = cli(capsys, args)
    assert code == 2 and out == "" and err.count("\n") == 1 and says in err


# ---- the emulated testbed -------------------------------------------------------------------------------

def test_testbed_refuses_a_bad_floor_before_building_anything(tmp_path) -> None:
    run_dir = tmp_path / "run"
    with pytest.raises(UserError, match=r"floor = 0.5 is invalid"):
        Testbed.up(preset("dumbbell"), "fl", run_dir, floor=0.5)  # K = 4: 3 x 0.5 >= 1
    assert not run_dir.exists()


def test_testbed_up_with_another_floor_is_refused_not_half_applied(tmp_path) -> None:
    topo = preset("dumbbell")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    state = State(name="fl", run_dir=str(run_dir), topology=topo.to_dict(), datapath_type="netdev",
                  switch_netns="lvtb-fl-sw", host_netns={}, controller="tcp:127.0.0.1:6653", phase="up",
                  queue_floor=0.0)
    state.save()
    with pytest.raises(UserError, match=r"queue floor 0, not 0.05; run `leveller testbed down --name fl`"):
        Testbed.up(topo, "fl", run_dir)  # the default floor, DEFAULT_FLOOR
    assert load_state(run_dir) == state


def test_state_files_from_before_floors_load_as_floor_zero(tmp_path) -> None:
    data = {"name": "old", "run_dir": str(tmp_path), "topology": {}, "datapath_type": "netdev",
            "switch_netns": "lvtb-old-sw", "host_netns": {}, "controller": "tcp:127.0.0.1:6653", "phase": "up"}
    (tmp_path / "state.json").write_text(json.dumps(data))
    state = load_state(tmp_path)
    assert state is not None and state.queue_floor == 0.0


def test_demo_cluster_passes_its_floor_on() -> None:
    from leveller.experiments.shared.cluster import DemoCluster

    assert DemoCluster("fa").floor == DEFAULT_FLOOR
    assert DemoCluster("fb", floor=0).floor == 0.0
    with pytest.raises(UserError, match=r"floor = 1.5 is invalid"):
        DemoCluster("fc", floor=1.5)


def test_floor_errors_give_the_limit_and_why_the_rate_is_needed() -> None:
    """With one level the limit is floor < 1; a floor without the port rate says why it needs it."""
    with pytest.raises(UserError) as info:
        check_floor(1.0, 1)
    assert str(info.value) == ("floor = 1.0 is invalid; the share of the link rate guaranteed to every queue below "
                               "the top: a number >= 0 (0 = pure strict priority) with floor < 1")
    with pytest.raises(UserError) as info:
        queue_configs(4, None, 0.1)
    assert str(info.value) == ("floor = 0.1 needs the port rate: a floor is a share of the link rate and OVS takes "
                               "absolute rates; give the rate or floor = 0")
