"""Unit configs, resource pools and tenants: CREATE / DROP RESOURCE UNIT, RESOURCE POOL and
TENANT (docs/design/statements.md; OceanBase's ``ObUnitManager`` and the tenant part of
``ObDDLService``).

The manager validates, places units (:mod:`rootservice.tenants.placement`), writes the rows in
one fenced transaction and, for a tenant, hands its log streams to
:class:`rootservice.tenants.log_streams.TenantReplicas`, which tells the agents to create the
replicas. Every statement either changes everything it names or nothing. Each committed change
bumps the :class:`rootservice.tenants.topology.LayoutVersion` so that readers can cache the
tenant layout. The statements arrive as the plain values of
:mod:`rootservice.tenants.ddl_requests`.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from obcommon.clock import Clock
from obcommon.errors import ObError
from rootservice.db import election_ref_repo, event_repo, ls_repo, tenant_repo, unit_repo
from rootservice.db.event_repo import Event
from rootservice.db.ls_repo import LsStatus
from rootservice.db.tenant_repo import Tenant
from rootservice.db.unit_repo import ResourcePool, Unit, UnitConfig
from rootservice.ha.store import MetaStore
from rootservice.tenants.ddl_requests import NewPool, NewTenant, NewUnitConfig
from rootservice.tenants.log_streams import TenantReplicas
from rootservice.tenants.placement import UnitRequest, place_units
from rootservice.tenants.ports import ZoneDirectory
from rootservice.tenants.rooms import ServerRooms
from rootservice.tenants.topology import LayoutVersion
from rootservice.tenants.unit_options import unit_resources
from rootservice.tenants.vocabulary import (
    MAX_LS_COUNT,
    MAX_UNIT_NUM,
    affinity_of,
    check_name,
    demand_of,
    parse_primary_zone,
)

log = logging.getLogger(__name__)


class TenantManager:
    """CREATE / DROP of unit configs, resource pools and tenants.

    ``rooms`` gives the servers as placement candidates (capacities and health);
    ``replicas`` creates and drops a tenant's replicas on the agents; ``layout`` is bumped
    after every committed change. Statements are serialised by one lock: two pools created at
    once must not both count the same free memory. Statement dispatch passes the
    term's gate before calling in; a deposed term's writes are refused by the fenced store.
    """

    def __init__(
        self,
        *,
        store: MetaStore,
        clock: Clock,
        zones: ZoneDirectory,
        rooms: ServerRooms,
        layout: LayoutVersion,
        replicas: TenantReplicas,
    ) -> None:
        """Wire the collaborators; ``term`` is the gate every statement passes first."""
        self.store = store
        self.clock = clock
        self.zones = zones
        self.rooms = rooms
        self.layout = layout
        self.replicas = replicas
        self._lock = threading.Lock()

    @property
    def statement_lock(self) -> threading.Lock:
        """The lock that serialises the statements that place or size units."""
        return self._lock

    def _event(self, now: int, event: str, *values: tuple[str, Any]) -> Event:
        return Event(now, "tenant", event, values)

    # --- resource units --------------------------------------------------------------------

    def create_unit_config(self, st: NewUnitConfig) -> bool:
        """CREATE RESOURCE UNIT. Returns False when IF NOT EXISTS found one already.

        Raises OB_INVALID_ARGUMENT (bad name, option twice, bad value, MIN_CPU > MAX_CPU,
        MIN_IOPS > MAX_IOPS), OB_INVALID_RESOURCE_UNIT (below OceanBase's minimum: 1 CPU, 1G
        memory, 2G log disk), OB_RESOURCE_UNIT_EXIST."""
        name = check_name("resource unit", st.name)
        res = unit_resources(st.options)
        with self._lock, self.store.txn() as conn:
            if name in unit_repo.load_unit_configs(conn):
                if st.if_not_exists:
                    return False
                raise ObError("OB_RESOURCE_UNIT_EXIST", name)
            now = self.clock.now_us()
            cid = unit_repo.next_id(conn, unit_repo.COUNTER_UNIT_CONFIG, now)
            unit_repo.insert_unit_config(
                conn,
                UnitConfig(
                    cid,
                    name,
                    res.max_cpu,
                    res.min_cpu,
                    res.memory_size,
                    res.log_disk_size,
                    res.max_iops,
                    res.min_iops,
                    res.iops_weight,
                ),
                now,
            )
            event_repo.insert_events(
                conn,
                [self._event(now, "create_resource_unit", ("name", name), ("id", cid))],
                self.store.rs_addr,
            )
        self.layout.changed()
        return True

    def drop_unit_config(self, name: str, *, if_exists: bool = False) -> bool:
        """DROP RESOURCE UNIT. Returns False when IF EXISTS found none. Raises
        OB_RESOURCE_UNIT_NOT_EXIST, OB_RESOURCE_UNIT_IS_REFERENCED (a pool uses it)."""
        name = name.lower()
        with self._lock, self.store.txn() as conn:
            c = unit_repo.load_unit_configs(conn).get(name)
            if c is None:
                if if_exists:
                    return False
                raise ObError("OB_RESOURCE_UNIT_NOT_EXIST", name)
            users = [
                p.name
                for p in unit_repo.load_pools(conn).values()
                if p.unit_config_id == c.unit_config_id
            ]
            if users:
                raise ObError(
                    "OB_RESOURCE_UNIT_IS_REFERENCED", name, detail=f"by pool {', '.join(users)}"
                )
            now = self.clock.now_us()
            unit_repo.delete_unit_config(conn, c.unit_config_id)
            event_repo.insert_events(
                conn, [self._event(now, "drop_resource_unit", ("name", name))], self.store.rs_addr
            )
        self.layout.changed()
        return True

    # --- resource pools --------------------------------------------------------------------

    def create_pool(self, st: NewPool) -> list[int]:
        """CREATE RESOURCE POOL: place UNIT_NUM units in each zone of ZONE_LIST (default:
        every zone). Returns the new unit ids ([] when IF NOT EXISTS found the pool).

        Raises OB_INVALID_ARGUMENT (bad name, UNIT / UNIT_NUM missing, UNIT_NUM out of
        1..1000, a zone twice), OB_RESOURCE_UNIT_NOT_EXIST, OB_ZONE_INFO_NOT_EXIST,
        OB_RESOURCE_POOL_EXIST, OB_ZONE_SERVER_NOT_ENOUGH (fewer usable servers than UNIT_NUM
        in a zone), OB_ZONE_RESOURCE_NOT_ENOUGH (servers without room; the message names the
        resource short)."""
        name = check_name("resource pool", st.name)
        if st.unit is None:
            raise ObError("OB_INVALID_ARGUMENT", "resource pool", detail="UNIT is required")
        if st.unit_num is None:
            raise ObError("OB_INVALID_ARGUMENT", "resource pool", detail="UNIT_NUM is required")
        if not 1 <= st.unit_num <= MAX_UNIT_NUM:
            raise ObError("OB_INVALID_ARGUMENT", f"UNIT_NUM {st.unit_num}", detail="1..1000")
        if st.zone_list is not None:
            zones = tuple(z.strip() for z in st.zone_list)
            if not zones:
                raise ObError("OB_INVALID_ARGUMENT", "ZONE_LIST", detail="it is empty")
            for z in zones:
                if zones.count(z) > 1:
                    raise ObError("OB_INVALID_ARGUMENT", f"zone '{z}' twice in ZONE_LIST")
                if self.zones.get(z) is None:
                    raise ObError("OB_ZONE_INFO_NOT_EXIST", z)
        else:
            zones = tuple(sorted(z.zone for z in self.zones.all() if z.zone))
        with self._lock, self.store.txn() as conn:
            pools = unit_repo.load_pools(conn)
            if name in pools:
                if st.if_not_exists:
                    return []
                raise ObError("OB_RESOURCE_POOL_EXIST", name)
            config = unit_repo.load_unit_configs(conn).get(st.unit.lower())
            if config is None:
                raise ObError("OB_RESOURCE_UNIT_NOT_EXIST", st.unit.lower())
            now = self.clock.now_us()
            pool_id = unit_repo.next_id(conn, unit_repo.COUNTER_POOL, now)
            pool = ResourcePool(pool_id, name, st.unit_num, config.unit_config_id, zones)
            demand = demand_of(config)
            requests = [
                UnitRequest((z, i), z, demand, affinity_of(pool))
                for z in zones
                for i in range(st.unit_num)
            ]
            placement = place_units(requests, self.rooms.rooms(conn))
            if placement.failures:
                f = placement.failures[0]
                code = (
                    "OB_ZONE_SERVER_NOT_ENOUGH"
                    if f.kind == "server"
                    else "OB_ZONE_RESOURCE_NOT_ENOUGH"
                )
                raise ObError(code, f.request.zone, str(st.unit_num), detail=f.reason)
            groups = [
                unit_repo.next_id(conn, unit_repo.COUNTER_UNIT_GROUP, now)
                for _ in range(st.unit_num)
            ]
            units = []
            for z in zones:
                for i in range(st.unit_num):
                    ip, _, port = placement.chosen[(z, i)].rpartition(":")
                    uid = unit_repo.next_id(conn, unit_repo.COUNTER_UNIT, now)
                    units.append(Unit(uid, pool_id, groups[i], z, ip, int(port)))
            unit_repo.insert_pool(conn, pool, now)
            unit_repo.insert_units(conn, units, now)
            event_repo.insert_events(
                conn,
                [
                    self._event(
                        now,
                        "create_resource_pool",
                        ("name", name),
                        ("id", pool_id),
                        ("units", ",".join(f"{u.unit_id}@{u.server}" for u in units)),
                    )
                ],
                self.store.rs_addr,
            )
        self.layout.changed()
        return [u.unit_id for u in units]

    def drop_pool(self, name: str, *, if_exists: bool = False) -> bool:
        """DROP RESOURCE POOL with its units. Returns False when IF EXISTS found none. Raises
        OB_RESOURCE_POOL_NOT_EXIST, OB_RESOURCE_POOL_ALREADY_GRANTED (a tenant uses it)."""
        name = name.lower()
        with self._lock, self.store.txn() as conn:
            pool = unit_repo.load_pools(conn).get(name)
            if pool is None:
                if if_exists:
                    return False
                raise ObError("OB_RESOURCE_POOL_NOT_EXIST", name)
            if pool.tenant_id != -1:
                raise ObError(
                    "OB_RESOURCE_POOL_ALREADY_GRANTED", name, detail=f"tenant {pool.tenant_id}"
                )
            now = self.clock.now_us()
            unit_repo.delete_pool(conn, pool.resource_pool_id)
            event_repo.insert_events(
                conn, [self._event(now, "drop_resource_pool", ("name", name))], self.store.rs_addr
            )
        self.layout.changed()
        return True

    # --- tenants ---------------------------------------------------------------------------

    def create_tenant(self, st: NewTenant) -> tuple[int, int]:
        """CREATE TENANT: grant the pools, create LS_COUNT log streams (default one per unit
        group) with one FULL replica per zone on the server of the unit that serves it, and
        wait (up to ``tenant_create_timeout``) until each has a leader in the primary zone.
        Returns ``(tenant_id, ls_count)``; ``(0, 0)`` when IF NOT EXISTS found the tenant.

        Raises OB_INVALID_ARGUMENT (bad name, a pool twice, pools sharing a zone or with
        different UNIT_NUM, LS_COUNT out of 1..1024), OB_EMPTY_RESOURCE_POOL_LIST,
        OB_RESOURCE_POOL_NOT_EXIST, OB_RESOURCE_POOL_ALREADY_GRANTED, OB_TENANT_EXIST,
        OB_PRIMARY_ZONE_NOT_IN_ZONE_LIST, and OB_TIMEOUT when the tenant was created but some
        log stream has no leader yet (the reconciler keeps working on it)."""
        name = check_name("tenant", st.name)
        if not st.pools:
            raise ObError("OB_EMPTY_RESOURCE_POOL_LIST")
        if len(set(st.pools)) != len(st.pools):
            raise ObError(
                "OB_INVALID_ARGUMENT", "RESOURCE_POOL_LIST", detail="a pool is listed twice"
            )
        if st.ls_count is not None and not 1 <= st.ls_count <= MAX_LS_COUNT:
            raise ObError("OB_INVALID_ARGUMENT", f"LS_COUNT {st.ls_count}", detail="1..1024")
        with self._lock, self.store.txn() as conn:
            if name in tenant_repo.load_tenants(conn):
                if st.if_not_exists:
                    return (0, 0)
                raise ObError("OB_TENANT_EXIST", name)
            all_pools = unit_repo.load_pools(conn)
            pools = []
            for pname in st.pools:
                p = all_pools.get(pname.lower())
                if p is None:
                    raise ObError("OB_RESOURCE_POOL_NOT_EXIST", pname.lower())
                if p.tenant_id != -1:
                    raise ObError("OB_RESOURCE_POOL_ALREADY_GRANTED", p.name)
                pools.append(p)
            zones: list[str] = []
            for p in pools:
                for z in p.zone_list:
                    if z in zones:
                        raise ObError(
                            "OB_INVALID_ARGUMENT",
                            "RESOURCE_POOL_LIST",
                            detail=f"two pools cover zone '{z}'",
                        )
                    zones.append(z)
            unit_num = pools[0].unit_count
            if any(p.unit_count != unit_num for p in pools):
                raise ObError(
                    "OB_INVALID_ARGUMENT",
                    "RESOURCE_POOL_LIST",
                    detail="the pools have different UNIT_NUM",
                )
            zone_tuple = tuple(zones)
            primary = (st.primary_zone or "RANDOM").strip()
            levels = parse_primary_zone(primary, zone_tuple)
            if primary.upper() == "RANDOM":
                primary = "RANDOM"
            ls_count = st.ls_count or unit_num
            now = self.clock.now_us()
            tenant_id = tenant_repo.next_tenant_id(conn, now)
            units = [
                u
                for u in unit_repo.load_units(conn)
                if u.resource_pool_id in {p.resource_pool_id for p in pools}
            ]
            groups = sorted(
                {u.unit_group_id for u in units if u.resource_pool_id == pools[0].resource_pool_id}
            )
            ls_rows = []
            for i in range(ls_count):
                # Leaders spread over the zones of the first priority, round robin.
                ls_rows.append(
                    LsStatus(
                        tenant_id,
                        ls_repo.FIRST_USER_LS_ID + i,
                        unit_group_id=groups[i % len(groups)],
                        ls_group_id=ls_repo.FIRST_USER_LS_ID + (i % len(groups)),
                        primary_zone=levels[0][i % len(levels[0])],
                    )
                )
            tenant_repo.insert_tenant(conn, Tenant(tenant_id, name, zone_tuple, primary), now)
            unit_repo.grant_pools(conn, [p.resource_pool_id for p in pools], tenant_id, now)
            ls_repo.insert_ls_status(conn, ls_rows, now)
            event_repo.insert_events(
                conn,
                [
                    self._event(
                        now,
                        "create_tenant",
                        ("name", name),
                        ("tenant_id", tenant_id),
                        ("ls_count", ls_count),
                        ("primary_zone", primary),
                    )
                ],
                self.store.rs_addr,
            )
        # After the commit, not inside it: a reader between the bump and the commit cached
        # the layout without the new log streams under the new version for good, and the
        # reconciler dropped their replicas once the agents reported them (a loaded run).
        self.layout.changed()
        self.replicas.create_tenant_replicas(tenant_id)
        return tenant_id, ls_count

    def drop_tenant(self, name: str, *, force: bool = False, if_exists: bool = False) -> int:
        """DROP TENANT [FORCE]: delete the tenant, its log streams and replica rows, return its
        pools, then tell the agents to drop the replicas. Returns the tenant id (0 when IF
        EXISTS found none). Raises OB_TENANT_NOT_EXIST.

        OceanBase without FORCE may keep a dropped tenant in the recycle bin; there is no
        recycle bin here, so both forms drop at once."""
        name = name.lower()
        with self._lock, self.store.txn() as conn:
            t = tenant_repo.load_tenants(conn).get(name)
            if t is None:
                if if_exists:
                    return 0
                raise ObError("OB_TENANT_NOT_EXIST", name)
            now = self.clock.now_us()
            pool_ids = [
                p.resource_pool_id
                for p in unit_repo.load_pools(conn).values()
                if p.tenant_id == t.tenant_id
            ]
            tenant_repo.delete_tenant(conn, t.tenant_id)
            election_ref_repo.delete_tenant(conn, t.tenant_id)
            unit_repo.grant_pools(conn, pool_ids, -1, now)
            event_repo.insert_events(
                conn,
                [
                    self._event(
                        now,
                        "drop_tenant",
                        ("name", name),
                        ("tenant_id", t.tenant_id),
                        ("force", int(force)),
                    )
                ],
                self.store.rs_addr,
            )
        self.layout.changed()
        self.replicas.drop_tenant_replicas(t.tenant_id)
        return t.tenant_id
