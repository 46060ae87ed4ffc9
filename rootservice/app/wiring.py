"""The RS's composition root: every component built in dependency order, each given its
collaborators at construction (docs/architecture.md section 1). :class:`RsComponents` is
what :class:`rootservice.app.RootService` is made of; the process's life cycle (open, start,
shut down, the task lists) is :mod:`rootservice.app`'s.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import sqlalchemy as sa

from obcommon import releases
from obcommon.clock import Clock, SystemClock
from obcommon.security.certs import Role
from obcommon.security.gate import PeerGate
from obcommon.security.revocation import OpenConnections
from obcommon.security.tls import TransportSecurity
from rootservice.app.lease_intake import IntakeParts, build_lease_intake
from rootservice.app.server_statements import build_server_statements
from rootservice.auth.audit import Audit
from rootservice.auth.revocations import Revocations
from rootservice.auth.users import Users
from rootservice.balancer.emptying_wake import EmptyingWake
from rootservice.balancer.layer import build_balancer_layer
from rootservice.balancer.planner import Planner
from rootservice.balancer.planner_check import PlannerCheck
from rootservice.bootstrap import Bootstrap
from rootservice.config import RsSettings
from rootservice.db.catalog import Catalog
from rootservice.ha.election import Election
from rootservice.ha.fence import METADATA_SERVER_FILE, EpochFence
from rootservice.ha.handover import Handover
from rootservice.ha.readiness import Readiness
from rootservice.ha.store import MetaStore
from rootservice.ha.term import Term
from rootservice.metrics import (
    Metrics,
    Readings,
    RsCollector,
    register_process_collectors,
    track_gc_pauses,
)
from rootservice.office import Office
from rootservice.parameters import Parameters
from rootservice.servers.agent_client import AgentClient
from rootservice.servers.agent_parameters import ClusterPlaces
from rootservice.servers.heartbeat_requester import HeartbeatRequester
from rootservice.servers.history_pruner import HistoryPruner
from rootservice.servers.identity import ClusterIdentity
from rootservice.servers.lag_detector import LagDetector
from rootservice.servers.loader import ServerLoader, TakeOfficeGrace
from rootservice.servers.persist_queue import PersistQueue
from rootservice.servers.ports import Background
from rootservice.servers.server_report_sync import ServerReportSync
from rootservice.servers.whitelist import Whitelist
from rootservice.servers.zones import ZoneManager
from rootservice.tenants.drain_work import DrainWork
from rootservice.tenants.layer import (
    build_lag_rebuilder,
    build_lost_servers,
    build_tenant_layer,
)
from rootservice.timers import Schedule, Timers, WallClockWatchdog
from rootservice.upgrade.layer import build_upgrade
from rootservice.upgrade.versions import Versions

log = logging.getLogger(__name__)


class RsComponents(ABC):
    """The components of one RS process, wired (see the module doc). The life cycle's side
    of what the components call back is abstract here: the leader's task list
    (:meth:`leader_tasks`, for the office), the parameter listener
    (:meth:`parameters_changed`), the background runner, the wall-clock watchdog's and the
    term's hooks; :class:`rootservice.app.RootService` provides them.

    ``settings`` are mutated in place by ALTER SYSTEM SET (the components read them on every
    use). ``flags_set`` names the settings given on the command line or in the environment:
    they win over ``__all_sys_parameter`` at start. ``sleep`` is used by bootstrap's waits
    (seconds); tests pass one that advances a FakeClock. ``background`` runs work off the
    heartbeat path (default: the RS thread pool); tests pass one that runs it inline.
    ``planner`` replaces the Spark planner behind ``balancer_planner = 'spark'`` (the
    fake-clock tests pass the pandas one or one that fails).
    """

    def __init__(
        self,
        settings: RsSettings,
        clock: Clock | None = None,
        *,
        flags_set: set[str] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        start_scheduler: bool = True,
        background: Callable[[Callable[[], object]], None] | None = None,
        planner: Planner | None = None,
    ) -> None:
        """Build every component; nothing is opened or started (see
        :meth:`rootservice.app.RootService.open` and ``start``)."""
        self.settings = settings
        self.clock = clock or SystemClock()
        self.sleep = sleep
        self.start_scheduler = start_scheduler
        host, _, port = settings.rpc_addr.rpartition(":")
        self.rpc_addr = settings.rpc_addr
        # Where MySQL clients connect; the port actually bound once listening.
        self.mysql_addr = settings.mysql_addr
        self.metrics = Metrics()
        track_gc_pauses(self.metrics)
        # This RS's release and the cluster version: the version skew rule and the gates.
        self.versions = Versions(releases.current(), self.metrics)
        self.engine: sa.Engine | None = None
        # The election's rounds and the leader's tasks on timers of their own, so that the
        # leader's can be stopped and started without touching the election's.
        self.election_timers = Timers(
            self.clock, self.metrics, enabled=start_scheduler, phase_step_us=0
        )
        self.timers = Timers(self.clock, self.metrics, enabled=start_scheduler)
        # Both sets of timers schedule on wall time: a step of the wall clock makes them
        # all due at once.
        self.wall_clock_watchdog = WallClockWatchdog(self.clock, self._on_wall_clock_jump)
        self.term = Term(
            self.clock,
            address=lambda: self.rpc_addr,
            lease_time=lambda: self.settings.lease_time,
            metrics=self.metrics,
            wake_election=self._wake_election,
        )
        # The agents' reported epochs and the metadata servers seen; after
        # a change of primary the take-office grace holds agents' leases for one lease.
        self.fence = EpochFence(
            self.clock,
            lambda: self.settings.lease_time,
            self.metrics,
            on_primary_change=lambda until: self.take_office_grace.hold_until(until),
            state_file=Path(settings.data_dir) / METADATA_SERVER_FILE,
        )
        self.store = MetaStore(
            sa.create_engine("sqlite://"),
            (host, int(port)),
            self.term,
            idle_timeout_us=lambda: self.settings.lease_time,
            fence=self.fence,
        )
        # Transport security: mutual TLS with rs.crt when a certificates directory is given,
        # else plaintext. The command line insists on one of --certs-dir / --insecure;
        # in-process tests that give neither get plaintext.
        self.security = (
            TransportSecurity(settings.certs_dir, Role.RS)
            if settings.certs_dir is not None
            else TransportSecurity.insecure_mode(Role.RS)
        )
        self.peer_gate = PeerGate(
            self.security.insecure,
            count=lambda kind: self.metrics.inc(f"peer_refused_{kind}_total"),
            clock=self.clock,
        )
        self.agents = AgentClient(
            settings.rpc_timeout,
            self.security,
            incarnation=lambda: self.term.incarnation,
            clock=clock,
        )
        self.executor = ThreadPoolExecutor(max_workers=8, thread_name_prefix="rs-bg")
        self.background: Background = background or self._background
        self._wire_servers(sleep)
        self._wire_emptying(planner)
        self._wire_intake(sleep)
        # FORCE DELETE SERVER and RECOVER LS, and the task that ends a
        # recovery a previous leader left half-way.
        self.lost_servers = build_lost_servers(
            tenants=self.tenant_layer,
            whitelist=self.whitelist,
            events=self.persist,
            heartbeats=self.heartbeat_requester,
            term=self.term,
            store=self.store,
            clock=self.clock,
            settings=settings,
            wake=self.timers.wake,
        )
        self._wire_office(flags_set, sleep)

    def _wire_servers(self, sleep: Callable[[float], None]) -> None:
        settings = self.settings
        # The server layer (docs/design/), built in dependency order: the whitelist
        # and what only needs it, then the tenant layer (which reads the whitelist), then the
        # admin operations (which run the tenant layer's checks), then the heartbeat intake
        # (which reports replicas to the tenant layer and runs the data-disk STOP / START
        # through the admin operations).
        self.whitelist = Whitelist()
        self.zones = ZoneManager(self.clock, self.store, self.whitelist)
        self.persist = PersistQueue(self.store, self.clock, self.whitelist, self.metrics)
        self.server_reports = ServerReportSync(self.term, self.store, self.clock, self.whitelist)
        self.take_office_grace = TakeOfficeGrace()
        self.identity = ClusterIdentity()
        self.heartbeat_requester = HeartbeatRequester(
            self.agents, self.store, lambda: self.heartbeats
        )
        self.server_loader = ServerLoader(
            self.whitelist,
            self.zones,
            self.persist,
            self.take_office_grace,
            self.identity,
            self.store,
            self.clock,
            settings,
        )
        # The steps of a replica move the tenant layer learns wake the task of the next
        # step (the end of a DELETE SERVER waited for the balancer's period).
        self.emptying_wake = EmptyingWake(servers=self.whitelist, wake=self.timers.wake)
        # The tenant layer (rootservice.tenants), one object per concern, reading the
        # whitelist through consumer protocols.
        self.tenant_layer = build_tenant_layer(
            store=self.store,
            agents=self.agents,
            servers=self.whitelist,
            zones=self.zones,
            events=self.persist,
            heartbeats=self.heartbeat_requester,
            term=self.term,
            clock=self.clock,
            settings=settings,
            metrics=self.metrics,
            sleep=sleep,
            moves=self.emptying_wake,
        )

    def _wire_emptying(self, planner: Planner | None) -> None:
        settings = self.settings
        tl = self.tenant_layer
        # Emptying servers (docs/design/migration.md), one object per concern.
        emptying = build_balancer_layer(
            servers=self.whitelist,
            tenants=tl,
            events=self.persist,
            store=self.store,
            clock=self.clock,
            settings=settings,
            metrics=self.metrics,
            wake=self.timers.wake,
            spark=planner,
            background=self.background,
            upgrade=self.versions,
        )
        self.planner = emptying.planner
        self.unit_moves = emptying.unit_moves
        self.copy_tasks = emptying.copy_tasks
        self.copy_replan = emptying.copy_replan
        self.delete_jobs = emptying.delete_jobs
        self.migration = emptying.migration
        self.delete_dry_run = emptying.delete_dry_run
        self.lost_replica_checker = emptying.lost_replica_checker
        self.manual_moves = emptying.manual_moves
        self.partial_replica_gc = emptying.partial_replica_gc
        self.copy_watch = emptying.copy_watch
        # Whether the configured planner can run (checked at open and when it changes).
        self.planner_check: PlannerCheck | None = None
        # DRAIN SERVER's tenant-layer part and the disruption budget,
        # built here rather than with the tenant layer: it counts the balancer's copies.
        self.drain_work = DrainWork(
            servers=self.whitelist,
            zones=self.zones,
            health=tl.health,
            layout=tl.layout,
            reports=tl.reports,
            leaders=tl.leaders,
            heartbeats=self.heartbeat_requester,
            clock=self.clock,
            settings=settings,
            copies=self.copy_replan.copies_left,
            replan_to=self.copy_replan.leave,
            views=tl.views,
        )
        # Retention of the event and job history.
        self.history_pruner = HistoryPruner(
            settings, self.term, self.store, self.clock, self.metrics
        )

    def _wire_intake(self, sleep: Callable[[float], None]) -> None:
        settings = self.settings
        tl = self.tenant_layer
        # The server and zone statements, DRAIN and the maintenance windows.
        statements = build_server_statements(
            whitelist=self.whitelist,
            zones=self.zones,
            store=self.store,
            clock=self.clock,
            settings=settings,
            agents=self.agents,
            tenants=tl,
            migration=self.migration,
            delete_jobs=self.delete_jobs,
            heartbeats=self.heartbeat_requester,
            persist=self.persist,
            term=self.term,
            drain_work=self.drain_work,
            wake=self.timers.wake,
            background=self.background,
            sleep=sleep,
        )
        self.server_admin = statements.server_admin
        self.zone_isolation = statements.zone_isolation
        self.root_inspection = statements.root_inspection
        self.drains = statements.drains
        self.maintenance = statements.maintenance
        self.empty_server_checker = statements.empty_server_checker
        intake = build_lease_intake(
            IntakeParts(
                whitelist=self.whitelist,
                zones=self.zones,
                persist=self.persist,
                grace=self.take_office_grace,
                identity=self.identity,
                term=self.term,
                store=self.store,
                clock=self.clock,
                settings=settings,
                metrics=self.metrics,
                replicas=tl.reports,
                server_admin=self.server_admin,
                wake=self.timers.wake,
                background=self.background,
                fence=self.fence,
                commands=self.agents.ledger,
                versions=self.versions,
            ),
            measure_ticks=self.start_scheduler,
            sleep=sleep,
        )
        self.intake_health = intake.intake_health
        self.loop_load = intake.loop_load
        self.lease_queue = intake.lease_queue
        self.agent_values = intake.agent_values
        self.heartbeats = intake.heartbeats
        self.self_suspicion = intake.self_suspicion
        self.lease_checker = intake.lease_checker
        self.check_all_server = intake.check_all_server
        # Agents that heartbeat while doing nothing.
        self.lag_detector = LagDetector(
            self.whitelist,
            self.persist,
            self.term,
            self.clock,
            settings,
            self.agents.ledger,
            replicas=tl.reports,
            leaders=tl.leaders,
            stacks=self.agents,
            heartbeats=self.heartbeat_requester,
            background=self.background,
            copies=self.copy_replan,
        )
        # ... and its last action: a follower LAGGING for long is rebuilt in place.
        self.lag_rebuilder = build_lag_rebuilder(
            tl, self.lag_detector, self.persist, self.clock, settings, self.metrics
        )

    def _wire_office(self, flags_set: set[str] | None, sleep: Callable[[float], None]) -> None:
        settings = self.settings
        tl = self.tenant_layer
        # Users, privileges and the audit trail of statements.
        self.users = Users(self.store, self.clock, settings)
        self.audit = Audit(self.store, self.clock)
        # The revocation list every front end checks.
        self.revocations = Revocations(self.store, self.clock, self.peer_gate.revoked)
        # The MySQL and HTTP connections by client certificate, closed when it is revoked.
        self.cert_connections = OpenConnections(self.peer_gate.revoked)
        # Table and column names for SELECT, read from the database on first use.
        self.catalog = Catalog()
        self.parameters = Parameters(
            settings,
            flags_set if flags_set is not None else settings.model_fields_set,
            self.term,
            self.store,
            self.clock,
            listener=self,
            places=ClusterPlaces(self.whitelist, self.zones),
            agent_values=self.agent_values,
        )
        self.office = Office(
            term=self.term,
            store=self.store,
            clock=self.clock,
            metrics=self.metrics,
            parameters=self.parameters,
            identity=self.identity,
            loader=self.server_loader,
            whitelist=self.whitelist,
            zones=self.zones,
            persist=self.persist,
            grace=self.take_office_grace,
            heartbeats=self.heartbeat_requester,
            background=self.background,
            timers=self.timers,
            tasks=self,
            versions=self.versions,
            # A deposed RS forgets replica reports, the cached layout and migration tasks;
            # the next term rebuilds them from the tables and fresh heartbeats.
            forget=[
                tl.reports.clear,
                tl.layout.clear,
                tl.meta_sync.forget_meta,
                tl.applier.announced.clear,
                self.migration.clear,
                self.self_suspicion.reset,
                self.lag_detector.clear,
                self.lag_rebuilder.clear,
                self.agents.ledger.clear,
            ],
            address=lambda: self.rpc_addr,
        )
        self.bootstrap = Bootstrap(
            term=self.term,
            store=self.store,
            clock=self.clock,
            settings=settings,
            agents=self.agents,
            whitelist=self.whitelist,
            zones=self.zones,
            identity=self.identity,
            grace=self.take_office_grace,
            heartbeats=self.heartbeat_requester,
            office=self.office,
            address=lambda: self.rpc_addr,
            sleep=sleep,
            release=self.versions.release,
        )
        # END ROLLING UPGRADE, BEGIN / END [ROLLING] UPGRADE and their pre-checks.
        self.finalize, self.upgrade = build_upgrade(
            self.versions,
            self.whitelist,
            self.store,
            self.clock,
            settings,
            tl,
            lambda: settings.lease_time,
        )
        self.election = Election(
            self.store,
            self.term,
            self.clock,
            lease_time=lambda: self.settings.lease_time,
            on_elected=self.office.take_office,
            on_step_down=self.office.step_down,
            metrics=self.metrics,
            fence=self.fence,
            release=str(self.versions.release),
        )
        self.handover = Handover(self.election)
        # Readiness for /readyz and the gRPC health service: the term, a
        # rate-limited database probe; a standby's admin service can forward statements
        # unless insecure (rootservice.api.forwarding.forwarder_for).
        self.readiness = Readiness(
            self.term,
            self.store,
            can_forward=lambda: not self.security.insecure,
            intake=self.lease_queue.describe,
        )
        # The HTTP(S) endpoint's address once bound (tests bind port 0).
        self.http_addr = settings.http_addr
        # Counted by the lease servicer on the event-loop thread (see rootservice.api.grpc_server).
        self.heartbeats_total = 0
        self.heartbeats_refused_total = 0
        # Refusals by OceanBase error name (a few names; counted on refusals only).
        self.heartbeats_refused: dict[str, int] = {}
        # The Prometheus exposition: read at each scrape, nothing per event.
        self.metrics.registry.register(RsCollector(self.metrics, self))
        register_process_collectors(self.metrics.registry)

    # --- what the life cycle provides (rootservice.app.RootService) ---------------------

    @abstractmethod
    def leader_tasks(self) -> Schedule:
        """The leader's background tasks with their periods (the office starts them)."""

    @abstractmethod
    def parameters_changed(self, names: set[str]) -> None:
        """Re-derive what changed parameters feed (the parameters' listener)."""

    @abstractmethod
    def _background(self, fn: Callable[[], object]) -> None:
        """Run ``fn`` off the caller's thread (the default ``background``)."""

    @abstractmethod
    def _on_wall_clock_jump(self, jump_us: int) -> None:
        """The wall-clock watchdog saw a step of ``jump_us`` microseconds."""

    @abstractmethod
    def readings(self) -> Readings:
        """What ``/metrics`` shows of the components (the collector registered here)."""

    @abstractmethod
    def _wake_election(self) -> None:
        """Run an election round now (the term asks after a step-down)."""
