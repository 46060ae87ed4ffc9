"""``__all_ls_log_mark``: the highest log end index any replica of each log stream ever
reported (migration 0009).

Every function takes a connection inside the caller's transaction and never commits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import sqlalchemy as sa

from rootservice.db.tables import all_ls_log_mark
from rootservice.db.timestamps import us_to_datetime

LsKey = tuple[int, int]


@dataclass(frozen=True)
class LogMark:
    """The highest ``log_end_index`` reported for an LS, at ``term``, by ``server``
    ('ip:port')."""

    log_end_index: int
    term: int
    server: str


def load_marks(conn: sa.Connection) -> dict[LsKey, LogMark]:
    """Every mark by (tenant_id, ls_id)."""
    t = all_ls_log_mark
    return {
        (int(r.tenant_id), int(r.ls_id)): LogMark(
            int(r.log_end_index), int(r.term), f"{r.svr_ip}:{r.svr_port}"
        )
        for r in conn.execute(sa.select(t))
    }


def put_marks(
    conn: sa.Connection, marks: Mapping[LsKey, LogMark], known: set[LsKey], now_us: int
) -> None:
    """Write ``marks``: UPDATE those in ``known`` (rows that exist), INSERT the others."""
    t = all_ls_log_mark
    ts = us_to_datetime(now_us)
    for (tenant_id, ls_id), m in marks.items():
        ip, _, port = m.server.rpartition(":")
        values = {
            "log_end_index": m.log_end_index,
            "term": m.term,
            "svr_ip": ip,
            "svr_port": int(port or 0),
            "gmt_modified": ts,
        }
        if (tenant_id, ls_id) in known:
            conn.execute(
                sa.update(t).where(t.c.tenant_id == tenant_id, t.c.ls_id == ls_id).values(values)
            )
        else:
            conn.execute(
                sa.insert(t).values(tenant_id=tenant_id, ls_id=ls_id, gmt_create=ts, **values)
            )
