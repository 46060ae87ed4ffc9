"""``__all_tenant``: tenants (docs/design/servers.md#the-tables). User tenant ids are even from 1002, as in
OceanBase.

Every function takes a connection inside the caller's transaction and never commits.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

from rootservice.db.param_repo import FIRST_USER_ID, next_counter
from rootservice.db.tables import (
    all_ls_meta_table,
    all_ls_status,
    all_space_usage,
    all_tenant,
)
from rootservice.db.timestamps import us_to_datetime
from rootservice.db.zone_repo import split_zone_list

COUNTER_TENANT = "max_used_tenant_id"


def next_tenant_id(conn: sa.Connection, now_us: int) -> int:
    """User tenant ids are even (1002, 1004, ...): OceanBase gives each user tenant the odd id
    below it for its meta tenant."""
    return 2 * next_counter(conn, COUNTER_TENANT, now_us, at_least=FIRST_USER_ID // 2)


@dataclass(frozen=True)
class Tenant:
    """A row of ``__all_tenant``."""

    tenant_id: int
    tenant_name: str
    zone_list: tuple[str, ...]
    primary_zone: str
    status: str = "NORMAL"


def load_tenants(conn: sa.Connection) -> dict[str, Tenant]:
    """Every tenant by name."""
    t = all_tenant
    out = {}
    for r in conn.execute(sa.select(t).order_by(t.c.tenant_id)).mappings():
        out[r["tenant_name"]] = Tenant(
            r["tenant_id"],
            r["tenant_name"],
            split_zone_list(r["zone_list"]),
            r["primary_zone"],
            r["status"],
        )
    return out


def insert_tenant(conn: sa.Connection, t: Tenant, now_us: int) -> None:
    """Insert one tenant."""
    ts = us_to_datetime(now_us)
    conn.execute(
        sa.insert(all_tenant).values(
            tenant_id=t.tenant_id,
            tenant_name=t.tenant_name,
            zone_list=";".join(t.zone_list),
            primary_zone=t.primary_zone,
            status=t.status,
            locality=",".join(f"FULL{{1}}@{z}" for z in t.zone_list),
            gmt_create=ts,
            gmt_modified=ts,
        )
    )


def delete_tenant(conn: sa.Connection, tenant_id: int) -> None:
    """Delete a tenant with its log streams, replica rows and space usage rows."""
    for table in (all_ls_meta_table, all_ls_status, all_space_usage, all_tenant):
        conn.execute(sa.delete(table).where(table.c.tenant_id == tenant_id))


def set_primary_zone(conn: sa.Connection, tenant_id: int, primary_zone: str, now_us: int) -> None:
    """ALTER TENANT ... PRIMARY_ZONE: write the tenant's ``primary_zone``."""
    t = all_tenant
    conn.execute(
        sa.update(t)
        .where(t.c.tenant_id == tenant_id)
        .values(primary_zone=primary_zone, gmt_modified=us_to_datetime(now_us))
    )
