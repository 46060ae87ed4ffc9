"""The ``lag_rebuilder`` task (the last of the lag detector's actions: "a
lagging replica rebuilt"; every ``ls_check_interval``).

A follower that trails its leader's log by more than ``ls_log_sync_threshold`` for
``2 x agent_lag_timeout`` is LAGGING: the lag detector
(:class:`rootservice.servers.lag_detector.LagDetector`) reports it once per episode with the
event ``follower_lagging`` and lists it in :meth:`~LaggingFollowers.lagging_followers`. When
it is still LAGGING :func:`rebuild_delay_us` after that event (``2 x agent_lag_timeout``, one
more detection window: 60 s at the default 30 s, so 2 minutes of trailing in all), this task
rebuilds it in place: its replica is dropped on its server and copied afresh from the
leader, and it stays a member throughout (not in service, so counted for neither leadership
nor a majority, until its copy has caught the leader's log up). One event
``disaster_recovery`` / ``rebuild_replica`` (the replica rebuilder's, with this
:data:`REASON_LAGGING` reason) per rebuild.

**Bounds.** One rebuild per replica per episode (an episode lasts while the detector lists the
follower with the same start; the drop ends it, and a rebuilt replica that trails again is a
new one). A replica rebuilt before waits twice as long for each earlier rebuild
(:func:`rebuild_delay_us`, at most :data:`MAX_DOUBLINGS` doublings); the count is forgotten
once :func:`forget_after_us` passed without a rebuild. A refused drop is no rebuild: it is
logged once and tried again next round, as the replica rebuilder does.

**Never** (each logged once per LS and server while it holds):

- while the follower's server is LAGGING itself (its commands or its disk: the server, not the
  replica, is the problem, and its leaders are already moved off) or SUSPECT (no copies to
  it);
- when the other members that are healthy (alive, started, replica in service: the majority
  checks of STOP, :meth:`rootservice.tenants.host_health.HostHealth.healthy_member`), not
  LAGGING and in log sync with the leader are fewer than a majority of the member list
  without it: the rebuild would leave the LS below its majority;
- on a server that is stopped (STOP, ISOLATE, DRAIN, maintenance), not started or in an
  inactive zone;
- on the leader, on a replica not in the member list, being built, or of a leaderless LS.

**After OceanBase.** PALF asks for a rebuild when a follower's log ends before what its leader
still keeps (``is_need_rebuild``, ``logservice/palf/log_sliding_window.h``; the callback
``ObLogRebuildCbAdapter::on_rebuild``). The storage side,
``ObLSRebuildCbImpl::on_rebuild`` (``src/storage/high_availability/ob_ls_rebuild_cb_impl.cpp``)
refuses a leader and a replica not in the leader's member list, and a call for a replica
already rebuilding only wakes the service; ``ObRebuildService``
(``src/storage/high_availability/ob_rebuild_service.cpp``) then disables the replica's vote,
copies it in place from the leader (``ObMigrationOpType::REBUILD_LS_OP``), enables the vote
again, and records ``disaster_recovery`` ``start_rebuild_ls_replica`` /
``finish_rebuild_ls_replica``. Here an agent's follower never falls past its leader's
compacted log (FetchLog's snapshot rule, :mod:`observer_agent.replicas.serving`, restarts it at
the leader's first kept entry), so the trigger is time, not a recycled log; and the agent
applies upserts before drops and ignores ``copy_from`` for a replica it hosts, so the rebuild
is two ApplyReplicas calls (the drop, then the copy spec). Should the second fail, the
member is "missing on a live server" and the replica rebuilder
(:mod:`rootservice.tenants.replica_rebuilder`) copies it back.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Set
from typing import Protocol

from obcommon.clock import Clock
from obcommon.errors import ObError
from obcommon.proto import obrpc_pb2
from rootservice.config import RsSettings
from rootservice.metrics import Metrics
from rootservice.servers.disruption_budget import ls_name
from rootservice.servers.lag_policy import progress_window_us
from rootservice.tenants.once_log import OnceLog
from rootservice.tenants.pause import ActGate
from rootservice.tenants.ports import EventSink
from rootservice.tenants.replica_rebuilder import rebuild_event
from rootservice.tenants.reports import LsView, effective_members, in_sync
from rootservice.tenants.topology import LsPlan, Topology
from rootservice.tenants.vocabulary import LsKey

log = logging.getLogger(__name__)

#: The start of the ``reason`` of this task's ``rebuild_replica`` events.
REASON_LAGGING = "follower lagging"
#: A replica rebuilt again waits at most ``2 ** MAX_DOUBLINGS`` times the first delay.
MAX_DOUBLINGS = 5


def rebuild_delay_us(timeout: int, prior: int) -> int:
    """How long after its ``follower_lagging`` event a follower still LAGGING is rebuilt,
    microseconds: ``2 x timeout`` (``agent_lag_timeout``; one more detection window), doubled
    for each of the ``prior`` rebuilds of the same replica, at most :data:`MAX_DOUBLINGS`
    times. Exactly the delay is due."""
    return progress_window_us(timeout) << min(max(prior, 0), MAX_DOUBLINGS)


def forget_after_us(timeout: int) -> int:
    """After this long without a rebuild (microseconds), a replica's earlier rebuilds no
    longer lengthen its delay: the longest delay."""
    return rebuild_delay_us(timeout, MAX_DOUBLINGS)


class LaggingFollowers(Protocol):
    """The followers LAGGING now (:meth:`rootservice.servers.lag_detector.LagDetector.
    lagging_followers`)."""

    def lagging_followers(self) -> Mapping[tuple[LsKey, str], int]:
        """``{((tenant_id, ls_id), 'ip:port'): monotonic µs it became LAGGING}``."""
        ...


class ReplicaHosts(Protocol):
    """The servers as replica hosts (:class:`rootservice.tenants.host_health.HostHealth`)."""

    def can_lead(self, server: str, exclude: Set[str] = frozenset()) -> bool:
        """Alive, not stopped, started, zone ACTIVE and not in ``exclude``."""
        ...

    def is_suspect(self, server: str) -> bool:
        """SUSPECT (or LAGGING) now: no copies to it."""
        ...

    def lag_reasons(self, server: str) -> tuple[str, ...]:
        """Why it is LAGGING; empty when it is not."""
        ...

    def healthy_member(
        self, server: str, r: obrpc_pb2.ReplicaInfo | None, exclude: Set[str]
    ) -> bool:
        """A member that counts for a majority (:meth:`can_lead` and its replica in
        service)."""
        ...


class LsReports(Protocol):
    """The log streams as the reports show them
    (:class:`rootservice.tenants.reports.ReplicaReports`)."""

    def views(self) -> Mapping[LsKey, LsView]:
        """Every LS's view: replicas, leader, term."""
        ...


