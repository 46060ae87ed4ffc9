"""ALTER RESOURCE POOL p {UNIT_NUM [=] n [DELETE UNIT [=] (ids)] | UNIT [=] 'u' | ZONE_LIST [=]
(...)}, one change per statement (OceanBase's ``ObUnitManager::alter_resource_pool``,
``alter_pool_unit_num``, ``alter_pool_zone_list`` and the unit-config change,
src/rootserver/ob_unit_manager.cpp).

- More than one change: ``OB_NOT_SUPPORTED`` ("alter unit_num, resource_unit, zone_list in one
  cmd"); an unknown pool ``OB_RESOURCE_POOL_NOT_EXIST``.
- **UNIT**: the config must exist (``OB_RESOURCE_UNIT_NOT_EXIST``); a config that grows a
  resource is checked on every server hosting a unit of the pool, as ALTER RESOURCE UNIT
  (``OB_MACHINE_RESOURCE_NOT_ENOUGH`` naming zone, server and resource).
- **UNIT_NUM**: 1..1000 (``OB_INVALID_ARGUMENT``); a pool granted to a tenant is refused
  (``OB_OP_NOT_ALLOW``, as OceanBase 4.x, where a tenant's unit number changes with ALTER
  RESOURCE TENANT); the same number with DELETE UNIT and a larger one with DELETE UNIT are
  ``OB_NOT_SUPPORTED``; growing places the new units as CREATE RESOURCE POOL places them
  (``OB_ZONE_SERVER_NOT_ENOUGH`` / ``OB_ZONE_RESOURCE_NOT_ENOUGH``); shrinking deletes the
  units DELETE UNIT names (each of the pool, as many in every zone as the shrink removes:
  else ``OB_INVALID_ARGUMENT``) or, without it, the newest units of each zone.
- **ZONE_LIST**: a zone twice (``OB_OP_NOT_ALLOW`` "alter resource pool zone repeat"), a zone
  that does not exist (``OB_ZONE_INFO_NOT_EXIST``), zones added and removed at once
  (``OB_OP_NOT_ALLOW`` "Cannot add and delete zones at the same time"). A pool granted to a
  tenant keeps its zones here (``OB_OP_NOT_ALLOW`` "alter resource pool zone list with not
  empty unit": the tenant's replicas live there); otherwise removed zones lose their units
  and added zones get ``UNIT_NUM`` units each.

A pool no tenant uses holds no replica, so nothing moves: every change is one fenced
transaction with event ``tenant``/``alter_resource_pool``. Sizes are bytes, CPU cores.
"""

from __future__ import annotations

import threading
from typing import Any

from obcommon.clock import Clock
from obcommon.errors import ObError
from rootservice.db import event_repo, unit_repo
from rootservice.db.event_repo import Event
from rootservice.db.unit_repo import ResourcePool, Unit
from rootservice.ha.store import MetaStore
from rootservice.tenants.placement import UnitRequest, place_units
from rootservice.tenants.ports import ZoneDirectory
from rootservice.tenants.rooms import ServerRooms
from rootservice.tenants.topology import LayoutVersion
from rootservice.tenants.vocabulary import MAX_UNIT_NUM, affinity_of, demand_of


