"""Zones in memory, mirrored write-through to ``__all_zone`` (SPEC.md sections 4 and 7).

OceanBase keeps zone state in ``__all_zone`` rows (``status``, ``region``, ``idc``) and caches
it in the RS's zone manager; ADD ZONE creates a zone INACTIVE, START ZONE makes it ACTIVE.
"""

from __future__ import annotations

import threading
from typing import Protocol

from obcommon.clock import Clock
from obcommon.errors import ObError
from rootservice.db import event_repo, zone_repo
from rootservice.db.event_repo import Event
from rootservice.db.zone_repo import DEFAULT_REGION, ZoneInfo
from rootservice.ha.store import MetaStore
from rootservice.servers.status import check_zone_name


class ServerZones(Protocol):
    """Where the servers are (the :class:`rootservice.servers.whitelist.Whitelist`)."""

    def server_zones(self) -> list[str]:
        """The zone of every whitelisted server."""
        ...


class ZoneManager:
    """Owns the zone cache. ``servers`` gives the zone of every whitelisted server, so DELETE
    ZONE can refuse a zone that still has servers."""

    def __init__(self, clock: Clock, store: MetaStore, servers: ServerZones) -> None:
        """Start with an empty cache, filled by :meth:`replace_all` on load or bootstrap."""
        self.clock = clock
        self.store = store
        self._servers = servers
        self._zones: dict[str, ZoneInfo] = {}
        self._lock = threading.Lock()

    # --- reads (heartbeat path: dict lookups only) ----------------------------------------

    def get(self, zone: str) -> ZoneInfo | None:
        """A copy of zone ``zone``'s info (status / region / idc), or None when it is unknown."""
        z = self._zones.get(zone)
        return None if z is None else ZoneInfo(z.zone, z.status, z.region, z.idc)

    def exists(self, zone: str) -> bool:
        """True when ``zone`` is cached, whatever its status (else ``OB_ZONE_INFO_NOT_EXIST``)."""
        return zone in self._zones

    def is_active(self, zone: str) -> bool:
        """True when ``zone`` exists and is ``ACTIVE`` (ADD SERVER's ``OB_ZONE_NOT_ACTIVE``)."""
        z = self._zones.get(zone)
        return z is not None and z.active

    def all(self) -> list[ZoneInfo]:
        """Copies of every cached zone, in insertion order."""
        with self._lock:
            return [ZoneInfo(z.zone, z.status, z.region, z.idc) for z in self._zones.values()]

    # --- loading --------------------------------------------------------------------------

    def replace_all(self, zones: dict[str, ZoneInfo]) -> None:
        """Swap in zones read from the table (load_server_manager / bootstrap)."""
        with self._lock:
            self._zones = dict(zones)

    # --- ALTER SYSTEM ... ZONE -------------------------------------------------------------

    def add_zone(self, zone: str, region: str | None, idc: str | None) -> None:
        """ADD ZONE: new zone, INACTIVE until START ZONE. Raises OB_ENTRY_EXIST,
        OB_INVALID_ARGUMENT."""
        z = check_zone_name(zone)
        info = ZoneInfo(
            z, "INACTIVE", check_zone_name(region) if region else DEFAULT_REGION, idc or ""
        )
        with self.store.write_lock:
            if z in self._zones:
                raise ObError("OB_ENTRY_EXIST", f"zone '{z}' already exists")
            now = self.clock.now_us()
            with self.store.txn() as conn:
                zone_repo.upsert_zone(conn, info, now)
                event_repo.insert_events(
                    conn,
                    [Event(now, "zone", "add_zone", (("zone", z), ("region", info.region)))],
                    self.store.rs_addr,
                )
            with self._lock:
                self._zones[z] = info

    def set_status(self, zone: str, active: bool, *, force: bool = False) -> None:
        """START ZONE (active) / STOP / FORCE STOP ZONE. STOP is refused while another zone is
        not ACTIVE (a second stopped zone could cost majorities); FORCE STOP skips that.
        Raises OB_ZONE_INFO_NOT_EXIST, OB_OP_NOT_ALLOW."""
        z = check_zone_name(zone)
        with self.store.write_lock:
            cur = self._zones.get(z)
            if cur is None:
                raise ObError("OB_ZONE_INFO_NOT_EXIST", z)
            if not active and not force:
                others = sorted(
                    o.zone for o in self._zones.values() if o.zone != z and not o.active
                )
                if others:
                    raise ObError(
                        "OB_OP_NOT_ALLOW", f"stop zone '{z}' while zone '{others[0]}' is not active"
                    )
            new = ZoneInfo(z, "ACTIVE" if active else "INACTIVE", cur.region, cur.idc)
            now = self.clock.now_us()
            event = "start_zone" if active else ("force_stop_zone" if force else "stop_zone")
            with self.store.txn() as conn:
                zone_repo.upsert_zone(conn, new, now)
                event_repo.insert_events(
                    conn, [Event(now, "zone", event, (("zone", z),))], self.store.rs_addr
                )
            with self._lock:
                self._zones[z] = new

    def delete_zone(self, zone: str) -> None:
        """DELETE ZONE: refused while servers are in it. Raises OB_ZONE_INFO_NOT_EXIST,
        OB_OP_NOT_ALLOW."""
        z = check_zone_name(zone)
        with self.store.write_lock:
            if z not in self._zones:
                raise ObError("OB_ZONE_INFO_NOT_EXIST", z)
            n = sum(1 for s in self._servers.server_zones() if s == z)
            if n:
                raise ObError("OB_OP_NOT_ALLOW", f"delete zone '{z}' with {n} server(s) in it")
            now = self.clock.now_us()
            with self.store.txn() as conn:
                zone_repo.delete_zone(conn, z)
                event_repo.insert_events(
                    conn, [Event(now, "zone", "delete_zone", (("zone", z),))], self.store.rs_addr
                )
            with self._lock:
                del self._zones[z]
