"""obcommon.security.identity: the identity a verified certificate names.
Only ``O=ob-rootservice`` certificates with one known OU and one CN are ours."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from obcommon.security.certs import CA_CERT, Role, create_cert
from obcommon.security.identity import (
    _PLAIN_SUBJECT,
    PeerIdentity,
    identity_of_pem,
    peer_identity,
)
from tests.unit.obcommon.security.helpers import VALID, make_ca


def _self_signed(attrs: list[x509.NameAttribute]) -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(attrs)
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM)


def test_our_certificates_name_role_and_identity(tmp_path: Path) -> None:
    certs, key = make_ca(tmp_path)
    for role, name in ((Role.RS, "127.0.0.1:1"), (Role.NODE, "127.0.0.1:2"), (Role.CLIENT, "bob")):
        pem = create_cert(certs, key, role, name, VALID).public_bytes(serialization.Encoding.PEM)
        assert identity_of_pem(pem) == PeerIdentity(role, name)
        assert identity_of_pem(pem) == PeerIdentity(role, name)  # cached: same answer
    assert str(PeerIdentity(Role.NODE, "127.0.0.1:2")) == "node '127.0.0.1:2'"


def test_the_ca_is_no_identity(tmp_path: Path) -> None:
    certs, _ = make_ca(tmp_path)
    assert identity_of_pem((certs / CA_CERT).read_bytes()) is None


def test_foreign_and_malformed_subjects_are_no_identity() -> None:
    o, ou, cn = NameOID.ORGANIZATION_NAME, NameOID.ORGANIZATIONAL_UNIT_NAME, NameOID.COMMON_NAME
    A = x509.NameAttribute  # noqa: N806
    cases = {
        "another organization": [A(o, "evil corp"), A(ou, "node"), A(cn, "127.0.0.1:2")],
        "no organization": [A(ou, "rs"), A(cn, "127.0.0.1:1")],
        "unknown role": [A(o, "ob-rootservice"), A(ou, "admin"), A(cn, "root")],
        "two roles": [A(o, "ob-rootservice"), A(ou, "rs"), A(ou, "client"), A(cn, "x")],
        "no name": [A(o, "ob-rootservice"), A(ou, "client")],
    }
    for why, attrs in cases.items():
        assert identity_of_pem(_self_signed(attrs)) is None, why
    assert (
        identity_of_pem(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n") is None
    )
    assert identity_of_pem(b"garbage") is None


class _Context:
    """The two methods of a gRPC servicer context that peer_identity reads (grpc's own
    context cannot be built outside a call)."""

    def __init__(self, auth: dict[str, list[bytes]] | Exception) -> None:
        self._auth = auth

    def auth_context(self) -> dict[str, list[bytes]]:
        if isinstance(self._auth, Exception):
            raise self._auth
        return self._auth


def test_peer_identity_reads_the_verified_leaf(tmp_path: Path) -> None:
    certs, key = make_ca(tmp_path)
    pem = create_cert(certs, key, Role.CLIENT, "carol", VALID).public_bytes(
        serialization.Encoding.PEM
    )
    assert peer_identity(_Context({"x509_pem_cert": [pem]})) == PeerIdentity(Role.CLIENT, "carol")
    # Plaintext: no x509 entries; a context that cannot answer counts as no identity.
    assert peer_identity(_Context({"transport_security_type": [b"insecure"]})) is None
    assert peer_identity(_Context({})) is None
    assert peer_identity(_Context(RuntimeError("closed"))) is None


def test_the_identity_cache_holds_every_node_of_a_large_cluster() -> None:
    # A reconnect storm of 10,000 agents (and a few clients) must find every certificate
    # parsed when its agent connected before: none evicted by the others.
    from obcommon.security.identity import _Cache

    cache = _Cache()
    n = 10_000 + 100
    for i in range(n):
        cache.put(b"pem-%d" % i, PeerIdentity(Role.NODE, f"127.0.0.1:{i}"))
    assert cache.get(b"pem-0") == (True, PeerIdentity(Role.NODE, "127.0.0.1:0"))
    assert all(cache.get(b"pem-%d" % i)[0] for i in range(n))


def _fresh_identity(pem: bytes, subject: bytes | None) -> tuple[PeerIdentity | None, str]:
    """identity_of_pem with an empty cache (so each path parses), with the serial, which
    PeerIdentity's equality leaves out."""
    import obcommon.security.identity as identity

    identity._cache = identity._Cache()
    got = identity_of_pem(pem, subject)
    return got, got.serial if got is not None else ""


