"""Building the tenant layer: every object of :mod:`rootservice.tenants` from the server
layer's objects (as the consumer protocols of :mod:`rootservice.tenants.ports`), in
dependency order, kept together in one :class:`TenantLayer`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from obcommon.clock import Clock
from rootservice.config import RsSettings
from rootservice.ha.store import MetaStore
from rootservice.ha.term import Term
from rootservice.metrics import Metrics
from rootservice.servers.tombstones import ServerBurial
from rootservice.servers.whitelist import Whitelist
from rootservice.tenants.alter import TenantAlterations
from rootservice.tenants.balancer_view import BalancerView
from rootservice.tenants.ddl import TenantManager
from rootservice.tenants.host_health import HostHealth
from rootservice.tenants.lag_rebuild import LaggingFollowers, LagRebuilder
from rootservice.tenants.leader_preferences import LeaderPreferences
from rootservice.tenants.leaders import LeaderCoordinator
from rootservice.tenants.learner_sync import LearnerSync
from rootservice.tenants.log_marks import LogMarks
from rootservice.tenants.log_streams import TenantReplicas
from rootservice.tenants.lost_servers import LostServers
from rootservice.tenants.member_removal import MemberRemoval
from rootservice.tenants.meta_sync import LsMetaSync
from rootservice.tenants.once_log import OnceLog
from rootservice.tenants.pause import PausableGate, SchedulingPause
from rootservice.tenants.pool_alter import PoolAlterations
from rootservice.tenants.ports import (
    EventSink,
    HeartbeatRequester,
    ReplicaAgents,
    ReplicaMoves,
    ServerDirectory,
    Sleep,
    ZoneDirectory,
)
from rootservice.tenants.pre_checks import ServerPreChecks
from rootservice.tenants.primary_zone_checker import PrimaryZoneChecker
from rootservice.tenants.reconciler import LsReconciler
from rootservice.tenants.replica_rebuilder import ReplicaRebuilder
from rootservice.tenants.replica_specs import ReplicaApplier
from rootservice.tenants.reports import ReplicaReports
from rootservice.tenants.rooms import ServerRooms
from rootservice.tenants.server_probes import ServerProbes
from rootservice.tenants.topology import LayoutCache, LayoutVersion
from rootservice.tenants.view_agreement import ViewAgreement


@dataclass(frozen=True)
class TenantLayer:
    """The tenant layer's objects, one per concern (see each class)."""

    version: LayoutVersion
    layout: LayoutCache
    reports: ReplicaReports
    health: HostHealth
    applier: ReplicaApplier
    meta_sync: LsMetaSync
    #: The wait of the statements that answer "done" for the view (DBA_OB_LS_LOCATIONS).
    views: ViewAgreement
    leaders: LeaderCoordinator
    #: SWITCH REPLICA {LEADER | FOLLOWER | DEFAULT}.
    preferences: LeaderPreferences
    reconciler: LsReconciler
    rebuilder: ReplicaRebuilder
    learner_sync: LearnerSync
    replicas: TenantReplicas
    rooms: ServerRooms
    ddl: TenantManager
    #: ALTER RESOURCE UNIT and ALTER TENANT ... PRIMARY_ZONE.
    alter: TenantAlterations
    #: ALTER RESOURCE POOL.
    pools: PoolAlterations
    primary_zone_checker: PrimaryZoneChecker
    pre_checks: ServerPreChecks
    probes: ServerProbes
    balancer_view: BalancerView
    #: Held by RECOVER LS / FORCE DELETE SERVER; the scheduling tasks' gate.
    pause: SchedulingPause
    gate: PausableGate
    log_marks: LogMarks


