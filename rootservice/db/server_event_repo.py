"""``__all_server_event_history``: what happened on each server, OceanBase's table of the
events an observer records about itself (``DBA_OB_SERVER_EVENT_HISTORY``,
src/share/inner_table/ob_inner_table_schema_def.py table id 21324 in oceanbase/oceanbase).

The agents do not send events. Their reports already tell the RS what happens on their node
(the data-disk bit, the replicas they host, build and hold, the copies they make), and the RS
records each change it acts on in ``__all_rootservice_event_history``. The events of that
history that happened on one server (:data:`SERVER_EVENTS`) are written here too, in the
same transaction, once per server they name, with the server's address split into
``svr_ip`` / ``svr_port``. Every function takes a connection inside the caller's
transaction and never commits.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

import sqlalchemy as sa

from rootservice.db.tables import all_server_event_history
from rootservice.db.timestamps import us_to_datetime


class Event(Protocol):
    """An event of the RS's history (:class:`rootservice.db.event_repo.Event`)."""

    @property
    def time_us(self) -> int:
        """When, microseconds since the epoch."""
        ...

    @property
    def module(self) -> str:
        """The RS module that recorded it."""
        ...

    @property
    def event(self) -> str:
        """What happened."""
        ...

    @property
    def values(self) -> tuple[tuple[str, Any], ...]:
        """Up to six (name, value) pairs."""
        ...

    @property
    def extra_info(self) -> str:
        """Free text."""
        ...


#: (module, event) of the RS's events that happened on a server -> the name of the value
#: holding that server's 'ip:port' (a comma-separated list names several servers).
SERVER_EVENTS: dict[tuple[str, str], str] = {
    # the agent reports its data disk broken / healthy again
    ("server", "data_disk_error"): "server",
    ("server", "data_disk_recovered"): "server",
    # the agent lags behind the RS's commands or its disk probes are slow
    ("server", "lagging"): "server",
    ("server", "lagging_end"): "server",
    ("server", "lag_expire"): "server",
    # replicas copied to the server (a new member, a migration, a rebuild)
    ("disaster_recovery", "add_replica"): "to",
    ("disaster_recovery", "migrate_replica"): "to",
    ("disaster_recovery", "rebuild_replica"): "server",
    # a copy on the server that makes no progress, a follower there that trails its leader
    ("disaster_recovery", "copy_stalled"): "server",
    ("disaster_recovery", "follower_lagging"): "server",
    # replicas dropped from the servers removed from a member list
    ("disaster_recovery", "change_member_list"): "removed",
}


def split_server(text: str) -> tuple[str, int] | None:
    """``'10.0.0.1:2882'`` / ``'[::1]:2882'`` -> ``(ip, port)``; None for anything else."""
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        return None
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def server_rows(events: Iterable[Event]) -> list[dict[str, Any]]:
    """The ``__all_server_event_history`` rows of ``events`` (those of :data:`SERVER_EVENTS`),
    one per server each names, with the event's name / value pairs and extra info."""
    rows: list[dict[str, Any]] = []
    for e in events:
        name = SERVER_EVENTS.get((e.module, e.event))
        if name is None:
            continue
        values = dict(e.values)
        servers = [split_server(s) for s in str(values.get(name, "")).split(",") if s.strip()]
        for addr in servers:
            if addr is None:
                continue
            row: dict[str, Any] = {
                "gmt_create": us_to_datetime(e.time_us),
                "event_time": e.time_us,
                "svr_ip": addr[0],
                "svr_port": addr[1],
                "module": e.module,
                "event": e.event,
                "extra_info": e.extra_info[:4096],
            }
            for i in range(1, 7):
                n, v = e.values[i - 1] if i <= len(e.values) else ("", "")
                row[f"name{i}"] = str(n)
                row[f"value{i}"] = str(v)[:4096]
            rows.append(row)
    return rows


def insert_server_events(conn: sa.Connection, events: Iterable[Event]) -> int:
    """Append the server rows of ``events`` (:func:`server_rows`); returns how many."""
    rows = server_rows(events)
    if rows:
        conn.execute(all_server_event_history.insert(), rows)
    return len(rows)


def delete_server_events_before(conn: sa.Connection, cutoff_us: int, limit: int) -> int:
    """Delete at most ``limit`` rows whose ``event_time`` (microseconds) is before
    ``cutoff_us``, oldest ids first; returns how many (as
    :func:`rootservice.db.event_repo.delete_events_before`)."""
    t = all_server_event_history
    ids = sa.select(t.c.id).where(t.c.event_time < cutoff_us).order_by(t.c.id).limit(limit)
    r = conn.execute(sa.delete(t).where(t.c.id.in_(ids.scalar_subquery())))
    return int(r.rowcount or 0)
