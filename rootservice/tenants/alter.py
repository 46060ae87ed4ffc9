"""ALTER RESOURCE UNIT and ALTER TENANT ... PRIMARY_ZONE (OceanBase's
``ObUnitManager::alter_unit_config``, src/rootserver/ob_unit_manager.cpp, and the primary-zone
part of ``ObDDLService::modify_tenant`` with ``ObAlterPrimaryZoneChecker``,
src/rootserver/ob_alter_primary_zone_checker.cpp).

- **ALTER RESOURCE UNIT** changes the options named and keeps the others; the result is
  checked as CREATE RESOURCE UNIT checks it. A change that grows a resource is checked on
  every server hosting (or being left by) a unit of the config: the server must hold the
  new size with what its other units take, else ``OB_MACHINE_RESOURCE_NOT_ENOUGH`` names
  the zone, the server and the resource (``MIN_CPU``, ``MAX_CPU``, ``MEMORY_SIZE``,
  ``LOG_DISK_SIZE``). Shrinking is always allowed. One fenced transaction writes the config
  and event ``tenant``/``alter_resource_unit``.
- **ALTER TENANT PRIMARY_ZONE** validates the value against the tenant's zones (as CREATE
  TENANT does), writes it with each log stream's own preferred zone (round robin over the
  first priority, as CREATE TENANT spreads them), ends a previous INPROGRESS
  ``ALTER_TENANT_PRIMARY_ZONE`` job of the tenant CANCELED and opens a new one, in one fenced
  transaction. The leaders then move by the reconciler's leader coordination
  (:meth:`rootservice.tenants.leaders.LeaderCoordinator.coordinate`), the same safe switch
  as every other leader move; the ``primary_zone_checker`` task
  (:mod:`rootservice.tenants.primary_zone_checker`) writes the job's progress and ends it.

Sizes are bytes, CPU is cores, times microseconds since the epoch.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from obcommon.clock import Clock
from obcommon.errors import ObError
from rootservice.db import event_repo, job_repo, ls_repo, tenant_repo, unit_repo
from rootservice.db.event_repo import Event
from rootservice.db.unit_repo import UnitConfig
from rootservice.ha.store import MetaStore
from rootservice.tenants.rooms import ServerRooms
from rootservice.tenants.topology import LayoutVersion
from rootservice.tenants.unit_options import unit_resources
from rootservice.tenants.vocabulary import affinity_of, demand_of, parse_primary_zone

log = logging.getLogger(__name__)

PRIMARY_ZONE_JOB = "ALTER_TENANT_PRIMARY_ZONE"

# The options of a unit config, in CREATE RESOURCE UNIT's names.
_OPTIONS = (
    "max_cpu",
    "min_cpu",
    "memory_size",
    "log_disk_size",
    "max_iops",
    "min_iops",
    "iops_weight",
)


class TenantAlterations:
    """ALTER RESOURCE UNIT and ALTER TENANT PRIMARY_ZONE.

    ``lock`` is the DDL's (:class:`rootservice.tenants.ddl.TenantManager`): a config growing
    while a pool is created must not count the same free memory twice. ``rooms`` gives the
    servers' capacities and loads; ``layout`` is bumped after every committed change.
    """

    def __init__(
        self,
        *,
        store: MetaStore,
        clock: Clock,
        rooms: ServerRooms,
        layout: LayoutVersion,
        lock: threading.Lock,
    ) -> None:
        """Nothing is read until the first call."""
        self.store = store
        self.clock = clock
        self.rooms = rooms
        self.layout = layout
        self._lock = lock

    def alter_unit_config(self, name: str, options: tuple[tuple[str, Any], ...]) -> bool:
        """ALTER RESOURCE UNIT ``name`` with the (option, value) pairs ``options``. Returns
        whether anything changed. Raises OB_RESOURCE_UNIT_NOT_EXIST, OB_INVALID_ARGUMENT /
        OB_INVALID_RESOURCE_UNIT (as CREATE RESOURCE UNIT, an option given twice too),
        OB_MACHINE_RESOURCE_NOT_ENOUGH (see the module doc); nothing changes then."""
        name = name.lower()
        given = dict(unit_resources_given(options))
        with self._lock, self.store.txn() as conn:
            old = unit_repo.load_unit_configs(conn).get(name)
            if old is None:
                raise ObError("OB_RESOURCE_UNIT_NOT_EXIST", name)
            merged = {k: getattr(old, k) for k in _OPTIONS}
            merged.update(given)
            res = unit_resources(tuple(merged.items()))
            new = UnitConfig(
                old.unit_config_id,
                name,
                res.max_cpu,
                res.min_cpu,
                res.memory_size,
                res.log_disk_size,
                res.max_iops,
                res.min_iops,
                res.iops_weight,
            )
            if new == old:
                return False
            self._check_growth(conn, old, new)
            now = self.clock.now_us()
            unit_repo.update_unit_config(conn, new, now)
            event_repo.insert_events(
                conn,
                [
                    Event(
                        now,
                        "tenant",
                        "alter_resource_unit",
                        (
                            ("name", name),
                            ("max_cpu", f"{new.max_cpu:g}"),
                            ("min_cpu", f"{new.min_cpu:g}"),
                            ("memory_size", new.memory_size),
                            ("log_disk_size", new.log_disk_size),
                        ),
                    )
                ],
                self.store.rs_addr,
            )
        self.layout.changed()
        return True

    def _check_growth(self, conn: Any, old: UnitConfig, new: UnitConfig) -> None:
        """Every server hosting a unit of ``old``'s config holds the units at ``new``'s size
        (OceanBase's ``check_expand_resource_``): only the resources that grow are judged."""
        grown = {
            "MAX_CPU": new.max_cpu > old.max_cpu,
            "MIN_CPU": new.min_cpu > old.min_cpu,
            "MEMORY_SIZE": new.memory_size > old.memory_size,
            "LOG_DISK_SIZE": new.log_disk_size > old.log_disk_size,
        }
        if not any(grown.values()):
            return
        pools = {
            p.resource_pool_id: p
            for p in unit_repo.load_pools(conn).values()
            if p.unit_config_id == old.unit_config_id
        }
        rooms = {r.key: r for r in self.rooms.rooms(conn)}
        placed: list[tuple[str, Any]] = []
        for u in unit_repo.load_units(conn):
            pool = pools.get(u.resource_pool_id)
            if pool is None:
                continue
            for key in {u.server, u.migrate_from} - {""}:
                room = rooms.get(key)
                if room is not None:
                    room.release(demand_of(old), affinity_of(pool))
                    placed.append((key, affinity_of(pool)))
        for key, aff in sorted(placed, key=lambda p: p[0]):
            room = rooms[key]
            short = room.short_resource(demand_of(new))
            if short is not None and grown[short]:
                raise ObError("OB_MACHINE_RESOURCE_NOT_ENOUGH", room.zone, key, short)
            room.take(demand_of(new), aff)

    def alter_primary_zone(self, tenant: str, primary_zone: str, sql_text: str = "") -> int:
        """ALTER TENANT ``tenant`` PRIMARY_ZONE ``primary_zone``. Returns the job id (0 when
        the value is the tenant's already). Raises OB_TENANT_NOT_EXIST,
        OB_PRIMARY_ZONE_NOT_IN_ZONE_LIST, OB_INVALID_ARGUMENT; nothing changes then."""
        name = tenant.lower()
        with self._lock, self.store.txn() as conn:
            t = tenant_repo.load_tenants(conn).get(name)
            if t is None:
                raise ObError("OB_TENANT_NOT_EXIST", name)
            primary = primary_zone.strip()
            levels = parse_primary_zone(primary, t.zone_list)
            if primary.upper() == "RANDOM":
                primary = "RANDOM"
            if primary == t.primary_zone:
                return 0
            now = self.clock.now_us()
            tenant_repo.set_primary_zone(conn, t.tenant_id, primary, now)
            rows = [r for r in ls_repo.load_ls_status(conn) if r.tenant_id == t.tenant_id]
            for i, r in enumerate(rows):
                ls_repo.set_ls_primary_zone(
                    conn, t.tenant_id, r.ls_id, levels[0][i % len(levels[0])], now
                )
            # A new primary zone replaces the one still being reached.
            previous = job_repo.inprogress_tenant_jobs(conn, PRIMARY_ZONE_JOB).get(t.tenant_id)
            if previous is not None:
                job_repo.finish_job(conn, previous, "CANCELED", now, ObError("OB_CANCELED").code)
            job_id = job_repo.create_job(
                conn,
                PRIMARY_ZONE_JOB,
                None,
                None,
                now,
                self.store.rs_addr,
                sql_text,
                tenant_id=t.tenant_id,
            )
            job_repo.set_job_progress(
                conn, job_id, 0, f"primary zone {t.primary_zone} -> {primary}", now
            )
            event_repo.insert_events(
                conn,
                [
                    Event(
                        now,
                        "tenant",
                        "alter_tenant",
                        (
                            ("tenant_id", t.tenant_id),
                            ("name", name),
                            ("old_primary_zone", t.primary_zone),
                            ("primary_zone", primary),
                            ("job_id", job_id),
                        ),
                    )
                ],
                self.store.rs_addr,
            )
        self.layout.changed()
        log.info("tenant %s: primary zone %s -> %s (job %d)", name, t.primary_zone, primary, job_id)
        return job_id


def unit_resources_given(options: tuple[tuple[str, Any], ...]) -> list[tuple[str, Any]]:
    """The options of ALTER RESOURCE UNIT as given; an option twice is refused
    (OB_INVALID_ARGUMENT), as CREATE RESOURCE UNIT refuses it."""
    seen: set[str] = set()
    for k, _ in options:
        if k in seen:
            raise ObError("OB_INVALID_ARGUMENT", f"{k.upper()} given twice")
        seen.add(k)
    return list(options)
