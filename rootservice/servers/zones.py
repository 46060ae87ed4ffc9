"""Zones in memory, mirrored write-through to ``__all_zone`` (docs/design/servers.md and docs/design/statements.md).

OceanBase keeps zone state in ``__all_zone`` rows (``status``, ``region``, ``idc``) and caches
it in the RS's zone manager; ADD ZONE creates a zone INACTIVE, START ZONE makes it ACTIVE.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Protocol

from obcommon.clock import Clock
from obcommon.errors import ObError
from rootservice.db import event_repo, zone_repo
from rootservice.db.event_repo import Event
from rootservice.db.zone_repo import DEFAULT_REGION, READ_WRITE, ZONE_TYPES, ZoneInfo
from rootservice.ha.store import MetaStore
from rootservice.servers.status import check_zone_name

# OceanBase's common::MAX_ZONE_NUM (src/share/ob_define.h): ADD ZONE refuses a zone beyond it.
MAX_ZONE_NUM = 64

# The LOG_USER_ERROR text of OB_STOP_SERVER_IN_MULTIPLE_ZONES in ObRootService::stop_zone and
# ObServerZoneOpService::stop_server_precheck.
MULTIPLE_ZONES_MESSAGE = "cannot stop server or stop zone in multiple zones"

# ObRootService::try_check_encryption_zone_cond's LOG_USER_ERROR: an Encryption zone needs a
# master key of the sys tenant, and this RS has no transparent data encryption, so none.
ENCRYPTION_ZONE_MESSAGE = "add encryption zone without available master key in sys tenant"


def parse_zone_type(text: str) -> str:
    """A ZONE_TYPE value as OceanBase spells it (``ReadWrite``, ``ReadOnly``,
    ``Encryption``), matched without regard to case as common::str_to_zone_type does.
    Raises OB_INVALID_ARGUMENT for any other value (ObAdminZoneResolver)."""
    for name in ZONE_TYPES:
        if text.lower() == name.lower():
            return name
    raise ObError(
        "OB_INVALID_ARGUMENT",
        "ZONE_TYPE",
        detail=f"'{text}' is not one of {', '.join(ZONE_TYPES)}",
    )


def zone_changes(old: dict[str, ZoneInfo], new: dict[str, ZoneInfo]) -> list[str]:
    """What differs between two sets of zones, one line per difference, in zone order:
    ``zone z4 added``, ``zone z4 removed``, ``zone z1 status ACTIVE -> INACTIVE``."""
    out: list[str] = []
    for z in sorted(old.keys() | new.keys()):
        a, b = old.get(z), new.get(z)
        if a is None:
            out.append(f"zone {z} added")
        elif b is None:
            out.append(f"zone {z} removed")
        else:
            for f in ("status", "region", "idc", "zone_type"):
                if getattr(a, f) != getattr(b, f):
                    out.append(f"zone {z} {f} {getattr(a, f)!r} -> {getattr(b, f)!r}")
    return out


class ServerZones(Protocol):
    """Where the servers are (the :class:`rootservice.servers.whitelist.Whitelist`)."""

    def server_count(self, zone: str, /) -> tuple[int, int]:
        """``(alive, not_alive)``: how many whitelisted servers of ``zone`` are alive (their
        lease not expired) and not, as OceanBase's ObRootUtils::get_server_count."""
        ...

    def stopped_server_zones(self) -> list[str]:
        """The zone of every whitelisted server whose ``stop_time`` is set."""
        ...


