"""The ``partial_replica_gc`` task (every :data:`PARTIAL_REPLICA_GC_INTERVAL_US`): drops
the replicas that nothing wants any more: partial copies above all, and any replica a
server holds where no plan, member list or copy puts one.

A copy is wanted while its destination is a planned member of its LS (the server of the
LS's unit in that zone, ``LsPlan.members``), an effective member (a member being rebuilt),
or the destination of a copy this RS has in flight. CANCEL DELETE SERVER, CANCEL MIGRATE
UNIT and the re-plan of a destination drop the partial replicas they leave at once
(:meth:`rootservice.balancer.copy_tasks.CopyTasks.cancel_to`), but that drop can lose a
race: a copy sent again by ``learner_sync`` from a report that predates the drop, a drop
call that failed or timed out on a loaded agent, an RS that took office after the cancel, a
spec computed from the layout before a CANCEL MIGRATE UNIT that reached the server after
it (a CI run saw the cancelled destination get both replicas created afresh 0.2 s after
the cancel, which kept the reversed move from ever ending). Nothing else would ever remove
such a replica: the agent keeps it, and the server's disk, until its restart.

Steps of one run:

1. Nothing to do unless this RS may act (the term's gate) and some server reports a
   replica.
2. Each replica whose server is neither a planned nor an effective member of its LS,
   nor the destination of a copy in flight, is *unwanted*. An LS the layout no longer names
   is left to the paths that drop log streams.
3. An unwanted replica is dropped (one ApplyReplicas per server, as a cancel drops) only
   once :data:`GC_REPORTS` more reports of its server still show it unwanted: the report in
   flight when a copy was handed out can predate its task, and the count does not depend on
   how loaded the machine is. Each drop is logged, counted
   (``partial_replicas_dropped_total``) and written to ``__all_rootservice_event_history``
   (``disaster_recovery`` / ``drop_partial_replica``).

OceanBase's observers do this themselves: ``ObGarbageCollector``
(src/logservice/ob_garbage_collector.cpp, ``gc_check_member_list_``) asks the leader
whether the local LS replica is in its member or learner list and removes it when it is
not (``NOT_IN_LEADER_MEMBER_LIST``). Here the RS holds both the plan and the reports, so it
decides.
"""

from __future__ import annotations

import logging
from typing import Protocol

from obcommon.clock import Clock
from rootservice.balancer.ports import CopyLedger, EventSink, Gate, LsKey, LsView, ReplicaWork
from rootservice.db.event_repo import Event
from rootservice.metrics import Metrics

log = logging.getLogger(__name__)

#: Period of the task, microseconds (a report comes every lease interval, 2 s by default).
PARTIAL_REPLICA_GC_INTERVAL_US = 1_000_000

#: Reports of the server, after the one that first showed a replica unwanted, that must
#: still show it so before it is dropped.
GC_REPORTS = 2


class ReportCounts(Protocol):
    """How many replica reports each server sent to this RS
    (:meth:`rootservice.tenants.reports.ReplicaReports.report_seq`)."""

    def report_seq(self, key: str, /) -> int:
        """Reports received from ``key`` (``'ip:port'``) since this RS took its term."""
        ...


class PartialReplicaGc:
    """``run_once()`` -> the replicas dropped (see the module doc).

    ``ls`` gives the reports, the layout and the effective members; ``counts`` the report
    counts; ``copies`` the copies in flight and the drop; ``term`` gates every run;
    ``events`` takes the ``drop_partial_replica`` rows, ``metrics`` the counter, ``clock``
    the events' time (µs since the epoch).
    """

    name = "partial_replica_gc"

    def __init__(
        self,
        *,
        ls: ReplicaWork,
        counts: ReportCounts,
        copies: CopyLedger,
        term: Gate,
        events: EventSink,
        metrics: Metrics,
        clock: Clock,
    ) -> None:
        """Nothing seen unwanted yet."""
        self.ls = ls
        self.counts = counts
        self.copies = copies
        self.term = term
        self.events = events
        self.metrics = metrics
        self.clock = clock
        # (LS, server) -> the server's report count when the replica was first seen unwanted.
        self._since: dict[tuple[LsKey, str], int] = {}

    def run_once(self) -> int:
        """One round (steps 1 to 3 of the module doc). Returns the replicas dropped (the
        calls' failures are logged by the drop, and the replica stays a candidate). Raises
        ``ObError`` when the layout cannot be read (the registry logs it; nothing is
        dropped)."""
        if not self.term.may_act():
            self._since.clear()
            return 0
        reports = self.ls.reports()
        building = [(key, server) for server, table in reports.items() for key in table]
        if not building:
            self._since.clear()
            return 0
        topo = self.ls.topology()
        views = self.ls.views()
        unwanted: dict[tuple[LsKey, str], int] = {}
        for key, server in building:
            plan = topo.plans.get(key)
            if plan is None or server in plan.members:
                continue
            if server in self.ls.members(plan, views.get(key, LsView(key))):
                continue
            if key in self.copies.keys_to(server):
                continue
            seq = self.counts.report_seq(server)
            unwanted[(key, server)] = self._since.get((key, server), seq)
        self._since = unwanted
        due = sorted(
            (server, key)
            for (key, server), first in unwanted.items()
            if self.counts.report_seq(server) >= first + GC_REPORTS
        )
        if not due:
            return 0
        drops: dict[str, list[LsKey]] = {}
        now = self.clock.now_us()
        for server, key in due:
            drops.setdefault(server, []).append(key)
            self._since.pop((key, server), None)
            log.warning(
                "LS %d.%d: the partial replica on %s is wanted by no plan, member list or "
                "copy: dropping it",
                *key,
                server,
            )
            self.events.add_event(
                Event(
                    now,
                    "disaster_recovery",
                    "drop_partial_replica",
                    (("tenant_id", key[0]), ("ls_id", key[1]), ("server", server)),
                )
            )
        self.copies.drop(drops)
        self.metrics.inc("partial_replicas_dropped_total", len(due))
        return len(due)
