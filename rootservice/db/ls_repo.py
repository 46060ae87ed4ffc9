"""``__all_ls_status`` and ``__all_ls_meta_table``: log streams and where their replicas are
(docs/design/servers.md#the-tables, OceanBase 4.x inner tables).

Every function takes a connection inside the caller's transaction and never commits.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from obcommon.addresses import format_server
from rootservice.db.tables import (
    all_ls_meta_table,
    all_ls_status,
)
from rootservice.db.timestamps import us_to_datetime

# The first user log stream of a tenant (LS 1 is the tenant's sys LS, not modelled here).
FIRST_USER_LS_ID = 1001
ROLE_LEADER = 1
ROLE_FOLLOWER = 2


@dataclass(frozen=True)
class LsStatus:
    """A row of ``__all_ls_status``: one log stream of a tenant."""

    tenant_id: int
    ls_id: int
    unit_group_id: int
    ls_group_id: int
    primary_zone: str
    status: str = "NORMAL"


def load_ls_status(conn: sa.Connection) -> list[LsStatus]:
    """Every log stream, by (tenant_id, ls_id)."""
    t = all_ls_status
    return [
        LsStatus(
            r["tenant_id"],
            r["ls_id"],
            r["unit_group_id"],
            r["ls_group_id"],
            r["primary_zone"],
            r["status"],
        )
        for r in conn.execute(sa.select(t).order_by(t.c.tenant_id, t.c.ls_id)).mappings()
    ]


def insert_ls_status(conn: sa.Connection, rows: Iterable[LsStatus], now_us: int) -> None:
    """Insert log streams."""
    ts = us_to_datetime(now_us)
    values = [
        {
            "tenant_id": r.tenant_id,
            "ls_id": r.ls_id,
            "status": r.status,
            "ls_group_id": r.ls_group_id,
            "unit_group_id": r.unit_group_id,
            "primary_zone": r.primary_zone,
            "gmt_create": ts,
            "gmt_modified": ts,
        }
        for r in rows
    ]
    if values:
        conn.execute(sa.insert(all_ls_status), values)


# (tenant_id, ls_id, svr_ip, svr_port)
MetaKey = tuple[int, int, str, int]
META_VALUE_COLUMNS = (
    "sql_port",
    "role",
    "member_list",
    "proposal_id",
    "replica_status",
    "unit_id",
    "zone",
    "paxos_replica_number",
    "data_size",
    "required_size",
    "stale",
    "last_report_time",
    "in_sync",
    "copy_from",
    "begin_lsn",
)


def load_ls_meta(conn: sa.Connection) -> dict[MetaKey, dict[str, Any]]:
    """Every replica row: key -> the values of :data:`META_VALUE_COLUMNS`."""
    t = all_ls_meta_table
    out: dict[MetaKey, dict[str, Any]] = {}
    for r in conn.execute(sa.select(t)).mappings():
        key = (r["tenant_id"], r["ls_id"], r["svr_ip"], int(r["svr_port"]))
        out[key] = {c: r[c] for c in META_VALUE_COLUMNS}
    return out


def upsert_ls_meta(
    conn: sa.Connection,
    inserts: dict[MetaKey, dict[str, Any]],
    updates: dict[MetaKey, dict[str, Any]],
    now_us: int,
) -> None:
    """Insert new replica rows and update changed ones (values as :func:`load_ls_meta`; a
    row without ``stale`` / ``last_report_time`` is written fresh: 0 and 0, one without
    ``in_sync`` / ``copy_from`` in sync and not being copied: 1 and '', one without
    ``begin_lsn`` with none known: NULL)."""
    t = all_ls_meta_table
    ts = us_to_datetime(now_us)
    fresh = {"stale": 0, "last_report_time": 0, "in_sync": 1, "copy_from": "", "begin_lsn": None}
    inserts = {k: fresh | v for k, v in inserts.items()}
    updates = {k: fresh | v for k, v in updates.items()}
    if inserts:
        conn.execute(
            sa.insert(t),
            [
                {
                    "tenant_id": k[0],
                    "ls_id": k[1],
                    "svr_ip": k[2],
                    "svr_port": k[3],
                    **v,
                    "gmt_create": ts,
                    "gmt_modified": ts,
                }
                for k, v in inserts.items()
            ],
        )
    if updates:
        stmt = (
            sa.update(t)
            .where(
                t.c.tenant_id == sa.bindparam("k_tenant"),
                t.c.ls_id == sa.bindparam("k_ls"),
                t.c.svr_ip == sa.bindparam("k_ip"),
                t.c.svr_port == sa.bindparam("k_port"),
            )
            .values({c: sa.bindparam(c) for c in META_VALUE_COLUMNS} | {"gmt_modified": ts})
        )
        conn.execute(
            stmt,
            [
                {"k_tenant": k[0], "k_ls": k[1], "k_ip": k[2], "k_port": k[3], **v}
                for k, v in updates.items()
            ],
        )


def delete_ls_meta(conn: sa.Connection, keys: Iterable[MetaKey]) -> int:
    """Delete replica rows; returns how many went."""
    t = all_ls_meta_table
    n = 0
    for k in keys:
        n += conn.execute(
            sa.delete(t).where(
                t.c.tenant_id == k[0],
                t.c.ls_id == k[1],
                t.c.svr_ip == k[2],
                t.c.svr_port == k[3],
            )
        ).rowcount
    return n


def replica_servers(conn: sa.Connection) -> set[tuple[str, int]]:
    """Every ``(svr_ip, svr_port)`` holding at least one ``__all_ls_meta_table`` row."""
    t = all_ls_meta_table
    return {(r[0], int(r[1])) for r in conn.execute(sa.select(t.c.svr_ip, t.c.svr_port).distinct())}


def replicas_on_server(conn: sa.Connection, ip: str, port: int) -> int:
    """How many ``__all_ls_meta_table`` rows are on ``ip:port``."""
    t = all_ls_meta_table
    q = sa.select(sa.func.count()).select_from(t).where(t.c.svr_ip == ip, t.c.svr_port == port)
    return int(conn.execute(q).scalar_one())


# The view operators read the replicas' roles from (migration 0003): a statement that says
# it moved a leader waits on this very view, as OceanBase's ``wait_leader_switch_out_``
# counts ``role = 'LEADER'`` rows of ``CDB_OB_LS_LOCATIONS``
# (src/sql/engine/cmd/ob_alter_system_executor.cpp).
_ls_locations = sa.table(
    "dba_ob_ls_locations",
    sa.column("tenant_id"),
    sa.column("ls_id"),
    sa.column("svr_ip"),
    sa.column("svr_port"),
    sa.column("role"),
)


def view_leaders(conn: sa.Connection) -> dict[tuple[int, int], list[str]]:
    """What ``DBA_OB_LS_LOCATIONS`` shows as LEADER: (tenant_id, ls_id) -> the 'ip:port' of
    every row whose ROLE is ``'LEADER'`` (normally one), sorted; an LS with no LEADER row is
    absent."""
    v = _ls_locations
    out: dict[tuple[int, int], list[str]] = {}
    q = sa.select(v.c.tenant_id, v.c.ls_id, v.c.svr_ip, v.c.svr_port).where(v.c.role == "LEADER")
    for tenant, ls, ip, port in conn.execute(q):
        out.setdefault((int(tenant), int(ls)), []).append(format_server(ip, int(port)))
    return {k: sorted(v) for k, v in out.items()}


def set_ls_primary_zone(
    conn: sa.Connection, tenant_id: int, ls_id: int, primary_zone: str, now_us: int
) -> None:
    """Write the ``primary_zone`` of log stream ``(tenant_id, ls_id)`` (the zone its leader
    prefers within its tenant's first priority)."""
    t = all_ls_status
    conn.execute(
        sa.update(t)
        .where(t.c.tenant_id == tenant_id, t.c.ls_id == ls_id)
        .values(primary_zone=primary_zone, gmt_modified=us_to_datetime(now_us))
    )
