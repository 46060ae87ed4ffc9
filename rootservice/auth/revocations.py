"""The cluster's revocation list of certificates.

``ALTER SYSTEM REVOKE CERTIFICATE`` (and ``rootservice cert revoke``, which sends it) writes a
row of ``__all_revoked_certificate`` in a fenced transaction (the leader only, as every
admin statement) and at once replaces the RS's :class:`RevokedSerials`; every RS, standbys
included, re-reads the table every :data:`REFRESH_INTERVAL_US` (an election timer, so it
runs whether or not this RS leads). The front ends only look at the in-memory set: the gRPC
services through :class:`obcommon.security.gate.PeerGate`, the MySQL and HTTP endpoints
through their :class:`obcommon.security.revocation.OpenConnections`; agents receive the set
with their lease answers. A revocation is never undone (issue a new certificate instead),
as in a CRL.

The RS checks nothing against a CRL or OCSP responder of a third party: the cluster's CA is
its own (``rootservice cert create-ca``), and the list is the cluster's.
"""

from __future__ import annotations

import logging

from cryptography import x509
from cryptography.x509.oid import NameOID

from obcommon.clock import Clock
from obcommon.errors import ObError
from obcommon.security.revocation import RevokedSerials, parse_serial
from rootservice.db import revoked_cert_repo
from rootservice.db.revoked_cert_repo import RevokedCert
from rootservice.ha.store import MetaStore

log = logging.getLogger(__name__)

#: How often every RS re-reads ``__all_revoked_certificate`` (microseconds): the longest a
#: standby, or an RS other than the one that ran the statement, admits a revoked certificate.
REFRESH_INTERVAL_US = 1_000_000

#: Longest reason and subject kept (the columns' sizes).
MAX_REASON_CHARS = 1024
MAX_SUBJECT_CHARS = 1024


def common_name_of(subject: str) -> str:
    """The CN of an RFC 4514 subject (``O=ob-rootservice,OU=node,CN=127.0.0.1:2882``), ""
    when there is none. Raises ``ObError("OB_INVALID_ARGUMENT")`` when ``subject`` does not
    parse."""
    if not subject:
        return ""
    try:
        name = x509.Name.from_rfc4514_string(subject)
    except ValueError as e:
        raise ObError("OB_INVALID_ARGUMENT", "SUBJECT", detail=str(e)) from None
    cns = name.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(cns[-1].value) if cns else ""


class Revocations:
    """Revoking certificates and keeping :attr:`revoked` (the set the front ends check) in
    step with ``__all_revoked_certificate``.

    ``store``: writes fenced (``store.txn()``), reads through ``store.read()``; ``clock``
    stamps ``revoked_at``. Also a timer task (:attr:`name`, :meth:`run_once`).
    """

    name = "cert_revocation_refresh"

    def __init__(self, store: MetaStore, clock: Clock, revoked: RevokedSerials) -> None:
        """Nothing loaded yet: the first :meth:`refresh` reads the table."""
        self.store = store
        self.clock = clock
        self.revoked = revoked

    def revoke(
        self, serial: str, *, subject: str = "", reason: str = "", revoked_by: str = ""
    ) -> tuple[str, bool]:
        """Revoke the certificate of ``serial`` (hex, see
        :func:`obcommon.security.revocation.parse_serial`); returns the serial as stored and
        True, or False when it was already revoked (the first row is kept). The set the
        front ends check is replaced before this returns. Raises
        ``ObError("OB_INVALID_ARGUMENT")`` for a malformed serial, subject or an over-long
        reason, ``OB_RS_NOT_MASTER`` / ``OB_ERR_SYS`` from the store."""
        try:
            key = parse_serial(serial)
        except ValueError as e:
            raise ObError("OB_INVALID_ARGUMENT", "SERIAL", detail=str(e)) from None
        if len(reason) > MAX_REASON_CHARS or len(subject) > MAX_SUBJECT_CHARS:
            raise ObError(
                "OB_INVALID_ARGUMENT",
                "REASON / SUBJECT",
                detail=f"at most {MAX_REASON_CHARS} characters",
            )
        row = RevokedCert(
            key, subject, common_name_of(subject), self.clock.now_us(), reason, revoked_by
        )
        with self.store.txn() as conn:
            added = revoked_cert_repo.get(conn, key) is None
            if added:
                revoked_cert_repo.insert(conn, row)
            serials = revoked_cert_repo.serials(conn)
        if added:
            log.warning(
                "certificate %s (%s) revoked by %s: %s",
                key,
                subject or "subject not given",
                revoked_by or "?",
                reason or "no reason given",
            )
        self.revoked.replace(serials)
        return key, added

    def list(self) -> list[RevokedCert]:
        """Every revoked certificate, oldest first. Raises ``ObError("OB_ERR_SYS")``."""
        with self.store.read() as conn:
            return revoked_cert_repo.list_all(conn)

    def refresh(self) -> bool:
        """Re-read the revoked serials; True when the set changed (the listeners closed what
        was open with them). Raises ``ObError("OB_ERR_SYS")`` when the table cannot be read
        (the set in force stays)."""
        with self.store.read() as conn:
            serials = revoked_cert_repo.serials(conn)
        return self.revoked.replace(serials)

    def run_once(self) -> bool:
        """One timer round: :meth:`refresh`."""
        return self.refresh()
