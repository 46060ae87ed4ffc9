"""``__all_server_drain``: one row per drained server, its last DRAIN SERVER (migration 0011; :mod:`rootservice.servers.drain`).

Every function takes a connection inside the caller's transaction and never commits. Times
are microseconds since the epoch (the RS's clock).
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

from rootservice.db.tables import all_server_drain
from rootservice.db.timestamps import us_to_datetime

DRAINING = "DRAINING"
FINISHED = "FINISHED"
TIMEOUT = "TIMEOUT"
CANCELED = "CANCELED"


@dataclass(frozen=True)
class DrainRow:
    """One drain: server ``ip``/``port``, ``status`` (:data:`DRAINING`, :data:`FINISHED`,
    :data:`TIMEOUT`, :data:`CANCELED`), ``start_time``, ``deadline``, ``end_time`` (0 while
    DRAINING), the last progress (``progress_time``, ``leaders_left``, ``copies_left``; -1
    before the first count) and ``blockers`` ("" or "LS ...: why; LS ...: why")."""

    ip: str
    port: int
    status: str
    start_time: int
    deadline: int
    end_time: int = 0
    progress_time: int = 0
    leaders_left: int = -1
    copies_left: int = -1
    blockers: str = ""


def start_drain(
    conn: sa.Connection, ip: str, port: int, now_us: int, deadline_us: int, rs_svr: str
) -> None:
    """Write the DRAINING row of a new drain, replacing the server's previous one."""
    t = all_server_drain
    ts = us_to_datetime(now_us)
    conn.execute(t.delete().where(t.c.svr_ip == ip, t.c.svr_port == port))
    conn.execute(
        t.insert().values(
            svr_ip=ip,
            svr_port=port,
            status=DRAINING,
            start_time=now_us,
            deadline=deadline_us,
            end_time=0,
            progress_time=now_us,
            leaders_left=-1,
            copies_left=-1,
            blockers="",
            rs_svr=rs_svr,
            gmt_create=ts,
            gmt_modified=ts,
        )
    )


def record_progress(
    conn: sa.Connection,
    ip: str,
    port: int,
    now_us: int,
    leaders_left: int,
    copies_left: int,
    blockers: str,
    rs_svr: str,
    status: str = DRAINING,
) -> int:
    """Write the progress of the server's DRAINING row, and its end when ``status`` is not
    DRAINING (``end_time = now_us``). Returns rows changed: 0 when the drain is no longer
    DRAINING (ended meanwhile: nothing is overwritten)."""
    t = all_server_drain
    values: dict[str, object] = {
        "progress_time": now_us,
        "leaders_left": leaders_left,
        "copies_left": copies_left,
        "blockers": blockers[:4096],
        "rs_svr": rs_svr,
        "status": status,
        "gmt_modified": us_to_datetime(now_us),
    }
    if status != DRAINING:
        values["end_time"] = now_us
    return conn.execute(
        t.update()
        .where(t.c.svr_ip == ip, t.c.svr_port == port, t.c.status == DRAINING)
        .values(**values)
    ).rowcount


def end_drain(
    conn: sa.Connection, ip: str, port: int, now_us: int, status: str, why: str, rs_svr: str
) -> int:
    """End the server's DRAINING row with ``status`` (``end_time = now_us``, ``why`` as
    its blockers), keeping its last counts. Returns rows changed: 0 when it was not
    DRAINING."""
    t = all_server_drain
    return conn.execute(
        t.update()
        .where(t.c.svr_ip == ip, t.c.svr_port == port, t.c.status == DRAINING)
        .values(
            status=status,
            end_time=now_us,
            progress_time=now_us,
            blockers=why[:4096],
            rs_svr=rs_svr,
            gmt_modified=us_to_datetime(now_us),
        )
    ).rowcount


def load_drains(conn: sa.Connection, status: str | None = None) -> list[DrainRow]:
    """Every row (or those in ``status``), by address."""
    t = all_server_drain
    q = sa.select(t).order_by(t.c.svr_ip, t.c.svr_port)
    if status is not None:
        q = q.where(t.c.status == status)
    return [
        DrainRow(
            r["svr_ip"],
            r["svr_port"],
            r["status"],
            r["start_time"],
            r["deadline"],
            r["end_time"],
            r["progress_time"],
            r["leaders_left"],
            r["copies_left"],
            r["blockers"],
        )
        for r in conn.execute(q).mappings()
    ]
