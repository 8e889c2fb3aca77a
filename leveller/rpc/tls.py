"""Mutual TLS for the controller service: credentials from --tls-cert/--tls-key/--tls-ca, peer names.

The controller requires a client certificate signed by --tls-ca (gRPC refuses the
handshake otherwise: no certificate, or one from another CA), and a report or watch
from host H is accepted only if H is named (SAN or CN) in the peer's certificate
(``peer_names`` / ``check_host``). Agents and `leveller status` check the
controller's certificate against the same CA and the address they dial.
With TLS the HMAC secret is optional; without TLS it stays required (labs).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from leveller.errors import UserError
from leveller.files import read_small_file

ADMIN = "admin"  # the name in the admin certificate (leveller.rpc.certs): it may read Status, nothing else
ROLE_NAMES = frozenset({ADMIN, "controller"})  # certificate names that are roles: never a reporting host
TLS_HELP = ("mutual TLS (all three together; see `leveller certs init`), e.g. "
            "--tls-cert certs/{own}.pem --tls-key certs/{own}.key --tls-ca certs/ca.pem")


@dataclass(frozen=True)
class TlsConfig:
    """PEM bytes of this side's certificate chain, its key, and the CA that peers must be signed by."""

    cert: bytes
    key: bytes
    ca: bytes


def add_tls_options(parser: argparse.ArgumentParser, own: str) -> None:
    """--tls-cert/--tls-key/--tls-ca; ``own`` names the example certificate (controller, HOST, admin)."""
    parser.add_argument("--tls-cert", metavar="PEM",
                        help=f"this side's certificate; {TLS_HELP.format(own=own)}")
    parser.add_argument("--tls-key", metavar="PEM", help="the private key of --tls-cert (keep it 0600)")
    parser.add_argument("--tls-ca", metavar="PEM", help="CA certificate the peer's certificate must be signed by")


def tls_from_args(args: argparse.Namespace | Any) -> TlsConfig | None:
    """The TLS files named by the options (all or none; UserError naming a missing or unreadable one); ``args``
    is a namespace or a configuration with the attributes tls_cert, tls_key, tls_ca."""
    given = {o: getattr(args, o.lstrip("-").replace("-", "_"), None) for o in ("--tls-cert", "--tls-key", "--tls-ca")}
    if not any(given.values()):
        return None
    missing = [o for o, v in given.items() if not v]
    if missing:
        raise UserError(f"{', '.join(missing)}: needed with {', '.join(o for o, v in given.items() if v)} "
                        "(mutual TLS takes all three: --tls-cert, --tls-key, --tls-ca)")
    data = {}
    for option, path in given.items():
        data[option] = read_small_file(str(path), option)  # a regular file of at most 1 MiB
        marker = b"PRIVATE KEY-----" if option == "--tls-key" else b"-----BEGIN CERTIFICATE-----"
        if marker not in data[option]:
            raise UserError(f"{option} {path!r}: not a PEM {'private key' if option == '--tls-key' else 'certificate'}")
    return TlsConfig(data["--tls-cert"], data["--tls-key"], data["--tls-ca"])


def server_credentials(tls: TlsConfig) -> grpc.ServerCredentials:
    """Server side: present our certificate, require a client certificate signed by the CA."""
    return grpc.ssl_server_credentials([(tls.key, tls.cert)], root_certificates=tls.ca, require_client_auth=True)


def channel(address: str, tls: TlsConfig | None, options: Sequence[tuple[str, Any]]) -> grpc.Channel:
    """A channel to ``address``: plain without ``tls``, else mutual TLS (server checked against the CA)."""
    if tls is None:
        return grpc.insecure_channel(address, options=list(options))
    creds = grpc.ssl_channel_credentials(root_certificates=tls.ca, private_key=tls.key, certificate_chain=tls.cert)
    return grpc.secure_channel(address, creds, options=list(options))


def peer_names(context: grpc.ServicerContext) -> frozenset[str]:
    """The names (SAN entries and CN) of the peer's verified certificate; empty without TLS."""
    ctx = context.auth_context()
    names = list(ctx.get("x509_subject_alternative_name", ())) + list(ctx.get("x509_common_name", ()))
    return frozenset(n.decode(errors="replace") if isinstance(n, bytes) else str(n) for n in names)


class PeerMismatch(Exception):
    """A request for a host that the peer's certificate does not name, or that its role may not make."""


def check_admin(context: grpc.ServicerContext) -> None:
    """PeerMismatch unless the TLS peer's certificate names ``admin``: under mutual TLS only the admin reads
    the cluster's status (every job, host and flow); a host's certificate reports for that host only."""
    names = peer_names(context)
    if ADMIN not in names:
        raise PeerMismatch(f"Status needs the {ADMIN} certificate (admin.pem of `leveller certs init`); this "
                           f"one names {', '.join(sorted(names)) or 'nothing'}: a host's certificate may only "
                           "report (and watch) for that host")


def check_host(context: grpc.ServicerContext, host: str) -> None:
    """PeerMismatch unless the TLS peer's certificate names ``host`` and ``host`` is no role's name (the
    admin certificate reads status and never reports; ``controller`` is the server's)."""
    names = peer_names(context)
    if host in ROLE_NAMES:
        raise PeerMismatch(f"host {host!r} is the name of a role, not of a host: the {ADMIN} certificate reads "
                           "status (leveller status), only hosts' certificates report")
    if host not in names:
        raise PeerMismatch(f"host {host!r} is not named in the client certificate "
                           f"(it names {', '.join(sorted(names)) or 'nothing'}): an agent reports only for "
                           "its own host")
