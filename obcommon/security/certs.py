"""Writing the cluster's certificates with the ``cryptography`` library.

The layout is CockroachDB's (``cockroach cert create-*``): one certificates directory per
process holding ``ca.crt`` and the process's own pair; the CA's private key lives elsewhere
(``--ca-key``) so that data nodes never hold it.

=========================  ===============================  ==============================
file                       what                             identity (subject CN)
=========================  ===============================  ==============================
``ca.crt`` (+ ca key)      the cluster CA                   ``ob-rootservice CA``
``rs.crt`` / ``rs.key``    a root service                   its RPC address ``ip:port``
``node.crt`` / ``node.key``  one observer (agent)           its server address ``ip:port``
``client.U.crt`` / ``.key``  the SQL / admin user ``U``      ``U``
=========================  ===============================  ==============================

The role is the subject's organizational unit (``OU=rs|node|client``), so a certificate of
one kind cannot be used as another (Kubernetes' NodeRestriction reads the role and the name
the same way from ``O`` and ``CN``). RS and node certificates carry their host in the
subjectAltName, so the peers' TLS host checks pass, and both TLS uses (server and client,
since a node also calls the RS and other nodes); client certificates are for TLS clients
only. Keys are ECDSA P-256 (cheap handshakes), written with mode 0600.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: Subject organization of every certificate this module writes.
ORGANIZATION = "ob-rootservice"
CA_COMMON_NAME = "ob-rootservice CA"
CA_CERT = "ca.crt"
DEFAULT_CA_LIFETIME_S = 10 * 366 * 86400
DEFAULT_CERT_LIFETIME_S = 5 * 366 * 86400
#: Backdating, so that a peer whose clock is a little behind accepts a fresh certificate.
BACKDATE_S = 3600


class Role(StrEnum):
    """Who a certificate speaks for: its subject's ``OU``."""

    RS = "rs"
    NODE = "node"
    CLIENT = "client"


class CertError(Exception):
    """A certificate could not be written or read; the message says which file and why."""


@dataclass(frozen=True)
class Validity:
    """``not_before_s`` .. ``not_after_s``, seconds since the Unix epoch."""

    not_before_s: int
    not_after_s: int

    @classmethod
    def starting(cls, now_s: int, lifetime_s: int) -> Validity:
        """From ``now_s - BACKDATE_S`` for ``lifetime_s`` seconds after ``now_s``."""
        if lifetime_s <= 0:
            raise CertError(f"lifetime must be positive, got {lifetime_s} s")
        return cls(now_s - BACKDATE_S, now_s + lifetime_s)


def cert_file(role: Role, user: str = "") -> str:
    """The file name of a certificate: ``rs.crt``, ``node.crt`` or ``client.<user>.crt``."""
    return f"client.{user}.crt" if role is Role.CLIENT else f"{role.value}.crt"


def key_file(role: Role, user: str = "") -> str:
    """The file name of the private key that goes with :func:`cert_file`."""
    return cert_file(role, user).removesuffix(".crt") + ".key"


def _time(seconds: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds, tz=dt.UTC)


def _write(path: Path, data: bytes, *, private: bool, overwrite: bool) -> None:
    if path.exists() and not overwrite:
        raise CertError(f"{path} exists (pass --overwrite to replace it)")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    # Atomic, so a process re-reading its certificates never sees half a file.
    os.replace(tmp, path)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def create_ca(
    certs_dir: Path, ca_key: Path, validity: Validity, *, overwrite: bool = False
) -> x509.Certificate:
    """Write a new CA: its key to ``ca_key`` (0600) and ``certs_dir/ca.crt``.

    With ``overwrite`` False an existing key or certificate is an error (``CertError``):
    replacing a CA invalidates every certificate it signed. Returns the CA certificate.
    """
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION),
            x509.NameAttribute(NameOID.COMMON_NAME, CA_COMMON_NAME),
        ]
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_time(validity.not_before_s))
        .not_valid_after(_time(validity.not_after_s))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    if not overwrite:
        for p in (ca_key, certs_dir / CA_CERT):
            if p.exists():
                raise CertError(f"{p} exists (pass --overwrite to replace the CA)")
    _write(ca_key, _key_pem(key), private=True, overwrite=True)
    _write(
        certs_dir / CA_CERT,
        cert.public_bytes(serialization.Encoding.PEM),
        private=False,
        overwrite=True,
    )
    return cert


def load_ca(certs_dir: Path, ca_key: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """Read ``certs_dir/ca.crt`` and the CA key; ``CertError`` when missing, unreadable or not
    a pair."""
    try:
        cert = x509.load_pem_x509_certificate((certs_dir / CA_CERT).read_bytes())
        key = serialization.load_pem_private_key(ca_key.read_bytes(), password=None)
    except (OSError, ValueError) as e:
        raise CertError(f"cannot read the CA ({certs_dir / CA_CERT}, {ca_key}): {e}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise CertError(f"{ca_key} is not an ECDSA key")
    if cert.public_key().public_numbers() != key.public_key().public_numbers():  # type: ignore[union-attr]
        raise CertError(f"{ca_key} is not the key of {certs_dir / CA_CERT}")
    return cert, key


def _san(hosts: list[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for h in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            names.append(x509.DNSName(h))
    return names


def create_cert(
    certs_dir: Path,
    ca_key: Path,
    role: Role,
    name: str,
    validity: Validity,
    *,
    hosts: list[str] | None = None,
    overwrite: bool = False,
) -> x509.Certificate:
    """Write ``role``'s certificate and key for ``name`` into ``certs_dir``, signed by the CA
    there (``ca.crt`` and ``ca_key``).

    ``name`` is ``ip:port`` for :attr:`Role.RS` and :attr:`Role.NODE` (its host goes in the
    subjectAltName, with the extra ``hosts``) and a user name for :attr:`Role.CLIENT`.
    Raises ``CertError`` for a malformed name, a missing CA or an existing file without
    ``overwrite``.
    """
    ca_cert, ca_priv = load_ca(certs_dir, ca_key)
    if role is Role.CLIENT:
        if not name or not all(c.isalnum() or c in "_-." for c in name):
            raise CertError(f"user name {name!r} must be letters, digits, '_', '-' or '.'")
        san: list[x509.GeneralName] = []
        usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
    else:
        host, sep, port = name.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise CertError(f"{role.value} identity must be ip:port, got {name!r}")
        san = _san([host, *(hosts or [])])
        usages = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        x509.CertificateBuilder()
        .subject_name(
            x509.Name(
                [
                    x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION),
                    x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, role.value),
                    x509.NameAttribute(NameOID.COMMON_NAME, name),
                ]
            )
        )
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_time(validity.not_before_s))
        .not_valid_after(_time(validity.not_after_s))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_priv.public_key()),
            critical=False,
        )
    )
    if san:
        builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
    cert = builder.sign(ca_priv, hashes.SHA256())
    user = name if role is Role.CLIENT else ""
    key_path, cert_path = certs_dir / key_file(role, user), certs_dir / cert_file(role, user)
    if not overwrite:
        for p in (key_path, cert_path):
            if p.exists():
                raise CertError(f"{p} exists (pass --overwrite to replace it)")
    # Key first: a reader that sees the new certificate must find its key.
    _write(key_path, _key_pem(key), private=True, overwrite=True)
    _write(cert_path, cert.public_bytes(serialization.Encoding.PEM), private=False, overwrite=True)
    return cert
