"""leveller.model.shape: ``C:M[:G[:S]]`` parses to exact fractions at every bound; every malformed form
is refused with a message naming the option, the text as given, the part and the rule; the controller's
``JOB=C:M[:G[:S]]`` gives the job name and a JobShape."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from leveller.model.errors import UserError
from leveller.model.shape import JobShape, parse_job_shape, parse_shape_text

RULE = "compute time C > 0, communication time M > 0, GPUs G an integer 1..1000000, slack 0 <= S <= C"
RULE_NO_SLACK = "compute time C > 0, communication time M > 0, GPUs G an integer 1..1000000"
RULE_CONTROLLER = RULE + ", C and M at most 86400 s"


def shape_error(text: str, option: str = "--job", **kwargs: object) -> str:
    """The message of the UserError ``parse_shape_text`` raises for ``text`` (fails if it accepts it)."""
    with pytest.raises(UserError) as info:
        parse_shape_text(text, option, **kwargs)  # type: ignore[arg-type]
    return str(info.value)


# --- shape: accepted values --------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ("1:2", JobShape(Fraction(1), Fraction(2), 1, Fraction(0))),  # G defaults to 1, S to 0
    ("3:2:1", JobShape(Fraction(3), Fraction(2), 1, Fraction(0))),  # G = 1, the lowest
    ("3:2:1000000", JobShape(Fraction(3), Fraction(2), 1_000_000, Fraction(0))),  # G = MAX_GPUS
    ("3:2:7:0", JobShape(Fraction(3), Fraction(2), 7, Fraction(0))),  # S = 0, the lowest
    ("3:2:7:1/2", JobShape(Fraction(3), Fraction(2), 7, Fraction(1, 2))),  # S < 1 (and < M)
    ("3:2:7:3", JobShape(Fraction(3), Fraction(2), 7, Fraction(3))),  # S = C (above M)
    ("0.5:0.25", JobShape(Fraction(1, 2), Fraction(1, 4), 1, Fraction(0))),  # C, M below 1
    ("1/3:2/7:5:1/6", JobShape(Fraction(1, 3), Fraction(2, 7), 5, Fraction(1, 6))),  # exact fractions
])
def test_shape_fields_are_parsed_exactly(text: str, expected: JobShape) -> None:
    """Each part lands in its own field, as an exact fraction; G and S take their defaults when absent."""
    shape = parse_shape_text(text, "--job")
    assert shape == expected
    assert (shape.compute, shape.comm, shape.gpus, shape.slack) == (
        expected.compute, expected.comm, expected.gpus, expected.slack)
    assert isinstance(shape.gpus, int) and isinstance(shape.slack, Fraction)


@given(compute=st.fractions(min_value=Fraction(1, 10**6), max_value=86400),
       comm=st.fractions(min_value=Fraction(1, 10**6), max_value=86400),
       gpus=st.integers(1, 1_000_000), share=st.fractions(min_value=0, max_value=1))
def test_shape_round_trips_any_valid_shape(compute: Fraction, comm: Fraction, gpus: int, share: Fraction) -> None:
    """Any C, M > 0, G in 1..MAX_GPUS and 0 <= S <= C written out parses back to the same values."""
    slack = compute * share
    text = f"{compute}:{comm}:{gpus}:{slack}"
    assert parse_shape_text(text, "--job") == JobShape(compute, comm, gpus, slack)
    assert parse_shape_text(text, "--job", max_seconds=86400.0) == JobShape(compute, comm, gpus, slack)


def test_shape_takes_slack_by_default_and_not_when_told() -> None:
    """``:S`` is allowed unless ``slack=False`` (the simulators' ``--job``), which takes ``C:M[:G]``."""
    assert parse_shape_text("2:1:3:1", "--job").slack == 1
    assert parse_shape_text("2:1:3", "--job", slack=False) == JobShape(Fraction(2), Fraction(1), 3)
    assert shape_error("2:1:3:1", slack=False) == f"--job '2:1:3:1': expected C:M[:G]; {RULE_NO_SLACK}"


def test_shape_at_the_controllers_bound_of_one_day() -> None:
    """C and M of exactly 86400 s are taken by the controller; one more is refused with the bound."""
    assert parse_shape_text("86400:86400", "--job-shape", max_seconds=86400.0) == JobShape(
        Fraction(86400), Fraction(86400))
    assert shape_error("86400.5:1", max_seconds=86400.0) == (
        f"--job '86400.5:1': compute time C must be a number > 0 and <= 86400, got '86400.5'; {RULE_CONTROLLER}")
    assert shape_error("1:86401", max_seconds=86400.0) == (
        f"--job '1:86401': communication time M must be a number > 0 and <= 86400, got '86401'; {RULE_CONTROLLER}")


# --- shape: refused forms and their messages ------------------------------------------------------------------


@pytest.mark.parametrize("text", ["1", "", "1:2:3:0:0", "1 2", "1,2", "1;2"])
def test_shape_with_a_wrong_number_of_parts_is_refused(text: str) -> None:
    """Fewer than two or more than four ``:`` parts: the message says the expected form and the rule."""
    assert shape_error(text) == f"--job {text!r}: expected C:M[:G[:S]]; {RULE}"


@pytest.mark.parametrize("text", ["1", "1:2:3:0"])
def test_shape_without_slack_names_its_own_form_and_rule(text: str) -> None:
    """With ``slack=False`` the message offers ``C:M[:G]`` and the rule without the slack clause."""
    assert shape_error(text, slack=False) == f"--job {text!r}: expected C:M[:G]; {RULE_NO_SLACK}"
    assert shape_error(text, slack=False, max_seconds=60.0) == (
        f"--job {text!r}: expected C:M[:G]; {RULE_NO_SLACK}, C and M at most 60 s")


@pytest.mark.parametrize(("text", "label", "raw"), [
    ("0:1", "compute time C", "0"),
    ("-1:1", "compute time C", "-1"),
    ("x:1", "compute time C", "x"),
    (" 1:1", "compute time C", " 1"),  # no surrounding spaces
    ("1 :1", "compute time C", "1 "),
    ("1/0:1", "compute time C", "1/0"),
    ("1:0", "communication time M", "0"),
    ("1:-0.5", "communication time M", "-0.5"),
    ("1:nan", "communication time M", "nan"),
    ("1:inf", "communication time M", "inf"),
    ("1:\t2", "communication time M", "\t2"),
])
def test_shape_refuses_a_non_positive_or_malformed_time(text: str, label: str, raw: str) -> None:
    """C and M must be numbers > 0, written without spaces; the message names the part and its text."""
    assert shape_error(text) == f"--job {text!r}: {label} must be a number > 0, got {raw!r}; {RULE}"


@pytest.mark.parametrize(("text", "raw"), [
    ("1:2:0", "0"), ("1:2:1000001", "1000001"), ("1:2:1.5", "1.5"), ("1:2:-1", "-1"), ("1:2:", ""),
    ("1:2:\u0663", "\u0663"),  # a non-ASCII digit
])
def test_shape_refuses_gpus_outside_one_to_a_million(text: str, raw: str) -> None:
    """G is an ASCII integer 1..1000000: 0 and 1000001, the first values outside, are refused."""
    assert shape_error(text) == (
        f"--job {text!r}: GPUs G must be an integer >= 1 and <= 1000000, got {raw!r}; {RULE}")


@pytest.mark.parametrize(("text", "raw"), [
    ("2:5:1:3", "3"),  # S > C, though S < M: slack is bounded by the compute time
    ("2:1:1:2.001", "2.001"),
    ("2:1:1:-1", "-1"),
    ("2:1:1:x", "x"),
    ("2:1:1: 1", " 1"),
    ("2:1:1:", ""),
])
def test_shape_refuses_slack_outside_zero_to_compute(text: str, raw: str) -> None:
    """S must be a number in 0..C; the message quotes the slack part as given."""
    assert shape_error(text) == f"--job {text!r}: slack S must be a number in 0..C, got {raw!r}; {RULE}"


def test_shape_message_quotes_the_shown_text_when_given() -> None:
    """``shown`` replaces the parsed text in the message (the controller shows ``JOB=C:M``)."""
    assert shape_error("0:1", "--opt", shown="j=0:1") == (
        f"--opt 'j=0:1': compute time C must be a number > 0, got '0'; {RULE}")
    assert shape_error("0:1", "--opt") == f"--opt '0:1': compute time C must be a number > 0, got '0'; {RULE}"


# --- shape: the controller's --job-shape ------------------------------------------------------------------------


def test_job_shape_gives_the_name_and_float_fields() -> None:
    """``JOB=C:M:G:S`` gives the job name and a JobShape of floats, each part in its own field."""
    name, shape = parse_job_shape("train-1=1.5:0.25:4:0.5")
    assert name == "train-1"
    assert shape == JobShape(1.5, 0.25, 4, 0.5)
    assert [type(v) for v in (shape.compute, shape.comm, shape.gpus, shape.slack)] == [float, float, int, float]
    assert parse_job_shape("j=2:3") == ("j", JobShape(2.0, 3.0, 1, 0.0))


def test_job_shape_message_names_the_option_and_the_whole_text() -> None:
    """A bad part is reported against ``--job-shape`` and the text as the user wrote it, with the day bound."""
    with pytest.raises(UserError) as info:
        parse_job_shape("j=0:1")
    assert str(info.value) == (
        f"--job-shape 'j=0:1': compute time C must be a number > 0 and <= 86400, got '0'; {RULE_CONTROLLER}")


def test_job_shape_splits_at_the_first_equals_sign() -> None:
    """The name ends at the first ``=``: ``a=b=1:2`` is a bad shape ``b=1:2``, not a bad name ``a=b``."""
    with pytest.raises(UserError) as info:
        parse_job_shape("a=b=1:2")
    assert str(info.value) == (
        f"--job-shape 'a=b=1:2': compute time C must be a number > 0 and <= 86400, got 'b=1'; {RULE_CONTROLLER}")


def test_job_shape_refuses_a_bad_job_name() -> None:
    """The name follows the job-name rule; the message names it."""
    with pytest.raises(UserError) as info:
        parse_job_shape("a b=1:2")
    assert str(info.value) == "job name: 'a b' is invalid; 1-64 characters from letters, digits, _ . : -"


@pytest.mark.parametrize(("compute", "comm", "gpus", "slack", "message"), [
    (Fraction(0), Fraction(1), 1, 0, "compute time C must be > 0, got 0"),
    (1.0, 0.0, 1, 0.0, "communication time M must be > 0, got 0.0"),
    (1.0, 1.0, 0, 0.0, "GPUs G must be >= 1, got 0"),
    (1.0, 1.0, 1, -0.5, "slack S must be in 0..C (1.0), got -0.5"),
    (Fraction(1), Fraction(1), 1, Fraction(3, 2), "slack S must be in 0..C (1), got 3/2"),
])
def test_a_shape_outside_the_rule_is_refused_whoever_builds_it(compute: Any, comm: Any, gpus: int, slack: Any,
                                                                message: str) -> None:
    with pytest.raises(ValueError) as exc:
        JobShape(compute, comm, gpus, slack)
    assert str(exc.value) == message


def test_one_shape_type_serves_the_link_simulator_and_the_controller() -> None:
    exact = parse_shape_text("1/3:2/7:5:1/6", "--job")
    assert isinstance(exact, JobShape) and exact.ideal == Fraction(13, 21)  # exact: 1/3 + 2/7
    assert isinstance(exact.ideal, Fraction)
    _, approx = parse_job_shape("j=1/3:2/7:5:1/6")
    assert isinstance(approx, JobShape) and isinstance(approx.compute, float)
    assert approx.ideal == pytest.approx(13 / 21)
    assert JobShape(1.0, 1.0, 1, 1.0).slack == 1.0  # S = C is allowed
