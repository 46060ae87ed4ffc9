"""Who is on the other end of a gRPC call: the role and name of the peer's verified
certificate.

gRPC has already verified the chain against ``ca.crt`` when a servicer runs; this module
only reads the verified leaf out of ``context.auth_context()`` and names it. Parsing is
cached by the certificate's bytes, because a unary lease renewal asks on every call.
"""

from __future__ import annotations

import re
import ssl
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from cryptography import x509
from cryptography.x509.oid import NameOID

from obcommon.security.certs import ORGANIZATION, Role
from obcommon.security.revocation import serial_text

#: Identities remembered by certificate: more than the nodes of a large cluster (10,000), so
#: that a reconnect storm of every agent parses no certificate twice (at 4,096 the LRU
#: evicted each one before its agent came back). About 1.3 KB of PEM each: ~20 MB at most.
_CACHE_SIZE = 16_384


@dataclass(frozen=True)
class PeerIdentity:
    """A verified peer: ``role`` (the subject's OU) and ``name`` (its CN: ``ip:port`` for RS
    and node certificates, the user for client certificates). ``serial`` is the
    certificate's serial number in lower-case hex (the key of the revocation list; not part of equality: two certificates of one peer are the same identity)."""

    role: Role
    name: str
    serial: str = field(default="", compare=False)

    def __str__(self) -> str:
        return f"{self.role.value} '{self.name}'"


class _Cache:
    def __init__(self) -> None:
        self._items: OrderedDict[bytes, PeerIdentity | None] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, pem: bytes) -> tuple[bool, PeerIdentity | None]:
        with self._lock:
            if pem in self._items:
                self._items.move_to_end(pem)
                return True, self._items[pem]
        return False, None

    def put(self, pem: bytes, ident: PeerIdentity | None) -> None:
        with self._lock:
            self._items[pem] = ident
            while len(self._items) > _CACHE_SIZE:
                self._items.popitem(last=False)


_cache = _Cache()


#: The subject of one of our certificates as gRPC's ``x509_subject`` auth property prints it
#: (RFC 2253, most specific first) when every value is plain: CN, OU, O and nothing else,
#: no character RFC 2253 escapes. Any other shape is parsed from the certificate.
_PLAIN_SUBJECT = re.compile(
    rb"CN=([A-Za-z0-9_.:\[\]-]+),OU=([a-z]+),O=" + re.escape(ORGANIZATION.encode())
)


def identity_of_pem(pem: bytes, subject: bytes | None = None) -> PeerIdentity | None:
    """The identity a PEM certificate claims, or None when it is not one of ours (no
    ``O=ob-rootservice``, no or unknown OU, no CN). Does not verify the chain: call it only
    on certificates TLS has verified. ``subject``: the certificate's subject as gRPC printed
    it (auth property ``x509_subject``), if known: when it has the plain shape of ours
    (:data:`_PLAIN_SUBJECT`) the role and name are read from it and only the serial from
    the certificate (about 15 us against 65 us for cryptography's ``Name`` objects; a
    reconnect storm of 10,000 agents parses 10,000 certificates)."""
    hit, ident = _cache.get(pem)
    if hit:
        return ident
    ident = None
    plain = _PLAIN_SUBJECT.fullmatch(subject) if subject is not None else None
    try:
        cert = x509.load_pem_x509_certificate(pem)
        if plain is not None:
            ident = PeerIdentity(
                Role(plain[2].decode()), plain[1].decode(), serial_text(cert.serial_number)
            )
            _cache.put(pem, ident)
            return ident
        names = cert.subject
        org = names.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
        ou = names.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)
        cn = names.get_attributes_for_oid(NameOID.COMMON_NAME)
        if org and org[0].value == ORGANIZATION and len(ou) == 1 and len(cn) == 1:
            role = Role(str(ou[0].value))
            ident = PeerIdentity(role, str(cn[0].value), serial_text(cert.serial_number))
    except ValueError:
        ident = None
    _cache.put(pem, ident)
    return ident


def identity_of_der(der: bytes) -> PeerIdentity | None:
    """:func:`identity_of_pem` of a DER certificate (what Python's ``ssl`` gives of a peer:
    the agent's HTTPS data path). Same caveat: only on verified certificates."""
    return identity_of_pem(ssl.DER_cert_to_PEM_cert(der).encode())


def peer_identity(context: Any) -> PeerIdentity | None:
    """The verified identity of a gRPC call's peer (``grpc.ServicerContext`` or its aio
    twin), or None when the connection is plaintext or the certificate is not one of ours."""
    try:
        auth = context.auth_context()
    except Exception:
        return None
    pems = auth.get("x509_pem_cert") if auth else None
    if not pems:
        return None
    subjects = auth.get("x509_subject")
    return identity_of_pem(pems[0], subjects[0] if subjects else None)


def session_resumed(context: Any) -> bool:
    """True when the TLS connection of a gRPC call (``grpc.ServicerContext`` or its aio twin)
    resumed an earlier session instead of a full handshake (gRPC's ``ssl_session_reused``
    auth property); False for a full handshake and in plaintext."""
    try:
        auth = context.auth_context()
    except Exception:
        return False
    return bool(auth) and auth.get("ssl_session_reused") == [b"true"]
