"""``__all_rootservice_job``: DELETE_SERVER jobs and their progress (SPEC.md section 9,
OceanBase's ``ObRsJobTableOperator``).

Every function takes a connection inside the caller's transaction and never commits.
"""

from __future__ import annotations

import sqlalchemy as sa

from rootservice.db.param_repo import PARAM_MAX_JOB_ID, next_counter
from rootservice.db.tables import (
    all_rootservice_job,
)
from rootservice.db.timestamps import us_to_datetime


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
