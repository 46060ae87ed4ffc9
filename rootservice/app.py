"""The RootService application: the composition root and the process's life cycle.

``RootService`` builds every component in dependency order, passing each its collaborators
(docs/ARCHITECTURE.md), lists the leader's background tasks in one place
(:meth:`RootService.leader_tasks`), and runs the process: open the database, start the
election, shut down. The RS state (SPEC.md section 8) lives in the term
(:class:`rootservice.ha.term.Term`); BOOTSTRAP is :mod:`rootservice.bootstrap`, parameters
:mod:`rootservice.parameters`. Leadership comes from :class:`rootservice.ha.election.Election` (issue 5): the round that
wins the lease calls :meth:`rootservice.office.Office.take_office`; a step-down stops the
timers of :meth:`RootService.leader_tasks` and drops in-memory state
(:meth:`rootservice.office.Office.step_down`). gRPC servers are created by
:mod:`rootservice.api.grpc_server`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import sqlalchemy as sa

from obcommon.clock import Clock, SystemClock
from obcommon.errors import ObError
from obcommon.security.certs import Role
from obcommon.security.gate import PeerGate
from obcommon.security.revocation import OpenConnections
from obcommon.security.tls import TransportSecurity
from rootservice.auth.audit import Audit
from rootservice.auth.revocations import REFRESH_INTERVAL_US as REVOCATION_REFRESH_INTERVAL_US
from rootservice.auth.revocations import Revocations
from rootservice.auth.users import Users
from rootservice.balancer.copy_tasks import COPY_WATCH_INTERVAL_US, CopyTasks, CopyWatch
from rootservice.balancer.dry_run import DeleteDryRun
from rootservice.balancer.job_progress import DeleteJobProgress
from rootservice.balancer.lost_replica_checker import LostReplicaChecker
from rootservice.balancer.planner import Planner
from rootservice.balancer.planner_check import PlannerCheck, check_planner
from rootservice.balancer.planners import LazySparkPlanner, PandasPlanner, SwitchablePlanner
from rootservice.balancer.root_balancer import RootBalancer
from rootservice.balancer.unit_moves import UnitMoves
from rootservice.bootstrap import Bootstrap
from rootservice.config import RsSettings
from rootservice.db import engine as dbengine
from rootservice.db import param_repo
from rootservice.db.catalog import Catalog
from rootservice.db.engine import db_error_summary
from rootservice.db.event_repo import Event
from rootservice.ha.election import Election
from rootservice.ha.readiness import Readiness
from rootservice.ha.store import MetaStore
from rootservice.ha.term import RsState, Term, lease_timings
from rootservice.metrics import (
    JobReading,
    Metrics,
    Readings,
    RsCollector,
    register_process_collectors,
    track_gc_pauses,
)
from rootservice.office import Office
from rootservice.parameters import Parameters
from rootservice.servers.admin import ServerAdmin
from rootservice.servers.agent_client import AgentClient
from rootservice.servers.check_all_server import CheckAllServerTask
from rootservice.servers.empty_server_checker import EmptyServerChecker
from rootservice.servers.heartbeat import HeartbeatIntake
from rootservice.servers.heartbeat_requester import HeartbeatRequester
from rootservice.servers.history_pruner import PRUNE_INTERVAL_US, HistoryPruner
from rootservice.servers.identity import ClusterIdentity
from rootservice.servers.intake_health import IntakeHealth
from rootservice.servers.lease_checker import LeaseChecker
from rootservice.servers.loader import ServerLoader, TakeOfficeGrace
from rootservice.servers.persist_queue import PersistQueue
from rootservice.servers.ports import Background
from rootservice.servers.self_suspicion import SelfSuspicion
from rootservice.servers.whitelist import Whitelist
from rootservice.servers.zones import ZoneManager
from rootservice.tasks import FnTask
from rootservice.tenants.layer import build_tenant_layer
from rootservice.tenants.learner_sync import LEARNER_SYNC_INTERVAL_US
from rootservice.timers import Schedule, Timers, WallClockWatchdog

log = logging.getLogger(__name__)


class StartupError(Exception):
    """The RS cannot start (database unreachable, schema migration failed...)."""


class RootService:
    """One RS process.

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
        self.settings = settings
        self.clock = clock or SystemClock()
        self.sleep = sleep
        self.start_scheduler = start_scheduler
        host, _, port = settings.rpc_addr.rpartition(":")
        self.rpc_addr = settings.rpc_addr
        # Where MySQL clients connect (issue 11); the port actually bound once listening.
        self.mysql_addr = settings.mysql_addr
        self.metrics = Metrics()
        track_gc_pauses(self.metrics)
        self.engine: sa.Engine | None = None
        # The election's rounds and the leader's tasks on timers of their own, so that the
        # leader's can be stopped and started without touching the election's.
        self.election_timers = Timers(
            self.clock, self.metrics, enabled=start_scheduler, phase_step_us=0
        )
        self.timers = Timers(self.clock, self.metrics, enabled=start_scheduler)
        # Both sets of timers schedule on wall time: a step of the wall clock makes them
        # all due at once (issue 14 item 7).
        self.wall_clock_watchdog = WallClockWatchdog(self.clock, self._on_wall_clock_jump)
        self.term = Term(
            self.clock,
            address=lambda: self.rpc_addr,
            lease_time=lambda: self.settings.lease_time,
            metrics=self.metrics,
            wake_election=self._wake_election,
        )
        self.store = MetaStore(
            sa.create_engine("sqlite://"),
            (host, int(port)),
            self.term,
            idle_timeout_us=lambda: self.settings.lease_time,
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
        self.agents = AgentClient(settings.rpc_timeout, self.security)
        self.executor = ThreadPoolExecutor(max_workers=8, thread_name_prefix="rs-bg")
        self.background: Background = background or self._background
        # The server layer (SPEC.md sections 2-9), built in dependency order: the whitelist
        # and what only needs it, then the tenant layer (which reads the whitelist), then the
        # admin operations (which run the tenant layer's checks), then the heartbeat intake
        # (which reports replicas to the tenant layer and runs the data-disk STOP / START
        # through the admin operations).
        self.whitelist = Whitelist()
        self.zones = ZoneManager(self.clock, self.store, self.whitelist)
        self.persist = PersistQueue(self.store, self.clock, self.whitelist, self.metrics)
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
        # The tenant layer (rootservice.tenants), one object per concern, reading the
        # whitelist through consumer protocols.
        self.tenant_layer = tl = build_tenant_layer(
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
        )
        # Emptying servers (SPEC.md section 9): plans by Spark (the SparkSession starts on
        # first use) or pandas, as balancer_planner says at each call; a failed plan is
        # counted, logged and recorded by the one planner object (issue 13 item 3).
        self.planner = SwitchablePlanner(
            settings,
            spark=planner or LazySparkPlanner(settings),
            local=PandasPlanner(settings.effective_db_url()),
            events=self.persist,
            metrics=self.metrics,
            clock=self.clock,
        )
        # Whether the configured planner can run (checked at open and when it changes).
        self.planner_check: PlannerCheck | None = None
        self.unit_moves = UnitMoves(
            servers=self.whitelist,
            ls=tl.balancer_view,
            layout=tl.version,
            store=self.store,
            clock=self.clock,
            metrics=self.metrics,
            wake=self.timers.wake,
        )
        self.copy_tasks = CopyTasks(
            servers=self.whitelist,
            ls=tl.balancer_view,
            events=self.persist,
            store=self.store,
            clock=self.clock,
            settings=settings,
            metrics=self.metrics,
        )
        self.delete_jobs = DeleteJobProgress(
            servers=self.whitelist,
            ls=tl.balancer_view,
            events=self.persist,
            store=self.store,
            clock=self.clock,
            settings=settings,
            units=self.unit_moves,
            copies=self.copy_tasks,
        )
        self.migration = RootBalancer(
            servers=self.whitelist,
            ls=tl.balancer_view,
            planner=self.planner,
            term=self.term,
            units=self.unit_moves,
            copies=self.copy_tasks,
            jobs=self.delete_jobs,
        )
        # EXPLAIN ALTER SYSTEM DELETE SERVER (issue 13 item 4): the balancer's planner on the
        # servers as DELETE would leave them; reads only, never the round's lock.
        self.delete_dry_run = DeleteDryRun(
            planner=self.planner, servers=self.whitelist, ls=tl.balancer_view, store=self.store
        )
        self.lost_replica_checker = LostReplicaChecker(
            servers=self.whitelist,
            ls=tl.balancer_view,
            planner=self.planner,
            term=self.term,
            store=self.store,
            wake=self.timers.wake,
            metrics=self.metrics,
        )
        # Retention of the event and job history (issue 12 item 6).
        self.history_pruner = HistoryPruner(
            settings, self.term, self.store, self.clock, self.metrics
        )
        self.server_admin = ServerAdmin(
            self.whitelist,
            self.zones,
            self.store,
            self.clock,
            settings,
            self.agents,
            checks=tl.pre_checks,
            leaders=tl.leaders,
            cancel_listener=self.migration,
            heartbeats=self.heartbeat_requester,
            wake=self.timers.wake,
            background=self.background,
        )
        # Issue 14: the RS's own intake delay lengthens the leases (item 3); the checker's
        # tick lateness is measured only when the timers run it (unit tests tick by hand).
        self.intake_health = IntakeHealth(self.clock, settings, measure_ticks=start_scheduler)
        self.heartbeats = HeartbeatIntake(
            self.whitelist,
            self.zones,
            self.persist,
            self.take_office_grace,
            self.identity,
            self.term,
            self.store,
            self.clock,
            settings,
            replicas=tl.reports,
            server_ops=self.server_admin,
            wake=self.timers.wake,
            background=self.background,
            transit=self.intake_health,
        )
        # A mass expiry makes the RS suspect itself and hold permanent offline (issue 14
        # item 7).
        self.self_suspicion = SelfSuspicion(
            self.clock,
            settings,
            is_alive=lambda key: (
                (s := self.whitelist.records.get(key)) is not None and s.is_alive()
            ),
            add_event=self.persist.add_event,
        )
        self.lease_checker = LeaseChecker(
            self.whitelist,
            self.persist,
            self.take_office_grace,
            self.term,
            self.clock,
            settings,
            self.metrics,
            self.timers.wake,
            allowance=self.intake_health,
            suspicion=self.self_suspicion,
        )
        self.check_all_server = CheckAllServerTask(
            self.whitelist,
            self.persist,
            self.take_office_grace,
            self.term,
            self.store,
            self.metrics,
            sleep,
        )
        self.empty_server_checker = EmptyServerChecker(
            self.whitelist,
            self.term,
            self.store,
            self.clock,
            self.agents,
            contents=tl.probes,
            removal=tl.probes,
            jobs=self.delete_jobs,
        )
        # Wakes the balancer / the empty-server checker when a copy ends or a server is empty,
        # instead of their next period (issue 14 item 5).
        self.copy_watch = CopyWatch(
            copies=self.copy_tasks,
            servers=self.whitelist,
            contents=tl.probes,
            wake=self.timers.wake,
            term=self.term,
        )
        # Users, privileges and the audit trail of statements (issue 10).
        self.users = Users(self.store, self.clock, settings)
        self.audit = Audit(self.store, self.clock)
        # The revocation list every front end checks (issue 26 item 5).
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
            # A deposed RS forgets replica reports, the cached layout and migration tasks;
            # the next term rebuilds them from the tables and fresh heartbeats.
            forget=[
                tl.reports.clear,
                tl.layout.clear,
                tl.meta_sync.forget_meta,
                tl.applier.announced.clear,
                self.migration.clear,
                self.self_suspicion.reset,
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
        )
        self.election = Election(
            self.store,
            self.term,
            self.clock,
            lease_time=lambda: self.settings.lease_time,
            on_elected=self.office.take_office,
            on_step_down=self.office.step_down,
            metrics=self.metrics,
        )
        # Readiness for /readyz and the gRPC health service (issue 12): the term, a
        # rate-limited database probe; a standby's admin service can forward statements
        # unless insecure (rootservice.api.forwarding.forwarder_for).
        self.readiness = Readiness(
            self.term, self.store, can_forward=lambda: not self.security.insecure
        )
        # The HTTP(S) endpoint's address once bound (issue 12; tests bind port 0).
        self.http_addr = settings.http_addr
        # Counted by the lease servicer on the event-loop thread (see rootservice.api.grpc_server).
        self.heartbeats_total = 0
        self.heartbeats_refused_total = 0
        # Refusals by OceanBase error name (a few names; counted on refusals only).
        self.heartbeats_refused: dict[str, int] = {}
        # The Prometheus exposition (issue 12): read at each scrape, nothing per event.
        self.metrics.registry.register(RsCollector(self.metrics, self))
        register_process_collectors(self.metrics.registry)

    # --- life cycle ----------------------------------------------------------------------

    def set_rpc_port(self, port: int) -> None:
        """Record the port actually bound (tests bind port 0)."""
        host = self.settings.rpc_addr.rpartition(":")[0]
        self.rpc_addr = f"{host}:{port}"
        self.store.rs_addr = (host, port)

    def set_mysql_port(self, port: int) -> None:
        """Record the MySQL endpoint's port actually bound (tests bind port 0)."""
        host = self.settings.mysql_addr.rpartition(":")[0]
        self.mysql_addr = f"{host}:{port}"

    def set_http_port(self, port: int) -> None:
        """Record the HTTP endpoint's port actually bound (tests bind port 0)."""
        host = self.settings.http_addr.rpartition(":")[0]
        self.http_addr = f"{host}:{port}"

    def open(self) -> None:
        """Connect to the database, apply migrations and read ``__all_sys_parameter``.

        Raises :class:`StartupError` with a readable reason (URL shown without password)."""
        url = self.settings.effective_db_url()
        shown = sa.make_url(url).render_as_string(hide_password=True)
        try:
            self.engine = dbengine.make_engine(url)
            dbengine.upgrade(self.engine)
            self.store.engine = self.engine
            with self.engine.connect() as conn:
                params = param_repo.load_params(conn)
        except sa.exc.ArgumentError as e:
            raise StartupError(f"bad database URL {shown}: {e}") from e
        except (sa.exc.SQLAlchemyError, OSError) as e:
            raise StartupError(
                f"cannot open the system-table database {shown}: {db_error_summary(e)}"
            ) from e
        try:
            self.parameters.apply_table(params)
        except ValueError as e:
            raise StartupError(str(e)) from e
        self._recheck_planner()
        self.identity.bootstrapped = param_repo.PARAM_BOOTSTRAP_TIME in params
        self.identity.cluster_id = params.get(param_repo.PARAM_CLUSTER_ID, "")
        self.identity.self_server = self.settings.self_server

    def check_planner(self) -> PlannerCheck:
        """Check, without starting a JVM, that the planner ``balancer_planner`` names can run
        (:func:`rootservice.balancer.planner_check.check_planner`), log the answer (INFO, or
        WARNING with the fix) and keep it in :attr:`planner_check` (``ob_rs_planner_ready``,
        the cluster document). Issue 13 item 3."""
        found = check_planner(self.settings.balancer_planner, self.settings.effective_db_url())
        self.planner_check = found
        if found.ready:
            log.info("balancer planner %s can run: %s", found.planner, found.detail)
        else:
            log.warning(
                "balancer planner %s cannot run: %s (DELETE SERVER and the lost-replica "
                "cleanup will stall until it can)",
                found.planner,
                found.detail,
            )
        return found

    def _recheck_planner(self) -> None:
        # Once at open and again only when balancer_planner changed: a re-read of the
        # parameters (take office) must not log the same answer again.
        if (
            self.planner_check is None
            or self.planner_check.planner != self.settings.balancer_planner
        ):
            self.check_planner()

    def start(self) -> None:
        """Run the first election round at once (taking office when the lease is free, see
        :meth:`rootservice.office.Office.take_office`), else stand by; then start the periodic rounds.

        SQLite mode is single-RS: raises :class:`StartupError` when another RS holds a live
        lease on the same file, instead of running as a second leader or a standby."""
        sqlite = self.store.engine.dialect.name == "sqlite"
        try:
            # Before the first call is served, not a timer period later (issue 26 item 5).
            self.revocations.refresh()
        except ObError as e:
            log.warning("revocation list not read yet: %s", e)
        if sqlite:
            log.warning(
                "SQLite mode: this is the only root service of the cluster (no standby can "
                "take over; run several root services on PostgreSQL for high availability)"
            )
        if not self.election.run_once():
            leader = self.term.leader
            if sqlite and leader and leader != self.rpc_addr:
                raise StartupError(
                    f"the root service at {leader} holds the lease on this SQLite database; "
                    "SQLite mode runs one root service only (stop it, or use PostgreSQL)"
                )
            self.term.state = RsState.NOT_MASTER
            log.info("standing by: the leader is %s", leader or "unknown")
        self._start_election()

    def leader_tasks(self) -> Schedule:
        """The one place that lists the leader's background tasks with their periods
        (``(task, interval_us)``; :class:`rootservice.office.LeaderTasks`)."""
        s = self.settings
        tl = self.tenant_layer
        return [
            (self.lease_checker, s.heartbeat_check_interval),
            (self.persist, s.persist_interval),
            (self.check_all_server, s.server_check_interval),
            (self.empty_server_checker, s.empty_server_check_interval),
            (tl.reconciler, s.ls_check_interval),
            (tl.rebuilder, s.ls_check_interval),
            (tl.learner_sync, LEARNER_SYNC_INTERVAL_US),
            (tl.meta_sync, s.ls_check_interval),
            (self.migration, s.balancer_interval),
            (self.copy_watch, COPY_WATCH_INTERVAL_US),
            (self.lost_replica_checker, s.lost_replica_check_interval),
            (self.history_pruner, PRUNE_INTERVAL_US),
        ]

    def _background(self, fn: Callable[[], object]) -> None:
        try:
            self.executor.submit(fn)
        except RuntimeError:
            log.warning("background task dropped: the RS is shutting down")

    def election_tasks(self) -> Schedule:
        """The election's round and its lease watchdog with their periods."""
        s = self.settings
        return [
            (self.election, lease_timings(s.lease_time)[0]),
            (FnTask("rs_lease_watchdog", self.election.check_lease), s.heartbeat_check_interval),
            # Every RS, leader or not, refuses what is revoked (issue 26 item 5).
            (self.revocations, REVOCATION_REFRESH_INTERVAL_US),
        ]

    def _start_election(self) -> None:
        if not self.start_scheduler:
            return
        self.election_timers.start(self.election_tasks())
        self.wall_clock_watchdog.start()
        self.term.supervise()

    def _on_wall_clock_jump(self, jump_us: int) -> None:
        """A step of the wall clock by ``jump_us`` microseconds (``WallClockWatchdog``):
        counted (``wall_clock_jumps_total``), recorded as the ``root_service`` /
        ``wall_clock_jump`` event (through the persistence queue: written by the leader),
        and every timer made due at once, since APScheduler schedules on wall time."""
        self.metrics.inc("wall_clock_jumps_total")
        self.persist.add_event(
            Event(
                self.clock.now_us(),
                "root_service",
                "wall_clock_jump",
                (("jump_us", jump_us), ("rs", self.rpc_addr)),
            )
        )
        self.election_timers.make_all_due()
        self.timers.make_all_due()

    def _wake_election(self) -> None:
        self.election_timers.wake(Election.name)

    def leader_hint(self) -> str:
        """The leader's ``ip:port`` for OB_RS_NOT_MASTER answers ("" when unknown or this
        RS)."""
        leader = self.term.leader
        return "" if leader == self.rpc_addr else leader

    def shutdown(self) -> None:
        """Stop the election and the timers, flush queued table changes (best effort), give
        the lease up so a standby takes office at once, release resources."""
        self.wall_clock_watchdog.stop()
        self.election_timers.shutdown()
        self.timers.shutdown()
        if self.term.in_service:
            self.persist.run_once()
        self.election.release()
        self.term.close_service()
        self.term.state = RsState.STOPPED
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.agents.close()
        self.planner.stop()
        if self.engine is not None:
            self.engine.dispose()

    def parameters_changed(self, names: set[str]) -> None:
        """:class:`rootservice.parameters.ParameterListener`: re-derive what the changed
        parameters feed (the agent client's timeout, the permanent-offline deadlines, the
        timers' periods)."""
        self.agents.timeout_us = self.settings.rpc_timeout
        if self.engine is not None:
            self._recheck_planner()
        if "server_permanent_offline_time" in names:
            self.lease_checker.resort_offline_deadlines()
        self.timers.reschedule(self.leader_tasks())
        self.election_timers.reschedule(self.election_tasks())

    def readings(self) -> Readings:
        """:class:`rootservice.metrics.RsReadings`: what ``/metrics`` shows of the
        components, read at each scrape (the whitelist without its lock, see
        :meth:`rootservice.servers.whitelist.Whitelist.status_counts`)."""
        by_status, by_hb = self.whitelist.status_counts()
        jobs = [
            JobReading(p.job_id, "DELETE_SERVER", server, p.percent, p.bytes_done, p.bytes_total)
            for server, p in list(self.delete_jobs.progress.items())
            if p.job_id
        ]
        return Readings(
            heartbeats_received=self.heartbeats_total + self.heartbeats_refused_total,
            heartbeats_refused=dict(self.heartbeats_refused),
            servers_by_status=by_status,
            servers_by_heartbeat=by_hb,
            persist_queue_depth=self.persist.depth(),
            writes_rejected=self.store.rejected_writes,
            epoch=self.store.epoch,
            leader=self.store.epoch > 0 and self.term.leader == self.rpc_addr,
            state=self.term.state.value,
            states=[s.value for s in RsState],
            lease_time_us=self.settings.lease_time,
            jobs=jobs,
            planner=self.settings.balancer_planner,
            planner_ready=self.planner_check.ready if self.planner_check else None,
            lease_allowance_us=self.intake_health.current_us,
            self_suspect=self.self_suspicion.suspected,
        )

    def metrics_snapshot(self) -> dict[str, Any]:
        """Counters, latency windows, server counts, state and epoch (for GetMetrics)."""
        out = self.metrics.snapshot()
        out["heartbeats_total"] = self.heartbeats_total
        out["heartbeats_refused_total"] = self.heartbeats_refused_total
        out.update(self.whitelist.counts())
        out["persist_queue_depth"] = self.persist.depth()
        out["state"] = self.term.state.value
        out["epoch"] = self.store.epoch
        out["leader"] = self.term.leader
        out["take_office_grace_until_us"] = self.take_office_grace.no_expire_until
        out["writes_rejected_total"] = self.store.rejected_writes
        out["lease_time_us"] = self.settings.lease_time
        out["balancer_planner"] = self.settings.balancer_planner
        out["planner_ready"] = self.planner_check.ready if self.planner_check else None
        out["lease_allowance_us"] = self.intake_health.current_us
        out["self_suspect"] = self.self_suspicion.suspected
        return out
