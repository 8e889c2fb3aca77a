"""`leveller controller --etcd ...`: the options' checks (errors naming the option, the value and what is
allowed), the etcd URLs, a TOML file with the etcd keys, and an EtcdStore that moves on to the next
member when one fails."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from leveller.cli import build_parser
from leveller.commands.controller import check_args
from leveller.controller.etcdstore import EtcdError, EtcdStore, parse_endpoints
from leveller.errors import UserError


def args(*argv: str) -> Any:
    return build_parser().parse_args(["controller", *argv])


URLS = "http://127.0.0.1:2379,http://127.0.0.1:22379,http://127.0.0.1:32379"


@pytest.mark.parametrize(("argv", "message"), [
    (("--etcd", "127.0.0.1:2379"), r"'127.0.0.1:2379' is not an etcd client URL; expected http://HOST:PORT"),
    (("--etcd", "http://a:1,http://a:1"), "given twice"),
    (("--etcd", "http://a:1,https://b:2"), "mixes http:// and https://"),
    (("--etcd", URLS, "--etcd-ttl", "2"), r"--etcd-ttl 2: must be whole seconds >= 1 and at most half of --lease "
                                          r"\(3 s\)"),
    (("--etcd", URLS, "--tau", "0.5"), r"--etcd-ttl 1: .* at most half of --lease \(1.5 s\)"),
    (("--etcd-ttl", "1"), "--etcd-ttl needs --etcd URL"),
    (("--etcd", URLS, "--etcd-cert", "c.pem"), "--etcd-cert and --etcd-key go together"),
    (("--etcd", URLS, "--etcd-cacert", "ca.pem"), "need https:// URLs"),
    (("--etcd", URLS, "--etcd-prefix", "leveller"), "--etcd-prefix 'leveller': a key prefix like /leveller/"),
    (("--etcd", URLS, "--advertise", "0.0.0.0"), "--advertise"),
    (("--etcd", URLS, "--name", "bad name"), "--name 'bad name'"),
    (("--etcd", URLS, "--etcd-timeout", "0"), "--etcd-timeout 0: must be 0.05..10 seconds"),
])
def test_bad_etcd_options_are_named(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(UserError, match=message):
        check_args(args(*argv))


def test_good_etcd_options_pass() -> None:
    check_args(args("--etcd", URLS))  # default TTL: lease 3 / 2 -> 1
    check_args(args("--etcd", "https://e1:2379", "--etcd-cacert", "ca.pem", "--etcd-cert", "c.pem", "--etcd-key",
                    "c.key", "--lease", "4", "--etcd-ttl", "2", "--advertise", "10.0.0.1:50051", "--name", "ctl-a"))
    check_args(args())  # without --etcd: as before


def test_the_etcd_keys_work_in_a_config_file(tmp_path: Path) -> None:
    import argparse

    from leveller import config

    toml = tmp_path / "controller.toml"
    toml.write_text(f'etcd = "{URLS}"\netcd_ttl = 1\nadvertise = "10.0.0.1:50051"\n')
    parser = build_parser()
    argv = ["controller", "--config", str(toml)]
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    parsed = config.apply(parser.parse_args(argv), sub.choices["controller"], argv[1:], "controller")
    assert parsed.etcd == URLS and parsed.etcd_ttl == 1
    check_args(parsed)


def test_endpoints() -> None:
    eps = parse_endpoints("http://127.0.0.1:2379, http://[::1]:2379")
    assert [str(e) for e in eps] == ["http://127.0.0.1:2379", "http://[::1]:2379"]


class Member:
    """A stand-in for one etcd3gw client: answers, or fails like a member that is down."""

    def __init__(self, up: bool) -> None:
        self.up, self.calls = up, 0

    def get_url(self, path: str) -> str:
        return path

    def post(self, url: str, json: Any = None) -> dict[str, Any]:
        self.calls += 1
        if not self.up:
            raise ConnectionError("refused")
        return {"ID": "7", "TTL": "2"}


def test_a_call_moves_to_the_next_member_and_stays_there() -> None:
    seen: list[tuple[str, str | None]] = []
    store = EtcdStore(parse_endpoints(URLS), on_call=lambda op, s, err: seen.append((op, err)))
    members = [Member(False), Member(True), Member(True)]
    store._clients = members  # type: ignore[assignment]
    assert store.grant(2) == (7, 2)
    assert store.active == "http://127.0.0.1:22379" and seen == [("grant", "ConnectionError"), ("grant", None)]
    store.grant(2)
    assert members[0].calls == 1 and members[1].calls == 2  # the member that answered is asked first
    for m in members:
        m.up = False
    with pytest.raises(EtcdError, match="no member answered .*127.0.0.1:2379: ConnectionError: refused"):
        store.grant(2)
