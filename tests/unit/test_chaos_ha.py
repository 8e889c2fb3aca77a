"""The chaos experiment's controllers on etcd, the parts that need no root (leveller.experiments.chaos.ha):
the agents are given every controller, decisions are read from the controllers' --json lines."""

from __future__ import annotations

from pathlib import Path

from leveller.cli import build_parser
from leveller.experiments.chaos.ha import EtcdNetns, HaSet, decision_times
from leveller.experiments.shared.policy_run import LiveSettings


def test_the_agents_get_every_controller_and_the_last_controller_option_wins() -> None:
    ha = HaSet(EtcdNetns.__new__(EtcdNetns), [5001, 5002], {})
    settings = ha.settings(LiveSettings(agent_args=("--overlap",)))
    assert settings.agent_args == ("--overlap", "--controller", "127.0.0.1:5001,127.0.0.1:5002")
    # run_policy writes its own --controller first; the one added here comes later and wins
    args = build_parser().parse_args(["agent", "--controller", "127.0.0.1:5001", "--host", "h1",
                                      *settings.agent_args])
    assert args.controller == "127.0.0.1:5001,127.0.0.1:5002"


def test_controller_options_name_the_controller_and_its_own_etcd_address() -> None:
    etcd = EtcdNetns.__new__(EtcdNetns)
    etcd.net, etcd.members = 7, 3
    assert etcd.ha_args(1, "127.0.0.1:5002", 1) == [
        "--etcd", "http://10.215.7.11:2379,http://10.215.7.11:2389,http://10.215.7.11:2399", "--etcd-ttl", "1",
        "--name", "c1", "--advertise", "127.0.0.1:5002"]
    assert etcd.address(0) != etcd.address(1)  # one address per controller: the partition cuts one


def test_decision_times_skip_failed_steps_and_other_lines(tmp_path: Path) -> None:
    lines = ['{"t": 3.5, "error": null}', "elected leader at epoch 3", '{"t": 1.25, "error": null}',
             '{"t": 2.0, "error": "ValueError: x"}', '{"t": 4', "[1, 2]"]
    assert decision_times(lines) == [1.25, 3.5]
    out = tmp_path / "c1.jsonl"
    out.write_text("\n".join(lines))
    assert HaSet(EtcdNetns.__new__(EtcdNetns), [1, 2], {"c1": out, "c0": tmp_path / "none"}).decisions() == {
        "c1": [1.25, 3.5], "c0": []}
