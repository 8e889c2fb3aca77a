"""leveller.model.checks: a job report keeps every field it was given; weights, recent lists and job
names are refused at the first value past each bound, with a message naming the field path, the value and
what is allowed."""

from __future__ import annotations

import pytest

from leveller.model.checks import check_job, check_job_name, check_weight, job_report
from leveller.model.errors import FieldError, UserError
from leveller.model.messages import JobReport


def test_check_job_name_accepts_a_name_and_names_the_rule_otherwise() -> None:
    """A valid name comes back unchanged; a bad one is a UserError naming "job name", the value and the rule."""
    assert check_job_name("a" * 64) == "a" * 64
    with pytest.raises(UserError) as info:
        check_job_name("a" * 65)
    assert str(info.value) == f"job name: {'a' * 65!r} is invalid; 1-64 characters from letters, digits, _ . : -"
    with pytest.raises(UserError) as info:
        check_job_name(None)
    assert str(info.value) == "job name: None is invalid; 1-64 characters from letters, digits, _ . : -"


@pytest.mark.parametrize("value", [0.001, 1, 1.0, 999.999, 1000, 1000.0])
def test_weight_is_accepted_from_one_thousandth_to_one_thousand(value: float) -> None:
    """Both bounds are inclusive; the weight comes back as a float."""
    out = check_weight(value, "--weight")
    assert out == value and type(out) is float


@pytest.mark.parametrize("value", [0.000999, 0, -1, 1000.001, 1e9, float("inf"), float("nan"), True, "1"])
def test_weight_outside_the_bounds_is_refused_with_the_field(value: object) -> None:
    """The first values past each bound (and non-numbers) are refused; the message names field, value, bounds."""
    with pytest.raises(FieldError) as info:
        check_weight(value, "jobs[1].weight")
    assert info.value.field == "jobs[1].weight"
    assert str(info.value) == f"jobs[1].weight: {value!r} is invalid; a finite number >= 0.001 and <= 1000"


def test_check_job_keeps_every_field() -> None:
    """A valid job comes back with every field it was given (ideal time and weight too), recent as tuples."""
    job = JobReport("j", 10, 100.0, 0.5, [[1, 101.0], [2, 102.5]], 2.5)  # type: ignore[arg-type]
    assert check_job(job, "jobs[0]") == JobReport("j", 10, 100.0, 0.5, ((1, 101.0), (2, 102.5)), 2.5)
    assert check_job(JobReport("j", 10, 100.0), "jobs[0]") == JobReport("j", 10, 100.0, None, (), None)


def test_check_job_names_the_path_of_the_bad_field() -> None:
    """The error is reported at ``<field>.<name>`` (e.g. ``jobs[2].weight``) so the sender can find it."""
    with pytest.raises(FieldError) as info:
        check_job(JobReport("j", 10, 100.0, None, (), 5000.0), "jobs[2]")
    assert info.value.field == "jobs[2].weight"
    assert str(info.value) == "jobs[2].weight: 5000.0 is invalid; a finite number >= 0.001 and <= 1000"
    with pytest.raises(FieldError) as info:
        check_job(JobReport("j", -1, 100.0), "jobs[2]")
    assert info.value.field == "jobs[2].iterations"


@pytest.mark.parametrize("weight", [0.001, 1000.0])
def test_job_report_keeps_a_weight_at_its_bounds(weight: float) -> None:
    """A declared weight at either bound is kept as given; an undeclared one stays None."""
    assert job_report("j", 1, 100.0, None, [], weight, "jobs[0]").weight == weight
    assert job_report("j", 1, 100.0, None, [], None, "jobs[0]").weight is None


@pytest.mark.parametrize("weight", [0.0, 1000.5])
def test_job_report_refuses_a_weight_past_its_bounds(weight: float) -> None:
    """The first weights outside 0.001..1000 are refused at ``<field>.weight``."""
    with pytest.raises(FieldError) as info:
        job_report("j", 1, 100.0, None, [], weight, "jobs[3]")
    assert info.value.field == "jobs[3].weight"
    assert str(info.value) == f"jobs[3].weight: {weight!r} is invalid; a finite number >= 0.001 and <= 1000"


@pytest.mark.parametrize(("items", "kind"), [("12", "str"), ({"a": 1}, "dict"), (None, "NoneType")])
def test_job_report_refuses_recent_that_is_not_a_list(items: object, kind: str) -> None:
    """``recent`` must be a list; the message names ``<field>.recent`` and the type it got."""
    with pytest.raises(FieldError) as info:
        job_report("j", 1, 100.0, None, items, None, "jobs[0]")
    assert info.value.field == "jobs[0].recent"
    assert str(info.value) == f"jobs[0].recent: expected a list, got {kind}"


def test_job_report_takes_at_most_256_recent_entries() -> None:
    """256 recent iteration ends are accepted; 257 are refused with the count and the limit."""
    pairs = [[k + 1, 100.0 + k] for k in range(257)]
    assert len(job_report("j", 257, 100.0, None, pairs[:256], None, "jobs[0]").recent) == 256
    with pytest.raises(FieldError) as info:
        job_report("j", 257, 100.0, None, pairs, None, "jobs[0]")
    assert info.value.field == "jobs[0].recent"
    assert str(info.value) == "jobs[0].recent: 257 entries; at most 256 are allowed"
