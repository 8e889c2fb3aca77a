"""skb_context() lays out struct __sk_buff as the kernel's uapi header says (checked with clang)."""

from __future__ import annotations

import shutil
import subprocess
import sys

from leveller.agent import libbpf


def test_sk_buff_layout_matches_the_uapi_header() -> None:
    clang = shutil.which("clang")
    assert clang, "clang is needed to check the struct layout (Debian package clang; `make setup`)"
    src = "\n".join([
        "#include <stddef.h>",
        "#include <linux/bpf.h>",
        f"_Static_assert(sizeof(struct __sk_buff) == {libbpf.SKB_CTX_SIZE}, \"size\");",
        f"_Static_assert(offsetof(struct __sk_buff, gso_segs) == {libbpf.SKB_GSO_SEGS_OFFSET}, \"gso_segs\");",
        f"_Static_assert(offsetof(struct __sk_buff, gso_size) == {libbpf.SKB_GSO_SIZE_OFFSET}, \"gso_size\");",
    ]) + "\n"
    r = subprocess.run([clang, "-fsyntax-only", "-x", "c", "-"], input=src, text=True, capture_output=True)
    assert r.returncode == 0, r.stderr


def test_skb_context_sets_only_the_gso_fields() -> None:
    ctx = libbpf.skb_context(gso_segs=7, gso_size=1448)
    assert len(ctx) == libbpf.SKB_CTX_SIZE
    segs = int.from_bytes(ctx[libbpf.SKB_GSO_SEGS_OFFSET:libbpf.SKB_GSO_SEGS_OFFSET + 4], sys.byteorder)
    size = int.from_bytes(ctx[libbpf.SKB_GSO_SIZE_OFFSET:libbpf.SKB_GSO_SIZE_OFFSET + 4], sys.byteorder)
    assert (segs, size) == (7, 1448)
    rest = bytearray(ctx)
    rest[libbpf.SKB_GSO_SEGS_OFFSET:libbpf.SKB_GSO_SEGS_OFFSET + 4] = bytes(4)
    rest[libbpf.SKB_GSO_SIZE_OFFSET:libbpf.SKB_GSO_SIZE_OFFSET + 4] = bytes(4)
    assert rest == bytes(libbpf.SKB_CTX_SIZE)
