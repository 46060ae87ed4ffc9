"""The ``replica_rebuilder`` task (docs/design/migration.md, disaster recovery;
every ``ls_check_interval``).

A Paxos member of an LS that sits on a live server but that server no longer reports (its
files vanished: removed under the running agent, or the agent restarted without them) has
lost its data. Nothing else rebuilds it: the reconciler creates replicas only for log
streams no server reports, and the balancer's replica plan (``ObDRWorker``'s "migrate
replica due to unit not match" and the rebuild of permanently offline servers) reads
``__all_ls_meta_table``, where such a replica is no longer listed. OceanBase's
``ObDRWorker`` (``src/rootserver/ob_disaster_recovery_worker.cpp``) repairs a log stream
whose member lost its replica from a healthy member; here the lost member gets its
replica back by copying from a healthy member, as a replacement would, on the same server.

The member list never changes for it: the lost member stays a member (it is not in service,
so it counts for neither leadership nor a majority until its copy has caught up) and is in
service again once its copy has caught the leader's log up.
"""

from __future__ import annotations

import logging

from obcommon.clock import Clock
from obcommon.errors import ObError
from rootservice.config import RsSettings
from rootservice.db.event_repo import Event
from rootservice.metrics import Metrics
from rootservice.tenants.host_health import HostHealth
from rootservice.tenants.once_log import OnceLog
from rootservice.tenants.pause import ActGate
from rootservice.tenants.ports import EventSink
from rootservice.tenants.replica_specs import ReplicaApplier
from rootservice.tenants.reports import LsView, ReplicaReports, effective_members
from rootservice.tenants.topology import LayoutCache
from rootservice.tenants.vocabulary import LsKey

log = logging.getLogger(__name__)

#: The ``reason`` of the ``disaster_recovery`` / ``rebuild_replica`` event.
REASON_MISSING = "replica missing on live server"

#: Wait, in microseconds, before the second retry of a member whose copies keep failing; it
#: doubles with every further failure up to :data:`RETRY_CAP_US`. The first retry (from
#: another source) is immediate. A destination whose data disk is full
#: refused a copy every 0.3 s, an event and a warning each time.
RETRY_BASE_US = 1_000_000
RETRY_CAP_US = 60_000_000


def rebuild_event(now: int, key: LsKey, dest: str, src: str, reason: str) -> Event:
    """The ``disaster_recovery`` / ``rebuild_replica`` event at ``now`` (µs): ``dest``'s
    replica of ``key`` copied from ``src`` for ``reason`` (this task's and the lag
    rebuilder's, :mod:`rootservice.tenants.lag_rebuild`)."""
    return Event(
        now,
        "disaster_recovery",
        "rebuild_replica",
        (
            ("tenant_id", key[0]),
            ("ls_id", key[1]),
            ("server", dest),
            ("source", src),
            ("reason", reason),
        ),
    )


