"""leveller.files: secret, token and PEM files are small regular files, and one others can read warns (issue 26,
findings 12 and 18), through each reader that uses it."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from leveller.errors import UserError


@pytest.mark.parametrize("loader", ["secret", "token", "tls"])
def test_secret_files_must_be_small_regular_files(loader: str) -> None:
    from leveller.rpc.auth import load_secret
    from leveller.rpc.tls import tls_from_args
    from sdn.token import load_token

    load = {"secret": lambda p: load_secret(p), "token": lambda p: load_token(p),
            "tls": lambda p: tls_from_args(argparse.Namespace(tls_cert=p, tls_key=p, tls_ca=p))}[loader]
    with pytest.raises(UserError, match="character device"):
        load("/dev/null")


# --- a token or secret others can read (issue 26, finding 18) -------------------------------------------------------

@pytest.mark.parametrize("loader", ["secret", "token"])
def test_a_world_readable_secret_warns(tmp_path: Path, loader: str, capsys: pytest.CaptureFixture[str]) -> None:
    from leveller.rpc.auth import load_secret
    from sdn.token import load_token

    load = load_secret if loader == "secret" else load_token
    f = tmp_path / "token"
    f.write_text("t" * 32 + "\n")
    f.chmod(0o600)
    assert load(str(f)) == b"t" * 32
    assert "warning" not in capsys.readouterr().err
    f.chmod(0o644)
    assert load(str(f)) == b"t" * 32
    err = capsys.readouterr().err
    assert "warning" in err and "0644" in err and "chmod 600" in err