def test_the_subject_grpc_prints_names_what_the_certificate_names(tmp_path: Path) -> None:
    """With the subject as gRPC prints it (RFC 2253, as ``rfc4514_string`` writes it), the
    identity is the one parsed from the certificate, serial included, for ours and for
    every foreign or odd subject (which take the certificate's path)."""
    certs, key = make_ca(tmp_path)
    pems = [
        create_cert(certs, key, role, name, VALID, overwrite=True).public_bytes(
            serialization.Encoding.PEM
        )
        for role, name in (
            (Role.RS, "127.0.0.1:1"),
            (Role.NODE, "127.0.0.1:2"),
            (Role.NODE, "[::1]:2881"),
            (Role.CLIENT, "bob"),
            (Role.CLIENT, "a.b-c_d"),
        )
    ]
    o, ou, cn = NameOID.ORGANIZATION_NAME, NameOID.ORGANIZATIONAL_UNIT_NAME, NameOID.COMMON_NAME
    A = x509.NameAttribute  # noqa: N806
    for attrs in (
        [A(o, "evil corp"), A(ou, "node"), A(cn, "127.0.0.1:2")],
        [A(o, "ob-rootservice"), A(ou, "admin"), A(cn, "root")],
        [A(o, "ob-rootservice"), A(ou, "rs"), A(ou, "client"), A(cn, "x")],
        [A(o, "ob-rootservice"), A(ou, "node"), A(cn, "a,OU=rs")],
        [A(o, "ob-rootservice"), A(ou, "node"), A(cn, " padded ")],
        [A(o, "ob-rootservice"), A(ou, "client"), A(cn, "bob"), A(NameOID.COUNTRY_NAME, "FR")],
    ):
        pems.append(_self_signed(attrs))
    pems.append((certs / CA_CERT).read_bytes())
    quick = 0
    for pem in pems:
        printed = x509.load_pem_x509_certificate(pem).subject.rfc4514_string().encode()
        full = _fresh_identity(pem, None)
        assert _fresh_identity(pem, printed) == full, printed
        quick += _PLAIN_SUBJECT.fullmatch(printed) is not None
    # Ours and the unknown role (refused on either path) took the quick path; nothing else.
    assert quick == 6


def test_grpc_prints_our_subjects_in_the_plain_shape(tmp_path: Path) -> None:
    """The quick path is only as good as gRPC's ``x509_subject``: on a real TLS call the
    node certificate's subject has the plain shape and names the node, and
    ``peer_identity`` gives the identity and serial the certificate gives."""
    import asyncio

    import grpc

    from obcommon.security.tls import TransportSecurity

    certs, key = make_ca(tmp_path)
    seen: dict[str, object] = {}

    def security(role: Role, name: str) -> TransportSecurity:
        d = tmp_path / role.value
        d.mkdir()
        (d / CA_CERT).write_bytes((certs / CA_CERT).read_bytes())
        create_cert(d, key, role, name, VALID)
        return TransportSecurity(d, role)

    async def call(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        seen["subject"] = context.auth_context()["x509_subject"][0]
        seen["pem"] = context.auth_context()["x509_pem_cert"][0]
        seen["identity"] = peer_identity(context)
        return b""

    async def main() -> None:
        server = grpc.aio.server()
        server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    "t.S", {"Call": grpc.unary_unary_rpc_method_handler(call)}
                ),
            )
        )
        port = security(Role.RS, "127.0.0.1:1").add_port(server, "127.0.0.1:0")
        await server.start()
        try:
            async with security(Role.NODE, "127.0.0.1:9").aio_channel(f"127.0.0.1:{port}") as ch:
                await ch.unary_unary("/t.S/Call")(b"", timeout=10)
        finally:
            await server.stop(None)

    asyncio.run(main())
    subject, pem, ident = seen["subject"], seen["pem"], seen["identity"]
    assert isinstance(subject, bytes) and isinstance(pem, bytes)
    assert _PLAIN_SUBJECT.fullmatch(subject) is not None, subject
    assert isinstance(ident, PeerIdentity) and ident == PeerIdentity(Role.NODE, "127.0.0.1:9")
    assert (ident, ident.serial) == _fresh_identity(pem, None)
