"""Repository functions over the system tables.

Each function takes an open ``sqlalchemy.Connection`` inside a transaction owned by the
caller and never commits: the caller decides what commits together (SPEC.md section 6,
write-through admin operations). Times passed in are microseconds since the epoch;
``gmt_*`` timestamps are derived from them so that a fake clock drives them too.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from rootservice.db.tables import (
    all_rootservice_event_history,
    all_rootservice_job,
    all_server,
    all_service_epoch,
    all_sys_parameter,
    all_zone,
)
from rootservice.errors import ObError

RS_EPOCH_NAME = "rootservice_epoch"
# Rows of __all_sys_parameter the RS keeps for itself (not settable with ALTER SYSTEM SET).
PARAM_CLUSTER_ID = "cluster_id"
PARAM_RS_LIST = "rootservice_list"
PARAM_MAX_SERVER_ID = "max_used_server_id"
PARAM_MAX_JOB_ID = "max_used_job_id"
# OceanBase's DEFAULT_REGION_NAME: the region of a zone created without one.
DEFAULT_REGION = "sys_region"


def us_to_datetime(us: int) -> dt.datetime:
    """Microseconds since the epoch -> naive UTC datetime (how gmt_* columns are stored)."""
    return dt.datetime(1970, 1, 1, tzinfo=dt.UTC).replace(tzinfo=None) + dt.timedelta(
        microseconds=us
    )


# --- epoch fencing (SPEC.md section 10) -----------------------------------------------------


def read_epoch(conn: sa.Connection, *, lock: bool = False) -> int:
    """The current RS epoch (0 when none was ever taken). ``lock`` takes a row lock
    (``FOR UPDATE`` on PostgreSQL; SQLite serialises writers with BEGIN IMMEDIATE)."""
    q = sa.select(all_service_epoch.c.value).where(all_service_epoch.c.name == RS_EPOCH_NAME)
    if lock:
        q = q.with_for_update()
    v = conn.execute(q).scalar()
    return int(v) if v is not None else 0


def check_epoch(conn: sa.Connection, epoch: int) -> None:
    """Abort the caller's transaction unless the stored epoch is still ``epoch``.

    Reads the epoch row ``FOR SHARE`` so a concurrent take-over (which updates it) waits for
    this transaction or makes it fail. Raises ``ObError(OB_RS_NOT_MASTER)`` when deposed.
    """
    q = (
        sa.select(all_service_epoch.c.value)
        .where(all_service_epoch.c.name == RS_EPOCH_NAME)
        .with_for_update(read=True)
    )
    v = conn.execute(q).scalar()
    if v is None or int(v) != epoch:
        raise ObError("OB_RS_NOT_MASTER", detail=f"epoch {epoch} was superseded by {v}")


def bump_epoch(conn: sa.Connection, now_us: int) -> int:
    """Take office: increment the epoch (creating the row at 1) and return the new value."""
    cur = read_epoch(conn, lock=True)
    new = cur + 1
    ts = us_to_datetime(now_us)
    if (
        cur == 0
        and conn.execute(
            sa.select(sa.func.count())
            .select_from(all_service_epoch)
            .where(all_service_epoch.c.name == RS_EPOCH_NAME)
        ).scalar_one()
        == 0
    ):
        conn.execute(
            all_service_epoch.insert().values(
                name=RS_EPOCH_NAME, value=new, gmt_create=ts, gmt_modified=ts
            )
        )
    else:
        conn.execute(
            all_service_epoch.update()
            .where(all_service_epoch.c.name == RS_EPOCH_NAME)
            .values(value=new, gmt_modified=ts)
        )
    return new


# --- __all_server ---------------------------------------------------------------------------


def load_servers(conn: sa.Connection) -> list[dict[str, Any]]:
    """Every ``__all_server`` row as a dict, ordered by id."""
    return [
        dict(r) for r in conn.execute(sa.select(all_server).order_by(all_server.c.id)).mappings()
    ]


def load_servers_page(
    conn: sa.Connection, after: tuple[str, int] | None, limit: int
) -> list[dict[str, Any]]:
    """Up to ``limit`` ``__all_server`` rows with ``(svr_ip, svr_port) > after`` in key
    order (keyset pagination; ``after=None`` starts at the beginning)."""
    q = sa.select(all_server).order_by(all_server.c.svr_ip, all_server.c.svr_port).limit(limit)
    if after is not None:
        q = q.where(
            sa.tuple_(all_server.c.svr_ip, all_server.c.svr_port)
            > sa.tuple_(sa.literal(after[0]), sa.literal(after[1]))
        )
    return [dict(r) for r in conn.execute(q).mappings()]


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


# --- __all_zone -----------------------------------------------------------------------------


@dataclass
class ZoneInfo:
    """A zone as kept in ``__all_zone`` rows (name = status / region / idc)."""

    zone: str
    status: str = "ACTIVE"
    region: str = DEFAULT_REGION
    idc: str = ""

    @property
    def active(self) -> bool:
        """True when the zone's status is ``ACTIVE`` (ADD SERVER needs it, SPEC.md section 7)."""
        return self.status == "ACTIVE"


