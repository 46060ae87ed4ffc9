"""obcommon.security.certs: the files ``rootservice cert create-*`` writes
(CockroachDB's layout, roles in the subject's OU as Kubernetes' NodeRestriction reads them)."""

from __future__ import annotations

import ipaddress
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from obcommon.security.certs import (
    BACKDATE_S,
    CA_CERT,
    ORGANIZATION,
    CertError,
    Role,
    Validity,
    cert_file,
    create_ca,
    create_cert,
    key_file,
    load_ca,
)
from tests.unit.obcommon.security.helpers import NOW_S, VALID, make_ca


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def _attr(cert: x509.Certificate, oid: x509.ObjectIdentifier) -> list[str]:
    return [str(a.value) for a in cert.subject.get_attributes_for_oid(oid)]


def test_file_names_follow_cockroachdb() -> None:
    assert (cert_file(Role.RS), key_file(Role.RS)) == ("rs.crt", "rs.key")
    assert (cert_file(Role.NODE), key_file(Role.NODE)) == ("node.crt", "node.key")
    assert (cert_file(Role.CLIENT, "bob"), key_file(Role.CLIENT, "bob")) == (
        "client.bob.crt",
        "client.bob.key",
    )


def test_validity_is_backdated_and_must_be_positive() -> None:
    assert Validity.starting(1000, 60) == Validity(1000 - BACKDATE_S, 1060)
    for bad in (0, -5):
        with pytest.raises(CertError, match="lifetime must be positive"):
            Validity.starting(1000, bad)


def test_ca_is_a_ca_with_a_private_key(tmp_path: Path) -> None:
    certs, key = make_ca(tmp_path)
    ca = x509.load_pem_x509_certificate((certs / CA_CERT).read_bytes())
    assert ca.subject == ca.issuer
    assert _attr(ca, NameOID.ORGANIZATION_NAME) == [ORGANIZATION]
    assert _attr(ca, NameOID.ORGANIZATIONAL_UNIT_NAME) == []  # a CA is no role
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert _mode(key) == 0o600
    assert _mode(certs / CA_CERT) == 0o644
    loaded, _ = load_ca(certs, key)
    assert loaded == ca


@pytest.mark.parametrize(
    ("role", "name", "eku"),
    [
        (
            Role.RS,
            "127.0.0.1:2882",
            {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH},
        ),
        (
            Role.NODE,
            "10.0.0.7:2882",
            {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH},
        ),
        (Role.CLIENT, "alice", {ExtendedKeyUsageOID.CLIENT_AUTH}),
    ],
)
def test_leaf_names_its_role_and_identity(
    tmp_path: Path, role: Role, name: str, eku: set[x509.ObjectIdentifier]
) -> None:
    certs, key = make_ca(tmp_path)
    cert = create_cert(certs, key, role, name, VALID)
    user = name if role is Role.CLIENT else ""
    on_disk = x509.load_pem_x509_certificate((certs / cert_file(role, user)).read_bytes())
    assert on_disk == cert
    assert _attr(cert, NameOID.ORGANIZATIONAL_UNIT_NAME) == [role.value]
    assert _attr(cert, NameOID.COMMON_NAME) == [name]
    assert _attr(cert, NameOID.ORGANIZATION_NAME) == [ORGANIZATION]
    assert set(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == eku
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    ca = x509.load_pem_x509_certificate((certs / CA_CERT).read_bytes())
    cert.verify_directly_issued_by(ca)  # raises when not signed by the CA
    assert int(cert.not_valid_before_utc.timestamp()) == VALID.not_before_s
    assert int(cert.not_valid_after_utc.timestamp()) == VALID.not_after_s
    assert _mode(certs / key_file(role, user)) == 0o600
    assert _mode(certs / cert_file(role, user)) == 0o644
    if role is Role.CLIENT:
        # A user certificate names no host: it cannot serve TLS.
        with pytest.raises(x509.ExtensionNotFound):
            cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)


@pytest.mark.parametrize("role", [Role.RS, Role.NODE])
def test_rs_and_node_carry_their_host_in_the_san(tmp_path: Path, role: Role) -> None:
    certs, key = make_ca(tmp_path)
    cert = create_cert(certs, key, role, "127.0.0.1:2882", VALID, hosts=["localhost", "::1"])
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("::1"),
    ]
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]


def test_existing_files_are_not_overwritten_without_asking(tmp_path: Path) -> None:
    certs, key = make_ca(tmp_path)
    first = create_cert(certs, key, Role.NODE, "127.0.0.1:1", VALID)
    key_before = (certs / "node.key").read_bytes()
    with pytest.raises(CertError, match="exists"):
        create_cert(certs, key, Role.NODE, "127.0.0.1:1", VALID)
    assert (certs / "node.key").read_bytes() == key_before
    second = create_cert(certs, key, Role.NODE, "127.0.0.1:1", VALID, overwrite=True)
    assert second.serial_number != first.serial_number
    assert (certs / "node.key").read_bytes() != key_before
    assert not list(certs.glob("*.tmp"))  # written atomically, nothing left behind

    ca_before = (certs / CA_CERT).read_bytes()
    with pytest.raises(CertError, match="pass --overwrite to replace the CA"):
        create_ca(certs, key, VALID)
    assert (certs / CA_CERT).read_bytes() == ca_before
    create_ca(certs, key, VALID, overwrite=True)
    assert (certs / CA_CERT).read_bytes() != ca_before


@pytest.mark.parametrize(
    ("role", "name"),
    [
        (Role.CLIENT, ""),
        (Role.CLIENT, "a b"),
        (Role.CLIENT, "x/y"),
        (Role.CLIENT, "root'"),
        (Role.NODE, "127.0.0.1"),
        (Role.NODE, ":2882"),
        (Role.NODE, "127.0.0.1:"),
        (Role.NODE, "127.0.0.1:http"),
        (Role.RS, "127.0.0.1:0"),
        (Role.RS, "127.0.0.1:65536"),
    ],
)
def test_bad_names_are_refused_and_nothing_is_written(
    tmp_path: Path, role: Role, name: str
) -> None:
    certs, key = make_ca(tmp_path)
    with pytest.raises(CertError, match="must be"):
        create_cert(certs, key, role, name, VALID)
    assert sorted(p.name for p in certs.iterdir()) == [CA_CERT]


def test_load_ca_refuses_a_missing_or_foreign_key(tmp_path: Path) -> None:
    certs_a, key_a = make_ca(tmp_path, "a")
    _, key_b = make_ca(tmp_path, "b")
    with pytest.raises(CertError, match="is not the key of"):
        load_ca(certs_a, key_b)
    with pytest.raises(CertError, match="cannot read the CA"):
        load_ca(certs_a, tmp_path / "nope.key")
    with pytest.raises(CertError, match="cannot read the CA"):
        load_ca(tmp_path / "empty", key_a)
    # And so signing with the wrong key writes nothing.
    with pytest.raises(CertError, match="is not the key of"):
        create_cert(certs_a, key_b, Role.CLIENT, "alice", VALID)
    assert not (certs_a / "client.alice.crt").exists()


def test_expired_validity_is_written_as_given(tmp_path: Path) -> None:
    certs, key = make_ca(tmp_path)
    past = Validity(NOW_S - 7200, NOW_S - 3600)
    cert = create_cert(certs, key, Role.CLIENT, "old", past)
    assert cert.not_valid_after_utc.timestamp() == NOW_S - 3600
