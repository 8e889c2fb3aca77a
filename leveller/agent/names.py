"""Interface and network-namespace names, checked before they reach a path or the kernel.

An interface name follows the kernel's own rule (``dev_valid_name``): 1 to
IFNAMSIZ - 1 = 15 bytes, not ``.`` or ``..``, no ``/``, ``:`` or white space;
we also refuse control characters. A namespace name (a file in /run/netns) is
1-64 characters from letters, digits, ``_ . -``, not ``.`` or ``..``. Both end
up in lock file names, so nothing here can leave the directory it is meant for.
"""

from __future__ import annotations

from leveller.errors import UserError
from leveller.model.limits import NETNS_PATTERN

IFNAMSIZ = 16  # include/uapi/linux/if.h, with the terminating NUL
_NETNS = NETNS_PATTERN


def check_ifname(name: object, option: str = "--dev") -> str:
    """``name`` if the kernel would accept it as an interface name, else UserError naming the rule."""
    rule = (f"an interface name is 1-{IFNAMSIZ - 1} bytes, not '.' or '..', without '/', ':', "
            "white space or control characters")
    if not isinstance(name, str) or name in ("", ".", ".."):
        raise UserError(f"{option} {name!r}: {rule}")
    if len(name.encode("utf-8", "surrogateescape")) >= IFNAMSIZ:
        raise UserError(f"{option} {name!r}: {len(name.encode('utf-8', 'surrogateescape'))} bytes; {rule}")
    bad = sorted({c for c in name if c in "/:" or c.isspace() or not c.isprintable()})
    if bad:
        raise UserError(f"{option} {name!r}: contains {bad}; {rule}")
    return name


def check_netns(name: object, option: str = "--netns") -> str:
    """``name`` if it is a plain network-namespace name, else UserError naming the rule."""
    if not isinstance(name, str) or not _NETNS.fullmatch(name) or name in (".", ".."):
        raise UserError(f"{option} {name!r}: a namespace name is 1-64 characters from letters, digits, "
                        "'_', '.', '-' (not '.' or '..')")
    return name
