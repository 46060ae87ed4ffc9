"""``__all_server_report``: the last resource and data-disk report of every server whose lease
is alive, the table under ``GV$OB_SERVERS`` (migration 0014).

Every function takes a connection inside the caller's transaction and never commits.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import sqlalchemy as sa

from rootservice.db.tables import all_server_report
from rootservice.db.timestamps import us_to_datetime

ServerKey = tuple[str, int]

#: The columns a report sets (all but the key and the gmt_* times).
REPORT_COLUMNS = (
    "cpu_capacity",
    "mem_capacity",
    "mem_in_use",
    "log_disk_capacity",
    "log_disk_in_use",
    "data_disk_capacity",
    "data_disk_in_use",
    "data_disk_health_status",
    "data_disk_abnormal_time",
)


def load_reports(conn: sa.Connection) -> dict[ServerKey, dict[str, Any]]:
    """Every row: ``(ip, port)`` -> the values of :data:`REPORT_COLUMNS`."""
    t = all_server_report
    return {
        (r["svr_ip"], int(r["svr_port"])): {c: r[c] for c in REPORT_COLUMNS}
        for r in conn.execute(sa.select(t)).mappings()
    }


def put_reports(
    conn: sa.Connection,
    upserts: Mapping[ServerKey, Mapping[str, Any]],
    deletes: Iterable[ServerKey],
    now_us: int,
    existing: set[ServerKey],
) -> None:
    """Write the rows of ``upserts`` (values of :data:`REPORT_COLUMNS`; updated when the key is
    in ``existing``, else inserted) and delete those of ``deletes``."""
    t = all_server_report
    ts = us_to_datetime(now_us)
    inserts = [
        {"svr_ip": k[0], "svr_port": k[1], **v, "gmt_create": ts, "gmt_modified": ts}
        for k, v in upserts.items()
        if k not in existing
    ]
    updates = [{"k_ip": k[0], "k_port": k[1], **v} for k, v in upserts.items() if k in existing]
    if inserts:
        conn.execute(sa.insert(t), inserts)
    if updates:
        stmt = (
            sa.update(t)
            .where(t.c.svr_ip == sa.bindparam("k_ip"), t.c.svr_port == sa.bindparam("k_port"))
            .values({c: sa.bindparam(c) for c in REPORT_COLUMNS} | {"gmt_modified": ts})
        )
        conn.execute(stmt, updates)
    for ip, port in deletes:
        conn.execute(sa.delete(t).where(t.c.svr_ip == ip, t.c.svr_port == port))
