"""Leaders of the log streams: choosing, switching and moving them off servers
(docs/design/statements.md; OceanBase's leader coordinator and ``ALTER SYSTEM SWITCH REPLICA LEADER``).

- **Choice.** A leader must be alive, started (``stop_time == 0``), in service, in an ACTIVE
  zone, and is preferred in the tenant's primary zone (:mod:`rootservice.tenants.host_health`).
  A SUSPECT server is chosen last: only when no other member can lead (an
  LS without leader is unavailable), never to move a leader to a better zone, and SWITCH
  REPLICA LEADER refuses it; a leader it already holds stays.
- **Switch.** The old leader resigns at a new term and reports its last log index; the new
  leader catches up to that index from it before it appends anything (and drops a tail of
  its own that differs, e.g. one it wrote as a deposed leader), so no entry the old leader
  wrote is lost; then the other members follow.
- **Coordination** (every reconciler round): elect a leader where there is none or it cannot
  lead; move it to a better zone when it is not in the tenant's first primary-zone priority.
- **Moving off** (after STOP / FORCE STOP / ISOLATE SERVER): until ``leader_cnt`` is 0.

Times are microseconds since the epoch.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Set

from obcommon.clock import Clock
from obcommon.errors import ObError
from rootservice.config import RsSettings
from rootservice.db.event_repo import Event
from rootservice.metrics import Metrics
from rootservice.tenants.host_health import HostHealth
from rootservice.tenants.once_log import OnceLog
from rootservice.tenants.ports import EventSink, HeartbeatRequester, ServerDirectory, Sleep
from rootservice.tenants.replica_specs import ReplicaApplier
from rootservice.tenants.reports import LsView, ReplicaReports, effective_members, in_sync
from rootservice.tenants.topology import LayoutCache, LsPlan
from rootservice.tenants.view_agreement import ViewAgreement
from rootservice.tenants.vocabulary import LsKey

log = logging.getLogger(__name__)

# Poll period (seconds) of the wait for leaders to move off stopped servers.
POLL_S = 0.2


class LeaderCoordinator:
    """Chooses and switches the leaders of log streams. One leader change at a time: a
    STOP statement and the reconciler must not both move the same LS."""

    def __init__(
        self,
        *,
        servers: ServerDirectory,
        health: HostHealth,
        layout: LayoutCache,
        reports: ReplicaReports,
        applier: ReplicaApplier,
        events: EventSink,
        heartbeats: HeartbeatRequester,
        views: ViewAgreement,
        clock: Clock,
        settings: RsSettings,
        metrics: Metrics,
        sleep: Sleep,
        warnings: OnceLog,
    ) -> None:
        """Wire the collaborators; nothing is read until a call."""
        self.servers = servers
        self.health = health
        self.layout = layout
        self.reports = reports
        self.applier = applier
        self.events = events
        self.heartbeats = heartbeats
        self.views = views
        self.clock = clock
        self.settings = settings
        self.metrics = metrics
        self.sleep = sleep
        self.warnings = warnings
        # The applier's: a copy's announcement never interleaves with a switch.
        self._switch_lock = applier.ls_change_lock

    def choose_leader(
        self, plan: LsPlan, view: LsView, exclude: Set[str], *, require_report: bool = True
    ) -> str | None:
        """The best leader candidate among the plan's members: able to lead (alive, started,
        in service, zone ACTIVE, not in ``exclude``), replica reported in service (unless
        ``require_report`` is False, at creation), ordered by not SUSPECT first, not in the
        LS's blacklist, a NORMAL member, the LS's manual leader, tenant primary-zone
        priority, the LS's own primary zone, then the longest log, then address."""

        def rank(server: str) -> tuple[int, int, int, int, int, int, int, str]:
            zone = self.health.zone_of(plan, server)
            r = view.replicas.get(server)
            s = self.servers.get(server)
            return (
                # a SUSPECT server only when nothing else can lead
                1 if self.health.is_suspect(server) else 0,
                # SWITCH REPLICA FOLLOWER's blacklist: only when nothing else can lead
                1 if server in plan.blacklist else 0,
                # a replica migrating away (its unit moved) or on a DELETING server leads
                # only when nothing else can
                0
                if server in plan.members and s is not None and s.admin_status.value == "NORMAL"
                else 1,
                # SWITCH REPLICA LEADER's manual leader before the primary zone
                0 if server == plan.manual_leader else 1,
                plan.zone_priority.get(zone, 99),
                0 if zone == plan.primary_zone else 1,
                -(r.log_end_index if r is not None else 0),
                server,
            )

        candidates = [
            m
            for m in (effective_members(plan, view) if require_report else plan.members)
            if self.health.can_lead(m, exclude)
            and (not require_report or (m in view.replicas and view.replicas[m].in_service))
        ]
        if not candidates:
            return None
        return min(candidates, key=rank)

    def switch_leader(self, key: LsKey, new_leader: str, reason: str) -> None:
        """Make ``new_leader`` the leader of LS ``key`` at a new term (docs/design/statements.md's
        "leaders move off"; OceanBase's ``ALTER SYSTEM SWITCH REPLICA LEADER``).

        The old leader (if alive) resigns first and reports its last log index; the new
        leader fetches the log up to that index from it before appending; the remaining
        members then follow the new leader. Raises OB_ENTRY_NOT_EXIST (no such LS or the
        server is not a member), OB_OP_NOT_ALLOW (the server cannot lead: stopped, not alive,
        not in service), OB_SERVER_CONNECTION_ERROR / OB_TIMEOUT from the agents; on failure
        the old leader is reinstated when it is still alive (even stopped). Returns once
        ``DBA_OB_LS_LOCATIONS`` shows the new leader
        (:meth:`rootservice.tenants.view_agreement.ViewAgreement.wait_leader`, within
        ``leader_switch_timeout``; OB_WAIT_LEADER_SWITCH_TIMEOUT naming what it shows)."""
        old = self._switch_checked(key, new_leader, reason)
        deadline = self.clock.now_us() + self.settings.leader_switch_timeout
        self.views.wait_leader(key, new_leader, [old] if old else [], deadline)

    def _switch_checked(self, key: LsKey, new_leader: str, reason: str) -> str | None:
        """:meth:`switch_leader`'s checks and switch; returns the leader it replaced."""
        with self._switch_lock:
            topo = self.layout.topology()
            plan = topo.plans.get(key)
            if plan is None:
                raise ObError("OB_ENTRY_NOT_EXIST", f"log stream {key[1]} of tenant {key[0]}")
            view = self.reports.views().get(key, LsView(key))
            if new_leader not in effective_members(plan, view):
                raise ObError(
                    "OB_ENTRY_NOT_EXIST",
                    f"server '{new_leader}' is not a member of log stream {key[1]} of tenant {key[0]}",
                )
            r = view.replicas.get(new_leader)
            if not self.health.can_lead(new_leader) or r is None or not r.in_service:
                raise ObError(
                    "OB_OP_NOT_ALLOW",
                    f"server '{new_leader}' leading log stream {key[1]} (it is stopped, not "
                    "alive or its replica is not in service)",
                )
            if self.health.is_suspect(new_leader) and view.leader != new_leader:
                raise ObError(
                    "OB_OP_NOT_ALLOW",
                    f"server '{new_leader}' leading log stream {key[1]} (it is SUSPECT: its "
                    "lease expired recently; see DBA_OB_SERVERS.SUSPECT_END_TIME)",
                )
            if view.leader == new_leader:
                return None
            self._switch(plan, view, new_leader, reason)
            return view.leader

    def switch(self, plan: LsPlan, view: LsView, new_leader: str, reason: str) -> None:
        """:meth:`switch_leader` without its checks, under the switch lock, for callers
        that chose ``new_leader`` themselves (the reconciler's member change). Raises
        ``ObError`` from the agents."""
        with self._switch_lock:
            self._switch(plan, view, new_leader, reason)

    def _switch(self, plan: LsPlan, view: LsView, new_leader: str, reason: str) -> None:
        term = view.term + 1
        old = view.leader
        members = effective_members(plan, view)
        spec = self.applier.spec
        catch_up_index, catch_up_from = 0, ""
        if old is not None and old != new_leader:
            try:
                resp = self.applier.apply(old, [spec(plan, old, new_leader, term, members=members)])
                for r in resp.replicas:
                    if (r.tenant_id, r.ls_id) == plan.key:
                        catch_up_index, catch_up_from = r.log_end_index, old
            except ObError as e:
                # An unreachable old leader cannot append either (its followers no longer
                # take its entries at the new term): take over from the longest member log.
                log.warning("LS %s: old leader %s did not resign: %s", plan.key, old, e)
        try:
            self.applier.apply(
                new_leader,
                [
                    spec(
                        plan,
                        new_leader,
                        new_leader,
                        term,
                        catch_up_index,
                        catch_up_from,
                        members=members,
                    )
                ],
                timeout_us=3 * self.settings.rpc_timeout,
            )
        except ObError:
            # A stopped or draining old leader is reinstated too: leading from a server
            # being emptied beats an LS without leader.
            if old is not None and old != new_leader and self.health.is_alive(old):
                try:
                    self.applier.apply(old, [spec(plan, old, old, term + 1, members=members)])
                except ObError as e2:
                    log.warning("LS %s: reinstating leader %s failed: %s", plan.key, old, e2)
            raise
        # Everyone else that hosts the LS (members and replicas being built) follows.
        others = {
            m: [spec(plan, m, new_leader, term, members=members)]
            for m in sorted(set(members) | set(view.replicas))
            if m != new_leader and m != old and self.health.is_alive(m)
        }
        for server, err in self.applier.apply_many(others).items():
            log.info("LS %s: member %s will learn the new leader later: %s", plan.key, server, err)
        self.metrics.inc("leader_switches_total")
        now = self.clock.now_us()
        self.events.add_event(
            Event(
                now,
                "leader_coordinator",
                "switch_leader",
                (
                    ("tenant_id", plan.key[0]),
                    ("ls_id", plan.key[1]),
                    ("from", old or ""),
                    ("to", new_leader),
                    ("term", term),
                    ("reason", reason),
                ),
            )
        )
        log.info(
            "LS %d.%d: leader %s -> %s at term %d (%s)",
            plan.key[0],
            plan.key[1],
            old or "none",
            new_leader,
            term,
            reason,
        )

    def coordinate(self, plan: LsPlan, view: LsView, exclude: Set[str] | None = None) -> int:
        """Elect a leader when there is none or it cannot lead; move it to a better zone when
        the current one is not in the tenant's first primary-zone priority. Returns 1 when a
        switch happened (a failed switch is logged once and returns 0)."""
        exclude = exclude or set()
        leader = view.leader
        members = effective_members(plan, view)
        majority = len(members) // 2 + 1
        healthy = [
            m for m in members if self.health.healthy_member(m, view.replicas.get(m), exclude)
        ]
        if leader is not None and self.health.can_lead(leader, exclude):
            best = self.choose_leader(plan, view, exclude)
            if best is None or best == leader or self.health.is_suspect(best):
                return 0
            reason = self._better_leader(plan, view, leader, best)
            if reason is None:
                return 0
        else:
            if len(healthy) < majority:
                self.warnings.warn(
                    "majority",
                    plan.key,
                    f"LS {plan.key[0]}.{plan.key[1]} has no leader and only {len(healthy)} of "
                    f"{len(members)} healthy members: waiting",
                )
                return 0
            best = self.choose_leader(plan, view, exclude)
            if best is None:
                return 0
            reason = "no leader" if leader is None else f"leader {leader} cannot lead"
        try:
            self.switch(plan, view, best, reason)
            self.warnings.cleared("majority", plan.key)
            return 1
        except ObError as e:
            self.warnings.warn(
                best, plan.key, f"LS {plan.key}: switching leader to {best} failed: {e}"
            )
            return 0

    def _better_leader(self, plan: LsPlan, view: LsView, leader: str, best: str) -> str | None:
        """Why the leadership should move from ``leader`` (able to lead) to ``best``
        (:meth:`choose_leader`'s choice), or None to leave it. The manual leader of SWITCH
        REPLICA LEADER is sticky: the primary zone never moves the leader off it, and it
        takes the leadership back when it can lead again; SWITCH REPLICA FOLLOWER's
        blacklist moves the leader off a blacklisted server (OceanBase's election priority
        with ``__all_ls_election_reference_info``)."""
        if best not in plan.members or best in plan.blacklist:
            return None
        if not in_sync(view, best, self.settings.ls_log_sync_threshold):
            return None
        if leader not in plan.members:
            return "the leader's replica migrates away"
        if leader in plan.blacklist:
            return f"{leader} is in the election blacklist (SWITCH REPLICA FOLLOWER)"
        if best == plan.manual_leader:
            return "manual leader (SWITCH REPLICA LEADER)"
        if leader == plan.manual_leader:
            return None
        cur_zone = self.health.zone_of(plan, leader)
        best_zone = self.health.zone_of(plan, best)
        if plan.zone_priority.get(best_zone, 99) >= plan.zone_priority.get(cur_zone, 99):
            return None
        return f"primary zone {best_zone}"

    def move_leaders_off(self, servers: Iterable[str]) -> None:
        """After STOP / FORCE STOP / ISOLATE: move every leader off ``servers`` and wait
        until their ``leader_cnt`` is 0 (fresh reports are requested each round), then until
        ``DBA_OB_LS_LOCATIONS`` shows no LEADER row on them
        (:meth:`rootservice.tenants.view_agreement.ViewAgreement.wait_leaders_off`), for up
        to ``leader_switch_timeout`` in all. Raises OB_WAIT_LEADER_SWITCH_TIMEOUT naming the
        log streams still led from there (the servers stay stopped; the reconciler keeps
        moving them), and ``ObError`` of the meta table's sync."""
        keys = set(servers)
        deadline = self.clock.now_us() + self.settings.leader_switch_timeout
        stuck: list[LsKey] = []
        for _ in range(100_000):
            self.heartbeats.request_heartbeats([k for k in keys if self.health.is_alive(k)])
            counts = [
                s.leader_cnt
                for k in keys
                if (s := self.servers.get(k)) is not None and s.is_alive()
            ]
            if all(c <= 0 for c in counts):
                # Operators look at DBA_OB_LS_LOCATIONS right after the statement returns.
                self.views.wait_leaders_off(
                    keys, deadline, f"leaders moved off {','.join(sorted(keys))}"
                )
                return
            topo = self.layout.topology()
            views = self.reports.views()
            stuck = []
            for key, plan in sorted(topo.plans.items()):
                view = views.get(key, LsView(key))
                if view.leader in keys:
                    stuck.append(key)
                    self.coordinate(plan, view, exclude=keys)
            # Replicas the RS does not plan (another RS's leftovers) cannot be moved by it.
            if self.clock.now_us() >= deadline:
                break
            self.sleep(POLL_S)
        raise ObError(
            "OB_WAIT_LEADER_SWITCH_TIMEOUT",
            detail=(
                f"log stream(s) {', '.join(f'{t}.{ls}' for t, ls in stuck[:10]) or '?'} "
                f"still led from {','.join(sorted(keys))}; the servers are stopped and leaders "
                "keep moving in the background"
            ),
        )
