"""The controller prunes one row per class (rows of one job on one path) and gives the others its level:
the result must be exactly the pruning of every row (leveller.core.levels.prune, itself checked against
the pairwise-graph oracle in test_core_levels)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from leveller.controller.decide import flow_classes, flow_levels
from leveller.controller.flowtable import FlowTable
from leveller.core.levels import prune
from leveller.model.flow import flow_key


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[str], list[tuple[str, tuple[str, ...] | None]], int]:
    """(job order, (job, path) per flow, K): few jobs and few paths, so most flows have a twin."""
    jobs = [f"j{i}" for i in range(draw(st.integers(1, 5)))]
    links = [f"l{i}" for i in range(draw(st.integers(1, 7)))]
    paths = draw(st.lists(st.one_of(st.none(), st.lists(st.sampled_from(links), min_size=1, max_size=4,
                                                         unique=True).map(tuple)), min_size=1, max_size=6))
    flows = draw(st.lists(st.tuples(st.sampled_from(jobs), st.sampled_from(paths)), max_size=150))
    return draw(st.permutations(jobs)), flows, draw(st.integers(1, 4))


def _snapshot(flows: list[tuple[str, tuple[str, ...] | None]]):  # type: ignore[no-untyped-def]
    table = FlowTable(capacity=4, width=1)  # small: growth (wider paths, more rows) is exercised too
    keys = [flow_key("10.0.0.1", "10.0.0.2", 1000 + i, 2000) for i in range(len(flows))]
    table.update_host("h", [(key, job) for key, (job, _) in zip(keys, flows)])
    table.set_links([(key, path) for key, (_, path) in zip(keys, flows)])
    return table.snapshot(table.live())


@settings(max_examples=300)
@given(clusters())
def test_levels_by_class_equal_the_pruning_of_every_row(case) -> None:  # type: ignore[no-untyped-def]
    order, flows, k = case
    snap = _snapshot(flows)
    got = flow_levels(order, snap, k)
    rank = np.array([order.index(snap.job_names[j]) for j in snap.job.tolist()], dtype=np.int64)
    present = snap.path >= 0
    want = prune(rank, np.nonzero(present)[0], snap.path[present], len(snap.link_names), k)
    assert got.tolist() == want.tolist()


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 5)), max_size=80), st.booleans())
def test_classes_are_the_distinct_job_path_pairs(rows, sparse) -> None:  # type: ignore[no-untyped-def]
    job = np.array([j for j, _ in rows], dtype=np.int32)
    # sparse: path ids so large that the key table would not fit; the classes come from a sort instead
    path = np.array([p * (10**6 if sparse else 1) for _, p in rows], dtype=np.int64)
    reps, cls = flow_classes(job, path)
    assert len(reps) == len(set(rows))
    for r, c in enumerate(cls.tolist()):  # every row's class is represented by a row of its job and path
        assert (job[reps[c]], path[reps[c]]) == (job[r], path[r])


def test_a_row_without_an_interned_path_is_pruned_as_it_is() -> None:
    snap = _snapshot([("j0", ("a",)), ("j1", ("a",)), ("j1", ("a",))])
    bare = snap.__class__(**{**snap.__dict__, "path_id": np.array([0, -1, 0], dtype=np.int32)})
    assert flow_levels(["j0", "j1"], bare, 2).tolist() == [1, 0, 0]


def test_flows_of_one_job_on_paths_that_differ_after_the_first_link_are_apart() -> None:
    # j1's flow on (a, b) meets nobody (a and b carry j1 only): alone, it takes the top level; its twin
    # on (a, c) meets j0 on c and waits below it. One class for both would give them one level.
    snap = _snapshot([("j1", ("a", "b")), ("j1", ("a", "c")), ("j0", ("c",))])
    assert flow_levels(["j0", "j1"], snap, 2).tolist() == [1, 0, 1]
    assert len(set(snap.path_id.tolist())) == 3
