"""Who is calling the HTTP endpoint (with the rules).

A request is authenticated by a client certificate of the cluster's CA whose role is
``client`` (CN = the user; a node or RS certificate names no user), or by HTTP Basic with a
user's password (checked by :meth:`rootservice.auth.users.Users.authenticate`: argon2, with
its cache of successful verifications, which an ALTER / DROP USER invalidates). The status
API is read-only: the ``SELECT`` privilege is enough (root has it). In insecure mode every
caller is root, as on the gRPC and MySQL endpoints.

A refused login (wrong password, unknown user, a certificate of an unknown user) is counted
(``logins_refused_total``) and audited (event ``login``) as on the other front ends; a
request that brings no credentials at all is answered 401 without an audit record (every
browser's first request is one). A refused privilege is audited with
``ER_SPECIFIC_ACCESS_DENIED_ERROR``. Table reads and argon2 run in a worker thread, never on
the event loop.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import ssl

from aiohttp import web

from obcommon.errors import ObError
from obcommon.security.certs import Role
from obcommon.security.identity import identity_of_pem
from rootservice.app import RootService
from rootservice.auth.principal import Principal
from rootservice.auth.privileges import SELECT
from rootservice.db.user_repo import ROOT_USER

#: What an audit record of this front end names as the statement.
LOGIN_STATEMENT = "(HTTP login)"


def peer_addr(request: web.Request) -> str:
    """The client's ``host:port`` (``[v6]:port``), "" when unknown."""
    peer = request.transport.get_extra_info("peername") if request.transport else None
    if not peer:
        return ""
    host, port = peer[0], peer[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def refuse_revoked(rs: RootService, request: web.Request) -> None:
    """Refuse a request whose connection presented a revoked certificate:
    ``ObError("ER_ACCESS_DENIED_ERROR")``, counted and audited, whatever credentials it
    brings; other connections with a certificate are remembered so that a later revocation
    closes them (``rs.cert_connections``)."""
    transport = request.transport
    ssl_object = transport.get_extra_info("ssl_object") if transport else None
    if ssl_object is None or transport is None:
        return
    try:
        der = ssl_object.getpeercert(binary_form=True)
    except (ValueError, ssl.SSLError):
        return
    ident = identity_of_pem(ssl.DER_cert_to_PEM_cert(der).encode()) if der else None
    if ident is None:
        return
    if ident.serial not in rs.peer_gate.revoked:
        rs.cert_connections.add(ident.serial, transport)
        return
    addr = peer_addr(request)
    rs.metrics.inc("logins_refused_total")
    _audit(rs, ident.name, addr, LOGIN_STATEMENT, "ER_ACCESS_DENIED_ERROR", "login")
    raise ObError(
        "ER_ACCESS_DENIED_ERROR",
        ident.name,
        addr,
        "NO",
        detail=f"certificate {ident.serial} is revoked",
    )


def cert_user(rs: RootService, request: web.Request) -> str | None:
    """The user named by the verified client certificate (role ``client``) when the current
    cluster CA issued it, else None."""
    transport = request.transport
    ssl_object = transport.get_extra_info("ssl_object") if transport else None
    if ssl_object is None:
        return None
    try:
        der = ssl_object.getpeercert(binary_form=True)
    except (ValueError, ssl.SSLError):
        return None
    if not der:
        return None
    # The handshake trusted every CA this endpoint ever loaded (an ssl.SSLContext can add
    # CAs but not drop them): after a CA rotation, only the current ca.crt names users.
    if not rs.security.issued_by_current_ca(der):
        return None
    ident = identity_of_pem(ssl.DER_cert_to_PEM_cert(der).encode())
    return ident.name if ident is not None and ident.role is Role.CLIENT else None


def basic_credentials(request: web.Request) -> tuple[str, str] | None:
    """``(user, password)`` of an ``Authorization: Basic`` header (RFC 7617, UTF-8), None
    without one. Raises ``ObError(OB_INVALID_ARGUMENT)`` for a malformed one."""
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        text = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise ObError("OB_INVALID_ARGUMENT", "Authorization header") from None
    user, sep, password = text.partition(":")
    if not sep:
        raise ObError("OB_INVALID_ARGUMENT", "Authorization header")
    return user, password


class NoCredentials(Exception):
    """The request brought neither a client certificate nor a Basic header."""


async def authenticate(rs: RootService, request: web.Request) -> Principal:
    """The principal of ``request`` holding the SELECT privilege.

    Raises :class:`NoCredentials`, ``ObError("ER_ACCESS_DENIED_ERROR")`` (a refused login:
    counted and audited), ``ObError("ER_SPECIFIC_ACCESS_DENIED_ERROR")`` (no SELECT:
    audited), ``ObError("OB_INVALID_ARGUMENT")`` (a malformed header) and
    ``ObError("OB_ERR_SYS")`` (the user table cannot be read)."""
    addr = peer_addr(request)
    if rs.settings.insecure:
        return Principal(ROOT_USER, addr)
    refuse_revoked(rs, request)
    basic = basic_credentials(request)
    cert = cert_user(rs, request)
    if basic is None and cert is None:
        raise NoCredentials
    user, password = basic if basic is not None else (None, None)
    try:
        principal = await asyncio.to_thread(rs.users.authenticate, user, password, cert, addr)
    except ObError as e:
        if e.name == "ER_ACCESS_DENIED_ERROR":
            rs.metrics.inc("logins_refused_total")
            _audit(rs, user or cert or "", addr, LOGIN_STATEMENT, e.name, "login")
        raise
    if principal.user != ROOT_USER:
        privileges = await asyncio.to_thread(rs.users.privileges, principal.user)
        if SELECT not in privileges:
            what = f"{request.method} {request.path}"
            _audit(rs, principal.user, addr, what, "ER_SPECIFIC_ACCESS_DENIED_ERROR", "statement")
            raise ObError("ER_SPECIFIC_ACCESS_DENIED_ERROR", SELECT)
    return principal


def _audit(rs: RootService, user: str, addr: str, what: str, outcome: str, event: str) -> None:
    # The audit writes a table row: off the event loop, not waited for (as the MySQL
    # endpoint's refused logins).
    loop = asyncio.get_running_loop()
    loop.run_in_executor(rs.executor, lambda: rs.audit.record(user, addr, what, outcome, event))
