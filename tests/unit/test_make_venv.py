"""`make venv` links Debian's bcc into a venv that already exists: on a fresh machine `.ci/run` runs
`make torch` (which makes the venv) before `make test` installs the Debian packages, and a link made
only when the venv is created left every BPF test with "No module named 'bcc'"."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(subprocess.run(["make", "--version"], capture_output=True).returncode != 0, reason="no make")
def test_make_venv_links_bcc_into_a_venv_made_before_the_debian_packages(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    stamp = venv / ".installed"
    stamp.touch()
    later = time.time() + 5  # the venv is up to date for make: only the link may run
    os.utime(stamp, (later, later))
    fake = tmp_path / "dist-packages" / "bcc"  # a stand-in for Debian's module, installed after the venv
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("WHERE = 'debian'\n")
    probe = [str(venv / "bin" / "python"), "-c", "import bcc; print(bcc.WHERE)"]
    assert subprocess.run(probe, capture_output=True).returncode != 0  # not linked yet

    env = dict(os.environ, LEVELLER_BCC_DIR=str(fake))
    for _ in range(2):  # idempotent: a second run changes nothing and still works
        subprocess.run(["make", "-s", "-C", str(REPO), "venv", f"VENV={venv}"], check=True, env=env,
                       capture_output=True)
        out = subprocess.run(probe, capture_output=True, text=True)
        assert out.returncode == 0 and out.stdout.strip() == "debian", out.stderr
    # only the bcc directory is exposed, not the rest of dist-packages
    (fake.parent / "other_module.py").write_text("")
    assert subprocess.run([str(venv / "bin" / "python"), "-c", "import other_module"],
                          capture_output=True).returncode != 0
