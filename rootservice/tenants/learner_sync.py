"""The ``learner_sync`` task (every :data:`LEARNER_SYNC_INTERVAL_US`): a
copy whose log catch-up is refused is announced again to the LS's current leader.

A replica being built by copy fetches its log from the leader, which serves it only while
its last spec lists the copy as a learner. Two things can make a leader forget
that: the leader moved and the new one's spec was built before the copy was announced (the
race a CI run hit: a copy handed out 60 ms before its LS's leader moved off the server being
deleted, refused for ever with ``PERMISSION_DENIED``), and an agent restart (an agent keeps
its learners in memory only). The agent reports the refusal in
``ReplicaInfo.catch_up_error``; this task then announces the copy again
(:meth:`ReplicaApplier.announce_copy`: the current leader and the source are told) and sends
the copy a spec naming the current leader and term, so it stops asking a former leader. A
copy is announced again at most once per ``rpc_timeout``, the time its next report takes.

It also forgets announcements whose copy ended (:meth:`AnnouncedCopies.prune`). OceanBase
adds a learner to the leader's member list through Paxos (``ObLSAddReplicaTask``), so every
future leader knows it; the agents here keep learners in memory, hence this repair.

Times are microseconds (monotonic).
"""

from __future__ import annotations

import logging

from obcommon.clock import Clock
from obcommon.errors import ObError
from rootservice.config import RsSettings
from rootservice.ha.term import Term
from rootservice.metrics import Metrics
from rootservice.tenants.replica_specs import ReplicaApplier
from rootservice.tenants.reports import LsView, ReplicaReports, effective_members
from rootservice.tenants.topology import LayoutCache
from rootservice.tenants.vocabulary import LsKey

log = logging.getLogger(__name__)

#: Period of the task, microseconds: a refused copy waits at most this long (beside the
#: heartbeat that reports the refusal) before it is announced again.
LEARNER_SYNC_INTERVAL_US = 500_000


class LearnerSync:
    """``run_once()`` -> the copies announced again (see the module doc).

    ``reports`` gives what the agents report (``catch_up_error`` of building replicas),
    ``layout`` the plans, ``applier`` announces and sends the specs, ``term`` gates every run
    (a standby announces nothing), ``settings`` give ``rpc_timeout`` (the least time between
    two announcements of one copy), ``metrics`` count ``learner_reannounced_total``.
    """

    name = "learner_sync"

    def __init__(
        self,
        *,
        term: Term,
        layout: LayoutCache,
        reports: ReplicaReports,
        applier: ReplicaApplier,
        clock: Clock,
        settings: RsSettings,
        metrics: Metrics,
    ) -> None:
        """Nothing announced again yet."""
        self.term = term
        self.layout = layout
        self.reports = reports
        self.applier = applier
        self.clock = clock
        self.settings = settings
        self.metrics = metrics
        # (LS, dest) -> when it was last announced again (monotonic µs).
        self._last: dict[tuple[LsKey, str], int] = {}

    def run_once(self) -> int:
        """One round: announce again every copy that reports a refused catch-up, at most
        once per ``rpc_timeout`` each; forget ended announcements. Returns the copies
        announced again. A server that cannot be told is logged and tried next round.
        Raises ``ObError`` when the layout cannot be read (the registry logs it)."""
        if not self.term.may_act():
            self._last.clear()
            return 0
        reports = self.reports.reports()
        refused = [
            (key, server, r.copy_from, r.catch_up_error)
            for server, table in reports.items()
            for key, r in table.items()
            if not r.in_service and r.catch_up_error and r.copy_from
        ]
        if not refused and not len(self.applier.announced):
            self._last.clear()
            return 0
        topo = self.layout.topology()
        views = self.reports.views()
        now = self.clock.monotonic_us()
        wait = self.settings.rpc_timeout
        self._last = {k: t for k, t in self._last.items() if now - t < wait}

        def is_member(key: LsKey, dest: str) -> bool:
            plan = topo.plans.get(key)
            return plan is not None and dest in effective_members(plan, views.get(key, LsView(key)))

        self.applier.announced.prune(
            lambda key, dest: key in reports.get(dest, {}), is_member, 2 * wait
        )
        sent = 0
        for key, dest, src, why in sorted(refused):
            plan = topo.plans.get(key)
            if plan is None or (key, dest) in self._last:
                continue
            self._last[(key, dest)] = now
            try:
                view = self.applier.announce_copy(plan, views.get(key, LsView(key)), dest, src)
                self.applier.apply(dest, [self.applier.copy_spec(plan, view, dest, src)])
            except ObError as e:
                log.warning("LS %s: announcing the copy on %s again failed: %s", key, dest, e)
                continue
            log.info(
                "LS %d.%d: the copy on %s was refused its log (%s): announced again to "
                "leader %s at term %d",
                key[0],
                key[1],
                dest,
                why,
                view.leader or "none",
                view.term,
            )
            sent += 1
        if sent:
            self.metrics.inc("learner_reannounced_total", sent)
        return sent
