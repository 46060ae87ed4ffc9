"""The root balancer task (``balancer``): emptying servers as the RS runs it (docs/design/migration.md;
OceanBase's ``ObRootBalancer`` and ``ObDRWorker``).

One round plans with the :class:`rootservice.balancer.planner.Planner` (Spark) and applies:
unit moves (:mod:`rootservice.balancer.unit_moves`), replica copies
(:mod:`rootservice.balancer.copy_tasks`), unit completion, then the progress of the
DELETE_SERVER jobs (:mod:`rootservice.balancer.job_progress`). Before it plans, a round
sends the units whose copies stalled at their destination, or whose destination is being
drained, to another server (:mod:`rootservice.balancer.copy_replan`), so its plan
already hands their copies to the new one. Every write is a fenced transaction
(docs/design/ha.md#fenced-writes).

CANCEL DELETE SERVER never waits for a round: its units go back in the
statement's own transaction (:meth:`RootBalancer.move_units_back`), the in-memory work is
forgotten under the parts' short locks once it committed (:meth:`RootBalancer.cancelled`)
and the partial replicas are dropped off the statement's path
(:meth:`RootBalancer.drop_partial`). A round that planned before the cancel applies nothing
of it: each part re-checks its rows' premises in its applying transaction and skips the
stale ones (counted in ``stale_plan_rows_total``, one INFO line per round). Leaders are not
moved by the balancer: the tenant layer moves them off a replica that leaves the *current*
layout, which a stale plan no longer changes.
"""

from __future__ import annotations

import logging
import threading
from typing import Protocol

import sqlalchemy as sa

from rootservice.balancer.copy_tasks import CopyTasks
from rootservice.balancer.job_progress import DeleteJobProgress
from rootservice.balancer.planner import Planner, PlannerError, server_rows
from rootservice.balancer.ports import Gate, LsKey, LsLayout, Replanner, UpgradeHold, Whitelist
from rootservice.balancer.replica_adds import ReplicaAdds, copy_rows
from rootservice.balancer.unit_moves import UnitMoves
from rootservice.db.unit_repo import Unit
from rootservice.servers.status import AdminStatus, HeartbeatStatus

log = logging.getLogger(__name__)


class UnitJobs(Protocol):
    """The progress of the MIGRATE UNIT jobs
    (:class:`rootservice.balancer.unit_migration.ManualUnitMoves`)."""

    def update_jobs(self) -> int:
        """Write the jobs' progress; returns the jobs written."""
        ...

    def clear(self) -> None:
        """Forget what was written (step-down)."""
        ...


