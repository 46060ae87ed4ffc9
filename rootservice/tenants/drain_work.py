"""The tenant layer's part of DRAIN SERVER and of the disruption budget: the log streams' members and leaders as the reports show them, and why a leader
cannot leave a server.

:class:`DrainWork` meets :class:`rootservice.servers.drain.DrainWork` and the server
statements' budget check (:class:`rootservice.servers.admin.ServerAdmin`); the rule itself is
:mod:`rootservice.servers.disruption_budget`.
"""

from __future__ import annotations

from collections.abc import Callable

from obcommon.clock import Clock
from obcommon.errors import ObError
from rootservice.config import RsSettings
from rootservice.servers.disruption_budget import LsMembers, disruption, ls_name, refusals
from rootservice.tenants.host_health import HostHealth
from rootservice.tenants.leaders import LeaderCoordinator
from rootservice.tenants.ports import HeartbeatRequester, ServerDirectory, ZoneDirectory
from rootservice.tenants.reports import LsView, ReplicaReports, effective_members, in_sync
from rootservice.tenants.topology import LayoutCache
from rootservice.tenants.view_agreement import ViewAgreement, leaders_on


class DrainWork:
    """Budget, leader moves and blockers for DRAIN / STOP / ISOLATE / maintenance.
    ``copies(server)`` counts the copies from or to ``server``, in flight or still to come
    (the balancer's :meth:`rootservice.balancer.copy_replan.CopyReplan.copies_left`);
    ``replan_to(server)``
    has the units still moving to a drained ``server`` sent elsewhere (their copies are
    forgotten there rather than waited for) and returns why some cannot be, one line each
    (:meth:`rootservice.balancer.copy_replan.CopyReplan.leave`)."""

    def __init__(
        self,
        *,
        servers: ServerDirectory,
        zones: ZoneDirectory,
        health: HostHealth,
        layout: LayoutCache,
        reports: ReplicaReports,
        leaders: LeaderCoordinator,
        heartbeats: HeartbeatRequester,
        clock: Clock,
        settings: RsSettings,
        copies: Callable[[str], int],
        replan_to: Callable[[str], list[str]],
        views: ViewAgreement,
    ) -> None:
        """Wire the collaborators; nothing is read until a call."""
        self.servers = servers
        self.zones = zones
        self.health = health
        self.layout = layout
        self.reports = reports
        self.leaders = leaders
        self.heartbeats = heartbeats
        self.clock = clock
        self.settings = settings
        self.copies = copies
        self.replan_to = replan_to
        self.views = views

    def disrupted(self) -> dict[str, str]:
        """Every whitelisted server the budget cannot count on, with why
        (:func:`rootservice.servers.disruption_budget.disruption`; a server of a stopped
        zone: ``"zone stopped"``)."""
        mono, now = self.clock.monotonic_us(), self.clock.now_us()
        out = {}
        for s in self.servers.snapshot():
            why = disruption(s, mono, now)
            if why is None and not self.zones.is_active(s.zone):
                why = "zone stopped"
            if why is not None:
                out[s.key] = why
        return out

    def streams(self) -> list[LsMembers]:
        """Every planned LS with its effective members (the leader's member list)."""
        views = self.reports.views()
        return [
            LsMembers(key, tuple(effective_members(plan, views.get(key, LsView(key)))))
            for key, plan in self.layout.topology().plans.items()
        ]

    def check_budget(self, targets: set[str], action: str) -> None:
        """The disruption budget. Raises OB_OP_NOT_ALLOW naming every LS
        that ``targets`` disrupted by ``action`` would leave below its majority."""
        problems = refusals(self.streams(), self.disrupted(), targets, action)
        if problems:
            raise ObError(
                "OB_OP_NOT_ALLOW",
                f"{action} {','.join(sorted(targets))} (disruption budget: {'; '.join(problems)}); it is",
            )

    def led_from(self, server: str) -> list[tuple[int, int]]:
        """The log streams whose reported leader is ``server``, by key."""
        views = self.reports.views()
        return sorted(k for k, v in views.items() if v.leader == server)

    def step(self, server: str) -> tuple[int, int]:
        """One drain round: request reports of ``server`` and of the members of the log
        streams it leads, try one leader move for each of them (excluding ``server``), have
        the units moving to it re-planned (``replan_to``; done by the balancer's round),
        count again. Returns (log streams led from ``server``, copies from or to it).

        When the reports show no leader left there, the count is the view's: the LEADER
        rows ``DBA_OB_LS_LOCATIONS`` shows on ``server`` once the meta table is synced
        (:class:`rootservice.tenants.view_agreement.ViewAgreement`), so the drain ends only
        when what operators read agrees. Raises ``ObError`` of that sync."""
        self.replan_to(server)
        led = self.led_from(server)
        topo = self.layout.topology()
        hosts = {server} | {
            m for k in led if (p := topo.plans.get(k)) is not None for m in p.members
        }
        self.heartbeats.request_heartbeats([h for h in sorted(hosts) if self.health.is_alive(h)])
        views = self.reports.views()
        for key in self.led_from(server):
            plan = topo.plans.get(key)
            if plan is not None:
                self.leaders.coordinate(plan, views.get(key, LsView(key)), exclude={server})
        led = self.led_from(server)
        if not led:
            # Fresh reports of every member of the log streams the server hosts, not of the
            # server alone: a new leader's last report may still be a follower's, and the
            # view would then show the log stream with no LEADER row at all right after
            # the drain's OK (seen once in a clean-clone run).
            members = {m for p in topo.plans.values() if server in p.members for m in p.members}
            view = self.views.leaders(sorted(members | {server}))
            return len(leaders_on(view, {server})), self.copies(server)
        return len(led), self.copies(server)

    def blockers(self, server: str) -> list[str]:
        """Why each LS still led from ``server`` keeps its leader there, one line per LS
        (then why each unit moving to it could not be sent elsewhere, ``replan_to``):
        ``"LS 1001 (tenant 1002): its only other in-sync member 127.0.0.1:2883 is
        SUSPECT"``; ``"LS 1001 (tenant 1002): 1 other member(s) can lead, a new leader needs
        2 of 3 (127.0.0.1:2884 INACTIVE)"`` (the leader coordinator elects only with a
        majority of healthy members besides the one it leaves); otherwise the members and
        why each cannot lead, or that the switch failed (see the events)."""
        views = self.reports.views()
        topo = self.layout.topology()
        disrupted = self.disrupted()
        threshold = self.settings.ls_log_sync_threshold
        out = []
        for key in self.led_from(server):
            view = views.get(key, LsView(key))
            plan = topo.plans.get(key)
            members = effective_members(plan, view) if plan is not None else sorted(view.replicas)
            others = [m for m in members if m != server]
            majority = len(members) // 2 + 1
            healthy = [
                m for m in others if self.health.healthy_member(m, view.replicas.get(m), {server})
            ]
            synced = [m for m in others if in_sync(view, m, threshold)]
            reasons = []
            for m in others:
                r = view.replicas.get(m)
                why = disrupted.get(m)
                if why is None and (r is None or not r.in_service):
                    why = "replica not in service"
                if why is None and m not in synced:
                    why = "not in log sync"
                if why is not None:
                    reasons.append(f"{m} {why}")
            if len(synced) == 1 and disrupted.get(synced[0]):
                text = f"its only other in-sync member {synced[0]} is {disrupted[synced[0]]}"
            elif not others:
                text = "it has no other member"
            elif len(healthy) < majority:
                text = (
                    f"{len(healthy)} other member(s) can lead, a new leader needs {majority} "
                    f"of {len(members)} ({', '.join(reasons) or 'none named'})"
                )
            else:
                text = "the leader switch failed (see the switch_leader events and the RS log)"
                if reasons:
                    text += f"; {', '.join(reasons)}"
            out.append(f"{ls_name(key)}: {text}")
        if not out:
            out = [
                f"{row}: DBA_OB_LS_LOCATIONS still shows it LEADER (the meta table lags)"
                for row in leaders_on(self.views.leaders([server]), {server})
            ]
        return out + self.replan_to(server)
