"""The RootService application: wiring, state, bootstrap, taking office and parameters.

``RootService`` owns the components (store, server layer, checkers, scheduler) and the
RS state (SPEC.md section 8): ``WAIT_BOOTSTRAP`` on an empty database, ``BOOTSTRAPPING``
while BOOTSTRAP waits for the rs_list servers, ``IN_SERVICE`` while taking office and
``FULL_SERVICE`` once the timers run; ``NOT_MASTER`` for a standby and after stepping
down. Leadership comes from :class:`rootservice.ha.election.Election` (issue 5): the round that
wins the lease calls :meth:`RootService._take_office`; a step-down stops the timers of
:meth:`RootService._tasks` and runs the ``on_step_down`` callbacks that drop in-memory
state. gRPC servers are created by :mod:`rootservice.api.grpc_server`.
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
from rootservice.balancer.copy_tasks import CopyTasks
from rootservice.balancer.job_progress import DeleteJobProgress
from rootservice.balancer.lost_replica_checker import LostReplicaChecker
from rootservice.balancer.planner import Planner
from rootservice.balancer.planners import LazySparkPlanner
from rootservice.balancer.root_balancer import RootBalancer
from rootservice.balancer.unit_moves import UnitMoves
from rootservice.bootstrap import Bootstrap
from rootservice.config import RsSettings
from rootservice.db import engine as dbengine
from rootservice.db import event_repo, param_repo
from rootservice.db.engine import db_error_summary
from rootservice.db.event_repo import Event
from rootservice.db.select_repo import Catalog
from rootservice.ha.election import Election, merge_rs_list
from rootservice.ha.store import MetaStore
from rootservice.ha.term import RsState, Term, lease_timings
from rootservice.metrics import Metrics, track_gc_pauses
from rootservice.parameters import Parameters
from rootservice.servers.admin import ServerAdmin
from rootservice.servers.agent_client import AgentClient
from rootservice.servers.check_all_server import CheckAllServerTask
from rootservice.servers.empty_server_checker import EmptyServerChecker
from rootservice.servers.heartbeat import HeartbeatIntake
from rootservice.servers.heartbeat_requester import HeartbeatRequester
from rootservice.servers.identity import ClusterIdentity
from rootservice.servers.lease_checker import LeaseChecker
from rootservice.servers.loader import ServerLoader, TakeOfficeGrace
from rootservice.servers.persist_queue import PersistQueue
from rootservice.servers.ports import Background
from rootservice.servers.whitelist import Whitelist
from rootservice.servers.zones import ZoneManager
from rootservice.tasks import FnTask, make_scheduler, register_tasks, reschedule, wake
from rootservice.tenants.balancer_view import BalancerView
from rootservice.tenants.ddl import TenantManager
from rootservice.tenants.host_health import HostHealth
from rootservice.tenants.leaders import LeaderCoordinator
from rootservice.tenants.log_streams import TenantReplicas
from rootservice.tenants.meta_sync import LsMetaSync
from rootservice.tenants.once_log import OnceLog
from rootservice.tenants.pre_checks import ServerPreChecks
from rootservice.tenants.reconciler import LsReconciler
from rootservice.tenants.replica_specs import ReplicaApplier
from rootservice.tenants.reports import ReplicaReports
from rootservice.tenants.rooms import ServerRooms
from rootservice.tenants.server_probes import ServerProbes
from rootservice.tenants.topology import LayoutCache, LayoutVersion

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
        self.metrics = Metrics()
        track_gc_pauses(self.metrics)
        self.engine: sa.Engine | None = None
        # The election and its watchdog run on a scheduler of their own, so that the leader's
        # timers can be stopped and started without touching them.
        self.election_scheduler = make_scheduler()
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
        # Callbacks that drop in-memory state when this RS steps down (issue 5); components
        # holding leader-only state append theirs. Each runs in the election thread.
        self.on_step_down: list[Callable[[], None]] = [self._drop_server_state]
        self.election = Election(
            self.store,
            self.term,
            self.clock,
            lease_time=lambda: self.settings.lease_time,
            on_elected=self._take_office,
            on_step_down=self._step_down,
            metrics=self.metrics,
        )
        self.agents = AgentClient(settings.rpc_timeout)
        self.executor = ThreadPoolExecutor(max_workers=8, thread_name_prefix="rs-bg")
        self.scheduler = make_scheduler()
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
        self.layout_version = LayoutVersion()
        self.layout = LayoutCache(self.store, self.layout_version)
        self.ls_reports = ReplicaReports(self.whitelist, self.layout)
        self.host_health = HostHealth(self.whitelist, self.zones)
        self.replica_applier = ReplicaApplier(
            self.store, self.agents, self.whitelist, self.ls_reports
        )
        self.ls_meta_sync = LsMetaSync(
            self.term, self.store, self.clock, self.whitelist, self.layout, self.ls_reports
        )
        ls_warnings = OnceLog()
        self.leaders = LeaderCoordinator(
            servers=self.whitelist,
            health=self.host_health,
            layout=self.layout,
            reports=self.ls_reports,
            applier=self.replica_applier,
            events=self.persist,
            heartbeats=self.heartbeat_requester,
            meta_sync=self.ls_meta_sync,
            clock=self.clock,
            settings=settings,
            metrics=self.metrics,
            sleep=sleep,
            warnings=ls_warnings,
        )
        self.ls_reconciler = LsReconciler(
            term=self.term,
            health=self.host_health,
            layout=self.layout,
            reports=self.ls_reports,
            applier=self.replica_applier,
            leaders=self.leaders,
            events=self.persist,
            clock=self.clock,
            settings=settings,
            metrics=self.metrics,
            warnings=ls_warnings,
        )
        self.tenant_replicas = TenantReplicas(
            layout=self.layout,
            reports=self.ls_reports,
            applier=self.replica_applier,
            leaders=self.leaders,
            reconciler=self.ls_reconciler,
            clock=self.clock,
            settings=settings,
            sleep=sleep,
        )
        self.server_rooms = ServerRooms(self.whitelist, self.zones)
        self.tenants = TenantManager(
            store=self.store,
            clock=self.clock,
            zones=self.zones,
            rooms=self.server_rooms,
            layout=self.layout_version,
            replicas=self.tenant_replicas,
        )
        self.server_pre_checks = ServerPreChecks(
            store=self.store,
            servers=self.whitelist,
            zones=self.zones,
            heartbeats=self.heartbeat_requester,
            health=self.host_health,
            rooms=self.server_rooms,
            layout=self.layout,
            reports=self.ls_reports,
            clock=self.clock,
            settings=settings,
            sleep=sleep,
        )
        self.server_probes = ServerProbes(
            self.store, self.layout, self.ls_reports, self.ls_meta_sync
        )
        # The balancer's one view of the tenant layer.
        self.ls = BalancerView(
            layout=self.layout,
            reports=self.ls_reports,
            applier=self.replica_applier,
            leaders=self.leaders,
            reconciler=self.ls_reconciler,
            meta_sync=self.ls_meta_sync,
        )
        # Emptying servers (SPEC.md section 9): plans by Spark unless a planner is given
        # (the fake-clock tests pass the pandas one); the SparkSession starts on first use.
        self.planner: Planner = planner or LazySparkPlanner(settings)
        self.unit_moves = UnitMoves(
            servers=self.whitelist,
            ls=self.ls,
            layout=self.layout_version,
            store=self.store,
            clock=self.clock,
            metrics=self.metrics,
            wake=self.wake,
        )
        self.copy_tasks = CopyTasks(
            servers=self.whitelist,
            ls=self.ls,
            events=self.persist,
            clock=self.clock,
            settings=settings,
            metrics=self.metrics,
        )
        self.delete_jobs = DeleteJobProgress(
            servers=self.whitelist,
            ls=self.ls,
            events=self.persist,
            store=self.store,
            clock=self.clock,
            settings=settings,
            units=self.unit_moves,
            copies=self.copy_tasks,
        )
        self.migration = RootBalancer(
            servers=self.whitelist,
            ls=self.ls,
            planner=self.planner,
            term=self.term,
            units=self.unit_moves,
            copies=self.copy_tasks,
            jobs=self.delete_jobs,
        )
        self.lost_replica_checker = LostReplicaChecker(
            servers=self.whitelist,
            ls=self.ls,
            planner=self.planner,
            term=self.term,
            store=self.store,
            wake=self.wake,
            metrics=self.metrics,
        )
        # A deposed RS forgets replica reports, the cached layout and migration tasks; the
        # next term rebuilds them from the tables and fresh heartbeats.
        self.on_step_down.append(self.ls_reports.clear)
        self.on_step_down.append(self.layout.clear)
        self.on_step_down.append(self.ls_meta_sync.forget_meta)
        self.on_step_down.append(self.migration.clear)
        self.server_admin = ServerAdmin(
            self.whitelist,
            self.zones,
            self.store,
            self.clock,
            settings,
            self.agents,
            checks=self.server_pre_checks,
            leaders=self.leaders,
            cancel_listener=self.migration,
            heartbeats=self.heartbeat_requester,
            wake=self.wake,
            background=self.background,
        )
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
            replicas=self.ls_reports,
            server_ops=self.server_admin,
            wake=self.wake,
            background=self.background,
        )
        self.lease_checker = LeaseChecker(
            self.whitelist,
            self.persist,
            self.take_office_grace,
            self.term,
            self.clock,
            settings,
            self.metrics,
            self.wake,
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
            contents=self.server_probes,
            removal=self.server_probes,
            jobs=self.delete_jobs,
        )
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
            office=self,
            address=lambda: self.rpc_addr,
            sleep=sleep,
        )
        self._registered: set[str] = set()
        # Counted by the lease servicer on the event-loop thread (see rootservice.api.grpc_server).
        self.heartbeats_total = 0
        self.heartbeats_refused_total = 0

    # --- life cycle ----------------------------------------------------------------------

    def set_rpc_port(self, port: int) -> None:
        """Record the port actually bound (tests bind port 0)."""
        host = self.settings.rpc_addr.rpartition(":")[0]
        self.rpc_addr = f"{host}:{port}"
        self.store.rs_addr = (host, port)

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
        self.bootstrap.bootstrapped = param_repo.PARAM_BOOTSTRAP_TIME in params
        self.identity.cluster_id = params.get(param_repo.PARAM_CLUSTER_ID, "")
        self.identity.self_server = self.settings.self_server

    def start(self) -> None:
        """Run the first election round at once (taking office when the lease is free, see
        :meth:`_take_office`), else stand by; then start the periodic rounds.

        SQLite mode is single-RS: raises :class:`StartupError` when another RS holds a live
        lease on the same file, instead of running as a second leader or a standby."""
        sqlite = self.store.engine.dialect.name == "sqlite"
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

    def _take_office(self, epoch: int) -> None:
        """Take office with ``epoch``, just won by the election (SPEC.md section 8): re-read
        ``__all_sys_parameter`` (a former leader may have changed it), then do_restart when
        bootstrapped, else wait for BOOTSTRAP. Raises ``ObError`` (the election then steps
        down again)."""
        started = self.clock.monotonic_us()
        if self.term.epoch != epoch:
            raise ObError("OB_RS_NOT_MASTER", detail=f"epoch {epoch} lost while taking office")
        with self.store.read() as conn:
            params = param_repo.load_params(conn)
        try:
            self.parameters.apply_table(params)
        except ValueError as e:
            raise ObError("OB_ERR_SYS", detail=str(e)) from e
        self.bootstrap.bootstrapped = param_repo.PARAM_BOOTSTRAP_TIME in params
        log.info("root service at %s took office with epoch %d", self.rpc_addr, epoch)
        self.metrics.inc("rs_take_office_total")
        if self.bootstrap.bootstrapped:
            self.do_restart()
        else:
            self.term.state = RsState.WAIT_BOOTSTRAP
            log.info("the cluster is not bootstrapped: waiting for ALTER SYSTEM BOOTSTRAP")
        self.metrics.window("take_office_us").record(self.clock.monotonic_us() - started)

    def do_restart(self) -> None:
        """SPEC.md section 8: load_server_manager, request heartbeats from servers that are
        not alive, start the timers, FULL_SERVICE."""
        self.term.state = RsState.IN_SERVICE
        with self.store.read() as conn:
            params = param_repo.load_params(conn)
        self.identity.cluster_id = params.get(param_repo.PARAM_CLUSTER_ID, "")
        stored_rs_list = params.get(param_repo.PARAM_RS_LIST, "")
        self.identity.rs_list = merge_rs_list(stored_rs_list, self.rpc_addr)
        self.server_loader.load(take_office=True)
        self.term.open_service()
        now = self.clock.now_us()
        with self.store.txn() as conn:
            if ";".join(self.identity.rs_list) != stored_rs_list:
                param_repo.set_param(
                    conn,
                    param_repo.PARAM_RS_LIST,
                    ";".join(self.identity.rs_list),
                    now,
                    "root service list",
                )
            event_repo.insert_events(
                conn,
                [
                    Event(
                        now,
                        "root_service",
                        "rs_take_office",
                        (("epoch", self.store.epoch), ("rs", self.rpc_addr)),
                    )
                ],
                self.store.rs_addr,
            )
        self._start_timers()
        not_alive = self.whitelist.not_alive_servers()
        self.background(lambda: self.heartbeat_requester.request_heartbeats(not_alive))
        self.term.state = RsState.FULL_SERVICE
        log.info(
            "root service is in FULL_SERVICE with %d servers", self.whitelist.counts()["servers"]
        )

    def _tasks(self) -> list[tuple[Any, int]]:
        s = self.settings
        return [
            (self.lease_checker, s.heartbeat_check_interval),
            (self.persist, s.persist_interval),
            (self.check_all_server, s.server_check_interval),
            (self.empty_server_checker, s.empty_server_check_interval),
            (self.ls_reconciler, s.ls_check_interval),
            (self.ls_meta_sync, s.ls_check_interval),
            (self.migration, s.balancer_interval),
            (self.lost_replica_checker, s.lost_replica_check_interval),
        ]

    def _start_timers(self) -> None:
        if not self.start_scheduler:
            return
        tasks = self._tasks()
        register_tasks(self.scheduler, tasks, self.metrics, self.clock)
        self._registered = {task.name for task, _ in tasks}
        if not self.scheduler.running:
            self.scheduler.start()

    def wake(self, name: str) -> None:
        """Run a checker now (no-op for components not registered, e.g. the balancer that
        arrives with unit migration)."""
        # Called on the heartbeat path for every transition: a name with no job (the
        # balancer, until unit migration exists) must cost nothing.
        if name in self._registered and self.scheduler.running:
            wake(self.scheduler, self.clock, name)

    def _background(self, fn: Callable[[], object]) -> None:
        try:
            self.executor.submit(fn)
        except RuntimeError:
            log.warning("background task dropped: the RS is shutting down")

    def _step_down(self, reason: str) -> None:
        """Election thread: stop the leader's timers and jobs, drop in-memory state (the
        ``on_step_down`` callbacks) and stand by; a later term loads everything afresh."""
        self._stop_timers()
        for drop in list(self.on_step_down):
            try:
                drop()
            except Exception:
                log.exception("dropping in-memory state failed")
        self.term.state = RsState.NOT_MASTER
        log.warning("stepped down (%s); standing by", reason)

    def _drop_server_state(self) -> None:
        self.term.close_service()
        dropped = self.persist.clear()
        if dropped:
            log.warning("dropped %d queued table changes of the finished term", dropped)
        self.take_office_grace.clear()
        self.whitelist.clear()
        self.zones.replace_all({})

    def _stop_timers(self) -> None:
        names, self._registered = self._registered, set()
        for name in names:
            try:
                self.scheduler.remove_job(name)
            except Exception:  # JobLookupError, or the scheduler is shut down
                log.debug("no job %s to remove", name)

    def _start_election(self) -> None:
        if not self.start_scheduler:
            return
        s = self.settings
        register_tasks(
            self.election_scheduler,
            [
                (self.election, lease_timings(s.lease_time)[0]),
                (
                    FnTask("rs_lease_watchdog", self.election.check_lease),
                    s.heartbeat_check_interval,
                ),
            ],
            self.metrics,
            self.clock,
            phase_step_us=0,
        )
        self.term.supervise()
        self.election_scheduler.start()

    def _wake_election(self) -> None:
        if self.election_scheduler.running:
            wake(self.election_scheduler, self.clock, Election.name)

    def leader_hint(self) -> str:
        """The leader's ``ip:port`` for OB_RS_NOT_MASTER answers ("" when unknown or this
        RS)."""
        leader = self.term.leader
        return "" if leader == self.rpc_addr else leader

    def shutdown(self) -> None:
        """Stop the election and the timers, flush queued table changes (best effort), give
        the lease up so a standby takes office at once, release resources."""
        if self.election_scheduler.running:
            self.election_scheduler.shutdown(wait=True)
        if self.scheduler.running:
            self.scheduler.shutdown(wait=True)
        if self.term.in_service:
            self.persist.run_once()
        self.election.release()
        self.term.close_service()
        self.term.state = RsState.STOPPED
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.agents.close()
        stop = getattr(self.planner, "stop", None)
        if stop is not None:
            stop()
        if self.engine is not None:
            self.engine.dispose()

    def parameters_changed(self, names: set[str]) -> None:
        """:class:`rootservice.parameters.ParameterListener`: re-derive what the changed
        parameters feed (the agent client's timeout, the permanent-offline deadlines, the
        timers' periods)."""
        self.agents.timeout_us = self.settings.rpc_timeout
        if "server_permanent_offline_time" in names:
            self.lease_checker.resort_offline_deadlines()
        if self.scheduler.running:
            for task, interval in self._tasks():
                reschedule(self.scheduler, task.name, interval)
        if self.election_scheduler.running:
            s = self.settings
            reschedule(self.election_scheduler, Election.name, lease_timings(s.lease_time)[0])
            reschedule(self.election_scheduler, "rs_lease_watchdog", s.heartbeat_check_interval)

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
        return out