class PoolAlterations:
    """ALTER RESOURCE POOL (see the module doc). ``lock`` is the DDL's statement lock;
    ``rooms`` the servers as placement candidates; ``layout`` is bumped after a change."""

    def __init__(
        self,
        *,
        store: MetaStore,
        clock: Clock,
        zones: ZoneDirectory,
        rooms: ServerRooms,
        layout: LayoutVersion,
        lock: threading.Lock,
    ) -> None:
        """Nothing is read until the first call."""
        self.store = store
        self.clock = clock
        self.zones = zones
        self.rooms = rooms
        self.layout = layout
        self._lock = lock

    def alter_pool(self, name: str, changes: tuple[tuple[str, Any], ...]) -> bool:
        """Apply the one change of ``changes`` (``("unit_num", (n, ids))``, ``("unit",
        config)`` or ``("zone_list", zones)``) to pool ``name``. Returns whether anything
        changed. Raises the errors of the module doc; nothing changes then."""
        name = name.lower()
        if len(changes) != 1:
            raise ObError("OB_NOT_SUPPORTED", "alter unit_num, resource_unit, zone_list in one cmd")
        [(kind, value)] = changes
        with self._lock, self.store.txn() as conn:
            pool = unit_repo.load_pools(conn).get(name)
            if pool is None:
                raise ObError("OB_RESOURCE_POOL_NOT_EXIST", name)
            units = [
                u for u in unit_repo.load_units(conn) if u.resource_pool_id == pool.resource_pool_id
            ]
            now = self.clock.now_us()
            if kind == "unit":
                new = self._unit_config(conn, pool, units, str(value))
            elif kind == "unit_num":
                count, ids = value
                new = self._unit_num(conn, pool, units, int(count), tuple(ids), now)
            else:
                new = self._zone_list(conn, pool, units, tuple(value), now)
            if new == pool:
                return False
            unit_repo.update_pool(conn, new, now)
            event_repo.insert_events(
                conn,
                [
                    Event(
                        now,
                        "tenant",
                        "alter_resource_pool",
                        (
                            ("name", name),
                            ("unit_config_id", new.unit_config_id),
                            ("unit_num", new.unit_count),
                            ("zone_list", ";".join(new.zone_list)),
                        ),
                    )
                ],
                self.store.rs_addr,
            )
        self.layout.changed()
        return True

    def _unit_config(
        self, conn: Any, pool: ResourcePool, units: list[Unit], config_name: str
    ) -> ResourcePool:
        configs = unit_repo.load_unit_configs(conn)
        new = configs.get(config_name.lower())
        if new is None:
            raise ObError("OB_RESOURCE_UNIT_NOT_EXIST", config_name.lower())
        old = next(c for c in configs.values() if c.unit_config_id == pool.unit_config_id)
        if new.unit_config_id == old.unit_config_id:
            return pool
        d_old, d_new = demand_of(old), demand_of(new)
        grown = {
            "MAX_CPU": d_new.max_cpu > d_old.max_cpu,
            "MIN_CPU": d_new.min_cpu > d_old.min_cpu,
            "MEMORY_SIZE": d_new.memory > d_old.memory,
            "LOG_DISK_SIZE": d_new.log_disk > d_old.log_disk,
        }
        rooms = {r.key: r for r in self.rooms.rooms(conn)}
        aff = affinity_of(pool)
        hosts = sorted({k for u in units for k in (u.server, u.migrate_from) if k and k in rooms})
        for key in hosts:
            rooms[key].release(d_old, aff)
        for key in hosts:
            short = rooms[key].short_resource(d_new)
            if short is not None and grown[short]:
                raise ObError("OB_MACHINE_RESOURCE_NOT_ENOUGH", rooms[key].zone, key, short)
            rooms[key].take(d_new, aff)
        return ResourcePool(
            pool.resource_pool_id,
            pool.name,
            pool.unit_count,
            new.unit_config_id,
            pool.zone_list,
            pool.tenant_id,
        )

    def _unit_num(
        self,
        conn: Any,
        pool: ResourcePool,
        units: list[Unit],
        count: int,
        ids: tuple[int, ...],
        now: int,
    ) -> ResourcePool:
        if not 1 <= count <= MAX_UNIT_NUM:
            raise ObError("OB_INVALID_ARGUMENT", f"UNIT_NUM {count}", detail="1..1000")
        if pool.tenant_id != -1:
            raise ObError("OB_OP_NOT_ALLOW", "alter pool unit num which is granted to a tenant")
        if count == pool.unit_count:
            if ids:
                raise ObError("OB_NOT_SUPPORTED", "delete unit without unit num change")
            return pool
        if count > pool.unit_count:
            if ids:
                raise ObError(
                    "OB_NOT_SUPPORTED", "expand pool unit num combined with deleting unit"
                )
            self._place(conn, pool, list(pool.zone_list), range(pool.unit_count, count), now)
        else:
            unit_repo.delete_units(conn, self._to_delete(pool, units, count, ids))
        return ResourcePool(
            pool.resource_pool_id,
            pool.name,
            count,
            pool.unit_config_id,
            pool.zone_list,
            pool.tenant_id,
        )

    @staticmethod
    def _to_delete(
        pool: ResourcePool, units: list[Unit], count: int, ids: tuple[int, ...]
    ) -> list[int]:
        """The units a shrink to ``count`` deletes: ``ids`` when given (each of the pool,
        ``unit_count - count`` in every zone), else the newest of each zone."""
        per_zone = pool.unit_count - count
        if not ids:
            out = []
            for z in pool.zone_list:
                zone_units = sorted((u.unit_id for u in units if u.zone == z), reverse=True)
                out.extend(zone_units[:per_zone])
            return out
        by_id = {u.unit_id: u for u in units}
        for i in ids:
            if i not in by_id:
                raise ObError(
                    "OB_INVALID_ARGUMENT",
                    "DELETE UNIT",
                    detail=f"unit {i} is not of pool {pool.name}",
                )
        if len(set(ids)) != len(ids):
            raise ObError("OB_INVALID_ARGUMENT", "DELETE UNIT", detail="a unit is named twice")
        for z in pool.zone_list:
            n = sum(1 for i in ids if by_id[i].zone == z)
            if n != per_zone:
                raise ObError(
                    "OB_INVALID_ARGUMENT",
                    "DELETE UNIT",
                    detail=f"zone '{z}' needs {per_zone} unit(s) named, {n} given",
                )
        return list(ids)

    def _zone_list(
        self, conn: Any, pool: ResourcePool, units: list[Unit], zones: tuple[str, ...], now: int
    ) -> ResourcePool:
        zones = tuple(z.strip() for z in zones)
        if len(set(zones)) != len(zones):
            raise ObError("OB_OP_NOT_ALLOW", "alter resource pool zone repeat")
        for z in zones:
            if self.zones.get(z) is None:
                raise ObError("OB_ZONE_INFO_NOT_EXIST", z)
        added = [z for z in zones if z not in pool.zone_list]
        removed = [z for z in pool.zone_list if z not in zones]
        if added and removed:
            raise ObError("OB_OP_NOT_ALLOW", "Cannot add and delete zones at the same time")
        if not added and not removed:
            return pool
        if pool.tenant_id != -1:
            raise ObError("OB_OP_NOT_ALLOW", "alter resource pool zone list with not empty unit")
        if removed:
            unit_repo.delete_units(conn, [u.unit_id for u in units if u.zone in removed])
        else:
            self._place(conn, pool, added, range(pool.unit_count), now)
        return ResourcePool(
            pool.resource_pool_id,
            pool.name,
            pool.unit_count,
            pool.unit_config_id,
            tuple(z for z in zones),
            pool.tenant_id,
        )

    def _place(
        self, conn: Any, pool: ResourcePool, zones: list[str], slots: range, now: int
    ) -> None:
        """Place one new unit per (zone, slot), as CREATE RESOURCE POOL does; a slot past the
        pool's unit number gets a new unit group, an existing one the group of that rank."""
        config = next(
            c
            for c in unit_repo.load_unit_configs(conn).values()
            if c.unit_config_id == pool.unit_config_id
        )
        requests = [
            UnitRequest((z, i), z, demand_of(config), affinity_of(pool))
            for z in zones
            for i in slots
        ]
        placement = place_units(requests, self.rooms.rooms(conn))
        if placement.failures:
            f = placement.failures[0]
            code = (
                "OB_ZONE_SERVER_NOT_ENOUGH" if f.kind == "server" else "OB_ZONE_RESOURCE_NOT_ENOUGH"
            )
            raise ObError(code, f.request.zone, str(len(slots)), detail=f.reason)
        existing = sorted(
            {
                u.unit_group_id
                for u in unit_repo.load_units(conn)
                if u.resource_pool_id == pool.resource_pool_id
            }
        )
        groups = {
            i: existing[i]
            if i < len(existing)
            else unit_repo.next_id(conn, unit_repo.COUNTER_UNIT_GROUP, now)
            for i in slots
        }
        new = []
        for z in zones:
            for i in slots:
                ip, _, port = placement.chosen[(z, i)].rpartition(":")
                uid = unit_repo.next_id(conn, unit_repo.COUNTER_UNIT, now)
                new.append(Unit(uid, pool.resource_pool_id, groups[i], z, ip, int(port)))
        unit_repo.insert_units(conn, new, now)
