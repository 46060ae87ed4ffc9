"""``__all_server_tombstone``: the retired server identities (migration
0009).

Every function takes a connection inside the caller's transaction and never commits. Rows
are never deleted: a buried ``ip:port`` and server id stay refused.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import sqlalchemy as sa

from rootservice.db.tables import all_server_tombstone
from rootservice.db.timestamps import us_to_datetime


@dataclass(frozen=True)
class Tombstone:
    """One buried server: ``ip``, ``port``, the ``server_id`` it had, its ``zone``,
    ``deleted_at_us`` (microseconds since the epoch) and ``reason`` (the statement, and for
    RECOVER LS its plan id)."""

    ip: str
    port: int
    server_id: int
    zone: str
    deleted_at_us: int
    reason: str

    @property
    def key(self) -> str:
        """``'ip:port'``."""
        return f"{self.ip}:{self.port}"


def load_tombstones(conn: sa.Connection) -> list[Tombstone]:
    """Every buried server, oldest first."""
    t = all_server_tombstone
    rows = conn.execute(sa.select(t).order_by(t.c.deleted_at, t.c.svr_ip, t.c.svr_port))
    return [
        Tombstone(r.svr_ip, int(r.svr_port), int(r.server_id), r.zone, int(r.deleted_at), r.reason)
        for r in rows
    ]


def insert_tombstones(conn: sa.Connection, stones: Iterable[Tombstone]) -> int:
    """Bury servers that are not buried yet (an address already buried keeps its first
    row); returns how many rows were added."""
    t = all_server_tombstone
    have = {(r.svr_ip, int(r.svr_port)) for r in conn.execute(sa.select(t.c.svr_ip, t.c.svr_port))}
    added = 0
    for s in stones:
        if (s.ip, s.port) in have:
            continue
        ts = us_to_datetime(s.deleted_at_us)
        conn.execute(
            t.insert().values(
                svr_ip=s.ip,
                svr_port=s.port,
                server_id=s.server_id,
                zone=s.zone,
                deleted_at=s.deleted_at_us,
                reason=s.reason[:1024],
                gmt_create=ts,
                gmt_modified=ts,
            )
        )
        have.add((s.ip, s.port))
        added += 1
    return added
