"""The RootService application: the composition root and the process's life cycle.

``RootService`` builds every component in dependency order, passing each its collaborators
(docs/architecture.md), lists the leader's background tasks in one place
(:meth:`RootService.leader_tasks`), and runs the process: open the database, start the
election, shut down. The RS state (docs/design/ha.md#taking-office) lives in the term
(:class:`rootservice.ha.term.Term`); BOOTSTRAP is :mod:`rootservice.bootstrap`, parameters
:mod:`rootservice.parameters`. Leadership comes from :class:`rootservice.ha.election.Election`: the round that
wins the lease calls :meth:`rootservice.office.Office.take_office`; a step-down stops the
timers of :meth:`RootService.leader_tasks` and drops in-memory state
(:meth:`rootservice.office.Office.step_down`). gRPC servers are created by
:mod:`rootservice.api.grpc_server`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from obcommon.errors import ObError
from rootservice.app.wiring import RsComponents
from rootservice.auth.revocations import REFRESH_INTERVAL_US as REVOCATION_REFRESH_INTERVAL_US
from rootservice.balancer.copy_tasks import COPY_WATCH_INTERVAL_US
from rootservice.balancer.partial_replica_gc import PARTIAL_REPLICA_GC_INTERVAL_US
from rootservice.balancer.planner_check import PlannerCheck, check_planner
from rootservice.db import engine as dbengine
from rootservice.db import member_repo, param_repo, schema_upgrade
from rootservice.db.engine import db_error_summary
from rootservice.db.event_repo import Event
from rootservice.ha.election import Election
from rootservice.ha.term import RsState, lease_timings
from rootservice.metrics import JobReading, Readings
from rootservice.servers.drain import DRAIN_RESUME_INTERVAL_US
from rootservice.servers.history_pruner import PRUNE_INTERVAL_US
from rootservice.servers.lag_detector import LAG_CHECK_INTERVAL_US
from rootservice.servers.maintenance import MAINTENANCE_TICK_US
from rootservice.servers.server_report_sync import INTERVAL_US as REPORT_SYNC_INTERVAL_US
from rootservice.tasks import FnTask
from rootservice.tenants.learner_sync import LEARNER_SYNC_INTERVAL_US
from rootservice.tenants.log_marks import INTERVAL_US as LOG_MARK_INTERVAL_US
from rootservice.timers import Schedule
from rootservice.upgrade.versions import rs_skew_refusal

log = logging.getLogger(__name__)


#: Poll period (seconds) of SWITCH ROOTSERVICE's wait for the successor.
HANDOVER_POLL_S = 0.05


class StartupError(Exception):
    """The RS cannot start (database unreachable, schema migration failed...)."""


class RootService(RsComponents):
    """One RS process: its components (:class:`rootservice.app.wiring.RsComponents`, built
    at construction) and its life cycle: :meth:`open` the database, :meth:`start` the
    election, :meth:`shutdown`; the one list of the leader's tasks (:meth:`leader_tasks`);
    what ``/metrics`` and GetMetrics read (:meth:`readings`, :meth:`metrics_snapshot`)."""

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
        """Connect to the database, apply the expand migrations
        (:func:`rootservice.db.schema_upgrade.upgrade_at_start`) and read ``__all_sys_parameter``;
        refuse to start beside a root service outside the version skew rule.

        Raises :class:`StartupError` with a readable reason (URL shown without password)."""
        url = self.settings.effective_db_url()
        shown = sa.make_url(url).render_as_string(hide_password=True)
        try:
            self.engine = dbengine.make_engine(url, server_judge=self.fence.judge_server)
            # Expand migrations only: a root service of the previous release may be
            # running on this database until the upgrade is finalized.
            schema_upgrade.upgrade_at_start(self.engine)
            self.store.engine = self.engine
            with self.engine.connect() as conn:
                params = param_repo.load_params(conn)
                # Root services seen within two default leases are running now.
                members = member_repo.seen_since(
                    conn, self.clock.now_us() - 2 * self.settings.lease_time
                )
        except sa.exc.ArgumentError as e:
            raise StartupError(f"bad database URL {shown}: {e}") from e
        except schema_upgrade.SchemaAhead as e:
            raise StartupError(f"{shown}: {e}") from e
        except (sa.exc.SQLAlchemyError, OSError) as e:
            raise StartupError(
                f"cannot open the system-table database {shown}: {db_error_summary(e)}"
            ) from e
        try:
            self.parameters.apply_table(params)
        except ValueError as e:
            raise StartupError(str(e)) from e
        refusal = rs_skew_refusal(self.versions.release, self.rpc_addr, members)
        if refusal is not None:
            raise StartupError(ObError("OB_VERSION_NOT_MATCH", detail=refusal).to_sql_text())
        self._recheck_planner()
        self.identity.bootstrapped = param_repo.PARAM_BOOTSTRAP_TIME in params
        self.identity.cluster_id = params.get(param_repo.PARAM_CLUSTER_ID, "")
        self.identity.self_server = self.settings.self_server

    def check_planner(self) -> PlannerCheck:
        """Check, without starting a JVM, that the planner ``balancer_planner`` names can run
        (:func:`rootservice.balancer.planner_check.check_planner`), log the answer (INFO, or
        WARNING with the fix) and keep it in :attr:`planner_check` (``ob_rs_planner_ready``,
        the cluster document)."""
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
            # Before the first call is served, not a timer period later.
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
            (self.lag_detector, LAG_CHECK_INTERVAL_US),
            (self.persist, s.persist_interval),
            (self.check_all_server, s.server_check_interval),
            (self.empty_server_checker, s.empty_server_check_interval),
            (tl.reconciler, s.ls_check_interval),
            (tl.primary_zone_checker, s.ls_check_interval),
            (tl.rebuilder, s.ls_check_interval),
            (self.lag_rebuilder, s.ls_check_interval),
            (tl.learner_sync, LEARNER_SYNC_INTERVAL_US),
            (tl.meta_sync, s.ls_check_interval),
            (self.migration, s.balancer_interval),
            (self.copy_watch, COPY_WATCH_INTERVAL_US),
            (self.partial_replica_gc, PARTIAL_REPLICA_GC_INTERVAL_US),
            (self.lost_replica_checker, s.lost_replica_check_interval),
            (self.lost_servers, s.ls_check_interval),
            (tl.log_marks, LOG_MARK_INTERVAL_US),
            (self.server_reports, REPORT_SYNC_INTERVAL_US),
            (self.history_pruner, PRUNE_INTERVAL_US),
            (self.drains, DRAIN_RESUME_INTERVAL_US),
            (self.maintenance, MAINTENANCE_TICK_US),
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
            # Every RS, leader or not, refuses what is revoked.
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

    def hand_over(self, successor: str) -> str:
        """ALTER SYSTEM SWITCH ROOTSERVICE LEADER SERVER 'successor': write the queued table
        changes, hand the office over to the standby at ``successor``
        (:meth:`rootservice.ha.handover.Handover.hand_over`: this RS steps down at once),
        then wait, at most one lease, until the successor holds the lease with a newer
        epoch; returns the statement's info text.

        Raises the handover's refusals (nothing changed), OB_RS_NOT_MASTER when another RS
        took office instead, OB_TIMEOUT when the successor has not taken office within the
        lease (it still may; else a normal election follows once the reservation ends)."""

        def flush() -> None:
            if self.term.in_service:
                self.persist.run_once()

        epoch = self.handover.hand_over(successor, flush)
        lease = self.settings.lease_time
        deadline = self.clock.monotonic_us() + lease + lease_timings(lease)[0]
        for _ in range(100_000):
            row = self.election.lease()
            if row.epoch > epoch and row.holder == successor:
                return f"root service {successor} took office with epoch {row.epoch}"
            if row.epoch > epoch:
                raise ObError(
                    "OB_RS_NOT_MASTER",
                    detail=f"{row.holder} took office with epoch {row.epoch} instead of "
                    f"{successor}",
                )
            if self.clock.monotonic_us() >= deadline:
                break
            self.sleep(HANDOVER_POLL_S)
        raise ObError(
            "OB_TIMEOUT",
            detail=f"this root service gave the office of epoch {epoch} up, but {successor} "
            "has not taken it yet (it still may; otherwise a new leader is elected when "
            "its reservation ends)",
        )

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
            servers_suspect=self.whitelist.suspect_count(),
            servers_lagging=self.whitelist.lagging_count(),
            intake_lag_us=self.lease_queue.lag_us(),
            intake_waiting=self.lease_queue.depth(),
            intake_behind=self.lease_queue.behind,
            intake_paced=self.lease_queue.held(),
            intake_paced_total=self.lease_queue.paced_total,
            intake_saturated=self.lease_queue.saturated,
            loop_busy=self.loop_load.last_busy,
            rs_lease_trusted_us=self.term.trusted_us(),
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
        out["rs_lease_trusted_us"] = self.term.trusted_us()
        out["leader"] = self.term.leader
        out["take_office_grace_until_us"] = self.take_office_grace.no_expire_until
        out["writes_rejected_total"] = self.store.rejected_writes
        out["lease_time_us"] = self.settings.lease_time
        out["balancer_planner"] = self.settings.balancer_planner
        out["planner_ready"] = self.planner_check.ready if self.planner_check else None
        out["lease_allowance_us"] = self.intake_health.current_us
        out["self_suspect"] = self.self_suspicion.suspected
        out["servers_suspect"] = self.whitelist.suspect_count()
        out["servers_lagging"] = self.whitelist.lagging_count()
        out["intake_lag_us"] = self.lease_queue.lag_us()
        out["intake_waiting"] = self.lease_queue.depth()
        out["intake_behind"] = self.lease_queue.behind
        out["intake_paced"] = self.lease_queue.held()
        out["intake_paced_total"] = self.lease_queue.paced_total
        out["intake_saturated"] = self.lease_queue.saturated
        out["loop_busy"] = self.loop_load.last_busy
        return out
