"""``__all_rootservice_member``: the root services seen by the database (
migration 0006).

Each RS's election round (:mod:`rootservice.ha.election`) calls :func:`touch` in its own
transaction, with the database's clock, so the status API can tell which standbys stood by
within the last lease period. Every function takes a connection inside the caller's
transaction and never commits.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

from obcommon.addresses import format_server
from rootservice.db.tables import all_rootservice_member
from rootservice.db.timestamps import us_to_datetime


@dataclass(frozen=True)
class Member:
    """One row: ``addr`` ``"ip:port"`` (the RS's RPC address), ``last_seen_us`` (its last
    election round, microseconds since the epoch by the database's clock) and
    ``build_version`` (the release it reports; None from a 0.1.0 RS)."""

    addr: str
    last_seen_us: int
    build_version: str | None = None


def touch(
    conn: sa.Connection, holder: tuple[str, int], now_us: int, build_version: str = ""
) -> None:
    """Record that the RS at ``holder`` (ip, port) of release ``build_version`` ran a round at
    ``now_us``: an UPDATE, and an INSERT when the row is missing (only this RS writes its
    row, so the two cannot race with another writer of the same key)."""
    t = all_rootservice_member
    ts = us_to_datetime(now_us)
    values: dict[str, object] = {"last_seen_time": now_us, "gmt_modified": ts}
    if build_version:
        values["build_version"] = build_version
    n = conn.execute(
        t.update().where(t.c.svr_ip == holder[0], t.c.svr_port == holder[1]).values(**values)
    ).rowcount
    if not n:
        conn.execute(
            t.insert().values(svr_ip=holder[0], svr_port=holder[1], gmt_create=ts, **values)
        )


def seen_since(conn: sa.Connection, since_us: int) -> list[Member]:
    """The members whose last round is at or after ``since_us``, most recent first."""
    t = all_rootservice_member
    q = (
        sa.select(t.c.svr_ip, t.c.svr_port, t.c.last_seen_time, t.c.build_version)
        .where(t.c.last_seen_time >= since_us)
        .order_by(t.c.last_seen_time.desc(), t.c.svr_ip, t.c.svr_port)
    )
    return [
        Member(format_server(r.svr_ip, int(r.svr_port)), int(r.last_seen_time), r.build_version)
        for r in conn.execute(q)
    ]
