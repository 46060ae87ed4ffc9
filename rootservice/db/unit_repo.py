"""``__all_unit_config``, ``__all_resource_pool`` and ``__all_unit``: resource units, pools
and the units placed on servers (docs/design/servers.md#the-tables, OceanBase 4.x inner tables).

Every function takes a connection inside the caller's transaction and never commits; sizes
are bytes, CPU is cores, times microseconds since the epoch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from rootservice.db.param_repo import FIRST_USER_ID, next_counter
from rootservice.db.tables import (
    all_resource_pool,
    all_unit,
    all_unit_config,
)
from rootservice.db.timestamps import us_to_datetime
from rootservice.db.zone_repo import split_zone_list

# Counters in __all_sys_parameter: ids are never reused, as in OceanBase.
COUNTER_UNIT_CONFIG = "max_used_unit_config_id"
COUNTER_POOL = "max_used_resource_pool_id"
COUNTER_UNIT = "max_used_unit_id"
COUNTER_UNIT_GROUP = "max_used_unit_group_id"


def next_id(conn: sa.Connection, counter: str, now_us: int) -> int:
    """The next id of ``counter`` (> 1000)."""
    return next_counter(conn, counter, now_us, at_least=FIRST_USER_ID)


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
    # Moved by ALTER SYSTEM MIGRATE UNIT (OceanBase's ``is_manual_migrate``), until the move
    # ends or is cancelled.
    manual_migrate: bool = False

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
            split_zone_list(r["zone_list"]),
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


def update_pool(conn: sa.Connection, p: ResourcePool, now_us: int) -> None:
    """ALTER RESOURCE POOL: write ``unit_count``, ``unit_config_id`` and ``zone_list`` of pool
    ``p`` (found by its id)."""
    t = all_resource_pool
    conn.execute(
        sa.update(t)
        .where(t.c.resource_pool_id == p.resource_pool_id)
        .values(
            unit_count=p.unit_count,
            unit_config_id=p.unit_config_id,
            zone_list=";".join(p.zone_list),
            gmt_modified=us_to_datetime(now_us),
        )
    )


def delete_units(conn: sa.Connection, unit_ids: Iterable[int]) -> None:
    """Delete units by id (a pool no tenant uses shrinking)."""
    conn.execute(sa.delete(all_unit).where(all_unit.c.unit_id.in_(list(unit_ids))))


def delete_pool(conn: sa.Connection, pool_id: int) -> None:
    """Delete a pool and its units."""
    conn.execute(sa.delete(all_unit).where(all_unit.c.resource_pool_id == pool_id))
    t = all_resource_pool
    conn.execute(sa.delete(t).where(t.c.resource_pool_id == pool_id))


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
        bool(r["manual_migrate"]),
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


def start_unit_move(
    conn: sa.Connection,
    unit_id: int,
    src: tuple[str, int],
    dest: tuple[str, int],
    now_us: int,
    *,
    manual: bool = False,
) -> bool:
    """Move unit ``unit_id`` from server ``src`` to ``dest`` (``(ip, port)``): ``svr_*`` =
    ``dest``, ``migrate_from_svr_*`` = ``src`` (docs/design/migration.md, the root balancer's unit
    moves), ``manual_migrate`` = ``manual`` (ALTER SYSTEM MIGRATE UNIT). Only if the unit is
    still on ``src`` and not already moving; returns whether it moved."""
    t = all_unit
    res = conn.execute(
        sa.update(t)
        .where(
            t.c.unit_id == unit_id,
            t.c.svr_ip == src[0],
            t.c.svr_port == src[1],
            t.c.migrate_from_svr_ip == "",
        )
        .values(
            svr_ip=dest[0],
            svr_port=dest[1],
            migrate_from_svr_ip=src[0],
            migrate_from_svr_port=src[1],
            manual_migrate=int(manual),
            gmt_modified=us_to_datetime(now_us),
        )
    )
    return bool(res.rowcount)


def _moving(
    unit_id: int, on: tuple[str, int], moving_from: tuple[str, int]
) -> tuple[sa.ColumnElement[bool], ...]:
    """The conditions "unit ``unit_id`` is on ``on`` moving from ``moving_from``"
    (``(ip, port)``) that guard a change of a move against a concurrent one."""
    t = all_unit
    return (
        t.c.unit_id == unit_id,
        t.c.svr_ip == on[0],
        t.c.svr_port == on[1],
        t.c.migrate_from_svr_ip == moving_from[0],
        t.c.migrate_from_svr_port == moving_from[1],
    )


def retarget_unit_move(
    conn: sa.Connection,
    unit_id: int,
    moving_from: tuple[str, int],
    was_to: tuple[str, int],
    to: tuple[str, int],
    now_us: int,
) -> bool:
    """Send moving unit ``unit_id`` to ``to`` instead of ``was_to`` (``(ip, port)``), still
    moving from ``moving_from``: ``svr_*`` = ``to`` (a copy to ``was_to`` stalled or it is
    being drained). Only while the unit is on ``was_to`` moving from
    ``moving_from``; returns whether it changed."""
    t = all_unit
    res = conn.execute(
        sa.update(t)
        .where(*_moving(unit_id, was_to, moving_from))
        .values(svr_ip=to[0], svr_port=to[1], gmt_modified=us_to_datetime(now_us))
    )
    return bool(res.rowcount)


def finish_unit_move(
    conn: sa.Connection,
    unit_id: int,
    now_us: int,
    *,
    on: tuple[str, int] | None = None,
    moving_from: tuple[str, int] | None = None,
) -> bool:
    """The move of unit ``unit_id`` is done: clear its ``migrate_from_svr_*``. With ``on``
    / ``moving_from`` (``(ip, port)``) only while the unit is still on ``on`` moving from
    ``moving_from`` (the balancer's premise: a CANCEL DELETE may have moved
    it back since the round looked); returns whether the row changed."""
    t = all_unit
    q = sa.update(t).where(t.c.unit_id == unit_id)
    if on is not None:
        q = q.where(t.c.svr_ip == on[0], t.c.svr_port == on[1])
    if moving_from is not None:
        q = q.where(
            t.c.migrate_from_svr_ip == moving_from[0],
            t.c.migrate_from_svr_port == moving_from[1],
        )
    res = conn.execute(
        q.values(
            migrate_from_svr_ip="",
            migrate_from_svr_port=0,
            manual_migrate=0,
            gmt_modified=us_to_datetime(now_us),
        )
    )
    return bool(res.rowcount)


def move_unit_back(
    conn: sa.Connection, unit_id: int, back_to: tuple[str, int], now_us: int
) -> None:
    """CANCEL DELETE SERVER: unit ``unit_id`` returns to ``back_to`` (``(ip, port)``, the
    server it was moving from) and is no longer moving."""
    t = all_unit
    conn.execute(
        sa.update(t)
        .where(t.c.unit_id == unit_id)
        .values(
            svr_ip=back_to[0],
            svr_port=back_to[1],
            migrate_from_svr_ip="",
            migrate_from_svr_port=0,
            manual_migrate=0,
            gmt_modified=us_to_datetime(now_us),
        )
    )


def reverse_unit_move(
    conn: sa.Connection,
    unit_id: int,
    on: tuple[str, int],
    moving_from: tuple[str, int],
    now_us: int,
) -> bool:
    """ALTER SYSTEM CANCEL MIGRATE UNIT: the move of unit ``unit_id`` from ``moving_from`` to
    ``on`` (``(ip, port)``) is reversed: ``svr_*`` = ``moving_from``, ``migrate_from_svr_*`` =
    ``on`` (the replicas already there move back), ``manual_migrate`` cleared (OceanBase's
    ``end_migrate_unit`` with ``REVERSE``). Only while the unit is still on ``on`` moving from
    ``moving_from``; returns whether the row changed."""
    t = all_unit
    res = conn.execute(
        sa.update(t)
        .where(*_moving(unit_id, on, moving_from))
        .values(
            svr_ip=moving_from[0],
            svr_port=moving_from[1],
            migrate_from_svr_ip=on[0],
            migrate_from_svr_port=on[1],
            manual_migrate=0,
            gmt_modified=us_to_datetime(now_us),
        )
    )
    return bool(res.rowcount)


def place_unit(conn: sa.Connection, unit_id: int, to: tuple[str, int], now_us: int) -> None:
    """Unit ``unit_id`` of a pool no tenant uses goes to ``to`` (``(ip, port)``) at once: it
    holds no replica, so nothing moves (OceanBase's ``migrate_unit_`` for a pool not
    granted)."""
    t = all_unit
    conn.execute(
        sa.update(t)
        .where(t.c.unit_id == unit_id)
        .values(svr_ip=to[0], svr_port=to[1], gmt_modified=us_to_datetime(now_us))
    )


def update_unit_config(conn: sa.Connection, c: UnitConfig, now_us: int) -> None:
    """ALTER RESOURCE UNIT: write every resource of config ``c`` (found by its id)."""
    t = all_unit_config
    conn.execute(
        sa.update(t)
        .where(t.c.unit_config_id == c.unit_config_id)
        .values(
            max_cpu=c.max_cpu,
            min_cpu=c.min_cpu,
            memory_size=c.memory_size,
            log_disk_size=c.log_disk_size,
            max_iops=c.max_iops,
            min_iops=c.min_iops,
            iops_weight=c.iops_weight,
            gmt_modified=us_to_datetime(now_us),
        )
    )


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
            "manual_migrate": int(u.manual_migrate),
            "gmt_create": ts,
            "gmt_modified": ts,
        }
        for u in units
    ]
    if rows:
        conn.execute(sa.insert(all_unit), rows)
