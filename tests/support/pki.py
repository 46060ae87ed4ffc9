"""The test session's PKI: one CA (in a temporary directory, removed at exit) and one
certificates directory per identity, made on first use, so that the real processes of the
integration tests run with mutual TLS as in production.

``certs_dir(Role.NODE, "127.0.0.1:4001")`` holds ``ca.crt`` and ``node.crt`` / ``node.key``;
``certs_dir(Role.CLIENT, "root")`` holds ``ca.crt`` and ``client.root.crt`` / ``.key``.
Addresses started with ``insecure=True`` are remembered in :data:`INSECURE_ADDRS` so that
health checks talk plaintext to them.
"""

from __future__ import annotations

import atexit
import shutil
import socket
import ssl
import tempfile
import threading
import time
from pathlib import Path

import grpc
from cryptography import x509

from obcommon.security.certs import (
    CA_CERT,
    Role,
    Validity,
    cert_file,
    create_ca,
    create_cert,
    key_file,
)
from obcommon.security.tls import TransportSecurity
from sql.client import Credentials
from sql.connect import connect

_lock = threading.Lock()
_root: Path | None = None
#: Plaintext addresses (processes started with ``--insecure``).
INSECURE_ADDRS: set[str] = set()
LIFETIME_S = 7 * 86400


def root() -> Path:
    """The session's PKI directory: ``ca.key`` and ``ca/ca.crt``, created on first call."""
    global _root
    with _lock:
        if _root is None:
            d = Path(tempfile.mkdtemp(prefix="ob-test-pki-"))
            create_ca(d / "ca", d / "ca.key", Validity.starting(int(time.time()), LIFETIME_S))
            atexit.register(shutil.rmtree, d, True)
            _root = d
        return _root


def ca_key() -> Path:
    """The CA's private key (for tests that sign certificates of their own)."""
    return root() / "ca.key"


def certs_dir(role: Role, name: str) -> Path:
    """A directory with ``ca.crt`` and ``role``'s pair for ``name`` (``ip:port`` or a user)."""
    base = root()
    d = base / f"{role.value}-{name.replace(':', '_')}"
    with _lock:
        if not d.exists():
            tmp = base / f".{d.name}.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
            shutil.copy(base / "ca" / CA_CERT, tmp / CA_CERT)
            create_cert(
                tmp, base / "ca.key", role, name, Validity.starting(int(time.time()), LIFETIME_S)
            )
            tmp.rename(d)
    return d


def client_certs() -> Path:
    """``certs_dir(Role.CLIENT, "root")``: what obadmin is given in the tests."""
    return certs_dir(Role.CLIENT, "root")


def security(role: Role = Role.CLIENT, name: str = "root") -> TransportSecurity:
    """A :class:`TransportSecurity` presenting ``role``'s certificate for ``name``."""
    return TransportSecurity(certs_dir(role, name), role, name if role is Role.CLIENT else "")


def channel(addr: str, role: Role = Role.CLIENT, name: str = "root") -> grpc.Channel:
    """A synchronous channel to ``addr``: plaintext when it was started insecure, else mutual
    TLS presenting ``role``'s certificate for ``name`` (default: the root client)."""
    if addr in INSECURE_ADDRS:
        return grpc.insecure_channel(addr, options=[("grpc.enable_http_proxy", 0)])
    return security(role, name).channel(addr)


def proven_channel(addr: str, timeout_s: float = 30.0) -> grpc.Channel:
    """A channel to the RS at ``addr`` as the root client whose connection was proven
    (:func:`sql.connect.connect`: a failed connect or handshake is retried with backoff for
    ``timeout_s`` seconds); for read-only calls. The caller closes it.
    Raises :class:`sql.connect.RsUnreachableError`."""
    sec = None if addr in INSECURE_ADDRS else security()
    return connect([addr], timeout_s, sec)[1]


def obadmin_flags(user: str = "root") -> list[str]:
    """The obadmin flags of a test client: ``--certs-dir`` with ``client.<user>.crt``."""
    return ["--certs-dir", str(certs_dir(Role.CLIENT, user))]


def credentials(user: str = "root", password: str | None = None) -> Credentials:
    """What ``sql.client.execute`` needs to log in as ``user`` over mutual TLS: the client
    certificate of ``user`` (made on first use) and, if given, the password."""
    return Credentials(
        user=user if password is not None else None,
        password=password,
        security=security(Role.CLIENT, user),
    )


def presented_cert(addr: str, certs: Path, role: Role, name: str) -> x509.Certificate:
    """Open a new TLS connection to ``addr`` (``host:port``) presenting ``role``'s pair for
    ``name`` from the directory ``certs`` (as gRPC peers do, ALPN ``h2``; ``ca.crt`` there is
    the only trusted root) and return the certificate the server presented, once the server
    has accepted ours. Raises ``ssl.SSLError`` / ``OSError`` when either side refuses."""
    ctx = ssl.create_default_context(cafile=str(certs / CA_CERT))
    ctx.check_hostname = False
    user = name if role is Role.CLIENT else ""
    ctx.load_cert_chain(certs / cert_file(role, user), certs / key_file(role, user))
    ctx.set_alpn_protocols(["h2"])
    host, port = addr.rsplit(":", 1)
    with (
        socket.create_connection((host, int(port)), timeout=5) as raw,
        ctx.wrap_socket(raw, server_hostname=host) as conn,
    ):
        der = conn.getpeercert(binary_form=True)
        # With TLS 1.3 the server judges the client's certificate after the client's side
        # of the handshake is done: only an answer to the HTTP/2 preface (the server's
        # SETTINGS) shows it was accepted; a refusal arrives here as an SSL alert.
        conn.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        if not conn.recv(9):
            raise ConnectionResetError(f"{addr} closed the connection after the handshake")
    assert der is not None
    return x509.load_der_x509_certificate(der)
