"""The servers as unit placement candidates (docs/design/statements.md and docs/design/migration.md; OceanBase's
``ObUnitManager`` load of each server).

Used by CREATE RESOURCE POOL (where do the new units go), by the DELETE SERVER pre-check
(can the other servers of the zone hold this server's units) and by the re-plan of a
migration whose destination stalled or is drained (:mod:`rootservice.balancer.copy_replan`).
Sizes are bytes, CPU is cores.
"""

from __future__ import annotations

from collections.abc import Sequence, Set
from typing import Any

from rootservice.db import unit_repo
from rootservice.servers.status import AdminStatus
from rootservice.tenants.placement import Placement, ServerRoom, UnitRequest, place_units
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

    def place(self, conn: Any, units: Sequence[unit_repo.Unit], *, avoid: Set[str]) -> Placement:
        """Where ``units`` would go if they left their servers (``Unit.server``): every
        server as :meth:`rooms` builds them with ``avoid`` (``'ip:port'``) not usable, each
        unit's demand released from its server, then placed in order on another server of
        its zone (:func:`rootservice.tenants.placement.place_units`: capacity,
        anti-affinity, least load; OceanBase's ``ObUnitManager::choose_server_for_unit``
        with its excluded servers). Failures are in the result, not raised. Reads units,
        pools and configs on ``conn``."""
        rooms = self.rooms(conn, exclude_usable=avoid)
        configs = {c.unit_config_id: c for c in unit_repo.load_unit_configs(conn).values()}
        pools = {p.resource_pool_id: p for p in unit_repo.load_pools(conn).values()}
        by_key = {r.key: r for r in rooms}
        requests = []
        for u in units:
            pool = pools[u.resource_pool_id]
            d = demand_of(configs[pool.unit_config_id])
            aff = affinity_of(pool)
            if u.server in by_key:
                by_key[u.server].release(d, aff)
            requests.append(UnitRequest(u.unit_id, u.zone, d, aff, frozenset({*avoid, u.server})))
        return place_units(requests, rooms)
