"""The SDN API's bearer token (sdn.token) on the real API app over loopback HTTP, and `leveller sdn`'s bind rule."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from leveller.cli import main
from leveller.errors import UserError
from sdn.client import SdnClient
from sdn.token import is_loopback, load_token, require_bearer
from tests.helpers.sdn import api_app, serving_http

TOKEN = b"0123456789abcdef0123"


@pytest.fixture
def url() -> Iterator[str]:
    _, _, app = api_app()
    with serving_http(require_bearer(app, TOKEN)) as url:
        yield url.rstrip("/")


def test_right_token_answers(url: str) -> None:
    assert SdnClient(url, token=TOKEN).health() == {"ok": True}


@pytest.mark.parametrize("token", [None, b"0123456789abcdef0124", TOKEN + b"x"])
def test_missing_or_wrong_token_is_401(url: str, token: bytes | None) -> None:
    with pytest.raises(RuntimeError, match="401"):
        SdnClient(url, token=token).health()


def test_loopback() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("[::1]")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.254") and not is_loopback("example.org")


def test_short_token_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "t").write_text("short\n")
    with pytest.raises(UserError, match="at least 16"):
        load_token(str(tmp_path / "t"))


def test_sdn_beyond_loopback_without_token_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sdn", "--topology", "dumbbell", "--api", "0.0.0.0:0"]) == 2
    assert "needs --api-token-file" in capsys.readouterr().err
