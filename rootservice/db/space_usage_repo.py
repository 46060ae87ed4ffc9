"""``__all_space_usage``: bytes each tenant's replicas take on each server, from the agents'
reports (docs/design/servers.md#the-tables).

Every function takes a connection inside the caller's transaction and never commits.
"""

from __future__ import annotations

import sqlalchemy as sa

from rootservice.db.tables import (
    all_space_usage,
)
from rootservice.db.timestamps import us_to_datetime

# (tenant_id, svr_ip, svr_port) -> (data_size, used_size); file_type 'tenant_data', start_seq 0
SpaceKey = tuple[int, str, int]


def load_space_usage(conn: sa.Connection) -> dict[SpaceKey, tuple[int, int]]:
    """Every tenant_data row of ``__all_space_usage``."""
    t = all_space_usage
    q = sa.select(t).where(t.c.file_type == "tenant_data", t.c.start_seq == 0)
    return {
        (r["tenant_id"], r["svr_ip"], int(r["svr_port"])): (
            int(r["data_size"]),
            int(r["used_size"]),
        )
        for r in conn.execute(q).mappings()
    }


def put_space_usage(
    conn: sa.Connection,
    rows: dict[SpaceKey, tuple[int, int] | None],
    now_us: int,
) -> None:
    """Replace the tenant_data rows of the given keys; None deletes the row."""
    t = all_space_usage
    ts = us_to_datetime(now_us)
    for (tenant_id, ip, port), value in rows.items():
        conn.execute(
            sa.delete(t).where(
                t.c.tenant_id == tenant_id,
                t.c.svr_ip == ip,
                t.c.svr_port == port,
                t.c.file_type == "tenant_data",
            )
        )
        if value is not None:
            conn.execute(
                sa.insert(t).values(
                    tenant_id=tenant_id,
                    svr_ip=ip,
                    svr_port=port,
                    start_seq=0,
                    file_type="tenant_data",
                    data_size=value[0],
                    used_size=value[1],
                    gmt_create=ts,
                    gmt_modified=ts,
                )
            )


def delete_space_usage_of_server(conn: sa.Connection, ip: str, port: int) -> None:
    """Delete every ``__all_space_usage`` row of ``ip:port`` (the last step of DELETE SERVER)."""
    t = all_space_usage
    conn.execute(sa.delete(t).where(t.c.svr_ip == ip, t.c.svr_port == port))
