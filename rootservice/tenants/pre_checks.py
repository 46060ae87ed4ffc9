"""The tenant layer's pre-checks of DELETE / STOP / FORCE STOP / ISOLATE SERVER
(docs/design/statements.md; OceanBase's ``check_majority_and_log_in_sync_`` and the DELETE SERVER unit check).

Each check raises ``ObError`` and changes nothing; the server manager runs it before it writes
anything. Times are microseconds since the epoch.
"""

from __future__ import annotations

import logging

from obcommon.clock import Clock
from obcommon.errors import ObError
from rootservice.config import RsSettings
from rootservice.db import unit_repo
from rootservice.ha.store import MetaStore
from rootservice.servers.status import ServerStatus, StopMode
from rootservice.tenants.host_health import HostHealth
from rootservice.tenants.ports import HeartbeatRequester, ServerDirectory, Sleep, ZoneDirectory
from rootservice.tenants.reports import LsView, ReplicaReports, effective_members, in_sync
from rootservice.tenants.rooms import ServerRooms
from rootservice.tenants.stop_rules import (
    PRIMARY_REGION_MESSAGE,
    TenantZones,
    primary_region_stopped,
    tenants_on,
)
from rootservice.tenants.topology import LayoutCache
from rootservice.tenants.vocabulary import parse_primary_zone

log = logging.getLogger(__name__)

# Poll period (seconds) of STOP's retries: fresh reports are requested before each try.
RETRY_S = 0.5


