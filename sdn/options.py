"""The OpenFlow side's options of `leveller sdn`: which networks may connect as switches (--of-allow) and
OpenFlow over TLS (--of-tls-*), checked with errors that name the option."""

from __future__ import annotations

import ipaddress
from ipaddress import IPv4Network, IPv6Network
from typing import Any

from leveller.errors import UserError
from leveller.files import read_small_file
from sdn.token import is_loopback


def of_allow(args: Any) -> tuple[IPv4Network | IPv6Network, ...]:
    """The networks of --of-allow (default loopback); UserError for a bad one, or for an --of-host beyond
    loopback without it (any host could then connect as a switch)."""
    from sdn.logic import LOOPBACK  # sdn.logic imports os_ken: not at `leveller --help`
    try:
        ipaddress.ip_address(args.of_host)
    except ValueError:
        raise UserError(f"--of-host = {args.of_host!r}: an IP address to listen on, e.g. 10.0.0.254") from None
    if args.of_allow is None:
        if not is_loopback(args.of_host):
            raise UserError(f"--of-host {args.of_host}: listening beyond loopback needs --of-allow NET[,NET...] "
                            "(the networks the switches connect from), e.g. --of-allow 10.0.0.0/24")
        return LOOPBACK
    nets = []
    for item in (i.strip() for i in args.of_allow.split(",")):
        try:
            nets.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise UserError(f"--of-allow {item!r}: not an address or network; allowed: e.g. 10.0.0.0/24, "
                            "192.168.5.7, ::1") from None
    return tuple(nets)


def of_tls(args: Any) -> tuple[str, str, str] | None:
    """(cert, key, CA) of --of-tls-*, all three or none, each a readable PEM file; UserError otherwise."""
    given = {"--of-tls-cert": args.of_tls_cert, "--of-tls-key": args.of_tls_key, "--of-tls-ca": args.of_tls_ca}
    if not any(given.values()):
        return None
    missing = [o for o, v in given.items() if not v]
    if missing:
        raise UserError(f"{', '.join(missing)}: needed with {', '.join(o for o, v in given.items() if v)} "
                        "(OpenFlow over TLS takes all three)")
    for option, path in given.items():
        marker = b"PRIVATE KEY-----" if option == "--of-tls-key" else b"-----BEGIN CERTIFICATE-----"
        if marker not in read_small_file(path, option):
            what = "private key" if option == "--of-tls-key" else "certificate"
            raise UserError(f"{option} {path!r}: not a PEM {what}")
    return args.of_tls_cert, args.of_tls_key, args.of_tls_ca
