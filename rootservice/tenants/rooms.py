"""The servers as unit placement candidates (SPEC.md sections 7 and 9; OceanBase's
``ObUnitManager`` load of each server).

Used by CREATE RESOURCE POOL (where do the new units go) and by the DELETE SERVER pre-check
(can the other servers of the zone hold this server's units). Sizes are bytes, CPU is cores.
"""

from __future__ import annotations

from collections.abc import Set
from typing import Any

from rootservice.db import unit_repo
from rootservice.servers.status import AdminStatus
from rootservice.tenants.placement import ServerRoom
from rootservice.tenants.ports import ServerDirectory, ZoneDirectory
from rootservice.tenants.vocabulary import affinity_of, demand_of


class ServerRooms:
    """Builds the :class:`ServerRoom` of every whitelisted server."""

    def __init__(self, servers: ServerDirectory, zones: ZoneDirectory) -> None:
        """Read capacities and health from ``servers``, zone status from ``zones``."""
        self.servers = servers
        self.zones = zones

    def rooms(self, conn: Any, *, exclude_usable: Set[str] | None = None) -> list[ServerRoom]:
        """Every whitelisted server as a placement candidate: capacity from its last
        heartbeat, what its units take (units migrating away still count on both ends, as in
        OceanBase) and the tenants / pools it hosts. ``usable`` = alive, NORMAL, not stopped,
        zone ACTIVE, and not in ``exclude_usable``. Reads units and pools on ``conn``."""
        configs = {c.unit_config_id: c for c in unit_repo.load_unit_configs(conn).values()}
        pools = {p.resource_pool_id: p for p in unit_repo.load_pools(conn).values()}
        rooms: dict[str, ServerRoom] = {}
        for s in self.servers.snapshot():
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
                    and self.zones.is_active(s.zone)
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