class ServerPreChecks:
    """``check_delete`` / ``check_stop`` (and ``check_isolate``) of the server statements."""

    def __init__(
        self,
        *,
        store: MetaStore,
        servers: ServerDirectory,
        zones: ZoneDirectory,
        heartbeats: HeartbeatRequester,
        health: HostHealth,
        rooms: ServerRooms,
        layout: LayoutCache,
        reports: ReplicaReports,
        clock: Clock,
        settings: RsSettings,
        sleep: Sleep,
    ) -> None:
        """Wire the collaborators; ``sleep`` waits between STOP's retries (seconds)."""
        self.store = store
        self.servers = servers
        self.zones = zones
        self.heartbeats = heartbeats
        self.health = health
        self.rooms = rooms
        self.layout = layout
        self.reports = reports
        self.clock = clock
        self.settings = settings
        self.sleep = sleep

    def check_delete(self, targets: list[ServerStatus]) -> None:
        """DELETE SERVER: every LS has a leader, else OB_OP_NOT_ALLOW naming the first LS
        without one (checked first: an LS that lost its majority blocks every removal, and
        its way out is RECOVER LS); the other active servers of each zone can
        hold every unit of the deleted servers (CPU, memory, log disk, one unit per tenant
        and server), else OB_DELETE_SERVER_NOT_ALLOWED naming the unit and the resource
        short."""
        views = self.reports.views()
        for key in sorted(self.layout.topology().plans):
            if views.get(key, LsView(key)).leader is None:
                raise ObError(
                    "OB_OP_NOT_ALLOW",
                    f"delete server while log stream {key[1]} of tenant {key[0]} has no leader; it is",
                    detail="if it lost its majority, see ALTER SYSTEM RECOVER LS ... FROM LOST "
                    "SERVERS",
                )
        keys = {s.key for s in targets}
        with self.store.read() as conn:
            units = [u for u in unit_repo.load_units(conn) if u.server in keys]
            placement = self.rooms.place(conn, units, avoid=keys)
        if placement.failures:
            f = placement.failures[0]
            u = next(x for x in units if x.unit_id == f.request.ref)
            raise ObError(
                "OB_DELETE_SERVER_NOT_ALLOWED",
                f"cannot delete server '{u.server}': unit {u.unit_id} has nowhere to go "
                f"({f.reason})",
            )

    def check_stop(self, targets: list[ServerStatus], mode: StopMode) -> None:
        """STOP / FORCE STOP SERVER (docs/design/statements.md; OceanBase's
        ``check_majority_and_log_in_sync_``): every LS with a member on the servers keeps a
        majority of members that are alive, started, in service and not being stopped, and
        (STOP only) a majority of members whose log is within ``ls_log_sync_threshold`` of
        the leader's. Fresh reports are requested from the members before each try; a
        failing check is retried for ``stop_server_check_timeout``, then OB_OP_NOT_ALLOW
        names the LS and what is short. ISOLATE runs :meth:`check_isolate` instead."""
        if mode == "ISOLATE":
            self.check_isolate(targets)
            return
        keys = {s.key for s in targets}
        deadline = self.clock.now_us() + self.settings.stop_server_check_timeout
        problem = ""
        for attempt in range(100_000):
            problem = self.stop_problem(keys, check_sync=mode == "STOP", refresh=True)
            if not problem:
                return
            if self.clock.now_us() >= deadline:
                break
            if attempt == 0:
                log.info("STOP SERVER %s waits: %s", ",".join(sorted(keys)), problem)
            self.sleep(RETRY_S)
        raise ObError("OB_OP_NOT_ALLOW", f"stop server {','.join(sorted(keys))}: {problem}; it is")

    def stop_problem(self, keys: set[str], *, check_sync: bool, refresh: bool) -> str:
        """Why stopping ``keys`` would hurt some LS now ("" when it would not): the first LS
        (by key) left without a majority of healthy members or, with ``check_sync``, of
        members in log sync. ``refresh`` first requests heartbeats of the hosts concerned."""
        topo = self.layout.topology()
        views0 = self.reports.views()
        plans = [
            p
            for p in topo.plans.values()
            if keys & (set(p.members) | set(views0.get(p.key, LsView(p.key)).replicas))
        ]
        if not plans:
            return ""
        if refresh:
            hosts = {m for p in plans for m in p.members} | {
                m for p in plans for m in views0.get(p.key, LsView(p.key)).replicas
            }
            self.heartbeats.request_heartbeats([m for m in hosts if self.health.is_alive(m)])
        views = self.reports.views()
        threshold = self.settings.ls_log_sync_threshold
        for plan in sorted(plans, key=lambda p: p.key):
            view = views.get(plan.key, LsView(plan.key))
            t, ls = plan.key
            members = effective_members(plan, view)
            majority = len(members) // 2 + 1
            healthy = [
                m for m in members if self.health.healthy_member(m, view.replicas.get(m), keys)
            ]
            if len(healthy) < majority:
                return (
                    f"log stream {ls} of tenant {t} would keep {len(healthy)} of "
                    f"{len(members)} members in service (a majority needs {majority})"
                )
            if check_sync:
                if view.leader is None:
                    return f"log stream {ls} of tenant {t} has no leader to measure log sync"
                synced = [m for m in healthy if in_sync(view, m, threshold)]
                if len(synced) < majority:
                    lagging = [m for m in healthy if m not in synced]
                    lr = view.replicas[view.leader]
                    lags = ", ".join(
                        f"{m} {(lr.log_end_ts - view.replicas[m].log_end_ts) / 1e6:.1f}s behind"
                        for m in lagging
                    )
                    return (
                        f"log stream {ls} of tenant {t} has {len(synced)} of "
                        f"{len(members)} remaining members with the log in sync "
                        f"({lags}; threshold {threshold / 1e6:g}s)"
                    )
        return ""

    def check_isolate(self, targets: list[ServerStatus]) -> None:
        """ISOLATE SERVER: refused with OB_OP_NOT_ALLOW when, with these servers stopped,
        every zone of some tenant's primary region would be stopped (a zone is stopped when it
        is not ACTIVE or has a stopped server). The primary region is the set of regions of
        the tenant's first-priority primary zones."""
        keys = {s.key for s in targets}
        stopped_zones = {z.zone for z in self.zones.all() if not z.active}
        for s in self.servers.snapshot():
            if s.is_stopped() or s.key in keys:
                stopped_zones.add(s.zone)
        topo = self.layout.topology()
        regions = {z.zone: z.region for z in self.zones.all()}
        for t in topo.tenants.values():
            try:
                first = parse_primary_zone(t.primary_zone, t.zone_list)[0]
            except ObError:
                first = list(t.zone_list)
            region_set = {regions.get(z, "") for z in first}
            region_zones = [z for z in t.zone_list if regions.get(z, "") in region_set]
            if region_zones and all(z in stopped_zones for z in region_zones):
                raise ObError(
                    "OB_OP_NOT_ALLOW",
                    f"isolate server {','.join(sorted(keys))}: every zone of tenant "
                    f"{t.tenant_name}'s primary region {','.join(sorted(region_set))} "
                    f"({','.join(region_zones)}) would be stopped; it is",
                )

    def check_isolate_zone(self, zone: str, members: list[ServerStatus]) -> None:
        """ISOLATE ZONE (ObRootService::check_can_stop with ``is_stop_zone``): refused with
        OB_OP_NOT_ALLOW "Stop all server in primary region is disabled" when a tenant with
        units both on a stopped server and in ``zone`` would have no zone of its primary
        region left (:func:`rootservice.tenants.stop_rules.primary_region_stopped`).
        ``members`` are the whitelisted servers of ``zone``."""
        zone_infos = self.zones.all()
        inactive = {z.zone for z in zone_infos if not z.active}
        stopped = [s for s in self.servers.snapshot() if s.is_stopped() or s.zone in inactive]
        topo = self.layout.topology()
        by_server: dict[str, set[int]] = {}
        for plan in topo.plans.values():
            for server in plan.members:
                by_server.setdefault(server, set()).add(plan.key[0])
        blocker = primary_region_stopped(
            zone,
            tenants_on([s.key for s in members], by_server),
            tenants_on([s.key for s in stopped], by_server),
            inactive | {s.zone for s in stopped},
            {
                tid: TenantZones(t.tenant_name, tuple(t.zone_list), t.primary_zone)
                for tid, t in topo.tenants.items()
            },
            {z.zone: z.region for z in zone_infos},
            {z.zone for z in zone_infos if z.zone_type == "ReadWrite"},
        )
        if blocker is not None:
            raise ObError(
                "OB_OP_NOT_ALLOW",
                PRIMARY_REGION_MESSAGE,
                detail=f"tenant {blocker} would have no zone of its primary region left",
            )