class RootBalancer:
    """The balancer task (``name = "balancer"``, woken by DELETE / CANCEL DELETE / a server
    going permanently offline or coming back).

    ``planner`` computes the plans (Spark); ``units``, ``copies`` and ``jobs`` apply them;
    ``replan`` re-plans copy destinations first (None: never); ``term`` gates each round;
    ``servers`` and ``ls`` tell whether there is anything to do.
    """

    name = "balancer"

    def __init__(
        self,
        *,
        servers: Whitelist,
        ls: LsLayout,
        planner: Planner,
        term: Gate,
        units: UnitMoves,
        copies: CopyTasks,
        jobs: DeleteJobProgress,
        replan: Replanner | None = None,
        adds: ReplicaAdds | None = None,
        manual: UnitJobs | None = None,
        upgrade: UpgradeHold | None = None,
    ) -> None:
        """Nothing runs until :meth:`run_once`. ``adds`` finds the log streams short of
        replicas and records why (None: nothing is added); ``manual`` writes the progress of
        the MIGRATE UNIT jobs (None: nobody does); while ``upgrade`` says the cluster is in
        upgrade mode, nothing is re-replicated off a permanently offline server."""
        self.servers = servers
        self.ls = ls
        self.planner = planner
        self.term = term
        self.units = units
        self.copies = copies
        self.jobs = jobs
        self.replan = replan
        self.adds = adds
        self.manual = manual
        self.upgrade = upgrade
        # One round at a time; CANCEL DELETE never takes it.
        self._lock = threading.Lock()

    def clear(self) -> None:
        """Forget in-flight copy tasks, job progress and placement failures (step-down).

        Without the round's lock: a step-down must not wait for a Spark job, and a round
        still running writes nothing once the epoch moved on (its transactions are fenced)."""
        self.copies.clear()
        self.jobs.clear()
        self.units.clear()
        if self.replan is not None:
            self.replan.clear()
        if self.adds is not None:
            self.adds.clear()
        if self.manual is not None:
            self.manual.clear()

    def _offline(self) -> bool:
        """Some server is permanently offline (what a round would re-replicate)."""
        return any(
            s.hb_status is HeartbeatStatus.PERMANENT_OFFLINE for s in self.servers.snapshot()
        )

    def _emptying(self) -> list[str]:
        return [
            s.key
            for s in self.servers.snapshot()
            if s.admin_status is AdminStatus.DELETING
            or s.hb_status is HeartbeatStatus.PERMANENT_OFFLINE
        ]

    def run_once(self) -> int:
        """One balancer round: re-plan the destinations due, plan and record unit moves,
        hand out replica copies, finish units whose replicas have moved, update job
        progress. Returns actions taken. Does
        nothing (and never starts Spark) while no server is being emptied and no unit or
        copy is in flight, while the RS is not in service, or in upgrade mode while a server
        is permanently offline. A plan that fails
        (``PlannerError``) ends the round after the jobs record it as their stall reason.
        Raises ``ObError`` when a transaction fails (the task registry logs it; the next
        round starts afresh)."""
        if not self.term.may_act():
            return 0
        if self.upgrade is not None and self.upgrade.in_upgrade_mode() and self._offline():
            # Re-replication waits for the end of upgrade mode (its round replans everything).
            return 0
        with self._lock:
            # Nothing due costs nothing here (no read).
            actions = self.replan.run() if self.replan is not None else 0
            # Cheap checks first: with no tenant and no server to empty (the common case,
            # and the only one at 10k idle servers) a round costs one pass over the
            # whitelist's flags.
            emptying = self.servers.has_servers_to_empty()
            if not emptying and not self.copies and not self.ls.topology().plans:
                return actions
            moving = self.units.moving()
            misplaced = self._misplaced_replicas()
            short, undecided = self.adds.shortages() if self.adds else ([], set())
            adding = bool(short) or (self.adds is not None and self.adds.has_open())
            if not emptying and not moving and not self.copies and not misplaced and not adding:
                return actions
            servers = server_rows(self.servers)
            stale = {"units": 0, "copies": 0, "finished": 0}
            try:
                if self._emptying():
                    actions += self.units.apply_unit_plan(self.planner.unit_plan(servers))
                    stale["units"] = self.units.last_stale
                    if self.adds is not None:
                        # The units just moved are the add's destinations of this round.
                        short, undecided = self.adds.shortages()
                # Only adds to hand out: no plan (a Spark job per round while a log stream
                # waits for a server would be for nothing).
                planned = emptying or moving or self.copies or misplaced
                rows = (self.planner.replica_plan(servers) if planned else []) + copy_rows(short)
                actions += self.copies.hand_out(rows)
                stale["copies"] = self.copies.last_stale
                if self.adds is not None:
                    self.adds.record(short, undecided)
            except PlannerError as e:
                # Counted, logged and recorded by the planner; the jobs say it, and the round ends as a handled one (no task-failure traceback).
                self.jobs.planner_failed(e.cause)
                self.jobs.update_jobs()
                return actions
            self.jobs.planner_works()
            actions += self.units.finish_units()
            stale["finished"] = self.units.last_stale
            if any(stale.values()):
                log.info(
                    "balancer: skipped stale plan rows (the state changed since the plan): "
                    "%d unit move(s), %d copy(ies), %d unit completion(s)",
                    stale["units"],
                    stale["copies"],
                    stale["finished"],
                )
            self.jobs.update_jobs()
            if self.manual is not None:
                self.manual.update_jobs()
            return actions

    def _misplaced_replicas(self) -> bool:
        """Some LS has a planned member without a replica while the LS exists (a replica to
        rebuild), so the replica plan is worth computing even with no unit moving."""
        topo = self.ls.topology()
        for key, view in self.ls.views().items():
            plan = topo.plans.get(key)
            if plan is None or not view.replicas or view.leader is None:
                continue
            for m in plan.members:
                s = self.servers.get(m)
                if s is not None and s.is_alive() and m not in view.replicas:
                    return True
        return False

    def move_units_back(self, conn: sa.Connection, server: str) -> list[Unit]:
        """CANCEL DELETE SERVER ``server`` (``'ip:port'``), in the statement's transaction
        ``conn``: units moving away from it go back (``svr`` = ``migrate_from``); units that
        finished moving stay. Returns the units moved back as they were (``server`` = the
        destination they leave). Never waits for a round."""
        return self.units.move_back(conn, server)

    def cancelled(self, server: str, back: list[Unit]) -> dict[str, list[LsKey]]:
        """Once the cancel of ``server`` committed (the caller still holds the store's write
        lock, so a round's premise checks see the cancel whole or not at all): the layout is
        re-read, the copies to the destinations the units ``back`` left are forgotten, and
        the job's progress. Short locks only, no RPC. Returns the replicas to drop, by
        destination (for :meth:`drop_partial`)."""
        if back:
            self.units.layout_changed()
        drops = self.copies.cancel_to({u.server for u in back})
        self.jobs.forget(server)
        return drops

    def drop_partial(self, drops: dict[str, list[LsKey]]) -> None:
        """Drop the partial replicas :meth:`cancelled` returned, one ApplyReplicas per
        destination in parallel, each bounded by ``rpc_timeout``; failures are logged."""
        self.copies.drop(drops)
