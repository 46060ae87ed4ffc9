"""Shared helpers of the trust-boundary unit tests: a throw-away CA in a directory, and a
TLS handshake with Python's ``ssl`` module that returns the certificate a server presents."""

from __future__ import annotations

import socket
import ssl
import time
from pathlib import Path

from cryptography import x509

from obcommon.security.certs import CA_CERT, Role, Validity, cert_file, create_ca, key_file

NOW_S = int(time.time())
VALID = Validity.starting(NOW_S, 86400)


def make_ca(tmp: Path, name: str = "ca") -> tuple[Path, Path]:
    """A new CA: ``(certs_dir, ca_key)`` with ``certs_dir/ca.crt`` written."""
    certs_dir, key = tmp / name, tmp / f"{name}.key"
    create_ca(certs_dir, key, VALID)
    return certs_dir, key


def presented_cert(addr: str, certs_dir: Path, role: Role, name: str) -> x509.Certificate:
    """Open a new TLS connection to ``addr`` presenting ``role``'s pair from ``certs_dir``
    (as gRPC peers do, ALPN ``h2``) and return the certificate the server presented."""
    ctx = ssl.create_default_context(cafile=str(certs_dir / CA_CERT))
    ctx.check_hostname = False
    user = name if role is Role.CLIENT else ""
    ctx.load_cert_chain(certs_dir / cert_file(role, user), certs_dir / key_file(role, user))
    ctx.set_alpn_protocols(["h2"])
    host, port = addr.rsplit(":", 1)
    with (
        socket.create_connection((host, int(port)), timeout=5) as raw,
        ctx.wrap_socket(raw, server_hostname=host) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)
