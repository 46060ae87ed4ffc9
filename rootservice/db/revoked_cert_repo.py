"""``__all_revoked_certificate``: the revoked certificates (migration 0007).

Every function takes a connection inside the caller's transaction and never commits. Serials
are lower-case hex (:func:`obcommon.security.revocation.serial_text`).
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

from rootservice.db.tables import all_revoked_certificate
from rootservice.db.timestamps import us_to_datetime


@dataclass(frozen=True)
class RevokedCert:
    """One row: ``serial`` (hex), ``subject`` (RFC 4514) and ``common_name`` when known
    (else ""), ``revoked_at_us`` (microseconds since the epoch), ``reason``, ``revoked_by``
    (a user name)."""

    serial: str
    subject: str
    common_name: str
    revoked_at_us: int
    reason: str
    revoked_by: str


def get(conn: sa.Connection, serial: str) -> RevokedCert | None:
    """The row of ``serial``, or None when it is not revoked."""
    t = all_revoked_certificate
    row = conn.execute(sa.select(t).where(t.c.serial == serial)).first()
    return _row(row) if row is not None else None


def insert(conn: sa.Connection, cert: RevokedCert) -> None:
    """Add ``cert``; the caller has checked with :func:`get` that it is not there (a
    duplicate raises the database's ``IntegrityError``)."""
    ts = us_to_datetime(cert.revoked_at_us)
    conn.execute(
        all_revoked_certificate.insert().values(
            serial=cert.serial,
            subject=cert.subject,
            common_name=cert.common_name,
            revoked_at=cert.revoked_at_us,
            reason=cert.reason,
            revoked_by=cert.revoked_by,
            gmt_create=ts,
            gmt_modified=ts,
        )
    )


def list_all(conn: sa.Connection) -> list[RevokedCert]:
    """Every revoked certificate, oldest revocation first."""
    t = all_revoked_certificate
    return [_row(r) for r in conn.execute(sa.select(t).order_by(t.c.revoked_at, t.c.serial))]


def serials(conn: sa.Connection) -> set[str]:
    """The revoked serials only (what the front ends check)."""
    t = all_revoked_certificate
    return {str(s) for s in conn.execute(sa.select(t.c.serial)).scalars()}


def _row(r: sa.Row) -> RevokedCert:  # type: ignore[type-arg]
    return RevokedCert(
        str(r.serial),
        str(r.subject),
        str(r.common_name),
        int(r.revoked_at),
        str(r.reason),
        str(r.revoked_by),
    )
