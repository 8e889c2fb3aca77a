"""leveller.model.job: a job's iteration as the network simulator runs it (JobSpec.stages)."""

from __future__ import annotations

from leveller.model.job import JobSpec


def test_ddp_is_one_stage_whose_all_reduce_starts_slack_before_the_compute_ends() -> None:
    job = JobSpec("a", ("h1", "h2"), compute=3.0, bytes=1e9, slack=1.0)
    assert job.stages() == ((3.0, 2.0),)
    assert JobSpec("b", ("h1", "h2"), compute=3.0, bytes=1e9).stages() == ((3.0, 3.0),)


def test_fsdp_is_three_stages_of_a_third_each_with_the_collective_from_their_start() -> None:
    job = JobSpec("f", ("h1", "h2"), compute=3.0, bytes=1e9, slack=1.0, collective="fsdp")
    assert job.stages() == ((1.0, 0.0), (1.0, 0.0), (1.0, 0.0))
    assert sum(c for c, _ in JobSpec("g", None, compute=0.9, bytes=1.0, size=2, collective="fsdp").stages()) \
        == 3 * (0.9 / 3)
