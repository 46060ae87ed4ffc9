"""The leader's renewal of its RS lease (docs/design/ha.md#epochs): one round of
:class:`rootservice.ha.election.Election` while this RS holds an epoch."""

from __future__ import annotations

import logging

import sqlalchemy as sa

from obcommon.errors import ObError
from rootservice.db import lease_repo, member_repo
from rootservice.db.engine import db_error_summary
from rootservice.ha.rounds import LeaseRounds

log = logging.getLogger(__name__)

#: Database errors a leader's renewal retries while its lease is trusted
#: (:meth:`LeaseRenewal.renew`): the connection lost, refused or timed out, a lock or
#: statement timeout, SQLite's "database is locked". Any other (a missing table, a
#: constraint) steps down at once.
TRANSIENT_DB_ERRORS = (sa.exc.OperationalError, sa.exc.InterfaceError)


class LeaseRenewal:
    """Renews the current term's lease through ``rounds`` (``expire = db_now +
    lease_time``), recording this RS in ``__all_rootservice_member`` with
    ``build_version`` ("" writes none)."""

    def __init__(self, rounds: LeaseRounds, build_version: str = "") -> None:
        """No renewal failed yet."""
        self.rounds = rounds
        self.build_version = build_version
        # (epoch, renewals of that term that failed on a passing error in a row): a new
        # term starts again at 0 without anyone resetting it.
        self._failing = (0, 0)

    def renew(self, *, retry: bool = True) -> None:
        """Renew the lease of the current term.

        Another epoch or holder in the row, or a refusal (``ObError``: a metadata server of
        a lower timeline), steps down at once. A database error that may pass (the
        connection lost or refused, a lock or statement timeout: ``OperationalError``,
        ``InterfaceError``) does not while the lease is still trusted
        (:meth:`Term.trusted_us`): the next round tries again, and the term's guard steps the
        leader down once ``lease_time - margin`` has passed since the last good renewal,
        i.e. after three failed rounds at the defaults. So one dropped connection or one
        slow statement costs no failover, no reload of the whitelist and no reconnect storm
        of every agent (Kubernetes client-go ``tools/leaderelection/leaderelection.go``
        ``renew()`` retries every ``RetryPeriod`` until ``RenewDeadline`` the same way).
        Each such failure is counted in ``rs_lease_renewal_failures_total`` and logged at
        WARNING with the trust left. ``retry`` False (the renewal right after a late
        take-office, which holds little of its lease) steps down on any error. Never
        raises."""
        r = self.rounds
        term = r.term
        epoch = term.epoch
        me, holder = r.me()
        started = r.clock.monotonic_us()
        lease = r.lease_time()
        try:
            with r.txn(renewal=True) as conn:
                server = r.judge_server(conn)
                now = r.db_now(conn)
                member_repo.touch(conn, holder, now, self.build_version)
                row = None
                if not lease_repo.renew_lease(conn, epoch, holder, now, now + lease, server):
                    row = lease_repo.read_lease(conn)
                    if row.epoch < epoch:
                        r.went_back(conn, now, epoch, row.epoch, "the lease row")
        except ObError as e:
            term.request_step_down(f"lease renewal refused: {e.message}", epoch)
            return
        except sa.exc.SQLAlchemyError as e:
            r.metrics.inc("rs_election_errors_total")
            why = db_error_summary(e)
            left = term.trusted_us()
            if retry and left > 0 and isinstance(e, TRANSIENT_DB_ERRORS):
                failed = self._failed_in_a_row(epoch) + 1
                self._failing = (epoch, failed)
                r.metrics.inc("rs_lease_renewal_failures_total")
                log.warning(
                    "lease renewal of epoch %d failed (%d in a row); the lease is trusted "
                    "for %d ms more, the next round tries again: %s",
                    epoch,
                    failed,
                    left // 1000,
                    why,
                    extra={"reason": "db"},
                )
                return
            term.request_step_down(f"lease renewal failed: {why}", epoch)
            return
        if row is None:
            term.renewed(epoch, started)
            r.metrics.inc("rs_lease_renewals_total")
            if failed := self._failed_in_a_row(epoch):
                log.info("lease of epoch %d renewed after %d failed renewals", epoch, failed)
                self._failing = (epoch, 0)
            return
        term.leader = row.holder if row.holder != me else ""
        term.request_step_down(
            f"the lease is now epoch {row.epoch} held by {row.holder or 'nobody'}", epoch
        )

    def _failed_in_a_row(self, epoch: int) -> int:
        failing_epoch, n = self._failing
        return n if failing_epoch == epoch else 0