def load_zones(conn: sa.Connection) -> dict[str, ZoneInfo]:
    """Zones by name, assembled from their ``__all_zone`` rows."""
    zones: dict[str, ZoneInfo] = {}
    for r in conn.execute(
        sa.select(all_zone.c.zone, all_zone.c.name, all_zone.c.info).where(all_zone.c.zone != "")
    ):
        z = zones.setdefault(r.zone, ZoneInfo(r.zone))
        if r.name in ("status", "region", "idc"):
            setattr(z, r.name, r.info)
    return zones


def upsert_zone(conn: sa.Connection, zone: ZoneInfo, now_us: int) -> None:
    """Write a zone's status / region / idc rows (insert or update)."""
    ts = us_to_datetime(now_us)
    for name, info, value in (
        ("status", zone.status, 1 if zone.active else 0),
        ("region", zone.region, 0),
        ("idc", zone.idc, 0),
    ):
        updated = conn.execute(
            all_zone.update()
            .where(all_zone.c.zone == zone.zone, all_zone.c.name == name)
            .values(info=info, value=value, gmt_modified=ts)
        ).rowcount
        if not updated:
            conn.execute(
                all_zone.insert().values(
                    zone=zone.zone,
                    name=name,
                    info=info,
                    value=value,
                    gmt_create=ts,
                    gmt_modified=ts,
                )
            )


def delete_zone(conn: sa.Connection, zone: str) -> None:
    """Delete every ``__all_zone`` row (status / region / idc) of ``zone``; no-op if absent."""
    conn.execute(all_zone.delete().where(all_zone.c.zone == zone))


# --- __all_sys_parameter --------------------------------------------------------------------


def load_params(conn: sa.Connection) -> dict[str, str]:
    """All ``__all_sys_parameter`` rows as name -> value."""
    return {
        r.name: r.value
        for r in conn.execute(sa.select(all_sys_parameter.c.name, all_sys_parameter.c.value))
    }


def set_param(conn: sa.Connection, name: str, value: str, now_us: int, info: str = "") -> None:
    """Insert or update one parameter, bumping its config_version."""
    ts = us_to_datetime(now_us)
    t = all_sys_parameter
    updated = conn.execute(
        t.update()
        .where(t.c.name == name)
        .values(value=value, gmt_modified=ts, config_version=t.c.config_version + 1)
    ).rowcount
    if not updated:
        conn.execute(
            t.insert().values(
                name=name, value=value, info=info, config_version=1, gmt_create=ts, gmt_modified=ts
            )
        )


def next_counter(conn: sa.Connection, name: str, now_us: int, at_least: int = 0) -> int:
    """Allocate the next value of a counter kept in ``__all_sys_parameter`` (server ids, job
    ids: never reused, SPEC.md section 2). The update takes the row lock, so concurrent
    allocators serialise."""
    t = all_sys_parameter
    cur = conn.execute(sa.select(t.c.value).where(t.c.name == name).with_for_update()).scalar()
    new = max(int(cur) if cur is not None else 0, at_least) + 1
    set_param(conn, name, str(new), now_us)
    return new


# --- jobs and events ------------------------------------------------------------------------


def create_job(
    conn: sa.Connection,
    job_type: str,
    ip: str,
    port: int,
    now_us: int,
    rs_addr: tuple[str, int],
    sql_text: str = "",
) -> int:
    """Insert an INPROGRESS job row; returns its job_id."""
    job_id = next_counter(conn, PARAM_MAX_JOB_ID, now_us)
    ts = us_to_datetime(now_us)
    conn.execute(
        all_rootservice_job.insert().values(
            job_id=job_id,
            job_type=job_type,
            job_status="INPROGRESS",
            progress=0,
            svr_ip=ip,
            svr_port=port,
            rs_svr_ip=rs_addr[0],
            rs_svr_port=rs_addr[1],
            sql_text=sql_text,
            gmt_create=ts,
            gmt_modified=ts,
        )
    )
    return job_id


def finish_jobs(
    conn: sa.Connection,
    job_type: str,
    ip: str,
    port: int,
    status: str,
    now_us: int,
    return_code: int = 0,
) -> int:
    """Move the server's INPROGRESS jobs of ``job_type`` to ``status`` (SUCCESS / CANCELED /
    FAILED); returns rows changed."""
    t = all_rootservice_job
    r = conn.execute(
        t.update()
        .where(
            t.c.job_type == job_type,
            t.c.svr_ip == ip,
            t.c.svr_port == port,
            t.c.job_status == "INPROGRESS",
        )
        .values(
            job_status=status,
            return_code=return_code,
            progress=100 if status == "SUCCESS" else t.c.progress,
            gmt_modified=us_to_datetime(now_us),
        )
    )
    return int(r.rowcount or 0)


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
    """Append events in one executemany; returns how many."""
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
    return len(rows)
