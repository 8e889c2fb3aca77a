"""Which eBPF program the agent may load: the CO-RE object only when it was built from exactly the
sources beside it (leveller.agent.bpfsource), and the loader choice's errors (leveller.agent.bpfload)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from leveller.agent import bpfload, bpfsource
from leveller.errors import UserError

C, H = b"int prog(void) { return 0; }\n", b"struct flow_key { int x; };\n"


def package(tmp_path: Path, digest: str | None, obj: bool = True) -> Path:
    """A directory laid out like the wheel's leveller/_bpf: sources, object, digest file."""
    (tmp_path / "flow_marker.c").write_bytes(C)
    (tmp_path / "flow_marker.h").write_bytes(H)
    if obj:
        (tmp_path / "flow_marker.bpf.o").write_bytes(b"\x7fELF")
    if digest is not None:
        (tmp_path / "flow_marker.bpf.sha256").write_text(digest + "\n")
    return tmp_path


def test_the_digest_is_sha256_of_the_c_file_then_the_header(tmp_path: Path) -> None:
    assert bpfsource.source_digest(package(tmp_path, None)) == hashlib.sha256(C + H).hexdigest()
    assert bpfsource.source_digest(tmp_path) != hashlib.sha256(H + C).hexdigest()


def test_an_object_built_from_the_sources_beside_it_is_used(tmp_path: Path) -> None:
    found = bpfsource.core_object(package(tmp_path, hashlib.sha256(C + H).hexdigest()))
    assert found.path == tmp_path / "flow_marker.bpf.o" and found.why == ""


@pytest.mark.parametrize("digest, obj, why", [
    (hashlib.sha256(b"older source" + H).hexdigest(), True, "built from other sources"),
    ("", True, "missing or empty"),
    (None, True, "missing or empty"),
    (hashlib.sha256(C + H).hexdigest(), False, "no CO-RE object"),
])
def test_an_edited_source_or_a_missing_object_or_digest_is_not_loaded(tmp_path: Path, digest: str | None, obj: bool,
                                                                     why: str) -> None:
    found = bpfsource.core_object(package(tmp_path, digest, obj))
    assert found.path is None and why in found.why and "make -C bpf" in found.why


def test_the_checkouts_object_lies_in_bpf_build() -> None:
    assert bpfsource.object_dir(bpfsource.CHECKOUT_BPF) == bpfsource.CHECKOUT_BPF / "build"
    assert bpfsource.object_dir(Path("/x/_bpf")) == Path("/x/_bpf")


def test_an_unknown_loader_is_refused_naming_the_choices() -> None:
    with pytest.raises(UserError, match="--loader 'clang': allowed is one of auto, libbpf, bcc"):
        bpfload.load_program("clang", {})


def test_libbpf_without_an_object_says_how_to_build_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bpfsource, "bpf_dir", lambda: package(tmp_path, None, obj=False))
    with pytest.raises(bpfload.LoadError, match=r"--loader libbpf: no CO-RE object .*make -C bpf"):
        bpfload.load_program("libbpf", {})


def test_auto_without_an_object_nor_bcc_names_both(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bpfsource, "bpf_dir", lambda: package(tmp_path, "stale"))
    monkeypatch.setattr(bpfload, "bcc_available", lambda: False)
    with pytest.raises(bpfload.LoadError, match=r"built from other sources.*; bcc: not installed \(Debian package "
                       "python3-bpfcc\\)"):
        bpfload.load_program("auto", {})
