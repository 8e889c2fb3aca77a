"""`leveller testbed up` options: the SDN app starts unless --no-sdn (--sdn, the old opt-in, still parses).
The live behaviour (hosts reach each other; status says when forwarding is off) is in
tests/integration/test_testbed.py."""

import pytest

from leveller.cli import build_parser


@pytest.mark.parametrize("flags, sdn", [([], True), (["--sdn"], True), (["--no-sdn"], False)])
def test_up_starts_the_sdn_app_unless_told_not_to(flags: list[str], sdn: bool) -> None:
    args = build_parser().parse_args(["testbed", "up", *flags])
    assert args.sdn is sdn


def test_help_names_the_opt_out(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["testbed", "up", "--help"])
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps the help text
    assert "--sdn, --no-sdn" in text and "leaves the switches without forwarding" in text
