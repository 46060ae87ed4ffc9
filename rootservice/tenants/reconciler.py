"""The ``ls_reconciler`` task (docs/design/servers.md, docs/design/statements.md and docs/design/migration.md; every ``ls_check_interval``).

Creates the replicas that ``__all_ls_status`` and ``__all_unit`` say should exist but no
alive server reports, drops replicas of log streams that no longer exist, elects or moves
leaders (:class:`rootservice.tenants.leaders.LeaderCoordinator`) and completes replica
migrations by changing the member list once the new replicas are in sync.
"""

from __future__ import annotations

import logging

from obcommon.clock import Clock
from obcommon.errors import ObError
from obcommon.proto import obrpc_pb2
from rootservice.config import RsSettings
from rootservice.db.event_repo import Event
from rootservice.metrics import Metrics
from rootservice.tenants.host_health import HostHealth
from rootservice.tenants.leaders import LeaderCoordinator
from rootservice.tenants.once_log import OnceLog
from rootservice.tenants.pause import ActGate
from rootservice.tenants.ports import EventSink
from rootservice.tenants.replica_specs import ReplicaApplier
from rootservice.tenants.reports import LsView, ReplicaReports, effective_members, in_sync
from rootservice.tenants.topology import LayoutCache, LsPlan
from rootservice.tenants.vocabulary import LsKey

log = logging.getLogger(__name__)


class LsReconciler:
    """``run_once()`` -> number of actions taken (replicas created or dropped, leader
    switches, member changes)."""

    name = "ls_reconciler"

    def __init__(
        self,
        *,
        term: ActGate,
        health: HostHealth,
        layout: LayoutCache,
        reports: ReplicaReports,
        applier: ReplicaApplier,
        leaders: LeaderCoordinator,
        events: EventSink,
        clock: Clock,
        settings: RsSettings,
        metrics: Metrics,
        warnings: OnceLog,
    ) -> None:
        """Wire the collaborators; nothing is read until a round."""
        self.term = term
        self.health = health
        self.layout = layout
        self.reports = reports
        self.applier = applier
        self.leaders = leaders
        self.events = events
        self.clock = clock
        self.settings = settings
        self.metrics = metrics
        self.warnings = warnings

    def run_once(self) -> int:
        """One reconciler round (the scheduled task): see :meth:`reconcile`."""
        return self.reconcile()

    def reconcile(self, only: set[LsKey] | None = None) -> int:
        """Create missing replicas on alive servers, drop replicas of log streams that no
        longer exist, and elect or move leaders (only the log streams in ``only`` when
        given). Returns the number of actions taken. Does nothing while not in service.
        Raises ``ObError(OB_ERR_SYS)`` when the layout cannot be read."""
        if not self.term.may_act():
            return 0
        # The reports first: a replica reported was created after its log stream's commit
        # (and the layout's bump), so the layout read next has it. The other order let a
        # slow round drop a new tenant's replicas as those of a log stream gone.
        views = self.reports.views()
        topo = self.layout.topology()
        actions = 0
        create: dict[str, list[obrpc_pb2.ReplicaSpec]] = {}
        drops: dict[str, list[LsKey]] = {}
        for key, view in views.items():
            if only is not None and key not in only:
                continue
            plan = topo.plans.get(key)
            if plan is None:
                for server in view.replicas:
                    if self.health.is_alive(server):
                        drops.setdefault(server, []).append(key)
                continue
            if view.replicas:
                # The LS exists: a missing replica is built by copying (disaster recovery,
                # rootservice.balancer), never generated afresh.
                continue
            for server in plan.members:
                if not self.health.is_alive(server):
                    continue
                create.setdefault(server, []).append(
                    self.applier.spec(plan, server, view.leader or "", view.term)
                )
        failures = self.applier.apply_many(create, drops)
        actions += sum(len(v) for v in create.values()) + sum(len(v) for v in drops.values())
        for server, e in failures.items():
            self.warnings.warn(server, (0, 0), f"applying replicas on {server} failed: {e}")
        if create or drops:
            views = self.reports.views()
        for key, plan in topo.plans.items():
            if only is not None and key not in only:
                continue
            view = views.get(key, LsView(key))
            actions += self.leaders.coordinate(plan, view)
        if actions:
            views = self.reports.views()
        for key, plan in topo.plans.items():
            if only is not None and key not in only:
                continue
            actions += self._complete_membership(plan, views.get(key, LsView(key)))
        return actions

    def _complete_membership(self, plan: LsPlan, view: LsView) -> int:
        """The last steps of a replica migration (docs/design/migration.md, disaster recovery):
        once every planned member that is not yet a Paxos member (those on servers that are
        not alive aside: then the others only join) hosts a replica that is in service and
        whose log is in sync, move leadership off leaving members, make the
        planned members the member list (same term), and drop the leaving replicas on the
        servers that are alive (the rows of dead ones go at the next meta sync). Returns 1
        when it changed something."""
        if view.leader is None:
            return 0
        members = effective_members(plan, view)
        desired = sorted(plan.members)
        if members == desired:
            return 0
        joining = [m for m in desired if m not in members]
        leaving = [m for m in members if m not in desired]
        absent = [m for m in joining if not self.health.is_alive(m)]
        if absent:
            # A planned member on a server that is not alive (its unit still on a lost
            # server, no other one having room) must not hold back the replicas added in
            # the other zones; nobody leaves meanwhile, its zone has no replacement yet.
            joining = [m for m in joining if m not in absent]
            if not joining:
                return 0
            leaving = []
            desired = sorted({*members, *joining})
        threshold = self.settings.ls_log_sync_threshold
        for m in joining:
            r = view.replicas.get(m)
            if r is None or not r.in_service or not self.health.is_alive(m):
                return 0
            if not in_sync(view, m, threshold):
                return 0
        if view.leader in leaving:
            best = self.leaders.choose_leader(plan, view, set(leaving))
            if best is None or best not in desired:
                return 0
            try:
                self.leaders.switch(plan, view, best, "the leader's replica migrates away")
            except ObError as e:
                self.warnings.warn(
                    best, plan.key, f"LS {plan.key}: moving the leader off failed: {e}"
                )
                return 0
            return 1
        work = {
            m: [self.applier.spec(plan, m, view.leader, view.term, members=desired)]
            for m in sorted(set(desired) | set(leaving))
            if self.health.is_alive(m) and m in view.replicas
        }
        # The leader learns the new member list first: it is the one that serves the log.
        try:
            self.applier.apply(view.leader, work.pop(view.leader))
        except ObError as e:
            self.warnings.warn(view.leader, plan.key, f"LS {plan.key}: member change failed: {e}")
            return 0
        self.applier.apply_many({m: w for m, w in work.items() if m not in leaving})
        drops = {m: [plan.key] for m in leaving if m in work}
        for server, err in self.applier.apply_many({}, drops).items():
            log.info("LS %s: dropping the replica on %s later: %s", plan.key, server, err)
        now = self.clock.now_us()
        self.events.add_event(
            Event(
                now,
                "disaster_recovery",
                "change_member_list",
                (
                    ("tenant_id", plan.key[0]),
                    ("ls_id", plan.key[1]),
                    ("added", ",".join(joining)),
                    ("removed", ",".join(leaving)),
                    ("leader", view.leader),
                ),
            )
        )
        self.metrics.inc("member_changes_total")
        log.info("LS %d.%d: members %s -> %s", plan.key[0], plan.key[1], members, desired)
        return 1
