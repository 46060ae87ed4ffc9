"""Which PostgreSQL server a connection reached: its system identifier and timeline.

``system_identifier`` (``pg_control_system()``) names one database cluster for life: a
standby made by ``pg_basebackup`` shares its primary's, a cluster made by ``initdb`` (or a
restore into one) has another. The timeline goes up by one at every promotion. The
checkpoint's ``timeline_id`` (``pg_control_checkpoint()``) only moves at the first
checkpoint after the promotion (2.5 s later on the test machine), so a primary's timeline is
also read from the name of the WAL file it inserts into (``pg_walfile_name``), which changes
at the promotion itself. SQLite has neither: None.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

#: One row: system identifier, timeline (the higher of the checkpoint's and, on a primary,
#: the current WAL file's).
IDENTITY_SQL = (
    "SELECT (SELECT system_identifier FROM pg_control_system()), "
    "GREATEST((SELECT timeline_id FROM pg_control_checkpoint()), "
    "CASE WHEN pg_is_in_recovery() THEN 0 ELSE "
    "('x' || substr(pg_walfile_name(pg_current_wal_insert_lsn()), 1, 8))::bit(32)::int END)"
)


@dataclass(frozen=True)
class ServerIdentity:
    """``system_id`` (PostgreSQL's ``system_identifier``), ``timeline`` (>= 1) and ``server``
    (``host:port`` as connected, for messages)."""

    system_id: int
    timeline: int
    server: str = ""

    def __str__(self) -> str:
        """``127.0.0.1:5432 (system 7713..., timeline 2)``."""
        return f"{self.server or '?'} (system {self.system_id}, timeline {self.timeline})"


def read_dbapi_identity(dbapi_conn: Any) -> ServerIdentity | None:
    """The identity of the server a fresh psycopg connection reached, or None when it cannot
    be read (the functions refused to this user, a server without them). Ends the
    transaction it opens; raises only what the connection raises on a lost server."""
    import psycopg

    try:
        with dbapi_conn.cursor() as cur:
            cur.execute(IDENTITY_SQL)
            row = cur.fetchone()
    except psycopg.errors.InsufficientPrivilege:
        row = None
    finally:
        if not dbapi_conn.closed:
            dbapi_conn.rollback()
    if row is None or row[0] is None or row[1] is None:
        return None
    info = dbapi_conn.info
    return ServerIdentity(int(row[0]), int(row[1]), f"{info.host}:{info.port}")


def read_identity(conn: sa.Connection) -> ServerIdentity | None:
    """The identity of the server ``conn`` is on (inside the caller's transaction); None on
    SQLite. Raises ``sqlalchemy`` errors as any statement would."""
    if conn.dialect.name != "postgresql":
        return None
    row = conn.exec_driver_sql(IDENTITY_SQL).first()
    if row is None or row[0] is None or row[1] is None:
        return None
    info = conn.connection.dbapi_connection.info  # type: ignore[union-attr]
    return ServerIdentity(int(row[0]), int(row[1]), f"{info.host}:{info.port}")
