"""A lab certificate authority for mutual TLS (`leveller certs init`), with python `cryptography`.

One CA signs a server certificate for the controller (its names: DNS names and IP
addresses the agents dial) and one client certificate per host whose name (the
SAN, and the CN) is the host name that host's agent reports as: the controller
refuses a report whose host is not named in the peer's certificate. An ``admin``
client certificate is made for `leveller status`. Keys are EC P-256, written
0600; certificates 0644. An existing CA in the directory is reused, so more
hosts can be added later without re-issuing the others: a pair that exists is
kept (the controller's is issued again only when --controller-names differ from
its names). Every name is checked before anything is written; a CA half there
(ca.pem whose key is kept offline) or a CA key others can read is refused, not
replaced or reused.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from leveller.errors import UserError
from leveller.rpc.tls import ADMIN

VALID_DAYS = 365
CONTROLLER = "controller"
DEFAULT_CONTROLLER_NAMES = ("localhost", "127.0.0.1", "::1")
_DNS_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


@dataclass(frozen=True)
class Issued:
    """Paths of one issued certificate and its key; ``kept``: it existed and was left as it was."""

    name: str
    cert: Path
    key: Path
    kept: bool = False


def check_controller_name(name: str) -> str:
    """``name`` if it is an IP address or a DNS name (letters, digits and inner hyphens per label, at most
    253 characters; ASCII only: write an internationalised name in its xn-- form); UserError otherwise."""
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        pass
    labels = name.removesuffix(".").split(".")
    if len(name) > 253 or not all(_DNS_LABEL.fullmatch(label) for label in labels):
        raise UserError(f"--controller-names: {name!r} is neither an IP address nor a DNS name; allowed: "
                        "labels of letters, digits and inner hyphens joined by dots (ASCII; an "
                        "internationalised name in its xn-- form), e.g. ctl.lab or 10.0.0.254")
    return name


def _san(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def _write(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` to ``path`` created with ``mode`` from the start (a key is never world-readable)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(tmp, mode)  # umask may have narrowed it
    os.replace(tmp, path)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _check_ca_files(directory: Path) -> None:
    """Refuse a CA that is half there (a new one would replace the one its hosts trust) or whose key others
    can read (every certificate it signs would be forgeable)."""
    cert_path, key_path = directory / "ca.pem", directory / "ca.key"
    if cert_path.exists() != key_path.exists():
        have, missing = (cert_path, key_path) if cert_path.exists() else (key_path, cert_path)
        raise UserError(f"{directory}: {have.name} is there but {missing.name} is not (a CA key kept offline?); "
                        f"`leveller certs init` signs with the CA's key: put {missing.name} back for the run, or "
                        f"remove {have.name} to make a new CA (its certificates then stop working)")
    if key_path.exists():
        mode = stat.S_IMODE(key_path.stat().st_mode)
        if mode & 0o077:
            raise UserError(f"{key_path}: mode {mode:04o}, group or others can read the CA key; allowed: 0600 "
                            f"(`chmod 600 {key_path}`; if others did read it, make a new CA)")


def _load_or_make_ca(directory: Path, now: dt.datetime) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    cert_path, key_path = directory / "ca.pem", directory / "ca.key"
    _check_ca_files(directory)
    if cert_path.exists() and key_path.exists():
        try:
            cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
            key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        except ValueError as exc:
            raise UserError(f"{directory}: ca.pem/ca.key exist but cannot be read ({exc}); "
                            "remove them to make a new CA") from None
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise UserError(f"{key_path}: not an EC key (this CA was not made by `leveller certs init`)")
        return cert, key
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "leveller lab CA")])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=VALID_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                         crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    _write(key_path, _key_pem(key), 0o600)
    _write(cert_path, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    return cert, key


def issue(directory: Path, ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey], file_name: str,
          names: tuple[str, ...], server: bool, now: dt.datetime) -> Issued:
    """Write FILE_NAME.pem/.key: a certificate for ``names`` (first = CN) signed by ``ca``."""
    ca_cert, ca_key = ca
    key = ec.generate_private_key(ec.SECP256R1())
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
            .issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=VALID_DAYS))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName([_san(n) for n in names]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    out = Issued(file_name, directory / f"{file_name}.pem", directory / f"{file_name}.key")
    _write(out.key, _key_pem(key), 0o600)
    _write(out.cert, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    return out


def _existing(directory: Path, file_name: str, names: tuple[str, ...]) -> Issued | None:
    """The pair FILE_NAME.pem/.key when both exist and the certificate names exactly ``names``."""
    out = Issued(file_name, directory / f"{file_name}.pem", directory / f"{file_name}.key", kept=True)
    if not (out.cert.exists() and out.key.exists()):
        return None
    try:
        cert = x509.load_pem_x509_certificate(out.cert.read_bytes())
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, x509.ExtensionNotFound):
        return None  # not ours or damaged: issued again
    have = {str(n.value) for n in san}
    return out if have == {str(_san(n).value) for n in names} else None


def init(directory: Path, hosts: tuple[str, ...], controller_names: tuple[str, ...] = DEFAULT_CONTROLLER_NAMES,
         now: dt.datetime | None = None) -> list[Issued]:
    """Make (or reuse) the CA in ``directory`` and issue the controller's, each host's and the admin's
    certificates, keeping each pair that exists with the same names; returns them all (the CA first).
    Every name is checked before anything is written."""
    from leveller.codec import SchemaError
    from leveller.rpc.schema import check_name

    for h in hosts:
        try:
            check_name(h, "--hosts")
        except SchemaError as exc:
            raise UserError(str(exc)) from None
        if h in (ADMIN, CONTROLLER, "ca"):
            raise UserError(f"--hosts: {h!r} is reserved (file names {h}.pem/.key are taken)")
        if h.startswith("."):
            raise UserError(f"--hosts: {h!r} would be a hidden file ({h}.pem); allowed: a name not starting "
                            "with a dot")
    if not controller_names:
        raise UserError("--controller-names: give at least one name or address the agents dial")
    controller_names = tuple(check_controller_name(n) for n in controller_names)
    now = now or dt.datetime.now(dt.UTC)
    if directory.exists():
        _check_ca_files(directory)  # before any write
    directory.mkdir(parents=True, exist_ok=True)
    kept = (directory / "ca.key").exists()
    ca = _load_or_make_ca(directory, now)
    out = [Issued("ca", directory / "ca.pem", directory / "ca.key", kept)]
    for file_name, names, server in ((CONTROLLER, controller_names, True), (ADMIN, (ADMIN,), False),
                                     *((h, (h,), False) for h in dict.fromkeys(hosts))):
        out.append(_existing(directory, file_name, names) or issue(directory, ca, file_name, names, server, now))
    return out
