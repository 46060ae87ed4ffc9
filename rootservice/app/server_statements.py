"""The objects behind the server and zone statements, wired together for the composition root
(:class:`rootservice.app.wiring.RsComponents`): ADD / DELETE / CANCEL DELETE / STOP / START /
ISOLATE SERVER (:class:`ServerAdmin`), ISOLATE ZONE, RUN JOB 'ROOT_INSPECTION', DRAIN SERVER,
the maintenance windows' ticker and the empty-server checker that ends DELETE SERVER.
Nothing is started here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from obcommon.clock import Clock
from rootservice.balancer.job_progress import DeleteJobProgress
from rootservice.balancer.root_balancer import RootBalancer
from rootservice.config import RsSettings
from rootservice.ha.store import MetaStore
from rootservice.ha.term import Term
from rootservice.root_inspection import RootInspection
from rootservice.servers.admin import ServerAdmin
from rootservice.servers.agent_client import AgentClient
from rootservice.servers.drain import DrainManager
from rootservice.servers.empty_server_checker import EmptyServerChecker
from rootservice.servers.heartbeat_requester import HeartbeatRequester
from rootservice.servers.maintenance import MaintenanceTicker
from rootservice.servers.persist_queue import PersistQueue
from rootservice.servers.ports import Background
from rootservice.servers.whitelist import Whitelist
from rootservice.servers.zone_isolation import ZoneIsolation
from rootservice.servers.zones import ZoneManager
from rootservice.tenants.drain_work import DrainWork
from rootservice.tenants.layer import TenantLayer


@dataclass
class ServerStatements:
    """The server statements' objects, one per concern (see each class)."""

    server_admin: ServerAdmin
    zone_isolation: ZoneIsolation
    root_inspection: RootInspection
    drains: DrainManager
    maintenance: MaintenanceTicker
    #: DELETE SERVER's last step: the server leaves once it holds nothing.
    empty_server_checker: EmptyServerChecker


def build_server_statements(
    *,
    whitelist: Whitelist,
    zones: ZoneManager,
    store: MetaStore,
    clock: Clock,
    settings: RsSettings,
    agents: AgentClient,
    tenants: TenantLayer,
    migration: RootBalancer,
    delete_jobs: DeleteJobProgress,
    heartbeats: HeartbeatRequester,
    persist: PersistQueue,
    term: Term,
    drain_work: DrainWork,
    wake: Callable[[str], None],
    background: Background,
    sleep: Callable[[float], None],
) -> ServerStatements:
    """Build the objects; ``migration`` hears a CANCEL DELETE (its partial replicas),
    ``delete_jobs`` the DELETE_SERVER jobs the empty-server checker ends,
    ``drain_work`` is the tenant-layer part of DRAIN and the disruption budget, ``sleep``
    (seconds) paces DRAIN's waits. Raises nothing."""
    admin = ServerAdmin(
        whitelist,
        zones,
        store,
        clock,
        settings,
        agents,
        checks=tenants.pre_checks,
        leaders=tenants.leaders,
        cancel_listener=migration,
        heartbeats=heartbeats,
        wake=wake,
        background=background,
        budget=drain_work,
    )
    return ServerStatements(
        server_admin=admin,
        zone_isolation=ZoneIsolation(
            zones, whitelist, tenants.pre_checks, tenants.leaders, drain_work
        ),
        root_inspection=RootInspection(
            store=store,
            clock=clock,
            whitelist=whitelist,
            pending=persist,
            zones=zones,
            layout=tenants.layout,
        ),
        drains=DrainManager(
            whitelist=whitelist,
            store=store,
            clock=clock,
            term=term,
            work=drain_work,
            sleep=sleep,
            background=background,
        ),
        maintenance=MaintenanceTicker(whitelist, zones, admin, term, clock),
        empty_server_checker=EmptyServerChecker(
            whitelist,
            term,
            store,
            clock,
            agents,
            contents=tenants.probes,
            removal=tenants.probes,
            jobs=delete_jobs,
        ),
    )
