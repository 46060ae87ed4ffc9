"""RS leader election on the system-table database (docs/design/ha.md).

Several ``rootservice serve`` processes share one database; the ``rootservice_epoch`` row of
``__all_service_epoch`` is the lease (see :mod:`rootservice.db.lease_repo`). One
:meth:`Election.run_once` is one round:

- a standby locks the row and takes office when the lease has run out by the database's
  clock (or is its own, left by an earlier process at this address), by raising the epoch
  (OceanBase's ``__all_service_epoch``, HDFS QJM's promised epoch); a round that took
  longer than a renewal interval (a slow database) renews once before taking office, so the
  new term does not start on a lease about to run out;
- every round, leader's or standby's, records this RS in ``__all_rootservice_member``
  (:mod:`rootservice.db.member_repo`: the standbys the status API lists);
- the leader renews the lease (``expire = db_now + lease_time``) every
  :func:`lease_timings` ``renew`` period, and steps down at once when a renewal finds another
  epoch or holder or is refused; a renewal that fails on a passing database error is tried
  again by the next round while the lease is still trusted
  (:meth:`rootservice.ha.renewal.LeaseRenewal.renew`).

Independently of the rounds, the leader also stops trusting its lease once ``lease_time -
margin`` has passed on its own monotonic clock since the start of its last successful
renewal (:meth:`rootservice.ha.term.Term.guard`, checked by :meth:`Election.check_lease` every
``heartbeat_check_interval`` and before every fenced write and lease answer). A standby can
take office only after ``renewal start + lease_time`` by the database's clock, so the two
never overlap as long as the clocks' rates differ by less than the margin - and if they do,
the epoch fence in :meth:`rootservice.ha.store.MetaStore.txn` still refuses the old leader's
writes.

Stepping down happens in two parts: :meth:`rootservice.ha.term.Term.request_step_down` (any
thread, never blocks: the epoch goes to 0 so nothing can be written, and the RS answers as a
follower) and the clean-up in the election thread (``on_step_down``: stop timers, drop
memory), so that taking office and stepping down never run concurrently. The election keeps
no leadership state of its own: it writes the :class:`rootservice.ha.term.Term`. Times are
integer microseconds; monotonic readings go through the injected :class:`Clock`.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import secrets
import threading
from collections.abc import Callable, Iterator

import sqlalchemy as sa

from obcommon.clock import Clock
from obcommon.errors import ObError
from obcommon.fencing import FenceToken
from obcommon.ratelimit_log import RateLimitedLog
from rootservice.db import lease_repo, member_repo
from rootservice.db.engine import db_error_summary
from rootservice.ha.fence import EpochFence, choose_epoch
from rootservice.ha.renewal import LeaseRenewal
from rootservice.ha.retake import EpochRetake
from rootservice.ha.rounds import LeaseRounds
from rootservice.ha.store import MetaStore
from rootservice.ha.term import CLEAN_STOP, Term, lease_timings
from rootservice.metrics import Metrics

log = logging.getLogger(__name__)

#: How many RS addresses ``rootservice_list`` keeps (the most recent leaders).
MAX_RS_LIST = 8


def merge_rs_list(stored: str, me: str, keep: int = MAX_RS_LIST) -> list[str]:
    """The RS list after ``me`` takes office: ``stored`` (``__all_sys_parameter``
    ``rootservice_list``, addresses separated by ``;``) without ``me``, then ``me``, cut to
    the ``keep`` most recent. Agents get it in every lease response (docs/design/leases.md) and
    rotate through it, so every RS that ever led stays findable; standbys that never led are
    found through the agents' own ``--rs-list``."""
    addrs = [a for a in (x.strip() for x in stored.split(";")) if a and a != me]
    return [*addrs, me][-keep:]


def new_incarnation() -> int:
    """A random incarnation id for a new term: 63 bits (a positive int64 on the wire), never
    0 (0 means "none")."""
    return secrets.randbits(63) or 1


