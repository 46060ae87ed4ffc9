"""Taking lost servers out of member lists: the two member changes
FORCE DELETE SERVER and RECOVER LS apply, and the plan inputs they read.

- :meth:`MemberRemoval.remove_member` (REMOVE_MEMBER): the LS keeps a majority without the
  lost servers. A leader is elected first when it has none or it is lost
  (:class:`rootservice.tenants.leaders.LeaderCoordinator`); then the leader, and after it
  the other members, take the member list without them at the same term (as the
  reconciler's member change does).
- :meth:`MemberRemoval.recover` (RECOVER): the survivor leads at the plan's new term with
  the members left, then those follow it. No catch-up: the survivor has the longest log of
  the highest term among the replicas that remain.

Both are idempotent (a repeated spec at the same term changes nothing; a lower term is
ignored by the agents), which is what lets a new leader resume a run. The learners named in
these specs never include a removed server: a buried agent that comes back must not fetch
from the survivors.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Set

from obcommon.clock import Clock
from obcommon.errors import ObError
from rootservice.config import RsSettings
from rootservice.db import ls_repo
from rootservice.db.event_repo import Event
from rootservice.ha.store import MetaStore
from rootservice.tenants.host_health import HostHealth
from rootservice.tenants.leaders import LeaderCoordinator
from rootservice.tenants.log_marks import LogMarks
from rootservice.tenants.ports import EventSink, HeartbeatRequester
from rootservice.tenants.recovery_plan import LsStep, PlanInputs
from rootservice.tenants.replica_specs import ReplicaApplier
from rootservice.tenants.reports import LsView, ReplicaReports, effective_members
from rootservice.tenants.topology import LayoutCache
from rootservice.tenants.vocabulary import LsKey

log = logging.getLogger(__name__)


class MemberRemoval:
    """Reads the plan inputs and applies the two member changes of a plan's steps."""

    def __init__(
        self,
        *,
        store: MetaStore,
        layout: LayoutCache,
        reports: ReplicaReports,
        health: HostHealth,
        applier: ReplicaApplier,
        leaders: LeaderCoordinator,
        heartbeats: HeartbeatRequester,
        events: EventSink,
        clock: Clock,
        settings: RsSettings,
        marks: LogMarks,
    ) -> None:
        """Wire the collaborators; nothing is read until a call."""
        self.store = store
        self.layout = layout
        self.reports = reports
        self.health = health
        self.applier = applier
        self.leaders = leaders
        self.heartbeats = heartbeats
        self.events = events
        self.clock = clock
        self.settings = settings
        self.marks = marks

    def inputs(self, lost: Set[str]) -> PlanInputs:
        """Fresh plan inputs: first a heartbeat is requested from every live server hosting
        an LS with a member in ``lost`` (so the reports are the holders' current ones), then
        the layout, views, reports and ``__all_ls_meta_table``'s terms are read. Raises
        ``ObError`` from the database."""
        topo = self.layout.topology(force=True)
        views = self.reports.views()
        hosts = {
            m
            for key, plan in topo.plans.items()
            if lost & set(effective_members(plan, (v := views.get(key, LsView(key)))))
            for m in {*effective_members(plan, v), *v.replicas}
            if m not in lost and self.health.is_alive(m)
        }
        self.heartbeats.request_heartbeats(sorted(hosts))
        with self.store.read() as conn:
            meta = ls_repo.load_ls_meta(conn)
        meta_terms: dict[LsKey, int] = {}
        for (t, ls, _, _), row in meta.items():
            meta_terms[(t, ls)] = max(meta_terms.get((t, ls), 0), int(row["proposal_id"]))
        return PlanInputs(
            plans=topo.plans,
            views=self.reports.views(),
            reports=self.reports.reports(),
            meta_terms=meta_terms,
            marks=self.marks.highest(),
            is_alive=self.health.is_alive,
            healthy=self.health.healthy_member,
            zone_priority=lambda plan, m: plan.zone_priority.get(self.health.zone_of(plan, m), 99),
        )

    def forget(self, servers: Iterable[str]) -> None:
        """Drop the last reports of buried servers: their replicas are history, and a
        report kept would make them learners in later specs."""
        for s in servers:
            self.reports.forget_server(s)

    def _learners(self, key: LsKey, members: Iterable[str], removed: Set[str]) -> list[str]:
        return [x for x in self.applier.learners(key, list(members)) if x not in removed]

    def remove_member(self, key: LsKey, removed: Set[str], reason: str) -> bool:
        """REMOVE_MEMBER on LS ``key``: elect a leader outside ``removed`` when it has none
        or it is removed, then the member list without ``removed`` at the same term, the
        leader first. Returns True when the member list changed (False: nothing to do, or
        the LS is gone). Raises OB_OP_NOT_ALLOW when no member left can lead, and ``ObError``
        of the agents."""
        plan = self.layout.topology().plans.get(key)
        if plan is None:
            return False
        view = self.reports.views().get(key, LsView(key))
        if view.leader is None or view.leader in removed:
            best = self.leaders.choose_leader(plan, view, removed)
            if best is None:
                raise ObError(
                    "OB_OP_NOT_ALLOW",
                    f"removing {','.join(sorted(removed))} from log stream {key[1]} of tenant "
                    f"{key[0]} when no member left can lead (alive, started, in service); it is",
                )
            self.leaders.switch(plan, view, best, reason)
            view = self.reports.views().get(key, LsView(key))
        leader = view.leader
        if leader is None:
            raise ObError("OB_LEADER_NOT_EXIST", detail=f"log stream {key[1]} of tenant {key[0]}")
        members = effective_members(plan, view)
        after = [m for m in members if m not in removed]
        if after == members:
            return False
        learners = self._learners(key, after, removed)

        def spec(m: str) -> list:  # type: ignore[type-arg]
            return [self.applier.spec(plan, m, leader, view.term, members=after, learners=learners)]

        with self.applier.ls_change_lock:
            self.applier.apply(leader, spec(leader))
            others = {m: spec(m) for m in after if m != leader and self.health.is_alive(m)}
            for server, err in self.applier.apply_many(others).items():
                log.info("LS %s: member %s learns the member list later: %s", key, server, err)
        self._event(
            key,
            "change_member_list",
            ("removed", ",".join(sorted(set(members) - set(after)))),
            ("leader", leader),
            ("reason", reason),
        )
        return True

    def recover(self, step: LsStep, removed: Set[str]) -> None:
        """RECOVER one LS: ``step.survivor`` leads at ``step.new_term`` with
        ``step.members_after``, then the other members follow. Raises ``ObError`` of the
        survivor's agent (the others are retried by a later run or the reconciler)."""
        plan = self.layout.topology().plans.get(step.key)
        if plan is None:
            return
        after = list(step.members_after)
        learners = self._learners(step.key, after, removed)

        def spec(m: str) -> list:  # type: ignore[type-arg]
            return [
                self.applier.spec(
                    plan, m, step.survivor, step.new_term, members=after, learners=learners
                )
            ]

        with self.applier.ls_change_lock:
            self.applier.apply(
                step.survivor, spec(step.survivor), timeout_us=3 * self.settings.rpc_timeout
            )
            others = {m: spec(m) for m in after if m != step.survivor}
            for server, err in self.applier.apply_many(others).items():
                log.warning("LS %s: survivor %s follows later: %s", step.key, server, err)
        self._event(
            step.key,
            "recover_ls",
            ("leader", step.survivor),
            ("term", step.new_term),
            ("log_end", step.survivor_log_end),
            ("lost_entries", step.lost_entries),
        )
        log.warning(
            "LS %d.%d recovered from lost servers %s: %s leads at term %d with %s, log end %d "
            "(%d entries reported elsewhere are lost)",
            step.tenant_id,
            step.ls_id,
            ",".join(step.removed),
            step.survivor,
            step.new_term,
            ",".join(after),
            step.survivor_log_end,
            step.lost_entries,
        )

    def _event(self, key: LsKey, name: str, *values: tuple[str, object]) -> None:
        self.events.add_event(
            Event(
                self.clock.now_us(),
                "disaster_recovery",
                name,
                (("tenant_id", key[0]), ("ls_id", key[1]), *values),
            )
        )


def keys_filter(tenant_id: int | None, ls_id: int | None) -> Callable[[LsKey], bool]:
    """The LS a statement's ``TENANT`` / ``LS`` clauses select (None: any)."""
    return lambda k: (tenant_id is None or k[0] == tenant_id) and (ls_id is None or k[1] == ls_id)
