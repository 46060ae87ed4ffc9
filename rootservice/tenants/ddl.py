"""Unit configs, resource pools and tenants: CREATE / DROP RESOURCE UNIT, RESOURCE POOL and
TENANT (OceanBase's ``ObUnitManager`` and the tenant part of ``ObDDLService``).

The manager validates, places units (:mod:`rootservice.tenants.placement`), writes the rows in one
fenced transaction and, for a tenant, hands its log streams to the
:class:`rootservice.tenants.log_streams.LsManager`, which tells the agents to create the replicas.
Every statement either changes everything it names or nothing. ``version`` grows with every
committed change so that readers can cache the tenant layout.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from obcommon.errors import ObError
from obcommon.sizes import parse_size
from rootservice.db import event_repo, ls_repo, tenant_repo, unit_repo
from rootservice.db.event_repo import Event
from rootservice.db.ls_repo import LsStatus
from rootservice.db.tenant_repo import Tenant
from rootservice.db.unit_repo import ResourcePool, Unit, UnitConfig
from rootservice.servers.status import AdminStatus
from rootservice.tenants.placement import GIB, Demand, ServerRoom, UnitRequest, place_units
from sql import ast

if TYPE_CHECKING:
    from rootservice.servers.manager import ServerManager
    from rootservice.tenants.log_streams import LsManager

log = logging.getLogger(__name__)

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")

# OceanBase 4.x lower bounds of a unit config (ObUnitResource: 1 CPU, 1G memory, 2G log
# disk); LOG_DISK_SIZE defaults to three times MEMORY_SIZE.
MIN_UNIT_CPU = 1.0
MIN_UNIT_MEMORY = 1 * GIB
MIN_UNIT_LOG_DISK = 2 * GIB
DEFAULT_LOG_DISK_FACTOR = 3
DEFAULT_MAX_IOPS = (1 << 63) - 1
MAX_UNIT_NUM = 1000
MAX_LS_COUNT = 1024

UNIT_OPTIONS = (
    "max_cpu",
    "min_cpu",
    "memory_size",
    "log_disk_size",
    "max_iops",
    "min_iops",
    "iops_weight",
)


def check_name(kind: str, name: str) -> str:
    """An object name: letters, digits, ``_``, not starting with a digit, <= 128 chars.
    Raises ``ObError(OB_INVALID_ARGUMENT)``."""
    if not _NAME_RE.match(name):
        raise ObError("OB_INVALID_ARGUMENT", f"{kind} name '{name[:140]}'")
    return name.lower()


def parse_primary_zone(text: str, zones: tuple[str, ...]) -> list[list[str]]:
    """``'z1;z2,z3'`` -> ``[['z1'], ['z2', 'z3']]`` (``;`` separates priorities, ``,`` zones
    of equal priority); ``RANDOM`` -> every zone at one priority. Raises
    OB_PRIMARY_ZONE_NOT_IN_ZONE_LIST for a zone outside ``zones`` and OB_INVALID_ARGUMENT for
    an empty part or a zone named twice."""
    if text.strip().upper() == "RANDOM":
        return [list(zones)]
    levels: list[list[str]] = []
    seen: set[str] = set()
    for part in text.split(";"):
        level = [z.strip() for z in part.split(",")]
        if not all(level):
            raise ObError("OB_INVALID_ARGUMENT", f"primary_zone '{text}'")
        for z in level:
            if z not in zones:
                raise ObError("OB_PRIMARY_ZONE_NOT_IN_ZONE_LIST", z, f"'{';'.join(zones)}'")
            if z in seen:
                raise ObError(
                    "OB_INVALID_ARGUMENT", f"primary_zone '{text}'", detail=f"zone {z} twice"
                )
            seen.add(z)
        levels.append(level)
    return levels


def zone_priority(primary_zone: str, zones: tuple[str, ...]) -> dict[str, int]:
    """Zone -> priority (0 is the most preferred) of a tenant's primary zone; zones outside
    the primary zone get ``len(levels)``. A malformed value counts as RANDOM."""
    try:
        levels = parse_primary_zone(primary_zone, zones)
    except ObError:
        levels = [list(zones)]
    out = {z: len(levels) for z in zones}
    for i, level in enumerate(levels):
        for z in level:
            out[z] = i
    return out


def demand_of(c: UnitConfig) -> Demand:
    """What a unit of config ``c`` takes from its server."""
    return Demand(c.min_cpu, c.max_cpu, c.memory_size, c.log_disk_size)


class TenantManager:
    """CREATE / DROP of unit configs, resource pools and tenants.

    ``manager`` is the server whitelist (capacities and health for placement); ``ls`` the
    log-stream manager that creates and drops replicas on the agents. Statements are
    serialised by one lock: two pools created at once must not both count the same free
    memory.
    """

    def __init__(self, manager: ServerManager, ls: LsManager) -> None:
        """Work on ``manager``'s store, clock and whitelist."""
        self.manager = manager
        self.store = manager.store
        self.clock = manager.clock
        self.ls = ls
        self.version = 0
        self._lock = threading.Lock()

    # --- helpers ---------------------------------------------------------------------------

    def _require(self) -> None:
        if not self.manager.term.in_service:
            raise ObError("OB_RS_NOT_MASTER", detail="the root service is not in service")

    def _changed(self) -> None:
        self.version += 1

    def _event(self, now: int, event: str, *values: tuple[str, Any]) -> Event:
        return Event(now, "tenant", event, values)

    def server_rooms(
        self, conn: Any, *, exclude_usable: set[str] | None = None
    ) -> list[ServerRoom]:
        """Every whitelisted server as a placement candidate: capacity from its last
        heartbeat, what its units take (units migrating away still count on both ends, as in
        OceanBase) and the tenants / pools it hosts. ``usable`` = alive, NORMAL, not stopped,
        zone ACTIVE, and not in ``exclude_usable``."""
        configs = {c.unit_config_id: c for c in unit_repo.load_unit_configs(conn).values()}
        pools = {p.resource_pool_id: p for p in unit_repo.load_pools(conn).values()}
        rooms: dict[str, ServerRoom] = {}
        for s in self.manager.snapshot():
            r = s.resource_info
            rooms[s.key] = ServerRoom(
                key=s.key,
                zone=s.zone,
                cpu_total=float(r.cpu_total),
                mem_total=int(r.mem_total),
                log_disk_total=int(r.log_disk_total),
                usable=(
                    s.is_alive()
                    and s.admin_status is AdminStatus.NORMAL
                    and not s.is_stopped()
                    and self.manager.zones.is_active(s.zone)
                    and s.key not in (exclude_usable or set())
                ),
            )
        for u in unit_repo.load_units(conn):
            pool = pools.get(u.resource_pool_id)
            if pool is None:
                continue
            d = demand_of(configs[pool.unit_config_id])
            aff = affinity_of(pool)
            for key in {u.server, u.migrate_from} - {""}:
                room = rooms.get(key)
                if room is not None:
                    room.take(d, aff)
        return list(rooms.values())

    # --- resource units --------------------------------------------------------------------

    def create_unit_config(self, st: ast.CreateResourceUnit) -> bool:
        """CREATE RESOURCE UNIT. Returns False when IF NOT EXISTS found one already.

        Raises OB_INVALID_ARGUMENT (bad name, option twice, bad value, MIN_CPU > MAX_CPU,
        MIN_IOPS > MAX_IOPS), OB_INVALID_RESOURCE_UNIT (below OceanBase's minimum: 1 CPU, 1G
        memory, 2G log disk), OB_RESOURCE_UNIT_EXIST."""
        self._require()
        name = check_name("resource unit", st.name)
        opts: dict[str, Any] = {}
        for k, v in st.options:
            if k in opts:
                raise ObError("OB_INVALID_ARGUMENT", f"{k.upper()} given twice")
            opts[k] = v
        for required in ("max_cpu", "memory_size"):
            if required not in opts:
                raise ObError(
                    "OB_INVALID_ARGUMENT", "resource unit", detail=f"{required.upper()} is required"
                )
        max_cpu = _number("MAX_CPU", opts["max_cpu"])
        min_cpu = _number("MIN_CPU", opts.get("min_cpu", max_cpu))
        memory = _size("MEMORY_SIZE", opts["memory_size"])
        log_disk = _size(
            "LOG_DISK_SIZE", opts.get("log_disk_size", memory * DEFAULT_LOG_DISK_FACTOR)
        )
        max_iops = _count("MAX_IOPS", opts.get("max_iops", DEFAULT_MAX_IOPS))
        min_iops = _count("MIN_IOPS", opts.get("min_iops", max_iops))
        iops_weight = _count("IOPS_WEIGHT", opts.get("iops_weight", 0))
        for label, value, minimum, shown in (
            ("min_cpu", min_cpu, MIN_UNIT_CPU, "1"),
            ("max_cpu", max_cpu, MIN_UNIT_CPU, "1"),
            ("memory_size", memory, MIN_UNIT_MEMORY, "1G"),
            ("log_disk_size", log_disk, MIN_UNIT_LOG_DISK, "2G"),
        ):
            if value < minimum:
                raise ObError("OB_INVALID_RESOURCE_UNIT", label, shown)
        if min_cpu > max_cpu:
            raise ObError("OB_INVALID_ARGUMENT", "MIN_CPU", detail="MIN_CPU exceeds MAX_CPU")
        if min_iops > max_iops:
            raise ObError("OB_INVALID_ARGUMENT", "MIN_IOPS", detail="MIN_IOPS exceeds MAX_IOPS")
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
                    cid, name, max_cpu, min_cpu, memory, log_disk, max_iops, min_iops, iops_weight
                ),
                now,
            )
            event_repo.insert_events(
                conn,
                [self._event(now, "create_resource_unit", ("name", name), ("id", cid))],
                self.store.rs_addr,
            )
            self._changed()
        return True

    def drop_unit_config(self, st: ast.DropResourceUnit) -> bool:
        """DROP RESOURCE UNIT. Returns False when IF EXISTS found none. Raises
        OB_RESOURCE_UNIT_NOT_EXIST, OB_RESOURCE_UNIT_IS_REFERENCED (a pool uses it)."""
        self._require()
        name = st.name.lower()
        with self._lock, self.store.txn() as conn:
            c = unit_repo.load_unit_configs(conn).get(name)
            if c is None:
                if st.if_exists:
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
            self._changed()
        return True

    # --- resource pools --------------------------------------------------------------------

    def create_pool(self, st: ast.CreateResourcePool) -> list[int]:
        """CREATE RESOURCE POOL: place UNIT_NUM units in each zone of ZONE_LIST (default:
        every zone). Returns the new unit ids ([] when IF NOT EXISTS found the pool).

        Raises OB_INVALID_ARGUMENT (bad name, UNIT / UNIT_NUM missing, UNIT_NUM out of
        1..1000, a zone twice), OB_RESOURCE_UNIT_NOT_EXIST, OB_ZONE_INFO_NOT_EXIST,
        OB_RESOURCE_POOL_EXIST, OB_ZONE_SERVER_NOT_ENOUGH (fewer usable servers than UNIT_NUM
        in a zone), OB_ZONE_RESOURCE_NOT_ENOUGH (servers without room; the message names the
        resource short)."""
        self._require()
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
                if self.manager.zones.get(z) is None:
                    raise ObError("OB_ZONE_INFO_NOT_EXIST", z)
        else:
            zones = tuple(sorted(z.zone for z in self.manager.zones.all() if z.zone))
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
            placement = place_units(requests, self.server_rooms(conn))
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
            self._changed()
        return [u.unit_id for u in units]

    def drop_pool(self, st: ast.DropResourcePool) -> bool:
        """DROP RESOURCE POOL with its units. Returns False when IF EXISTS found none. Raises
        OB_RESOURCE_POOL_NOT_EXIST, OB_RESOURCE_POOL_ALREADY_GRANTED (a tenant uses it)."""
        self._require()
        name = st.name.lower()
        with self._lock, self.store.txn() as conn:
            pool = unit_repo.load_pools(conn).get(name)
            if pool is None:
                if st.if_exists:
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
            self._changed()
        return True

    # --- tenants ---------------------------------------------------------------------------

    def create_tenant(self, st: ast.CreateTenant) -> tuple[int, int]:
        """CREATE TENANT: grant the pools, create LS_COUNT log streams (default one per unit
        group) with one FULL replica per zone on the server of the unit that serves it, and
        wait (up to ``tenant_create_timeout``) until each has a leader in the primary zone.
        Returns ``(tenant_id, ls_count)``; ``(0, 0)`` when IF NOT EXISTS found the tenant.

        Raises OB_INVALID_ARGUMENT (bad name, a pool twice, pools sharing a zone or with
        different UNIT_NUM, LS_COUNT out of 1..1024), OB_EMPTY_RESOURCE_POOL_LIST,
        OB_RESOURCE_POOL_NOT_EXIST, OB_RESOURCE_POOL_ALREADY_GRANTED, OB_TENANT_EXIST,
        OB_PRIMARY_ZONE_NOT_IN_ZONE_LIST, and OB_TIMEOUT when the tenant was created but some
        log stream has no leader yet (the reconciler keeps working on it)."""
        self._require()
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
            self._changed()
        self.ls.create_tenant_replicas(tenant_id)
        return tenant_id, ls_count

    def drop_tenant(self, st: ast.DropTenant) -> int:
        """DROP TENANT [FORCE]: delete the tenant, its log streams and replica rows, return its
        pools, then tell the agents to drop the replicas. Returns the tenant id (0 when IF
        EXISTS found none). Raises OB_TENANT_NOT_EXIST.

        OceanBase without FORCE may keep a dropped tenant in the recycle bin; there is no
        recycle bin here, so both forms drop at once."""
        self._require()
        name = st.name.lower()
        with self._lock, self.store.txn() as conn:
            t = tenant_repo.load_tenants(conn).get(name)
            if t is None:
                if st.if_exists:
                    return 0
                raise ObError("OB_TENANT_NOT_EXIST", name)
            now = self.clock.now_us()
            pool_ids = [
                p.resource_pool_id
                for p in unit_repo.load_pools(conn).values()
                if p.tenant_id == t.tenant_id
            ]
            tenant_repo.delete_tenant(conn, t.tenant_id)
            unit_repo.grant_pools(conn, pool_ids, -1, now)
            event_repo.insert_events(
                conn,
                [
                    self._event(
                        now,
                        "drop_tenant",
                        ("name", name),
                        ("tenant_id", t.tenant_id),
                        ("force", int(st.force)),
                    )
                ],
                self.store.rs_addr,
            )
            self._changed()
        self.ls.drop_tenant_replicas(t.tenant_id)
        return t.tenant_id


def affinity_of(pool: ResourcePool) -> Hashable:
    """Anti-affinity key of a pool's units: its tenant once granted, else the pool itself."""
    return ("tenant", pool.tenant_id) if pool.tenant_id != -1 else ("pool", pool.resource_pool_id)


def _number(label: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ObError("OB_INVALID_ARGUMENT", label)
    try:
        out = float(value)
    except ValueError:
        raise ObError("OB_INVALID_ARGUMENT", f"{label} '{value}'") from None
    if out != out or out < 0 or out > float(DEFAULT_MAX_IOPS):
        raise ObError("OB_INVALID_ARGUMENT", f"{label} {value}")
    return out


def _count(label: str, value: Any) -> int:
    """A non-negative integer option up to 2**63-1 (floats are truncated, as OceanBase does)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if not 0 <= value <= DEFAULT_MAX_IOPS:
            raise ObError("OB_INVALID_ARGUMENT", f"{label} {value}")
        return value
    return min(int(_number(label, value)), DEFAULT_MAX_IOPS)


def _size(label: str, value: Any) -> int:
    try:
        return parse_size(value)
    except ValueError as e:
        raise ObError("OB_INVALID_ARGUMENT", f"{label} '{value}'", detail=str(e)) from None
