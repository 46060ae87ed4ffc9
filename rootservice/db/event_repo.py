"""``__all_rootservice_event_history``: what the RS did and why (docs/design/servers.md#the-tables).

Every function takes a connection inside the caller's transaction and never commits.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from rootservice.db import server_event_repo
from rootservice.db.tables import (
    all_rootservice_event_history,
)
from rootservice.db.timestamps import us_to_datetime


@dataclass
class Event:
    """One ``__all_rootservice_event_history`` row: ``values`` are up to six (name, value)
    pairs, as OceanBase's ROOTSERVICE_EVENT_ADD does."""

    time_us: int
    module: str
    event: str
    values: tuple[tuple[str, Any], ...] = ()
    extra_info: str = ""


def insert_events(conn: sa.Connection, events: Iterable[Event], rs_addr: tuple[str, int]) -> int:
    """Append events in one executemany; returns how many. Those that happened on a server
    also go to ``__all_server_event_history``
    (:func:`rootservice.db.server_event_repo.insert_server_events`), in the same
    transaction."""
    events = list(events)
    rows = []
    for e in events:
        row: dict[str, Any] = {
            "gmt_create": us_to_datetime(e.time_us),
            "event_time": e.time_us,
            "module": e.module,
            "event": e.event,
            "extra_info": e.extra_info[:4096],
            "rs_svr_ip": rs_addr[0],
            "rs_svr_port": rs_addr[1],
        }
        for i in range(1, 7):
            name, value = e.values[i - 1] if i <= len(e.values) else ("", "")
            row[f"name{i}"] = str(name)
            row[f"value{i}"] = str(value)[:4096]
        rows.append(row)
    if rows:
        conn.execute(all_rootservice_event_history.insert(), rows)
        server_event_repo.insert_server_events(conn, events)
    return len(rows)


def latest_events(conn: sa.Connection, limit: int) -> list[dict[str, Any]]:
    """The ``limit`` latest events, newest first (by ``event_time``, then insertion order),
    for the status API: dicts of ``event_time_us``, ``module``, ``event``,
    ``values`` (the non-empty name/value pairs, in order) and ``rs`` (``"ip:port"`` of the RS
    that wrote it, "" when unknown)."""
    t = all_rootservice_event_history
    q = sa.select(t).order_by(t.c.event_time.desc(), t.c.id.desc()).limit(limit)
    out = []
    for r in conn.execute(q).mappings():
        values = {r[f"name{i}"]: r[f"value{i}"] for i in range(1, 7) if r[f"name{i}"]}
        rs = f"{r['rs_svr_ip']}:{r['rs_svr_port']}" if r["rs_svr_ip"] else ""
        out.append(
            {
                "event_time_us": int(r["event_time"]),
                "module": r["module"],
                "event": r["event"],
                "values": values,
                "rs": rs,
            }
        )
    return out


def delete_events_before(conn: sa.Connection, cutoff_us: int, limit: int) -> int:
    """Delete at most ``limit`` rows whose ``event_time`` (microseconds) is before
    ``cutoff_us``, oldest ids first; returns how many. A row exactly at ``cutoff_us`` is kept,
    as OceanBase's ``gmt_create < now - ob_event_history_recycle_interval``. One statement
    of a bounded size (``DELETE ... WHERE id IN (SELECT id ... LIMIT n)``, which SQLite and
    PostgreSQL both accept), so a large backlog is pruned in short transactions. The same
    number of ``__all_server_event_history`` rows at most go too (not counted)."""
    t = all_rootservice_event_history
    ids = sa.select(t.c.id).where(t.c.event_time < cutoff_us).order_by(t.c.id).limit(limit)
    r = conn.execute(sa.delete(t).where(t.c.id.in_(ids.scalar_subquery())))
    # The servers' copies go with them, as many at most (a backlog there is worked off by
    # the next batches: there are hardly more of them than of the RS's rows).
    server_event_repo.delete_server_events_before(conn, cutoff_us, limit)
    return int(r.rowcount or 0)