def build_tenant_layer(
    *,
    store: MetaStore,
    agents: ReplicaAgents,
    servers: ServerDirectory,
    zones: ZoneDirectory,
    events: EventSink,
    heartbeats: HeartbeatRequester,
    term: Term,
    clock: Clock,
    settings: RsSettings,
    metrics: Metrics,
    sleep: Sleep,
    moves: ReplicaMoves,
) -> TenantLayer:
    """Every tenant-layer object, wired: ``servers`` is the whitelist, ``events`` the
    persistence queue's event sink, ``heartbeats`` the RS -> agent heartbeat requester,
    ``moves`` hears the steps of replica moves (the reports and the meta sync tell it)."""
    version = LayoutVersion()
    layout = LayoutCache(store, version)
    reports = ReplicaReports(servers, layout, moves, metrics)
    health = HostHealth(servers, zones, clock)
    applier = ReplicaApplier(store, agents, servers, reports, clock.monotonic_us)
    meta_sync = LsMetaSync(term, store, clock, servers, layout, reports, moves, settings)
    views = ViewAgreement(
        store=store,
        meta_sync=meta_sync,
        heartbeats=heartbeats,
        health=health,
        reports=reports,
        clock=clock,
        sleep=sleep,
    )
    ls_warnings = OnceLog()
    pause = SchedulingPause()
    gate = PausableGate(term, pause)
    leaders = LeaderCoordinator(
        servers=servers,
        health=health,
        layout=layout,
        reports=reports,
        applier=applier,
        events=events,
        heartbeats=heartbeats,
        views=views,
        clock=clock,
        settings=settings,
        metrics=metrics,
        sleep=sleep,
        warnings=ls_warnings,
    )
    reconciler = LsReconciler(
        term=gate,
        health=health,
        layout=layout,
        reports=reports,
        applier=applier,
        leaders=leaders,
        events=events,
        clock=clock,
        settings=settings,
        metrics=metrics,
        warnings=ls_warnings,
    )
    rebuilder = ReplicaRebuilder(
        term=gate,
        health=health,
        layout=layout,
        reports=reports,
        applier=applier,
        events=events,
        clock=clock,
        settings=settings,
        metrics=metrics,
        warnings=ls_warnings,
    )
    learner_sync = LearnerSync(
        term=term,
        layout=layout,
        reports=reports,
        applier=applier,
        clock=clock,
        settings=settings,
        metrics=metrics,
    )
    replicas = TenantReplicas(
        layout=layout,
        reports=reports,
        applier=applier,
        leaders=leaders,
        reconciler=reconciler,
        clock=clock,
        settings=settings,
        sleep=sleep,
    )
    rooms = ServerRooms(servers, zones)
    ddl = TenantManager(
        store=store,
        clock=clock,
        zones=zones,
        rooms=rooms,
        layout=version,
        replicas=replicas,
    )
    alter = TenantAlterations(
        store=store, clock=clock, rooms=rooms, layout=version, lock=ddl.statement_lock
    )
    pools = PoolAlterations(
        store=store, clock=clock, zones=zones, rooms=rooms, layout=version, lock=ddl.statement_lock
    )
    primary_zone_checker = PrimaryZoneChecker(
        gate=gate, store=store, layout=layout, reports=reports, health=health, clock=clock
    )
    pre_checks = ServerPreChecks(
        store=store,
        servers=servers,
        zones=zones,
        heartbeats=heartbeats,
        health=health,
        rooms=rooms,
        layout=layout,
        reports=reports,
        clock=clock,
        settings=settings,
        sleep=sleep,
    )
    probes = ServerProbes(store, layout, reports, meta_sync)
    # The balancer's one view of the tenant layer.
    balancer_view = BalancerView(
        layout=layout,
        reports=reports,
        applier=applier,
        leaders=leaders,
        reconciler=reconciler,
        meta_sync=meta_sync,
    )
    return TenantLayer(
        version=version,
        layout=layout,
        reports=reports,
        health=health,
        applier=applier,
        meta_sync=meta_sync,
        views=views,
        leaders=leaders,
        preferences=LeaderPreferences(
            store=store,
            layout=layout,
            version=version,
            servers=servers,
            reports=reports,
            leaders=leaders,
            events=events,
            clock=clock,
            settings=settings,
        ),
        reconciler=reconciler,
        rebuilder=rebuilder,
        learner_sync=learner_sync,
        replicas=replicas,
        rooms=rooms,
        ddl=ddl,
        alter=alter,
        pools=pools,
        primary_zone_checker=primary_zone_checker,
        pre_checks=pre_checks,
        probes=probes,
        balancer_view=balancer_view,
        pause=pause,
        gate=gate,
        log_marks=LogMarks(term, store, clock, reports),
    )


def build_lost_servers(
    *,
    tenants: TenantLayer,
    whitelist: Whitelist,
    events: EventSink,
    heartbeats: HeartbeatRequester,
    term: Term,
    store: MetaStore,
    clock: Clock,
    settings: RsSettings,
    wake: Callable[[str], None],
) -> LostServers:
    """FORCE DELETE SERVER and RECOVER LS on the tenant layer
    ``tenants``: the burial of lost servers and the removal of their members. ``wake(name)``
    runs a task now (the balancer and the checkers after a burial)."""
    return LostServers(
        whitelist=whitelist,
        burial=ServerBurial(whitelist, whitelist.tombstones, store, clock),
        removal=MemberRemoval(
            store=store,
            layout=tenants.layout,
            reports=tenants.reports,
            health=tenants.health,
            applier=tenants.applier,
            leaders=tenants.leaders,
            heartbeats=heartbeats,
            events=events,
            clock=clock,
            settings=settings,
            marks=tenants.log_marks,
        ),
        layout=tenants.layout,
        pause=tenants.pause,
        term=term,
        store=store,
        clock=clock,
        wake=wake,
        views=tenants.views,
        view_timeout_us=settings.leader_switch_timeout,
    )


def build_lag_rebuilder(
    tenants: TenantLayer,
    followers: LaggingFollowers,
    events: EventSink,
    clock: Clock,
    settings: RsSettings,
    metrics: Metrics,
) -> LagRebuilder:
    """The ``lag_rebuilder`` task on the tenant layer ``tenants``:
    ``followers`` (the lag detector) lists the LAGGING followers it rebuilds in place."""
    return LagRebuilder(
        term=tenants.gate,
        followers=followers,
        health=tenants.health,
        layout=tenants.layout,
        reports=tenants.reports,
        applier=tenants.applier,
        events=events,
        clock=clock,
        settings=settings,
        metrics=metrics,
        warnings=OnceLog(),
    )
