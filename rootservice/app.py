"""The RootService application: wiring, state, bootstrap, taking office and parameters.

``RootService`` owns the components (store, server manager, checkers, scheduler) and the
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
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import sqlalchemy as sa

from obcommon.addresses import format_server, parse_server
from obcommon.clock import Clock, SystemClock
from obcommon.durations import format_duration, parse_duration
from obcommon.errors import ObError
from rootservice.balancer.manager import LostReplicaChecker, MigrationManager, Planner
from rootservice.config import PARAMETERS, RsSettings, validate_parameter
from rootservice.db import engine as dbengine
from rootservice.db import event_repo, param_repo, server_repo, zone_repo
from rootservice.db.event_repo import Event
from rootservice.db.zone_repo import DEFAULT_REGION, ZoneInfo
from rootservice.ha.election import Election, merge_rs_list
from rootservice.ha.store import MetaStore, db_error_summary
from rootservice.ha.term import RsState, Term, lease_timings
from rootservice.metrics import Metrics, track_gc_pauses
from rootservice.servers.agent_client import AgentClient
from rootservice.servers.empty_server_checker import EmptyServerChecker
from rootservice.servers.manager import ServerManager
from rootservice.servers.status import ServerStatus, check_zone_name
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
from sql import ast

log = logging.getLogger(__name__)

PARAM_BOOTSTRAP_TIME = "bootstrap_time"


class StartupError(Exception):
    """The RS cannot start (database unreachable, schema migration failed...)."""


class RootService:
    """One RS process.

    ``settings`` are mutated in place by ALTER SYSTEM SET (the manager reads them on every
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
        self.flags_set = set(flags_set if flags_set is not None else settings.model_fields_set)
        self.param_sources: dict[str, str] = {
            n: ("command line" if n in self.flags_set else "default") for n in PARAMETERS
        }
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
        self.manager = ServerManager(
            self.clock,
            settings,
            self.store,
            self.agents,
            self.metrics,
            background=background or self._background,
            wake=self.wake,
            sleep=sleep,
        )
        # The tenant layer (rootservice.tenants), one object per concern; the server
        # manager stands in for the server directory and the heartbeat requester.
        m = self.manager
        self.layout_version = LayoutVersion()
        self.layout = LayoutCache(self.store, self.layout_version)
        self.ls_reports = ReplicaReports(m, self.layout)
        self.host_health = HostHealth(m, m.zones)
        self.replica_applier = ReplicaApplier(self.store, self.agents, m, self.ls_reports)
        self.ls_meta_sync = LsMetaSync(
            self.term, self.store, self.clock, m, self.layout, self.ls_reports
        )
        ls_warnings = OnceLog()
        self.leaders = LeaderCoordinator(
            servers=m,
            health=self.host_health,
            layout=self.layout,
            reports=self.ls_reports,
            applier=self.replica_applier,
            events=m.persist,
            heartbeats=m,
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
            events=m.persist,
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
        self.server_rooms = ServerRooms(m, m.zones)
        self.tenants = TenantManager(
            term=self.term,
            store=self.store,
            clock=self.clock,
            zones=m.zones,
            rooms=self.server_rooms,
            layout=self.layout_version,
            replicas=self.tenant_replicas,
        )
        self.server_pre_checks = ServerPreChecks(
            store=self.store,
            servers=m,
            zones=m.zones,
            heartbeats=m,
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
        # The balancer's view of the tenant layer.
        self.ls = BalancerView(
            layout=self.layout,
            reports=self.ls_reports,
            applier=self.replica_applier,
            leaders=self.leaders,
            reconciler=self.ls_reconciler,
            meta_sync=self.ls_meta_sync,
        )
        m.on_replicas = self.ls_reports.report
        m.delete_pre_check = self.server_pre_checks.check_delete
        m.stop_pre_check = self.server_pre_checks.check_stop
        m.after_stop = self.leaders.move_leaders_off
        # Emptying servers (SPEC.md section 9): plans by Spark unless a planner is given
        # (the fake-clock tests pass the pandas one); the SparkSession starts on first use.
        self.planner: Planner = planner or _LazySparkPlanner(settings)
        self.migration = MigrationManager(self.manager, self.ls, self.planner)
        self.lost_replica_checker = LostReplicaChecker(self.migration)
        self.manager.on_cancel_delete = self.migration.cancel_server
        # A deposed RS forgets replica reports, the cached layout and migration tasks; the
        # next term rebuilds them from the tables and fresh heartbeats.
        self.on_step_down.append(self.ls_reports.clear)
        self.on_step_down.append(self.layout.clear)
        self.on_step_down.append(self.ls_meta_sync.forget_meta)
        self.on_step_down.append(self.migration.clear)
        self.empty_server_checker = EmptyServerChecker(
            self.manager,
            has_units=self.server_probes.has_units,
            has_replicas=self.server_probes.has_replicas,
            all_ls_have_leader=self.server_probes.all_ls_have_leader,
            extra_deletes=self._removal_rows,
        )
        self._bootstrap_lock = threading.Lock()
        self._registered: set[str] = set()
        # Counted by the lease servicer on the event-loop thread (see rootservice.api.grpc_server).
        self.heartbeats_total = 0
        self.heartbeats_refused_total = 0
        self.bootstrapped = False

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
        self._apply_table_params(params)
        self.bootstrapped = PARAM_BOOTSTRAP_TIME in params
        self.manager.cluster_id = params.get(param_repo.PARAM_CLUSTER_ID, "")
        self.manager.self_server = self.settings.self_server

    def _apply_table_params(self, params: dict[str, str]) -> None:
        trial = self.settings.model_dump()
        taken = []
        for name in PARAMETERS:
            if name in params and name not in self.flags_set:
                try:
                    trial[name] = parse_duration(params[name])
                    taken.append(name)
                except ValueError as e:
                    log.error("ignoring __all_sys_parameter %s = %r: %s", name, params[name], e)
        try:
            merged = RsSettings.model_validate(trial)
        except ValueError as e:
            raise StartupError(
                f"__all_sys_parameter with the command-line flags is invalid: {e}"
            ) from e
        self._assign_settings(merged)
        for name in taken:
            self.param_sources[name] = "__all_sys_parameter"

    def _assign_settings(self, new: RsSettings) -> None:
        # The object is shared by every component, so it is updated in place; ``new`` was
        # validated as a whole, so per-field re-validation (which would see half-updated
        # invariants) is bypassed.
        for name in RsSettings.model_fields:
            self.settings.__dict__[name] = getattr(new, name)
        self.agents.timeout_us = self.settings.rpc_timeout

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
            self._apply_table_params(params)
        except StartupError as e:
            raise ObError("OB_ERR_SYS", detail=str(e)) from e
        self.bootstrapped = PARAM_BOOTSTRAP_TIME in params
        log.info("root service at %s took office with epoch %d", self.rpc_addr, epoch)
        self.metrics.inc("rs_take_office_total")
        if self.bootstrapped:
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
        self.manager.cluster_id = params.get(param_repo.PARAM_CLUSTER_ID, "")
        stored_rs_list = params.get(param_repo.PARAM_RS_LIST, "")
        self.manager.rs_list = merge_rs_list(stored_rs_list, self.rpc_addr)
        self.manager.load(take_office=True)
        self.term.open_service()
        now = self.clock.now_us()
        with self.store.txn() as conn:
            if ";".join(self.manager.rs_list) != stored_rs_list:
                param_repo.set_param(
                    conn,
                    param_repo.PARAM_RS_LIST,
                    ";".join(self.manager.rs_list),
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
        not_alive = self.manager.not_alive_servers()
        self.manager.background(lambda: self.manager.request_heartbeats(not_alive))
        self.term.state = RsState.FULL_SERVICE
        log.info(
            "root service is in FULL_SERVICE with %d servers", self.manager.counts()["servers"]
        )

    def _removal_rows(self, conn: Any, ip: str, port: int) -> None:
        """What goes with an emptied server in its removal transaction: its
        ``__all_space_usage`` rows and the final progress of its DELETE_SERVER job."""
        self.server_probes.extra_deletes(conn, ip, port)
        self.migration.finalize_job(conn, ip, port)

    def _tasks(self) -> list[tuple[Any, int]]:
        s = self.settings
        return [
            (
                FnTask("heartbeat_checker", self.manager.check_heartbeats),
                s.heartbeat_check_interval,
            ),
            (FnTask("persist_queue", self.manager.persist.run_once), s.persist_interval),
            (FnTask("check_all_server", self.manager.check_all_server), s.server_check_interval),
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
        dropped = self.manager.persist.clear()
        if dropped:
            log.warning("dropped %d queued table changes of the finished term", dropped)
        self.manager.clear()
        self.manager.zones.replace_all({})

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
            self.manager.persist.run_once()
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

    # --- admin entry points ------------------------------------------------------------------

    def require_master(self) -> None:
        """Raise OB_RS_NOT_MASTER unless this RS is the leader (in service or not)."""
        self.term.check(need_service=False)

    def bootstrap(self, entries: tuple[ast.BootstrapEntry, ...]) -> None:
        """ALTER SYSTEM BOOTSTRAP (SPEC.md section 8).

        Raises OB_INIT_TWICE (already bootstrapped, or one is running), OB_INVALID_ARGUMENT
        (empty or malformed list), OB_PARTITION_ZONE_DUPLICATED (two servers in one zone),
        OB_SERVER_CONNECTION_ERROR, OB_OP_NOT_ALLOW (a server of another cluster),
        OB_SERVER_ZONE_NOT_MATCH, OB_WAIT_ALL_RS_ONLINE_TIMEOUT. On failure nothing is kept.
        """
        self.require_master()
        if not self._bootstrap_lock.acquire(blocking=False):
            raise ObError("OB_INIT_TWICE", detail="a bootstrap is already running")
        try:
            if self.bootstrapped:
                raise ObError("OB_INIT_TWICE", detail="the cluster is already bootstrapped")
            if not entries:
                raise ObError("OB_INVALID_ARGUMENT", "bootstrap", detail="empty server list")
            keys: list[str] = []
            zones: dict[str, ZoneInfo] = {}
            region = DEFAULT_REGION
            for e in entries:
                # An item without REGION is in the region named before it.
                region = check_zone_name(e.region) if e.region else region
                ip, port = parse_server(e.server)
                key = format_server(ip, port)
                zone = check_zone_name(e.zone)
                if key in keys:
                    raise ObError("OB_INVALID_ARGUMENT", f"server '{key}' listed twice")
                if zone in zones:
                    raise ObError("OB_PARTITION_ZONE_DUPLICATED", detail=f"zone '{zone}'")
                keys.append(key)
                zones[zone] = ZoneInfo(zone, "ACTIVE", region, "")
            self._run_bootstrap(keys, list(zones.values()))
        finally:
            self._bootstrap_lock.release()

    def _run_bootstrap(self, keys: list[str], zones: list[ZoneInfo]) -> None:
        now = self.clock.now_us()
        with self.store.read() as conn:
            cluster_id = (
                param_repo.load_params(conn).get(param_repo.PARAM_CLUSTER_ID) or uuid.uuid4().hex
            )
        with self.store.txn() as conn:
            # Kept even if this attempt fails: agents that already accepted a lease keep
            # this identity, and a retried BOOTSTRAP must give them the same one.
            param_repo.set_param(
                conn, param_repo.PARAM_CLUSTER_ID, cluster_id, now, "cluster identity"
            )
        statuses = []
        for i, (key, zone) in enumerate(zip(keys, zones, strict=True), start=1):
            check = self.agents.check_server_empty(key, self.store.epoch)
            if check.zone != zone.zone:
                raise ObError(
                    "OB_SERVER_ZONE_NOT_MATCH",
                    detail=f"server '{key}' was started in zone '{check.zone}', not '{zone.zone}'",
                )
            if not check.is_empty and (check.cluster_id != cluster_id or check.server_id != i):
                raise ObError(
                    "OB_OP_NOT_ALLOW",
                    f"bootstrap with server '{key}' of cluster '{check.cluster_id}'",
                )
            ip, port = parse_server(key)
            statuses.append(
                ServerStatus(id=i, zone=zone.zone, ip=ip, port=port, sql_port=0, last_hb_time=now)
            )
        self.term.state = RsState.BOOTSTRAPPING
        self.manager.zones.replace_all({z.zone: z for z in zones})
        self.manager.cluster_id = cluster_id
        self.manager.rs_list = [self.rpc_addr]
        self.manager.install_bootstrap_servers(statuses)
        self.term.open_service()
        try:
            self.manager.request_heartbeats(keys)
            self._wait_for(keys, lambda s: s.is_alive(), self.settings.bootstrap_timeout, "alive")
            self._wait_for(
                keys,
                lambda s: s.in_service(),
                self.settings.bootstrap_in_service_timeout,
                "in service",
            )
            now = self.clock.now_us()
            rows = [s.to_row() for s in self.manager.snapshot()]
            with self.store.txn() as conn:
                for z in zones:
                    zone_repo.upsert_zone(conn, z, now)
                for row in rows:
                    server_repo.insert_server(conn, row, now)
                param_repo.set_param(
                    conn, param_repo.PARAM_RS_LIST, self.rpc_addr, now, "root service list"
                )
                param_repo.set_param(
                    conn,
                    param_repo.PARAM_MAX_SERVER_ID,
                    str(len(keys)),
                    now,
                    "largest server id allocated",
                )
                param_repo.set_param(
                    conn, PARAM_BOOTSTRAP_TIME, str(now), now, "when the cluster was bootstrapped"
                )
                events = [
                    Event(
                        now,
                        "root_service",
                        "bootstrap",
                        (("rs_list", ";".join(keys)), ("cluster_id", cluster_id)),
                    )
                ]
                events += [
                    Event(
                        now,
                        "server",
                        "add_server",
                        (
                            ("server", r["svr_ip"] + ":" + str(r["svr_port"])),
                            ("zone", r["zone"]),
                            ("id", r["id"]),
                        ),
                    )
                    for r in rows
                ]
                event_repo.insert_events(conn, events, self.store.rs_addr)
        except BaseException:
            self.term.close_service()
            self.manager.clear()
            self.manager.zones.replace_all({})
            self.term.state = RsState.WAIT_BOOTSTRAP
            raise
        self.bootstrapped = True
        log.info("bootstrap finished: %s", ", ".join(keys))
        self.do_restart()

    def _wait_for(
        self, keys: list[str], ok: Callable[[ServerStatus], bool], timeout_us: int, what: str
    ) -> None:
        deadline = self.clock.monotonic_us() + timeout_us
        # Bounded in count as well as time, in case a test clock never advances.
        for _ in range(1 + timeout_us // 200_000 + 10):
            missing = [k for k in keys if not ((s := self.manager.get(k)) is not None and ok(s))]
            if not missing:
                return
            if self.clock.monotonic_us() >= deadline:
                break
            self.sleep(0.2)
        raise ObError(
            "OB_WAIT_ALL_RS_ONLINE_TIMEOUT",
            detail=f"not {what} after {format_duration(timeout_us)}: {', '.join(missing)}",
        )

    def reload_server(self) -> None:
        """ALTER SYSTEM RELOAD SERVER: load_server_manager without a take-office grace."""
        self.term.check()
        self.manager.load(take_office=False)

    def set_parameters(self, items: tuple[tuple[str, str | int | float], ...]) -> None:
        """ALTER SYSTEM SET: validate every item (ranges, invariants, together), write them in
        one transaction, then apply them live. Raises OB_ERR_SYS_CONFIG_UNKNOWN,
        OB_INVALID_ARGUMENT; nothing changes on error."""
        self.require_master()
        trial = RsSettings.model_validate(self.settings.model_dump())
        values: dict[str, int] = {}
        for name, raw in items:
            if isinstance(raw, float):
                raise ObError(
                    "OB_INVALID_ARGUMENT",
                    f"{name} = {raw}",
                    detail="write a duration such as '10s'",
                )
            v = validate_parameter(trial, name, raw)
            trial = RsSettings.model_validate(trial.model_dump() | {name.lower(): v})
            values[name.lower()] = v
        now = self.clock.now_us()
        with self.store.txn() as conn:
            for name, v in values.items():
                param_repo.set_param(conn, name, format_duration(v), now, PARAMETERS[name].info)
            event_repo.insert_events(
                conn,
                [
                    Event(now, "root_service", "set_parameter", ((n, format_duration(v)),))
                    for n, v in values.items()
                ],
                self.store.rs_addr,
            )
        self._assign_settings(trial)
        for name in values:
            self.param_sources[name] = "__all_sys_parameter"
        if "server_permanent_offline_time" in values:
            self.manager.resort_offline_deadlines()
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
        out.update(self.manager.counts())
        out["persist_queue_depth"] = self.manager.persist.depth()
        out["state"] = self.term.state.value
        out["epoch"] = self.store.epoch
        out["leader"] = self.term.leader
        out["take_office_grace_until_us"] = self.manager.no_expire_until
        out["writes_rejected_total"] = self.store.rejected_writes
        out["lease_time_us"] = self.settings.lease_time
        return out


class _LazySparkPlanner:
    """A :class:`rootservice.balancer.planners.SparkPlanner` built on first use, so that an RS that
    never empties a server never imports PySpark (nor starts a JVM)."""

    def __init__(self, settings: RsSettings) -> None:
        self.settings = settings
        self._planner: Any = None
        self._lock = threading.Lock()

    def _get(self) -> Any:
        with self._lock:
            if self._planner is None:
                from rootservice.balancer.planners import SparkPlanner

                self._planner = SparkPlanner(self.settings)
            return self._planner

    def unit_plan(self, servers: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """See :class:`rootservice.balancer.manager.Planner`."""
        return self._get().unit_plan(servers)  # type: ignore[no-any-return]

    def replica_plan(self, servers: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """See :class:`rootservice.balancer.manager.Planner`."""
        return self._get().replica_plan(servers)  # type: ignore[no-any-return]

    def lost_replicas(self, servers: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """See :class:`rootservice.balancer.manager.Planner`."""
        return self._get().lost_replicas(servers)  # type: ignore[no-any-return]

    def stop(self) -> None:
        """Stop Spark if it was started."""
        with self._lock:
            if self._planner is not None:
                self._planner.stop()