class ZoneManager:
    """Owns the zone cache and the zone statements. ``servers`` counts the servers of a zone
    (DELETE ZONE refuses a zone that still has servers) and names the zones with a stopped
    server (STOP ZONE refuses while another zone has one)."""

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
        return None if z is None else replace(z)

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
            return [replace(z) for z in self._zones.values()]

    # --- loading --------------------------------------------------------------------------

    def replace_all(self, zones: dict[str, ZoneInfo]) -> None:
        """Swap in zones read from the table (load_server_manager / bootstrap)."""
        with self._lock:
            self._zones = dict(zones)

    def snapshot(self) -> dict[str, ZoneInfo]:
        """Copies of the cached zones by name (what ROOT_INSPECTION compares with the table)."""
        with self._lock:
            return {z: replace(i) for z, i in self._zones.items()}

    def reload(self) -> list[str]:
        """ALTER SYSTEM RELOAD ZONE (ObZoneManagerBase::reload): re-read ``__all_zone`` and
        swap it in, under the write lock so no zone statement interleaves. Returns what
        changed (:func:`zone_changes`); one event ``admin_reload_zone`` with the count, as
        ObRootService::admin_reload_zone adds one. Raises ``ObError`` of the database."""
        with self.store.write_lock:
            with self.store.read() as conn:
                fresh = zone_repo.load_zones(conn)
            changes = zone_changes(self.snapshot(), fresh)
            now = self.clock.now_us()
            with self.store.txn() as conn:
                ev = Event(now, "root_service", "admin_reload_zone", (("changes", len(changes)),))
                ev.extra_info = "; ".join(changes)
                event_repo.insert_events(conn, [ev], self.store.rs_addr)
            self.replace_all(fresh)
        return changes

    # --- ALTER SYSTEM ... ZONE -------------------------------------------------------------
    # Each statement follows OceanBase's ObRootService::{add,delete,start,stop,alter}_zone and
    # ObZoneManagerBase::{add,delete,start,stop,alter}_zone (src/rootserver/ob_root_service.cpp,
    # src/rootserver/ob_zone_manager.cpp); docs/ZONES.md lists every refusal with its source.

    def add_zone(
        self, zone: str, region: str | None, idc: str | None, zone_type: str | None = None
    ) -> None:
        """ADD ZONE: a new zone, INACTIVE until START ZONE; region ``DEFAULT_REGION`` and type
        ReadWrite when not given. Raises OB_INVALID_ARGUMENT (bad name or ZONE_TYPE),
        OB_OP_NOT_ALLOW (an Encryption zone: no master key, ObRootService::
        try_check_encryption_zone_cond), OB_NOT_SUPPORTED (a ReadOnly zone, refused by
        ObZoneManagerBase::add_zone since OceanBase 2.2), OB_OVER_ZONE_NUM_LIMIT (already
        ``MAX_ZONE_NUM`` zones), OB_ENTRY_EXIST (the zone exists, whatever its status)
        (ObZoneManagerBase::add_zone, in that order)."""
        z = check_zone_name(zone)
        ztype = READ_WRITE if zone_type is None else parse_zone_type(zone_type)
        if ztype == "Encryption":
            raise ObError(
                "OB_OP_NOT_ALLOW",
                ENCRYPTION_ZONE_MESSAGE,
                detail="this RS has no transparent data encryption, so no master key",
            )
        if ztype == "ReadOnly":
            raise ObError(
                "OB_NOT_SUPPORTED",
                "ZONE_TYPE 'ReadOnly'",
                detail="OceanBase refuses read-only zones since 2.2; use ReadWrite",
            )
        info = ZoneInfo(
            z, "INACTIVE", check_zone_name(region) if region else DEFAULT_REGION, idc or "", ztype
        )
        with self.store.write_lock:
            if len(self._zones) >= MAX_ZONE_NUM:
                raise ObError("OB_OVER_ZONE_NUM_LIMIT")
            if z in self._zones:
                raise ObError("OB_ENTRY_EXIST")
            self._write(
                info,
                "add_zone",
                ("region", info.region),
                ("idc", info.idc),
                ("zone_type", info.zone_type),
            )

    def start_zone(self, zone: str) -> None:
        """START ZONE: INACTIVE -> ACTIVE. Raises OB_ENTRY_NOT_EXIST (unknown zone),
        OB_ZONE_STATUS_NOT_MATCH (already ACTIVE) (ObZoneManagerBase::start_zone)."""
        z = check_zone_name(zone)
        with self.store.write_lock:
            cur = self._zones.get(z)
            if cur is None:
                raise ObError("OB_ENTRY_NOT_EXIST")
            if cur.active:
                raise ObError("OB_ZONE_STATUS_NOT_MATCH")
            self._write(replace(cur, status="ACTIVE"), "start_zone")

    def check_stop_zone(self, zone: str) -> bool:
        """The zone rules of STOP / FORCE STOP ZONE before anything changes
        (ObRootService::stop_zone): False when ``zone`` is already INACTIVE (the statement then
        succeeds without a change, so it can be retried until it succeeds), True when it is to
        be stopped. Raises OB_ENTRY_NOT_EXIST with "zone not exist" (unknown zone),
        OB_STOP_SERVER_IN_MULTIPLE_ZONES with "cannot stop server or stop zone in multiple
        zones" when :meth:`have_other_stop_task` (ObRootUtils::have_other_stop_task)."""
        z = check_zone_name(zone)
        cur = self._zones.get(z)
        if cur is None:
            raise ObError("OB_ENTRY_NOT_EXIST", "zone not exist")
        if not cur.active:
            return False
        if self.have_other_stop_task(z):
            raise ObError("OB_STOP_SERVER_IN_MULTIPLE_ZONES", MULTIPLE_ZONES_MESSAGE)
        return True

    def have_other_stop_task(self, zone: str) -> bool:
        """OceanBase's ObRootUtils::have_other_stop_task (src/rootserver/ob_root_utils.cpp):
        True when a server of another zone is stopped (``stop_time > 0``) or another zone is
        INACTIVE. STOP SERVER and STOP ZONE both refuse then, so at most one zone is ever
        stopped."""
        if any(s_zone != zone for s_zone in self._servers.stopped_server_zones()):
            return True
        with self._lock:
            return any(o.zone != zone and not o.active for o in self._zones.values())

    def stop_zone(self, zone: str, *, force: bool = False, isolate: bool = False) -> None:
        """STOP / FORCE STOP / ISOLATE ZONE: ACTIVE -> INACTIVE, after :meth:`check_stop_zone`
        (re-run here under the write lock; ISOLATE skips its other-stopped-zone rule, as
        ObRootService::stop_zone does); an INACTIVE zone is left as it is. Refuses to stop
        the last ACTIVE zone with OB_OP_NOT_ALLOW "Operation not allowed now"
        (ObZoneManagerBase::stop_zone). The checks of the zone's servers are the caller's
        (:meth:`rootservice.servers.admin.ServerAdmin.stop_zone`,
        :class:`rootservice.servers.zone_isolation.ZoneIsolation`). Raises
        OB_ENTRY_NOT_EXIST, OB_STOP_SERVER_IN_MULTIPLE_ZONES, OB_OP_NOT_ALLOW."""
        z = check_zone_name(zone)
        with self.store.write_lock:
            cur = self._zones.get(z)
            if isolate:
                if cur is None:
                    raise ObError("OB_ENTRY_NOT_EXIST", "zone not exist")
                if not cur.active:
                    return
            elif not self.check_stop_zone(z):
                return
            cur = self._zones[z]
            if sum(1 for o in self._zones.values() if o.active) <= 1:
                raise ObError("OB_OP_NOT_ALLOW")
            event = "isolate_zone" if isolate else "force_stop_zone" if force else "stop_zone"
            self._write(replace(cur, status="INACTIVE"), event)

    def delete_zone(self, zone: str) -> None:
        """DELETE ZONE. Raises OB_ERR_ZONE_NOT_EMPTY (servers in it, counted alive / not
        alive as OceanBase's ObRootUtils::get_server_count), then OB_ENTRY_NOT_EXIST (unknown
        zone), OB_ZONE_STATUS_NOT_MATCH (not INACTIVE) (ObRootService::delete_zone, then
        ObZoneManagerBase::delete_zone)."""
        z = check_zone_name(zone)
        with self.store.write_lock:
            alive, not_alive = self._servers.server_count(z)
            if alive or not_alive:
                raise ObError("OB_ERR_ZONE_NOT_EMPTY", str(alive), str(not_alive))
            cur = self._zones.get(z)
            if cur is None:
                raise ObError("OB_ENTRY_NOT_EXIST")
            if cur.active:
                raise ObError("OB_ZONE_STATUS_NOT_MATCH")
            now = self.clock.now_us()
            with self.store.txn() as conn:
                zone_repo.delete_zone(conn, z)
                event_repo.insert_events(
                    conn, [Event(now, "zone", "delete_zone", (("zone", z),))], self.store.rs_addr
                )
            with self._lock:
                del self._zones[z]

    def alter_zone(
        self, zone: str, region: str | None, idc: str | None, zone_type: str | None = None
    ) -> None:
        """ALTER | CHANGE | MODIFY ZONE ... [SET] REGION / IDC: change the attributes given,
        in any status. Raises OB_INVALID_ARGUMENT (bad name or ZONE_TYPE, no attribute
        given), OB_ENTRY_NOT_EXIST (unknown zone), OB_NOT_SUPPORTED "alter zone type" when
        ZONE_TYPE is given, with nothing changed (ObZoneManagerBase::alter_zone refuses it
        inside the transaction that would change REGION / IDC, which is rolled back)."""
        z = check_zone_name(zone)
        if region is None and idc is None and zone_type is None:
            raise ObError("OB_INVALID_ARGUMENT", "ALTER ZONE", detail="give REGION or IDC")
        if zone_type is not None:
            parse_zone_type(zone_type)
        with self.store.write_lock:
            cur = self._zones.get(z)
            if cur is None:
                raise ObError("OB_ENTRY_NOT_EXIST")
            if zone_type is not None:
                raise ObError(
                    "OB_NOT_SUPPORTED",
                    "alter zone type",
                    detail=f"zone '{z}' stays {cur.zone_type}",
                )
            new = replace(
                cur,
                region=cur.region
                if region is None
                else (check_zone_name(region) if region else DEFAULT_REGION),
                idc=cur.idc if idc is None else idc,
            )
            self._write(new, "alter_zone", ("region", new.region), ("idc", new.idc))

    def _write(self, info: ZoneInfo, event: str, *values: tuple[str, str]) -> None:
        """Write-through (docs/design/servers.md#memory-and-the-table): the zone's rows and one ``zone`` event in one
        fenced transaction, then the cache. The caller holds the store's write lock."""
        now = self.clock.now_us()
        with self.store.txn() as conn:
            zone_repo.upsert_zone(conn, info, now)
            event_repo.insert_events(
                conn,
                [Event(now, "zone", event, (("zone", info.zone), *values))],
                self.store.rs_addr,
            )
        with self._lock:
            self._zones[info.zone] = info