class Layout(Protocol):
    """The planned members (:class:`rootservice.tenants.topology.LayoutCache`)."""

    def topology(self) -> Topology:
        """Every LS's plan; raises ``ObError(OB_ERR_SYS)`` when it cannot be read."""
        ...


class ReplicaCopies(Protocol):
    """Replica specs sent to the agents (:class:`rootservice.tenants.replica_specs.
    ReplicaApplier`)."""

    def apply(
        self,
        server: str,
        upsert: Iterable[obrpc_pb2.ReplicaSpec] = (),
        drop: Iterable[LsKey] = (),
        timeout_us: int | None = None,
    ) -> obrpc_pb2.ApplyReplicasResponse:
        """One ApplyReplicas call; raises ``ObError``."""
        ...

    def announce_copy(self, plan: LsPlan, view: LsView, dest: str, src: str) -> LsView:
        """Tell ``src`` and the leader that ``dest`` copies; the view then. Raises
        ``ObError``."""
        ...

    def copy_spec(self, plan: LsPlan, view: LsView, dest: str, src: str) -> obrpc_pb2.ReplicaSpec:
        """The spec that makes ``dest`` copy its replica from ``src``."""
        ...


class LagRebuilder:
    """``run_once()`` -> replicas whose rebuild was handed out (see the module doc).

    ``followers`` lists the LAGGING followers; ``health`` tells the servers' state, ``layout``
    the planned members, ``reports`` the replicas; ``applier`` sends the drop and the copy
    spec; ``events`` gets the ``rebuild_replica`` events, ``metrics`` the counter
    ``lagging_replica_rebuilds_total``; ``warnings`` logs each refusal once."""

    name = "lag_rebuilder"

    def __init__(
        self,
        *,
        term: ActGate,
        followers: LaggingFollowers,
        health: ReplicaHosts,
        layout: Layout,
        reports: LsReports,
        applier: ReplicaCopies,
        events: EventSink,
        clock: Clock,
        settings: RsSettings,
        metrics: Metrics,
        warnings: OnceLog,
    ) -> None:
        """Wire the collaborators; nothing is read until a round. ``agent_lag_timeout`` and
        ``ls_log_sync_threshold`` are read every round."""
        self.term = term
        self.followers = followers
        self.health = health
        self.layout = layout
        self.reports = reports
        self.applier = applier
        self.events = events
        self.clock = clock
        self.settings = settings
        self.metrics = metrics
        self.warnings = warnings
        # (LS, server) -> the start of the episode whose rebuild was handed out.
        self._done: dict[tuple[LsKey, str], int] = {}
        # (LS, server) -> (rebuilds so far, monotonic µs of the last one).
        self._history: dict[tuple[LsKey, str], tuple[int, int]] = {}

    def clear(self) -> None:
        """Forget the episodes and the rebuild counts (step down): memory only, as the
        detector's episodes are."""
        self._done.clear()
        self._history.clear()

    def prior_rebuilds(self, key: LsKey, server: str) -> int:
        """Rebuilds of ``server``'s replica of ``key`` that still lengthen its next delay."""
        n, last = self._history.get((key, server), (0, 0))
        timeout = self.settings.agent_lag_timeout
        return n if n and self.clock.monotonic_us() - last < forget_after_us(timeout) else 0

    def run_once(self) -> int:
        """One round: every follower LAGGING for :func:`rebuild_delay_us` since its event,
        not rebuilt in this episode and not refused (see the module), is rebuilt. Returns how
        many. Nothing while this RS may not act (or scheduling is paused). Raises
        ``ObError(OB_ERR_SYS)`` when the layout cannot be read."""
        if not self.term.may_act():
            return 0
        lagging = self.followers.lagging_followers()
        self._done = {k: v for k, v in self._done.items() if lagging.get(k) == v}
        mono = self.clock.monotonic_us()
        timeout = self.settings.agent_lag_timeout
        self._history = {
            k: h for k, h in self._history.items() if mono - h[1] < forget_after_us(timeout)
        }
        views = self.reports.views()
        plans = self.layout.topology().plans
        n = 0
        for (key, server), since in sorted(lagging.items()):
            if (key, server) in self._done:
                continue
            prior = self.prior_rebuilds(key, server)
            if mono - since < rebuild_delay_us(timeout, prior):
                continue
            plan, view = plans.get(key), views.get(key)
            if plan is None or view is None:
                continue
            why = self.refusal(plan, view, server)
            if why:
                self.warnings.warn(
                    f"lag_rebuild {server}",
                    key,
                    f"{ls_name(key)}: not rebuilding the lagging replica on {server}: {why}",
                )
                continue
            if self._rebuild(plan, view, server, mono - since, prior):
                self._done[(key, server)] = since
                self._history[(key, server)] = (prior + 1, mono)
                n += 1
        if n:
            self.metrics.inc("lagging_replica_rebuilds_total", n)
        return n

    def refusal(self, plan: LsPlan, view: LsView, server: str) -> str:
        """Why the replica of ``plan``'s LS on ``server`` must not be rebuilt now ("" when it
        may): the guards of the module doc, first match."""
        leader = view.leader
        r = view.replicas.get(server)
        if leader is None:
            return "the LS has no leader"
        if server == leader:
            return "it leads"
        members = effective_members(plan, view)
        if server not in members:
            return "it is not in the member list"
        if r is None or not r.in_service or r.copy_from:
            return "it is being built"
        if not self.health.can_lead(server):
            # Stopped, draining or in maintenance: its replicas are leaving or waiting.
            return "its server is not alive, started and running in an ACTIVE zone"
        reasons = self.health.lag_reasons(server)
        if reasons:
            return f"its server is LAGGING ({','.join(reasons)}): the server is the problem"
        if self.health.is_suspect(server):
            return "its server is SUSPECT: no copies to it"
        lead = view.replicas.get(leader)
        if lead is None or not lead.in_service:
            return f"the leader {leader} is not in service"
        threshold = self.settings.ls_log_sync_threshold
        majority = len(members) // 2 + 1
        others = [
            m
            for m in members
            if m != server
            and self.health.healthy_member(m, view.replicas.get(m), {server})
            and not self.health.lag_reasons(m)
            and in_sync(view, m, threshold)
        ]
        if len(others) < majority:
            return (
                f"{len(others)} other member(s) are healthy and in log sync, a majority of "
                f"{len(members)} needs {majority}"
            )
        return ""

    def _rebuild(self, plan: LsPlan, view: LsView, dest: str, lagging_us: int, prior: int) -> bool:
        """Drop ``dest``'s replica, then send it the copy spec from the leader; one event and
        a WARNING log (``lagging_us``: since its ``follower_lagging`` event; ``prior``: its
        earlier rebuilds). False (logged once) when the drop was refused: nothing changed."""
        key, src = plan.key, view.leader
        assert src is not None
        lead, r = view.replicas[src], view.replicas[dest]
        behind = max(0, lead.log_end_ts - r.log_end_ts)
        reason = (
            f"{REASON_LAGGING}: {behind / 1e6:.1f}s behind the leader, "
            f"{lagging_us / 1e6:.1f}s after follower_lagging"
            + (f", rebuild {prior + 1}" if prior else "")
        )
        try:
            self.applier.apply(dest, drop=[key])
        except ObError as e:
            self.warnings.warn(
                f"lag_rebuild {dest}", key, f"{ls_name(key)}: dropping on {dest}: {e}"
            )
            return False
        try:
            fresh = self.applier.announce_copy(plan, view, dest, src)
            self.applier.apply(dest, [self.applier.copy_spec(plan, fresh, dest, src)])
        except ObError as e:
            # Dropped: a member missing on a live server, the replica rebuilder's to copy.
            reason += f"; copy left to the replica rebuilder ({e.name})"
        self.warnings.cleared(f"lag_rebuild {dest}", key)
        self.events.add_event(rebuild_event(self.clock.now_us(), key, dest, src, reason[:200]))
        log.warning(
            "%s: the follower on %s is LAGGING (%s); rebuilding it by copy from %s",
            ls_name(key),
            dest,
            reason,
            src,
        )
        return True
