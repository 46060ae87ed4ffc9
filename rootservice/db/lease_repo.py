"""The ``rootservice_epoch`` row of ``__all_service_epoch``: the epoch every write is fenced
with and the leader's lease (docs/design/ha.md#fenced-writes).

``svr_ip`` / ``svr_port`` hold the leader's RPC address, ``lease_expire_time`` /
``lease_renew_time`` are microseconds by the database's clock. Every function takes a
connection inside the caller's transaction and never commits.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

from obcommon.errors import ObError
from rootservice.db.server_identity import ServerIdentity
from rootservice.db.tables import (
    all_service_epoch,
)
from rootservice.db.timestamps import us_to_datetime

RS_EPOCH_NAME = "rootservice_epoch"


@dataclass(frozen=True)
class RsLease:
    """The lease row: ``epoch`` (0 = never taken), ``holder`` (``"ip:port"``, "" = nobody),
    ``expire_us`` and ``renew_us`` (microseconds since the epoch by the database's clock);
    ``incarnation`` (the holder's random id, 0 = none), ``pg_system_id`` and
    ``pg_timeline`` (the PostgreSQL server the holder took office or last renewed through;
    None on SQLite); ``successor`` (``"ip:port"`` named by a handover, "" = none) and
    ``handover_expire_us`` (until then only the successor may take office)."""

    epoch: int
    holder: str
    expire_us: int
    renew_us: int
    incarnation: int = 0
    pg_system_id: int | None = None
    pg_timeline: int | None = None
    successor: str = ""
    handover_expire_us: int = 0

    def reserved_for(self, now_us: int) -> str:
        """The successor the lease is reserved for at ``now_us`` (database clock), or ""."""
        return self.successor if self.successor and now_us < self.handover_expire_us else ""


def db_now_us(conn: sa.Connection) -> int:
    """The database's own clock, integer microseconds since the Unix epoch.

    PostgreSQL's ``clock_timestamp()`` (the real time, not the transaction's start, so a lock
    wait inside the transaction is counted); SQLite's ``julianday('now')`` (millisecond
    precision; SQLite is a local file, so this is the RS host's clock). Every RS measures the
    lease by this one clock, so their own clocks may disagree (docs/design/ha.md#fenced-writes).
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
    which hold the row ``FOR KEY SHARE`` (see :func:`check_epoch`)."""
    t = all_service_epoch
    q = sa.select(
        t.c.value,
        t.c.svr_ip,
        t.c.svr_port,
        t.c.lease_expire_time,
        t.c.lease_renew_time,
        t.c.incarnation,
        t.c.pg_system_id,
        t.c.pg_timeline,
        t.c.successor_ip,
        t.c.successor_port,
        t.c.handover_expire_time,
    ).where(t.c.name == RS_EPOCH_NAME)
    if lock:
        q = q.with_for_update()
    r = conn.execute(q).first()
    if r is None:
        return RsLease(0, "", 0, 0)
    holder = f"{r.svr_ip}:{r.svr_port}" if r.svr_ip else ""
    return RsLease(
        int(r.value),
        holder,
        int(r.lease_expire_time),
        int(r.lease_renew_time),
        int(r.incarnation),
        r.pg_system_id,
        r.pg_timeline,
        f"{r.successor_ip}:{r.successor_port}" if r.successor_ip else "",
        int(r.handover_expire_time),
    )


def _server_values(server: ServerIdentity | None) -> dict[str, int]:
    if server is None:
        return {}
    return {"pg_system_id": server.system_id, "pg_timeline": server.timeline}


def check_epoch(conn: sa.Connection, epoch: int) -> None:
    """Abort the caller's transaction unless the lease row's epoch is still ``epoch``.

    Reads the row ``FOR KEY SHARE`` so a concurrent take-over (which locks it ``FOR UPDATE``
    and raises the epoch) waits for this transaction to end, and this transaction, once it
    has read the row, commits before any newer epoch exists. Epoch 0 (not in office) never
    passes. Raises ``ObError(OB_RS_NOT_MASTER)`` when deposed.

    ``KEY SHARE``, not ``SHARE``: the holder's own renewal (a plain UPDATE of non-key
    columns, which keeps the epoch) must not wait for these transactions, or one fenced
    transaction longer than a renewal round makes the leader depose itself (seen in CI: a
    BOOTSTRAP under load, "lease renewal failed: canceling statement due to statement
    timeout"). Hence every path that raises the epoch must first read the row with
    ``read_lease(lock=True)`` (``FOR UPDATE``, which conflicts with ``KEY SHARE``); an
    UPDATE alone would not wait.
    """
    q = (
        sa.select(all_service_epoch.c.value)
        .where(all_service_epoch.c.name == RS_EPOCH_NAME)
        .with_for_update(read=True, key_share=True)
    )
    v = conn.execute(q).scalar()
    if epoch <= 0 or v is None or int(v) != epoch:
        raise ObError("OB_RS_NOT_MASTER", detail=f"epoch {epoch} was superseded by {v}")


def take_lease(
    conn: sa.Connection,
    old: RsLease,
    holder: tuple[str, int],
    now_us: int,
    expire_us: int,
    *,
    epoch: int = 0,
    incarnation: int = 0,
    server: ServerIdentity | None = None,
) -> int:
    """Take office: raise the epoch from ``old.epoch`` (as read with ``lock=True`` in the same
    transaction) to ``epoch`` (default and at least ``old.epoch + 1``) and make ``holder``
    the leader until ``expire_us`` with ``incarnation``, recording ``server`` and clearing a
    handover's successor; returns the new epoch. Creates the row when it is missing (a database migrated before
    0002 inserted it)."""
    t = all_service_epoch
    new = max(epoch, old.epoch + 1)
    ts = us_to_datetime(now_us)
    values = {
        "value": new,
        "svr_ip": holder[0],
        "svr_port": holder[1],
        "lease_expire_time": expire_us,
        "lease_renew_time": now_us,
        "gmt_modified": ts,
        "incarnation": incarnation,
        "successor_ip": "",
        "successor_port": 0,
        "handover_expire_time": 0,
        **_server_values(server),
    }
    n = conn.execute(
        t.update().where(t.c.name == RS_EPOCH_NAME, t.c.value == old.epoch).values(**values)
    ).rowcount
    if not n:
        conn.execute(t.insert().values(name=RS_EPOCH_NAME, gmt_create=ts, **values))
    return new


def renew_lease(
    conn: sa.Connection,
    epoch: int,
    holder: tuple[str, int],
    now_us: int,
    expire_us: int,
    server: ServerIdentity | None = None,
) -> bool:
    """Extend the lease of ``holder`` at ``epoch`` to ``expire_us``, recording ``server`` (the
    PostgreSQL server renewed through; None leaves the columns); False (nothing
    changed) when the row has another epoch or holder, i.e. this RS was deposed."""
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
            **_server_values(server),
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


def hand_over(
    conn: sa.Connection,
    epoch: int,
    holder: tuple[str, int],
    successor: tuple[str, int],
    now_us: int,
    until_us: int,
) -> bool:
    """End the lease of ``holder`` at ``epoch`` now and reserve the next take-office for
    ``successor`` until ``until_us`` (ALTER SYSTEM SWITCH ROOTSERVICE LEADER); the epoch
    stays, the successor raises it. False (nothing changed) when the lease was not ours any
    more."""
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
            lease_expire_time=now_us,
            successor_ip=successor[0],
            successor_port=successor[1],
            handover_expire_time=until_us,
            gmt_modified=us_to_datetime(now_us),
        )
    ).rowcount
    return bool(n)
