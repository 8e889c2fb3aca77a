"""The edges of the domain types every layer shares (leveller.model): what is accepted at each bound,
what is refused just past it, and the exact message a user reads when a value is refused.

- shape: ``C:M[:G[:S]]`` parses to exact fractions; every malformed form names the option, the
  text as given, the part and the rule.
- checks: a job report keeps every field it was given; weights, recent lists and job names are
  refused with a message naming the field path, the value and what is allowed.
- flow: addresses are canonical, both of one version, without scope ids; labels bracket IPv6.
"""

from __future__ import annotations

import ipaddress
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from leveller.model.checks import check_job, check_job_name, check_weight, job_report
from leveller.model.errors import FieldError, UserError
from leveller.model.flow import canonical_address, flow_key
from leveller.model.messages import JobReport
from leveller.model.shape import ExactShape, JobShape, parse_job_shape, parse_shape_text

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
    ("1:2", ExactShape(Fraction(1), Fraction(2), 1, Fraction(0))),  # G defaults to 1, S to 0
    ("3:2:1", ExactShape(Fraction(3), Fraction(2), 1, Fraction(0))),  # G = 1, the lowest
    ("3:2:1000000", ExactShape(Fraction(3), Fraction(2), 1_000_000, Fraction(0))),  # G = MAX_GPUS
    ("3:2:7:0", ExactShape(Fraction(3), Fraction(2), 7, Fraction(0))),  # S = 0, the lowest
    ("3:2:7:1/2", ExactShape(Fraction(3), Fraction(2), 7, Fraction(1, 2))),  # S < 1 (and < M)
    ("3:2:7:3", ExactShape(Fraction(3), Fraction(2), 7, Fraction(3))),  # S = C (above M)
    ("0.5:0.25", ExactShape(Fraction(1, 2), Fraction(1, 4), 1, Fraction(0))),  # C, M below 1
    ("1/3:2/7:5:1/6", ExactShape(Fraction(1, 3), Fraction(2, 7), 5, Fraction(1, 6))),  # exact fractions
])
def test_shape_fields_are_parsed_exactly(text: str, expected: ExactShape) -> None:
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
    assert parse_shape_text(text, "--job") == ExactShape(compute, comm, gpus, slack)
    assert parse_shape_text(text, "--job", max_seconds=86400.0) == ExactShape(compute, comm, gpus, slack)


def test_shape_takes_slack_by_default_and_not_when_told() -> None:
    """``:S`` is allowed unless ``slack=False`` (the simulators' ``--job``), which takes ``C:M[:G]``."""
    assert parse_shape_text("2:1:3:1", "--job").slack == 1
    assert parse_shape_text("2:1:3", "--job", slack=False) == ExactShape(Fraction(2), Fraction(1), 3)
    assert shape_error("2:1:3:1", slack=False) == f"--job '2:1:3:1': expected C:M[:G]; {RULE_NO_SLACK}"


def test_shape_at_the_controllers_bound_of_one_day() -> None:
    """C and M of exactly 86400 s are taken by the controller; one more is refused with the bound."""
    assert parse_shape_text("86400:86400", "--job-shape", max_seconds=86400.0) == ExactShape(
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


# --- checks ------------------------------------------------------------------------------------------------------


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


# --- flow --------------------------------------------------------------------------------------------------------


def test_ipv4_text_is_version_4_like_an_address_object() -> None:
    """The fast path for IPv4 text gives version 4, so text and ``ipaddress`` objects mix in one key."""
    assert canonical_address("10.0.0.1", "src") == ("10.0.0.1", 4)
    assert canonical_address(ipaddress.ip_address("10.0.0.2"), "dst") == ("10.0.0.2", 4)
    key = flow_key(ipaddress.ip_address("10.0.0.1"), "10.0.0.2", 1, 2)
    assert key == ("10.0.0.1", "10.0.0.2", 1, 2, 6) and key.version == 4


@pytest.mark.parametrize(("value", "shown"), [
    ("fe80::1%eth0", "'fe80::1%eth0'"),  # a scope id names a host's interface: no flow crosses hosts with it
    ("10.0.0.1%1", "'10.0.0.1%1'"),
    (167772161, "167772161"),  # ipaddress would take an int; a flow's address is text
    (None, "None"),
    (b"10.0.0.1", "b'10.0.0.1'"),
])
def test_address_with_a_scope_id_or_not_text_is_refused(value: object, shown: str) -> None:
    """Only address text (or an ipaddress object) is taken; the message names the end and the value."""
    with pytest.raises(UserError) as info:
        flow_key(value, "fe80::2" if isinstance(value, str) and ":" in value else "10.0.0.2")
    assert str(info.value) == f"flow: src = {shown} is invalid; an IPv4 or IPv6 address"


def test_mixed_address_versions_are_refused_with_both_addresses() -> None:
    """src and dst must be of one version; the message shows both canonical texts."""
    with pytest.raises(UserError) as info:
        flow_key("10.0.0.1", "FD00:0::1")
    assert str(info.value) == ("flow: src = '10.0.0.1' and dst = 'fd00::1' are invalid together; "
                               "both IPv4 or both IPv6")


def test_labels_bracket_ipv6_and_name_port_protocols() -> None:
    """IPv6 labels put the canonical address in brackets before the port; protocols without ports by number."""
    v6 = flow_key("FD00:0:0::1", "fd00::0002", 5, 6, "udp")
    assert (v6.src, v6.dst, v6.version) == ("fd00::1", "fd00::2", 6)
    assert v6.label() == "udp [fd00::1]:5>[fd00::2]:6"
    assert flow_key("10.0.0.1", "10.0.0.3", 40000, 47000).label() == "tcp 10.0.0.1:40000>10.0.0.3:47000"
    assert flow_key("fd00::1", "fd00::2", 7, 8, "icmp").label() == "1 [fd00::1]:0>[fd00::2]:0"
    assert flow_key("10.0.0.1", "10.0.0.2", 7, 8, 47).label() == "47 10.0.0.1:0>10.0.0.2:0"


@pytest.mark.parametrize("proto", ["icmp", 1, "1"])
def test_icmp_flows_carry_no_ports(proto: object) -> None:
    # ICMP has no ports: keeping them would make two packets of one ping two different flows.
    key = flow_key("10.0.0.1", "10.0.0.2", 1234, 80, proto)
    assert (key.sport, key.dport, key.proto) == (0, 0, 1)
    assert key == flow_key("10.0.0.1", "10.0.0.2", 0, 0, "icmp")


@pytest.mark.parametrize("proto,n", [("tcp", 6), ("udp", 17), (17, 17)])
def test_tcp_and_udp_flows_keep_their_ports(proto: object, n: int) -> None:
    key = flow_key("10.0.0.1", "10.0.0.2", 1234, 80, proto)
    assert (key.sport, key.dport, key.proto) == (1234, 80, n)
