"""Raising the leader's epoch above a token an agent reported having obeyed
(docs/design/ha.md#the-agents-check): one round of :class:`rootservice.ha.election.Election`
while the fence holds such a report."""

from __future__ import annotations

import logging
from collections.abc import Callable

import sqlalchemy as sa

from obcommon.errors import ObError
from obcommon.fencing import FenceToken, reports_conflict
from rootservice.db import lease_repo
from rootservice.db.engine import db_error_summary
from rootservice.ha.fence import choose_epoch
from rootservice.ha.rounds import LeaseRounds

log = logging.getLogger(__name__)


class EpochRetake:
    """Re-takes the lease row (still this RS's, locked) with an epoch above the reported one
    before anything else is commanded, through ``rounds``; ``incarnation()`` draws the new
    term's incarnation id."""

    def __init__(self, rounds: LeaseRounds, incarnation: Callable[[], int]) -> None:
        """Stateless beyond its collaborators."""
        self.rounds = rounds
        self.incarnation = incarnation

    def retake(self) -> None:
        """Answer the fence's pending demand (``EpochFence.take_demand``), if it still
        conflicts with this term's token: the event ``epoch_went_back`` and a new epoch
        above the report and every epoch known (``rs_epoch_raised_total``). A row that is no
        longer this term's, or any failure, steps down. Never raises."""
        r = self.rounds
        term, fence = r.term, r.fence
        demand = fence.take_demand()
        epoch = term.epoch
        if demand is None or epoch == 0:
            return
        reported, server = demand
        if not reports_conflict(term.token(), reported):
            # Judged against a token this RS has left since: a report that reached the fence
            # while an earlier re-take ran (the agent's next request, still carrying what it
            # obeyed). That re-take already put the epoch above it; one report, one raise.
            log.info("report of %s by %s already answered by a re-take", reported, server)
            return
        me, holder = r.me()
        started = r.clock.monotonic_us()
        lease = r.lease_time()
        incarnation = self.incarnation()
        try:
            with r.txn() as conn:
                ident = r.judge_server(conn)
                row = lease_repo.read_lease(conn, lock=True)
                now = r.db_now(conn)
                if row.epoch != epoch or row.holder != me:
                    term.request_step_down(
                        f"the lease is now epoch {row.epoch} held by {row.holder or 'nobody'}",
                        epoch,
                    )
                    return
                r.went_back(conn, now, reported.epoch, epoch, f"reported by {server}")
                new = lease_repo.take_lease(
                    conn,
                    row,
                    holder,
                    now,
                    now + lease,
                    epoch=choose_epoch(row.epoch, [reported.epoch, fence.highest_known]),
                    incarnation=incarnation,
                    server=ident,
                )
        except (ObError, sa.exc.SQLAlchemyError) as e:
            r.metrics.inc("rs_election_errors_total")
            why = e.message if isinstance(e, ObError) else db_error_summary(e)
            term.request_step_down(f"raising the epoch failed: {why}", epoch)
            return
        old = term.token()
        with r.store.write_lock:
            term.begin(new, started, incarnation)
        fence.note_epoch(new)
        r.metrics.inc("rs_epoch_raised_total")
        log.error(
            "raised the epoch from %s to %s: server %s had obeyed %s",
            old,
            FenceToken(new, incarnation),
            server,
            reported,
        )
