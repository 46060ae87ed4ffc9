"""``__all_rootservice_job``: DELETE_SERVER jobs and their progress (docs/design/migration.md,
OceanBase's ``ObRsJobTableOperator``).

Every function takes a connection inside the caller's transaction and never commits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from rootservice.db.param_repo import PARAM_MAX_JOB_ID, next_counter
from rootservice.db.tables import (
    all_rootservice_job,
)
from rootservice.db.timestamps import datetime_to_us, us_to_datetime


@dataclass(frozen=True)
class Job:
    """The identity of a row of ``__all_rootservice_job``: its id and the server it is about."""

    job_id: int
    job_type: str
    svr_ip: str
    svr_port: int
    # The row's extra_info ("" when NULL): a DELETE_SERVER job's progress baseline lives
    # there, read back by a new leader.
    extra_info: str = ""

    @property
    def server(self) -> str:
        """``'ip:port'`` of the job's server."""
        return f"{self.svr_ip}:{self.svr_port}"


def create_job(
    conn: sa.Connection,
    job_type: str,
    ip: str | None,
    port: int | None,
    now_us: int,
    rs_addr: tuple[str, int],
    sql_text: str = "",
    tenant_id: int | None = None,
    unit_id: int | None = None,
) -> int:
    """Insert an INPROGRESS job row (about server ``ip:port`` unless None, of ``tenant_id`` /
    ``unit_id`` when given); returns its job_id."""
    job_id = next_counter(conn, PARAM_MAX_JOB_ID, now_us)
    ts = us_to_datetime(now_us)
    conn.execute(
        all_rootservice_job.insert().values(
            job_id=job_id,
            job_type=job_type,
            job_status="INPROGRESS",
            progress=0,
            tenant_id=tenant_id,
            unit_id=unit_id,
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
    where = (t.c.job_type == job_type, t.c.svr_ip == ip, t.c.svr_port == port)
    return _finish(conn, where, status, now_us, return_code)


def finish_job(
    conn: sa.Connection, job_id: int, status: str, now_us: int, return_code: int = 0
) -> int:
    """Move job ``job_id`` to ``status`` (SUCCESS / CANCELED / FAILED) if it is INPROGRESS;
    returns rows changed."""
    return _finish(conn, (all_rootservice_job.c.job_id == job_id,), status, now_us, return_code)


def _finish(
    conn: sa.Connection,
    where: tuple[sa.ColumnElement[bool], ...],
    status: str,
    now_us: int,
    return_code: int,
) -> int:
    t = all_rootservice_job
    # result_code is OceanBase's name for the result; return_code stays written for an RS
    # of the schema before migration 0014 (both are read, result_code first).
    r = conn.execute(
        t.update()
        .where(*where, t.c.job_status == "INPROGRESS")
        .values(
            job_status=status,
            return_code=return_code,
            result_code=return_code,
            progress=100 if status == "SUCCESS" else t.c.progress,
            gmt_modified=us_to_datetime(now_us),
        )
    )
    return int(r.rowcount or 0)


def finish_unit_jobs(
    conn: sa.Connection,
    job_type: str,
    unit_id: int,
    status: str,
    now_us: int,
    return_code: int = 0,
) -> int:
    """Move the INPROGRESS jobs of ``job_type`` about unit ``unit_id`` to ``status``
    (OceanBase's ``RS_JOB_FIND(MIGRATE_UNIT, ..., "unit_id", id)`` then ``RS_JOB_COMPLETE``);
    returns rows changed."""
    t = all_rootservice_job
    where = (t.c.job_type == job_type, t.c.unit_id == unit_id)
    return _finish(conn, where, status, now_us, return_code)


def inprogress_unit_jobs(conn: sa.Connection, job_type: str) -> dict[int, int]:
    """The INPROGRESS jobs of ``job_type`` that name a unit: unit_id -> job_id."""
    t = all_rootservice_job
    q = sa.select(t.c.job_id, t.c.unit_id).where(
        t.c.job_type == job_type, t.c.job_status == "INPROGRESS", t.c.unit_id.is_not(None)
    )
    return {int(r["unit_id"]): int(r["job_id"]) for r in conn.execute(q).mappings()}


def inprogress_tenant_jobs(conn: sa.Connection, job_type: str) -> dict[int, int]:
    """The INPROGRESS jobs of ``job_type`` that name a tenant: tenant_id -> job_id (the
    newest one when several)."""
    t = all_rootservice_job
    q = (
        sa.select(t.c.job_id, t.c.tenant_id)
        .where(t.c.job_type == job_type, t.c.job_status == "INPROGRESS", t.c.tenant_id.is_not(None))
        .order_by(t.c.job_id)
    )
    return {int(r["tenant_id"]): int(r["job_id"]) for r in conn.execute(q).mappings()}


def inprogress_jobs(conn: sa.Connection, job_type: str) -> list[Job]:
    """The INPROGRESS jobs of ``job_type`` (with their ``extra_info``), in the database's
    order."""
    t = all_rootservice_job
    q = sa.select(t.c.job_id, t.c.job_type, t.c.svr_ip, t.c.svr_port, t.c.extra_info).where(
        t.c.job_type == job_type, t.c.job_status == "INPROGRESS"
    )
    return [
        Job(
            int(r["job_id"]),
            r["job_type"],
            r["svr_ip"],
            int(r["svr_port"]),
            r["extra_info"] or "",
        )
        for r in conn.execute(q).mappings()
    ]


def set_job_progress(
    conn: sa.Connection, job_id: int, progress: int, extra_info: str, now_us: int
) -> int:
    """Set ``progress`` (0-100) and ``extra_info`` of job ``job_id`` while it is INPROGRESS
    (a job that ended meanwhile keeps its final values); returns rows changed."""
    t = all_rootservice_job
    r = conn.execute(
        sa.update(t)
        .where(t.c.job_id == job_id, t.c.job_status == "INPROGRESS")
        .values(progress=progress, extra_info=extra_info, gmt_modified=us_to_datetime(now_us))
    )
    return int(r.rowcount or 0)


def set_job_extra_info(
    conn: sa.Connection, job_type: str, ip: str, port: int, extra_info: str
) -> int:
    """Set ``extra_info`` of the server's INPROGRESS jobs of ``job_type`` (``gmt_modified``
    untouched: the same transaction ends the job and stamps it); returns rows changed."""
    t = all_rootservice_job
    r = conn.execute(
        sa.update(t)
        .where(
            t.c.job_type == job_type,
            t.c.svr_ip == ip,
            t.c.svr_port == port,
            t.c.job_status == "INPROGRESS",
        )
        .values(extra_info=extra_info)
    )
    return int(r.rowcount or 0)


def recent_jobs(conn: sa.Connection, ended_limit: int = 20) -> list[dict[str, Any]]:
    """Every INPROGRESS job (oldest first), then the ``ended_limit`` most recently modified
    ended ones (newest first), for the status API. Each is a dict: ``job_id``,
    ``job_type``, ``job_status``, ``svr_ip`` / ``svr_port`` (None when the job is not about a
    server), ``progress``, ``extra_info`` (the raw text, "" when NULL), ``return_code``,
    ``create_time_us`` / ``modify_time_us`` (microseconds since the epoch)."""
    t = all_rootservice_job
    cols = (
        t.c.job_id,
        t.c.job_type,
        t.c.job_status,
        t.c.svr_ip,
        t.c.svr_port,
        t.c.progress,
        t.c.extra_info,
        t.c.return_code,
        t.c.gmt_create,
        t.c.gmt_modified,
    )
    running = sa.select(*cols).where(t.c.job_status == "INPROGRESS").order_by(t.c.job_id)
    ended = (
        sa.select(*cols)
        .where(t.c.job_status != "INPROGRESS")
        .order_by(t.c.gmt_modified.desc(), t.c.job_id.desc())
        .limit(ended_limit)
    )
    out = []
    for q in (running, ended):
        for r in conn.execute(q).mappings():
            out.append(
                {
                    "job_id": int(r["job_id"]),
                    "job_type": r["job_type"],
                    "job_status": r["job_status"],
                    "svr_ip": r["svr_ip"],
                    "svr_port": r["svr_port"],
                    "progress": int(r["progress"] or 0),
                    "extra_info": r["extra_info"] or "",
                    "return_code": r["return_code"],
                    "create_time_us": datetime_to_us(r["gmt_create"]),
                    "modify_time_us": datetime_to_us(r["gmt_modified"]),
                }
            )
    return out


def delete_ended_jobs_before(conn: sa.Connection, cutoff_us: int, limit: int) -> int:
    """Delete at most ``limit`` ended jobs (any status but INPROGRESS) whose ``gmt_modified``
    (the time they ended) is before ``cutoff_us`` (microseconds since the epoch), lowest
    ``job_id`` first; returns how many. INPROGRESS jobs are never deleted, however old; a job
    that ended exactly at ``cutoff_us`` is kept. Bounded as
    :func:`rootservice.db.event_repo.delete_events_before` is."""
    t = all_rootservice_job
    ids = (
        sa.select(t.c.job_id)
        .where(t.c.job_status != "INPROGRESS", t.c.gmt_modified < us_to_datetime(cutoff_us))
        .order_by(t.c.job_id)
        .limit(limit)
    )
    r = conn.execute(sa.delete(t).where(t.c.job_id.in_(ids.scalar_subquery())))
    return int(r.rowcount or 0)
