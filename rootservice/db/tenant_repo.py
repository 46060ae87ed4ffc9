"""Repository functions of the tenant layer: unit configs, resource pools, units, tenants,
log streams and their replicas (SPEC.md section 4, OceanBase 4.x inner tables).

Like :mod:`rootservice.db.repo`, every function takes a connection inside the caller's
transaction and never commits; the caller (through ``MetaStore.txn``) owns the transaction
and its epoch fence. Sizes are bytes, CPU is cores, times microseconds since the epoch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from rootservice.db.repo import next_counter, us_to_datetime
from rootservice.db.tables import (
    all_ls_meta_table,
    all_ls_status,
    all_resource_pool,
    all_space_usage,
    all_tenant,
    all_unit,
    all_unit_config,
)

# Counters in __all_sys_parameter: ids are never reused, as in OceanBase.
COUNTER_UNIT_CONFIG = "max_used_unit_config_id"
COUNTER_POOL = "max_used_resource_pool_id"
COUNTER_UNIT = "max_used_unit_id"
COUNTER_UNIT_GROUP = "max_used_unit_group_id"
COUNTER_TENANT = "max_used_tenant_id"
# OceanBase numbers user objects from 1001 (1-1000 are reserved for the sys tenant's own).
FIRST_USER_ID = 1000
# The first user log stream of a tenant (LS 1 is the tenant's sys LS, not modelled here).
FIRST_USER_LS_ID = 1001

ROLE_LEADER = 1
ROLE_FOLLOWER = 2


def next_id(conn: sa.Connection, counter: str, now_us: int) -> int:
    """The next id of ``counter`` (> 1000)."""
    return next_counter(conn, counter, now_us, at_least=FIRST_USER_ID)


def next_tenant_id(conn: sa.Connection, now_us: int) -> int:
    """User tenant ids are even (1002, 1004, ...): OceanBase gives each user tenant the odd id
    below it for its meta tenant."""
    return 2 * next_counter(conn, COUNTER_TENANT, now_us, at_least=FIRST_USER_ID // 2)


@dataclass(frozen=True)
class UnitConfig:
    """A row of ``__all_unit_config``."""

    unit_config_id: int
    name: str
    max_cpu: float
    min_cpu: float
    memory_size: int
    log_disk_size: int
    max_iops: int
    min_iops: int
    iops_weight: int


@dataclass(frozen=True)
class ResourcePool:
    """A row of ``__all_resource_pool``; ``tenant_id`` is -1 until granted."""

    resource_pool_id: int
    name: str
    unit_count: int
    unit_config_id: int
    zone_list: tuple[str, ...]
    tenant_id: int = -1


@dataclass(frozen=True)
class Unit:
    """A row of ``__all_unit``; ``migrate_from`` is ``''`` when the unit is not moving."""

    unit_id: int
    resource_pool_id: int
    unit_group_id: int
    zone: str
    svr_ip: str
    svr_port: int
    migrate_from_svr_ip: str = ""
    migrate_from_svr_port: int = 0
    status: str = "ACTIVE"

    @property
    def server(self) -> str:
        """``'ip:port'`` of the hosting server."""
        return f"{self.svr_ip}:{self.svr_port}"

    @property
    def migrate_from(self) -> str:
        """``'ip:port'`` the unit is moving from, ``''`` if none."""
        return (
            f"{self.migrate_from_svr_ip}:{self.migrate_from_svr_port}"
            if self.migrate_from_svr_ip
            else ""
        )


@dataclass(frozen=True)
class Tenant:
    """A row of ``__all_tenant``."""

    tenant_id: int
    tenant_name: str
    zone_list: tuple[str, ...]
    primary_zone: str
    status: str = "NORMAL"


@dataclass(frozen=True)
class LsStatus:
    """A row of ``__all_ls_status``: one log stream of a tenant."""

    tenant_id: int
    ls_id: int
    unit_group_id: int
    ls_group_id: int
    primary_zone: str
    status: str = "NORMAL"


def _zones(text: str) -> tuple[str, ...]:
    return tuple(z for z in text.split(";") if z)


# --- unit configs ---------------------------------------------------------------------------


def load_unit_configs(conn: sa.Connection) -> dict[str, UnitConfig]:
    """Every unit config by name."""
    t = all_unit_config
    out = {}
    for r in conn.execute(sa.select(t).order_by(t.c.unit_config_id)).mappings():
        out[r["name"]] = UnitConfig(
            r["unit_config_id"],
            r["name"],
            float(r["max_cpu"]),
            float(r["min_cpu"]),
            int(r["memory_size"]),
            int(r["log_disk_size"]),
            int(r["max_iops"]),
            int(r["min_iops"]),
            int(r["iops_weight"]),
        )
    return out


def insert_unit_config(conn: sa.Connection, c: UnitConfig, now_us: int) -> None:
    """Insert one unit config."""
    ts = us_to_datetime(now_us)
    conn.execute(
        sa.insert(all_unit_config).values(
            unit_config_id=c.unit_config_id,
            name=c.name,
            max_cpu=c.max_cpu,
            min_cpu=c.min_cpu,
            memory_size=c.memory_size,
            log_disk_size=c.log_disk_size,
            max_iops=c.max_iops,
            min_iops=c.min_iops,
            iops_weight=c.iops_weight,
            gmt_create=ts,
            gmt_modified=ts,
        )
    )


def delete_unit_config(conn: sa.Connection, unit_config_id: int) -> None:
    """Delete one unit config."""
    t = all_unit_config
    conn.execute(sa.delete(t).where(t.c.unit_config_id == unit_config_id))


# --- resource pools -------------------------------------------------------------------------


def load_pools(conn: sa.Connection) -> dict[str, ResourcePool]:
    """Every resource pool by name."""
    t = all_resource_pool
    out = {}
    for r in conn.execute(sa.select(t).order_by(t.c.resource_pool_id)).mappings():
        out[r["name"]] = ResourcePool(
            r["resource_pool_id"],
            r["name"],
            int(r["unit_count"]),
            r["unit_config_id"],
            _zones(r["zone_list"]),
            int(r["tenant_id"]),
        )
    return out


def insert_pool(conn: sa.Connection, p: ResourcePool, now_us: int) -> None:
    """Insert one resource pool."""
    ts = us_to_datetime(now_us)
    conn.execute(
        sa.insert(all_resource_pool).values(
            resource_pool_id=p.resource_pool_id,
            name=p.name,
            unit_count=p.unit_count,
            unit_config_id=p.unit_config_id,
            zone_list=";".join(p.zone_list),
            tenant_id=p.tenant_id,
            gmt_create=ts,
            gmt_modified=ts,
        )
    )


def grant_pools(conn: sa.Connection, pool_ids: Sequence[int], tenant_id: int, now_us: int) -> None:
    """Set ``tenant_id`` of the pools (-1 revokes them)."""
    t = all_resource_pool
    conn.execute(
        sa.update(t)
        .where(t.c.resource_pool_id.in_(list(pool_ids)))
        .values(tenant_id=tenant_id, gmt_modified=us_to_datetime(now_us))
    )


def delete_pool(conn: sa.Connection, pool_id: int) -> None:
    """Delete a pool and its units."""
    conn.execute(sa.delete(all_unit).where(all_unit.c.resource_pool_id == pool_id))
    t = all_resource_pool
    conn.execute(sa.delete(t).where(t.c.resource_pool_id == pool_id))


# --- units ----------------------------------------------------------------------------------


def _unit(r: Any) -> Unit:
    return Unit(
        r["unit_id"],
        r["resource_pool_id"],
        r["unit_group_id"],
        r["zone"],
        r["svr_ip"],
        int(r["svr_port"]),
        r["migrate_from_svr_ip"],
        int(r["migrate_from_svr_port"]),
        r["status"],
    )


def load_units(conn: sa.Connection) -> list[Unit]:
    """Every unit, by unit id."""
    t = all_unit
    return [_unit(r) for r in conn.execute(sa.select(t).order_by(t.c.unit_id)).mappings()]


def units_on_server(conn: sa.Connection, ip: str, port: int) -> list[Unit]:
    """Units hosted by, or migrating away from, the server ``ip:port``."""
    t = all_unit
    q = sa.select(t).where(
        sa.or_(
            sa.and_(t.c.svr_ip == ip, t.c.svr_port == port),
            sa.and_(t.c.migrate_from_svr_ip == ip, t.c.migrate_from_svr_port == port),
        )
    )
    return [_unit(r) for r in conn.execute(q.order_by(t.c.unit_id)).mappings()]


def insert_units(conn: sa.Connection, units: Iterable[Unit], now_us: int) -> None:
    """Insert units (one executemany)."""
    ts = us_to_datetime(now_us)
    rows = [
        {
            "unit_id": u.unit_id,
            "resource_pool_id": u.resource_pool_id,
            "unit_group_id": u.unit_group_id,
            "zone": u.zone,
            "svr_ip": u.svr_ip,
            "svr_port": u.svr_port,
            "migrate_from_svr_ip": u.migrate_from_svr_ip,
            "migrate_from_svr_port": u.migrate_from_svr_port,
            "status": u.status,
            "gmt_create": ts,
            "gmt_modified": ts,
        }
        for u in units
    ]
    if rows:
        conn.execute(sa.insert(all_unit), rows)


# --- tenants and log streams ----------------------------------------------------------------


def load_tenants(conn: sa.Connection) -> dict[str, Tenant]:
    """Every tenant by name."""
    t = all_tenant
    out = {}
    for r in conn.execute(sa.select(t).order_by(t.c.tenant_id)).mappings():
        out[r["tenant_name"]] = Tenant(
            r["tenant_id"], r["tenant_name"], _zones(r["zone_list"]), r["primary_zone"], r["status"]
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


# --- replicas: __all_ls_meta_table and __all_space_usage ------------------------------------

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
    """Insert new replica rows and update changed ones (values as :func:`load_ls_meta`)."""
    t = all_ls_meta_table
    ts = us_to_datetime(now_us)
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


def replicas_on_server(conn: sa.Connection, ip: str, port: int) -> int:
    """How many ``__all_ls_meta_table`` rows are on ``ip:port``."""
    t = all_ls_meta_table
    q = sa.select(sa.func.count()).select_from(t).where(t.c.svr_ip == ip, t.c.svr_port == port)
    return int(conn.execute(q).scalar_one())


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