def is_wildcard(host: str) -> bool:
    """True for an unspecified listen address (``0.0.0.0``, ``::``): not an identity."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False


@contextlib.contextmanager
def db_errors(metrics: Metrics, what: str) -> Iterator[None]:
    """A database error (``SQLAlchemyError``) of a statement's election work ``what``,
    raised as the statement's error: OB_ERR_SYS, counted in ``rs_election_errors_total``."""
    try:
        yield
    except sa.exc.SQLAlchemyError as e:
        metrics.inc("rs_election_errors_total")
        raise ObError("OB_ERR_SYS", detail=f"{what} failed: {db_error_summary(e)}") from None


class Election:
    """The lease protocol of one RS process (a task: ``name`` + ``run_once()``).

    ``store`` gives the engine (rounds use their own short transactions, never the fenced
    ones, so a slow admin statement cannot delay a renewal) and the write lock a new epoch is
    installed under. ``term`` is where the outcome goes (epoch, leader, renewals,
    step-downs). ``lease_time()`` is the lease length in microseconds (read each round: ALTER
    SYSTEM SET applies at the next renewal). ``db_clock`` replaces the database's clock (unit
    tests pass their FakeClock); None reads the database's. ``on_elected(epoch)`` takes
    office (in the round that won; raising makes the round step down again);
    ``on_step_down(reason)`` cleans up in the election thread. ``fence`` holds the agents'
    reported epochs and the metadata servers seen: a take-office starts
    above both the row and every reported epoch, a conflicting report makes the leader re-take
    the row above it (:class:`rootservice.ha.retake.EpochRetake`), a server of a lower timeline is refused, and no
    take-office happens within one lease after a change of primary. ``incarnation()`` draws
    each term's incarnation id.
    """

    name = "rs_election"

    def __init__(
        self,
        store: MetaStore,
        term: Term,
        clock: Clock,
        *,
        lease_time: Callable[[], int],
        on_elected: Callable[[int], None],
        on_step_down: Callable[[str], None],
        metrics: Metrics | None = None,
        db_clock: Clock | None = None,
        fence: EpochFence | None = None,
        incarnation: Callable[[], int] = new_incarnation,
        release: str = "",
    ) -> None:
        """Start as a standby; nothing is read until a round. ``release`` is what each round
        records as this RS's ``build_version`` in ``__all_rootservice_member`` ("" writes
        none)."""
        self.build_version = release
        self.fence = fence or EpochFence(clock, lease_time, metrics)
        self.incarnation = incarnation
        self.store = store
        self.term = term
        self.clock = clock
        self.lease_time = lease_time
        self.on_elected = on_elected
        self.on_step_down = on_step_down
        self.metrics = metrics or Metrics()
        # What every round shares, the leader's renewal and the re-take above a report.
        self.rounds = LeaseRounds(
            store, term, clock, lease_time, self.fence, self.metrics, db_clock
        )
        self.renewal = LeaseRenewal(self.rounds, release)
        self.retake = EpochRetake(self.rounds, incarnation)
        # One round at a time (the scheduler already ensures it; tests and start() too).
        self.round_lock = threading.Lock()
        # A standby or a leader cut off from the database fails every round: one line a
        # minute.
        self._failures = RateLimitedLog(log, clock, 60_000_000)
        # After taking office failed on a database error (PostgreSQL out of
        # connections), no new attempt before this monotonic time: one lease, not every
        # round - each attempt raises the epoch and logs.
        self._retry_after_mono = 0

    @property
    def db_clock(self) -> Clock | None:
        """The clock standing in for the database's (None: the database's own)."""
        return self.rounds.db_clock

    @db_clock.setter
    def db_clock(self, clock: Clock | None) -> None:
        self.rounds.db_clock = clock

    def db_now(self, conn: sa.Connection) -> int:
        """The database's clock (:meth:`LeaseRounds.db_now`), microseconds since the epoch."""
        return self.rounds.db_now(conn)

    def me(self) -> tuple[str, tuple[str, int]]:
        """This RS's address, as ``ip:port`` and as the lease row's holder tuple."""
        return self.rounds.me()

    def check_lease(self) -> bool:
        """The watchdog (every ``heartbeat_check_interval``): request a step-down when the
        term's guard objects to a leader. Returns True when it did."""
        epoch = self.term.epoch
        if epoch == 0:
            return False
        why = self.term.guard()
        return why is not None and self.term.request_step_down(why, epoch)

    def finish_step_down(self) -> None:
        """Run ``on_step_down`` for a step-down requested since the last call (election
        thread, under :attr:`round_lock`)."""
        reason = self.term.take_step_down()
        if reason is not None:
            self.on_step_down(reason)

    # --- rounds --------------------------------------------------------------------------

    def run_once(self) -> bool:
        """One election round; returns True when this RS is the leader afterwards.

        Finishes a pending step-down first. A leader renews (stepping down when that fails);
        a standby takes office when the lease has run out, calling ``on_elected`` inline.
        Never raises: database errors fail the round (logged, ``rs_election_errors_total``).
        """
        with self.round_lock:
            self.term.round_thread = threading.get_ident()
            try:
                self.finish_step_down()
                if self.term.epoch and self.fence.pending():
                    self.retake.retake()
                elif self.term.epoch:
                    self.renewal.renew()
                else:
                    self._try_take_office()
                self.finish_step_down()
                return self.term.epoch != 0
            finally:
                self.term.round_thread = None

    def _try_take_office(self) -> None:
        me, holder = self.me()
        started = self.clock.monotonic_us()
        if started < self._retry_after_mono:
            return
        lease = self.lease_time()
        try:
            with self.rounds.txn() as conn:
                server = self.rounds.judge_server(conn)
                row = lease_repo.read_lease(conn, lock=True)
                now = self.db_now(conn)
                # Seen by the status API's root services: standbys too.
                member_repo.touch(conn, holder, now, self.build_version)
                # Our own address in the row is a lease left by an earlier process (or term)
                # of this RS: binding the same port proves that process is gone. Not so for
                # a wildcard address, which several hosts may be configured with.
                own = row.holder == me and not is_wildcard(holder[0])
                # A handover reserves the next take-office for its successor: the others
                # do not compete (until the reservation runs out: a successor that died
                # leaves a normal election), the successor does not wait for the lease.
                reserved = row.reserved_for(now)
                if row.holder and row.holder != me:
                    self.term.leader = reserved or row.holder
                live = row.holder and not own and now < row.expire_us and reserved != me
                if (
                    live
                    or (reserved and reserved != me)
                    or self.fence.holding(self.clock.monotonic_us())
                ):
                    # After a change of primary, the new server's clock and its copy of the
                    # row are not trusted for one lease.
                    return
                reported = self.fence.highest_known
                if reported > row.epoch:
                    self.rounds.went_back(conn, now, reported, row.epoch, "epochs agents obeyed")
                epoch = choose_epoch(row.epoch, [reported])
                incarnation = self.incarnation()
                epoch = lease_repo.take_lease(
                    conn,
                    row,
                    holder,
                    now,
                    now + lease,
                    epoch=epoch,
                    incarnation=incarnation,
                    server=server,
                )
        except ObError as e:
            self.metrics.inc("rs_election_errors_total")
            self._failures.warning("round", "election round refused: %s", e.message)
            return
        except sa.exc.SQLAlchemyError as e:
            self.metrics.inc("rs_election_errors_total")
            self._failures.warning(
                "round", "election round failed: %s", db_error_summary(e), extra={"reason": "db"}
            )
            return
        self._failures.reset("round")
        with self.store.write_lock:
            # Under the write lock: a write of the previous term still in flight finishes
            # (and fails its fence) before the new epoch is used.
            self.term.begin(epoch, started, incarnation)
        self.fence.note_epoch(epoch)
        self.metrics.inc("rs_elected_total")
        log.info(
            "won the RS lease with %s (previous: epoch %d held by %s)",
            FenceToken(epoch, incarnation),
            row.epoch,
            row.holder or "nobody",
        )
        if self._won_late(started):
            # The round outlasted a renewal interval (a slow database): the lease is trusted
            # from the round's start, so little of it may be left - taking office on it
            # would load the whitelist only to be deposed by the guard a moment later (a
            # slow-database test saw 300 ms left, FULL_SERVICE, then a refused write). One
            # renewal first; when it fails the term ends here and nothing was served.
            log.warning(
                "the round that won epoch %d took %d ms: renewing before taking office",
                epoch,
                (self.clock.monotonic_us() - started) // 1000,
            )
            self.renewal.renew(retry=False)
            if self.term.epoch != epoch:
                return
        try:
            self.on_elected(epoch)
        except ObError as e:
            # The database failed under the take-over (OB_ERR_SYS: unreachable, out of
            # connections...): a known condition, one line a minute, no traceback, and a
            # pause of one lease before the next attempt.
            self._retry_after_mono = self.clock.monotonic_us() + lease
            self._failures.warning(
                "take_office",
                "taking office with epoch %d failed, next attempt in %d ms: %s",
                epoch,
                lease // 1000,
                e,
                extra={"reason": "db"},
            )
            if self.term.request_step_down(f"taking office failed: {e}", epoch):
                self.finish_step_down()
            self._release(epoch, holder)
        except Exception as e:
            log.exception("taking office with epoch %d failed", epoch)
            if self.term.request_step_down(f"taking office failed: {e}", epoch):
                self.finish_step_down()
            # Let this RS (or another) try again from scratch at once instead of after the
            # lease runs out.
            self._release(epoch, holder)

    def _won_late(self, started_mono: int) -> bool:
        """Whether a take-office round that started at the monotonic time ``started_mono``
        left less of the lease than one renewal interval would (it took longer than
        ``renew_interval``, :func:`lease_timings`)."""
        renew, _ = lease_timings(self.lease_time())
        return self.clock.monotonic_us() - started_mono > renew

    # --- what a handover (rootservice.ha.handover) runs on ------------------------------

    @contextlib.contextmanager
    def round_txn(self) -> Iterator[sa.Connection]:
        """A short transaction of this election's bounds (lock, statement and idle timeouts
        of one renewal interval; all its I/O within the time a lease is trusted), outside
        the fenced ones. Raises what SQLAlchemy raises."""
        with self.rounds.txn() as conn:
            yield conn

    def lease(self) -> lease_repo.RsLease:
        """The lease row as it is now (a short read of its own). Raises OB_ERR_SYS when the
        database fails."""
        with db_errors(self.metrics, "reading the lease"), self.round_txn() as conn:
            return lease_repo.read_lease(conn)

    # --- clean stop --------------------------------------------------------------------

    def release(self) -> bool:
        """Give the lease up (a clean stop): step down, then end the lease now by the
        database's clock so a standby takes office at its next round. Returns True when the
        lease was ours and is released; database errors are only logged."""
        epoch = self.term.epoch
        if epoch == 0:
            return False
        self.term.request_step_down(CLEAN_STOP, epoch)
        with self.round_lock:
            self.finish_step_down()
        return self._release(epoch, self.me()[1])

    def _release(self, epoch: int, holder: tuple[str, int]) -> bool:
        try:
            with self.rounds.txn() as conn:
                done = lease_repo.release_lease(conn, epoch, holder, self.db_now(conn))
        except sa.exc.SQLAlchemyError as e:
            log.warning("releasing the RS lease failed: %s", db_error_summary(e))
            return False
        if done:
            log.info("released the RS lease of epoch %d", epoch)
        return done