class ReplicaRebuilder:
    """``run_once()`` -> copies handed out to rebuild lost members (see the module doc).

    ``health`` tells live servers, ``layout`` the planned members, ``reports`` what the
    servers report, ``applier`` sends the copy specs; ``events`` gets one
    ``disaster_recovery`` / ``rebuild_replica`` event per copy handed out and ``metrics``
    the counter ``replica_rebuilds_total``.
    """

    name = "replica_rebuilder"

    def __init__(
        self,
        *,
        term: ActGate,
        health: HostHealth,
        layout: LayoutCache,
        reports: ReplicaReports,
        applier: ReplicaApplier,
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
        self.events = events
        self.clock = clock
        self.settings = settings
        self.metrics = metrics
        self.warnings = warnings
        # (LS, server) -> that server's report count when its copy was handed out: not sent
        # again before two reports of that server have come in since (the one in flight may
        # predate the spec). A time (rpc_timeout) sent the same copy twice on a loaded
        # machine where the next report took longer than that.
        self._sent: dict[tuple[LsKey, str], int] = {}
        # (LS, server) -> that server's report count when its member was first seen missing:
        # rebuilt only once two more of its reports lack it. A replica the reconciler has
        # just created is not in the report that was in flight (CI saw both followers of a
        # new tenant "rebuilt" the moment CREATE TENANT made them).
        self._missing: dict[tuple[LsKey, str], int] = {}
        # (LS, server) -> (failed copies in a row, earliest next retry, monotonic microseconds);
        # forgotten once that member's replica is in service.
        self._failures: dict[tuple[LsKey, str], tuple[int, int]] = {}

    def run_once(self) -> int:
        """One round: for every LS with a leader, every planned member that is in the
        effective member list, on an alive server, and not reported by that server in the
        two reports after it was first seen missing (or reported with a failed build) gets a
        copy spec from a healthy member (the leader
        when in service), at most ``migration_concurrency_per_server`` building at once per
        server. Returns the copies handed out. Does nothing while the RS is not in service.
        A server that refuses is logged once and tried again next round. A member whose
        copy failed is retried at once from another source, then after 1 s, 2 s, 4 s ... up
        to 60 s (:data:`RETRY_BASE_US`, :data:`RETRY_CAP_US`) while its copies keep failing.
        Raises
        ``ObError(OB_ERR_SYS)`` when the layout cannot be read."""
        if not self.term.may_act():
            return 0
        topo = self.layout.topology()
        views = self.reports.views()
        reports = self.reports.reports()
        # Monotonic: a wall-clock jump must not make a copy look just sent for an hour.
        now = self.clock.monotonic_us()
        # A server that stopped reporting is not alive (its lease lapses): forgotten, and
        # handed a fresh copy if it comes back.
        self._sent = {
            k: seq
            for k, seq in self._sent.items()
            if self.health.is_alive(k[1]) and self.reports.report_seq(k[1]) < seq + 2
        }
        building = {
            server: sum(1 for r in table.values() if not r.in_service)
            for server, table in reports.items()
        }
        limit = self.settings.migration_concurrency_per_server
        sent = 0
        missing: dict[tuple[LsKey, str], int] = {}
        for key in sorted(topo.plans):
            plan = topo.plans[key]
            view = views.get(key)
            if view is None or view.leader is None:
                # Leaderless: the reconciler elects first (a copy catches up the leader's log).
                continue
            members = effective_members(plan, view)
            for server in sorted(plan.members):
                if server not in members:
                    continue  # not a member yet: a unit's move, the balancer's copy
                r = view.replicas.get(server)
                failed = r is not None and not r.in_service and bool(r.build_error)
                if r is not None and r.in_service:
                    self._failures.pop((key, server), None)
                if (r is not None and not failed) or not self.health.is_alive(server):
                    continue
                if self.health.is_suspect(server):
                    continue  # no copy to a SUSPECT server: after it
                if failed and now < self._failures.get((key, server), (0, 0))[1]:
                    continue  # backing off: the same failure would come back at once
                if r is None:
                    seq = self.reports.report_seq(server)
                    since = missing[(key, server)] = self._missing.get((key, server), seq)
                    if seq < since + 2:
                        continue  # maybe just created: two more reports must lack it
                if r is None and (key, server) in self._sent:
                    continue
                if r is None and building.get(server, 0) >= limit:
                    continue
                src = self._source(view, server, r.copy_from if failed and r else "")
                if src is None:
                    self.warnings.warn(
                        server, key, f"LS {key}: no healthy member to rebuild {server} from"
                    )
                    continue
                why = (r.build_error if failed and r else "")[:200]
                if self._hand_out(key, view, server, src, why):
                    self._sent[(key, server)] = self.reports.report_seq(server)
                    if failed:
                        n = self._failures.get((key, server), (0, 0))[0]
                        delay = min(RETRY_CAP_US, RETRY_BASE_US << min(n, 30))
                        self._failures[(key, server)] = (n + 1, now + delay)
                    building[server] = building.get(server, 0) + (1 if r is None else 0)
                    sent += 1
        # Only members still missing are remembered (a report that shows one ends its wait).
        self._missing = missing
        if sent:
            self.metrics.inc("replica_rebuilds_total", sent)
        return sent

    def _source(self, view: LsView, dest: str, failed_src: str) -> str | None:
        """The healthy member to copy from: the leader when it is in service, else the
        lowest alive in-service replica (never ``dest``; not ``failed_src``, the source of a
        failed attempt, when another one exists)."""
        leader = view.leader
        candidates = [
            s
            for s, r in sorted(view.replicas.items())
            if s != dest and r.in_service and not r.copy_from and self.health.is_alive(s)
        ]
        if leader in candidates and leader != failed_src:
            return leader
        others = [s for s in candidates if s != failed_src]
        if others:
            return others[0]
        return candidates[0] if candidates else None

    def _hand_out(self, key: LsKey, view: LsView, dest: str, src: str, failed: str) -> bool:
        """Tell ``src`` and the leader, then send ``dest`` its copy spec; one event and a
        WARNING log per copy. ``failed`` is the ``build_error`` of the failed copy this one
        retries ("" for a first copy), shown in the event's reason and the log (a destination whose disk is full says OB_SERVER_OUTOF_DISK_SPACE). False
        (logged once) when a server refused."""
        plan = self.layout.topology().plans.get(key)
        if plan is None:
            return False
        try:
            view = self.applier.announce_copy(plan, view, dest, src)
            self.applier.apply(dest, [self.applier.copy_spec(plan, view, dest, src)])
        except ObError as e:
            self.warnings.warn(dest, key, f"LS {key}: rebuilding the replica on {dest} failed: {e}")
            return False
        self.warnings.cleared(dest, key)
        self.events.add_event(
            rebuild_event(
                self.clock.now_us(),
                key,
                dest,
                src,
                REASON_MISSING + (f" (retry after a failed copy: {failed})" if failed else ""),
            )
        )
        log.warning(
            "LS %d.%d: the replica on %s is missing though the server is alive; rebuilding it "
            "by copy from %s%s",
            key[0],
            key[1],
            dest,
            src,
            f" (the last copy failed: {failed})" if failed else "",
        )
        return True
