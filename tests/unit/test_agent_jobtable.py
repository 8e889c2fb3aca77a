"""The agent's job table (leveller.agent.jobtable): flows to jobs by cgroup id, refusals, ends.

Directories under tmp_path stand in for cgroup directories: the table reads only their inode numbers
(the cgroup ids) and, to end entries, whether they are populated (cgroup.events, written here)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveller.agent.jobsources import MessageTailer, OneJobTracker
from leveller.agent.jobtable import JobTable, Refused
from leveller.agent.reports import Classifier, FlowSample, parse_port_rule
from leveller.model.flow import flow_key

FLOW = flow_key("10.0.0.1", "10.0.0.2", 40000, 47000)


def cgroup(root: Path, name: str, populated: bool = True) -> Path:
    d = root / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "cgroup.events").write_text(f"populated {int(populated)}\nfrozen 0\n")
    return d


def test_flows_of_a_cgroup_tree_belong_to_its_job_and_static_rules_come_first(tmp_path: Path) -> None:
    a = cgroup(tmp_path, "a")
    leaf = cgroup(a, "step_0/task_0")
    static = Classifier(ports=(parse_port_rule("ported=47000"),))
    table = JobTable(static)
    table.add("socket", "j1", 1000, str(a))
    assert table.job_of(flow_key("10.0.0.1", "10.0.0.2", 1, 2), FlowSample(1, os.stat(leaf).st_ino)) == "j1"
    assert table.job_of(FLOW, FlowSample(1, os.stat(leaf).st_ino)) == "ported"  # the --job-ports rule wins
    assert table.job_of(flow_key("10.0.0.1", "10.0.0.2", 1, 2), FlowSample(1, 0)) is None


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=12), st.data())
def test_job_of_matches_a_search_of_every_entry(tmp_path_factory: pytest.TempPathFactory, shape: list[int],
                                                data: st.DataObject) -> None:
    root = tmp_path_factory.mktemp("cg")
    table = JobTable(max_entries=100)
    dirs: dict[int, str] = {}
    for i, children in enumerate(shape):
        top = cgroup(root, f"job{i}")
        for c in range(children):
            cgroup(top, f"c{c}")
        table.add("socket", f"job{i}", 0, str(top))
        for sub, _, _ in os.walk(top):
            dirs[os.stat(sub).st_ino] = f"job{i}"
    ended = data.draw(st.sets(st.sampled_from(sorted(table.entries))))
    for entry_id in ended:
        gone = table.entries[entry_id].job
        table.end(entry_id, "end")
        dirs = {k: v for k, v in dirs.items() if v != gone}
    probes = list(dirs) + [max(dirs or [1]) + 1, 1]
    for cid in probes:
        assert table.job_of(flow_key("10.0.0.1", "10.0.0.2", 1, 2), FlowSample(1, cid)) == dirs.get(cid)


def test_refusals_leave_the_table_as_it_was(tmp_path: Path) -> None:
    table = JobTable(max_jobs=2, max_entries=3)
    a, b, c = (str(cgroup(tmp_path, n)) for n in "abc")
    table.add("socket", "j1", 1000, a)
    with pytest.raises(Refused) as exc:
        table.add("socket", "j1", 1001, b)
    assert exc.value.reason == "name_taken"
    with pytest.raises(Refused) as exc:
        table.add("socket", "j2", 1000, a)
    assert exc.value.reason == "cgroup_taken"
    table.add("socket", "j2", 1000, b)
    with pytest.raises(Refused) as exc:
        table.add("socket", "j3", 1000, c)
    assert exc.value.reason == "jobs"
    table.add("socket", "j1", 1000, a)  # another rank of j1
    with pytest.raises(Refused) as exc:
        table.add("socket", "j1", 1000, a)
    assert exc.value.reason == "registrations"
    assert sorted(e.job for e in table.entries.values()) == ["j1", "j1", "j2"]


def test_an_entry_ends_when_its_cgroup_empties_or_its_lease_runs_out(tmp_path: Path) -> None:
    clock = [100.0]
    table = JobTable(monotonic=lambda: clock[0])
    a, b = cgroup(tmp_path, "a"), cgroup(tmp_path, "b")
    ea = table.add("socket", "ja", 0, str(a))
    eb = table.add("socket", "jb", 0, str(b), lease_s=5.0)
    clock[0] += 1
    assert table.sweep() == []
    (a / "cgroup.events").write_text("populated 0\n")
    clock[0] += 1
    assert [e.id for e in table.sweep()] == [ea.id]
    table.renew(eb.id)  # at 102: good until 107
    clock[0] = 106.5
    assert table.sweep() == []
    clock[0] = 107.5
    assert [e.id for e in table.sweep()] == [eb.id]
    assert table.ended == {"empty": 1, "lease": 1}
    assert table.job_of(FLOW, FlowSample(1, os.stat(b).st_ino)) is None


def test_a_registrations_log_counts_only_for_the_registered_job() -> None:
    tracker = OneJobTracker("mine")
    tracker.feed("leveller-iter job=victim rank=0 iter=0 t=1000.0", now=1001.0)
    tracker.feed("leveller-iter job=victim rank=0 iter=7 t=1000.5", now=1001.0)
    assert list(tracker.jobs) == ["mine"] and tracker.jobs["mine"].iterations == 7


def test_iteration_messages_become_the_jobs_log_lines() -> None:
    tailer = MessageTailer("j", 2, "socket:j")
    tailer.started(1000.0, done=4, now=1010.0)
    tailer.put(5, 1011.0)
    tracker = OneJobTracker("j")
    assert tracker.feed_all(tailer.poll(), now=1012.0) == {"j"}
    p = tracker.jobs["j"]
    assert (p.start_time, p.iterations) == (1000.0, 5) and tailer.poll() == []


def test_ideal_times_and_weights_of_registrations_merge_under_the_static_flags(tmp_path: Path) -> None:
    table = JobTable(static_ideals={"fixed": 2.0}, static_weights={"fixed": 3.0})
    table.add("socket", "fixed", 0, str(cgroup(tmp_path, "a")), ideal=9.0, weight=9.0)
    table.add("socket", "free", 0, str(cgroup(tmp_path, "b")), ideal=0.5)
    assert dict(table.ideal_times) == {"fixed": 2.0, "free": 0.5}
    assert dict(table.weights) == {"fixed": 3.0}
