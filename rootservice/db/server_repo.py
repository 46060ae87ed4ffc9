"""``__all_server``: the whitelist's rows (docs/design/servers.md).

Every function takes a connection inside the caller's transaction and never commits; the
caller decides what commits together (write-through admin operations).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from rootservice.db.tables import (
    all_server,
)
from rootservice.db.timestamps import us_to_datetime


def load_servers(conn: sa.Connection) -> list[dict[str, Any]]:
    """Every ``__all_server`` row as a dict, ordered by id."""
    return [
        dict(r) for r in conn.execute(sa.select(all_server).order_by(all_server.c.id)).mappings()
    ]


def load_checked_page(
    conn: sa.Connection, after: tuple[str, int] | None, limit: int, columns: Sequence[str]
) -> list[tuple[Any, ...]]:
    """Up to ``limit`` ``__all_server`` rows with ``(svr_ip, svr_port) > after`` in key order
    (keyset pagination; ``after=None`` starts at the beginning), each as the plain tuple
    ``(svr_ip, svr_port, *columns)``: only the columns a comparison reads, and no mapping
    per row (at 5,000 rows, dicts of every column were two thirds of a check's CPU)."""
    q = (
        sa.select(all_server.c.svr_ip, all_server.c.svr_port, *(all_server.c[c] for c in columns))
        .order_by(all_server.c.svr_ip, all_server.c.svr_port)
        .limit(limit)
    )
    if after is not None:
        q = q.where(
            sa.tuple_(all_server.c.svr_ip, all_server.c.svr_port)
            > sa.tuple_(sa.literal(after[0]), sa.literal(after[1]))
        )
    return [tuple(r) for r in conn.execute(q).all()]


def insert_server(conn: sa.Connection, row: Mapping[str, Any], now_us: int) -> None:
    """Insert one ``__all_server`` row (``row`` from ``ServerStatus.to_row()``)."""
    ts = us_to_datetime(now_us)
    conn.execute(all_server.insert().values(**row, gmt_create=ts, gmt_modified=ts))


def update_servers(conn: sa.Connection, rows: Sequence[Mapping[str, Any]], now_us: int) -> int:
    """Overwrite the given rows (matched on svr_ip, svr_port) in one ``executemany``.

    Rows of servers no longer in the table are skipped (never re-inserted: a deleted server
    must not come back). Returns the number of rows matched.
    """
    if not rows:
        return 0
    cols = [c for c in rows[0] if c not in ("svr_ip", "svr_port")]
    stmt = (
        all_server.update()
        .where(
            all_server.c.svr_ip == sa.bindparam("b_ip"),
            all_server.c.svr_port == sa.bindparam("b_port"),
        )
        .values({c: sa.bindparam(f"b_{c}") for c in cols} | {"gmt_modified": sa.bindparam("b_gmt")})
    )
    ts = us_to_datetime(now_us)
    params = [
        {"b_ip": r["svr_ip"], "b_port": r["svr_port"], "b_gmt": ts} | {f"b_{c}": r[c] for c in cols}
        for r in rows
    ]
    result = conn.execute(stmt, params)
    return int(result.rowcount or 0)


def delete_server(conn: sa.Connection, ip: str, port: int) -> int:
    """Delete one ``__all_server`` row; returns rows deleted."""
    r = conn.execute(
        all_server.delete().where(all_server.c.svr_ip == ip, all_server.c.svr_port == port)
    )
    return int(r.rowcount or 0)
