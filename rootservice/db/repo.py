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

from obcommon.errors import ObError
from rootservice.db.tables import (
    all_rootservice_event_history,
    all_rootservice_job,
    all_server,
    all_service_epoch,
    all_sys_parameter,
    all_zone,
)

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


# --- epoch fencing and the RS election lease (SPEC.md section 10, issue 5) -----------------
#
# The ``rootservice_epoch`` row of ``__all_service_epoch`` is both the epoch every write is
# fenced with and the leader's lease: ``svr_ip`` / ``svr_port`` hold the leader's RPC address,
# ``lease_expire_time`` / ``lease_renew_time`` are microseconds by the database's clock.


@dataclass(frozen=True)
class RsLease:
    """The lease row: ``epoch`` (0 = never taken), ``holder`` (``"ip:port"``, "" = nobody),
    ``expire_us`` and ``renew_us`` (microseconds since the epoch by the database's clock)."""

    epoch: int
    holder: str
    expire_us: int
    renew_us: int


def db_now_us(conn: sa.Connection) -> int:
    """The database's own clock, integer microseconds since the Unix epoch.

    PostgreSQL's ``clock_timestamp()`` (the real time, not the transaction's start, so a lock
    wait inside the transaction is counted); SQLite's ``julianday('now')`` (millisecond
    precision; SQLite is a local file, so this is the RS host's clock). Every RS measures the
    lease by this one clock, so their own clocks may disagree (SPEC.md section 10).
    """
    if conn.dialect.name == "postgresql":
        q = "SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000 AS BIGINT)"
    else:
        q = "SELECT CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)"
    return int(conn.exec_driver_sql(q).scalar_one())


def read_epoch(conn: sa.Connection, *, lock: bool = False) -> int:
    """The current RS epoch (0 when none was ever taken). ``lock`` takes a row lock
    (``FOR UPDATE`` on PostgreSQL; SQLite serialises writers with BEGIN IMMEDIATE)."""
    q = sa.select(all_service_epoch.c.value).where(all_service_epoch.c.name == RS_EPOCH_NAME)
    if lock:
        q = q.with_for_update()
    v = conn.execute(q).scalar()
    return int(v) if v is not None else 0


def read_lease(conn: sa.Connection, *, lock: bool = False) -> RsLease:
    """The lease row (epoch 0 and no holder when the row is missing). ``lock`` reads it
    ``FOR UPDATE``: a take-over then waits for every fenced transaction of the old leader,
    which hold the row ``FOR SHARE`` (see :func:`check_epoch`)."""
    t = all_service_epoch
    q = sa.select(t.c.value, t.c.svr_ip, t.c.svr_port, t.c.lease_expire_time, t.c.lease_renew_time)
    q = q.where(t.c.name == RS_EPOCH_NAME)
    if lock:
        q = q.with_for_update()
    r = conn.execute(q).first()
    if r is None:
        return RsLease(0, "", 0, 0)
    holder = f"{r.svr_ip}:{r.svr_port}" if r.svr_ip else ""
    return RsLease(int(r.value), holder, int(r.lease_expire_time), int(r.lease_renew_time))


def check_epoch(conn: sa.Connection, epoch: int) -> None:
    """Abort the caller's transaction unless the lease row's epoch is still ``epoch``.

    Reads the row ``FOR SHARE`` so a concurrent take-over (which locks it ``FOR UPDATE``
    and raises the epoch) waits for this transaction to end, and this transaction, once it
    has read the row, commits before any newer epoch exists. Epoch 0 (not in office) never
    passes. Raises ``ObError(OB_RS_NOT_MASTER)`` when deposed.
    """
    q = (
        sa.select(all_service_epoch.c.value)
        .where(all_service_epoch.c.name == RS_EPOCH_NAME)
        .with_for_update(read=True)
    )
    v = conn.execute(q).scalar()
    if epoch <= 0 or v is None or int(v) != epoch:
        raise ObError("OB_RS_NOT_MASTER", detail=f"epoch {epoch} was superseded by {v}")


def take_lease(
    conn: sa.Connection, old: RsLease, holder: tuple[str, int], now_us: int, expire_us: int
) -> int:
    """Take office: raise the epoch from ``old.epoch`` (as read with ``lock=True`` in the same
    transaction) and make ``holder`` the leader until ``expire_us``; returns the new epoch.
    Creates the row when it is missing (a database migrated before 0002 inserted it)."""
    t = all_service_epoch
    new = old.epoch + 1
    ts = us_to_datetime(now_us)
    values = {
        "value": new,
        "svr_ip": holder[0],
        "svr_port": holder[1],
        "lease_expire_time": expire_us,
        "lease_renew_time": now_us,
        "gmt_modified": ts,
    }
    n = conn.execute(
        t.update().where(t.c.name == RS_EPOCH_NAME, t.c.value == old.epoch).values(**values)
    ).rowcount
    if not n:
        conn.execute(t.insert().values(name=RS_EPOCH_NAME, gmt_create=ts, **values))
    return new


def renew_lease(
    conn: sa.Connection, epoch: int, holder: tuple[str, int], now_us: int, expire_us: int
) -> bool:
    """Extend the lease of ``holder`` at ``epoch`` to ``expire_us``; False (nothing changed)
    when the row has another epoch or holder, i.e. this RS was deposed."""
    t = all_service_epoch
    n = conn.execute(
        t.update()
        .where(
            t.c.name == RS_EPOCH_NAME,
            t.c.value == epoch,
            t.c.svr_ip == holder[0],
            t.c.svr_port == holder[1],
        )
        .values(
            lease_expire_time=expire_us,
            lease_renew_time=now_us,
            gmt_modified=us_to_datetime(now_us),
        )
    ).rowcount
    return bool(n)


def release_lease(conn: sa.Connection, epoch: int, holder: tuple[str, int], now_us: int) -> bool:
    """End the lease of ``holder`` at ``epoch`` now (a clean stop), so a standby need not
    wait for it to run out; the epoch stays. False when the lease was not ours any more."""
    t = all_service_epoch
    n = conn.execute(
        t.update()
        .where(
            t.c.name == RS_EPOCH_NAME,
            t.c.value == epoch,
            t.c.svr_ip == holder[0],
            t.c.svr_port == holder[1],
        )
        .values(lease_expire_time=now_us, gmt_modified=us_to_datetime(now_us))
    ).rowcount
    return bool(n)


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
