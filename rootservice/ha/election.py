"""RS leader election on the system-table database (issue 5, SPEC.md sections 8 and 10).

Several ``rootservice serve`` processes share one database; the ``rootservice_epoch`` row of
``__all_service_epoch`` is the lease (see :mod:`rootservice.db.repo`). One
:meth:`Election.run_once` is one round:

- a standby locks the row and takes office when the lease has run out by the database's
  clock (or is its own, left by an earlier process at this address), by raising the epoch
  (OceanBase's ``__all_service_epoch``, HDFS QJM's promised epoch: seeds 002);
- the leader renews the lease (``expire = db_now + lease_time``) every
  :func:`lease_timings` ``renew`` period, and steps down at once when a renewal fails or
  finds another epoch or holder.

Independently of the rounds, the leader also stops trusting its lease once ``lease_time -
margin`` has passed on its own monotonic clock since the start of its last successful
renewal (:meth:`Election.guard`, checked by :meth:`Election.check_lease` every
``heartbeat_check_interval`` and before every fenced write and lease answer). A standby can
take office only after ``renewal start + lease_time`` by the database's clock, so the two
never overlap as long as the clocks' rates differ by less than the margin - and if they do,
the epoch fence in :meth:`rootservice.ha.store.MetaStore.txn` still refuses the old leader's
writes.

Stepping down happens in two parts: :meth:`Election.request_step_down` (any thread, never
blocks: the epoch goes to 0 so nothing can be written, and ``on_deposed_now`` makes the RS
answer as a follower) and the clean-up in the election thread (``on_step_down``: stop timers,
drop memory), so that taking office and stepping down never run concurrently. Times are
integer microseconds; monotonic readings go through the injected :class:`Clock`.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
from collections.abc import Callable

import sqlalchemy as sa

from obcommon.addresses import parse_server
from obcommon.clock import Clock
from rootservice.db import lease_repo
from rootservice.ha.store import MetaStore, db_error_summary
from rootservice.metrics import Metrics

log = logging.getLogger(__name__)

#: Longest renewal period of the leader (the issue's "renews every 2 s").
RENEW_INTERVAL_MAX_US = 2_000_000
#: Shortest lock / statement timeout of one election round on PostgreSQL.
MIN_ROUND_TIMEOUT_US = 200_000


#: How many RS addresses ``rootservice_list`` keeps (the most recent leaders).
MAX_RS_LIST = 8


def merge_rs_list(stored: str, me: str, keep: int = MAX_RS_LIST) -> list[str]:
    """The RS list after ``me`` takes office: ``stored`` (``__all_sys_parameter``
    ``rootservice_list``, addresses separated by ``;``) without ``me``, then ``me``, cut to
    the ``keep`` most recent. Agents get it in every lease response (SPEC.md section 5) and
    rotate through it, so every RS that ever led stays findable; standbys that never led are
    found through the agents' own ``--rs-list``."""
    addrs = [a for a in (x.strip() for x in stored.split(";")) if a and a != me]
    return [*addrs, me][-keep:]


def is_wildcard(host: str) -> bool:
    """True for an unspecified listen address (``0.0.0.0``, ``::``): not an identity."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False


def lease_timings(lease_us: int) -> tuple[int, int]:
    """``(renew_interval_us, margin_us)`` for an RS lease of ``lease_us`` microseconds.

    The leader renews every ``min(2 s, lease / 5)`` and trusts its lease for ``lease -
    margin`` after the start of its last successful renewal, ``margin = lease / 5``: with the
    default 10 s lease, renewals every 2 s and a step-down 8 s after the last good one, i.e.
    after three renewals in a row could not be made.
    """
    return min(RENEW_INTERVAL_MAX_US, lease_us // 5), lease_us // 5


class Election:
    """The lease protocol of one RS process (a task: ``name`` + ``run_once()``).

    ``store`` gives the engine (rounds use their own short transactions, never the write
    lock, so a slow admin statement cannot delay a renewal) and the epoch it sets for fenced
    writes. ``address()`` is this RS's ``"ip:port"`` (the holder written in the row);
    ``lease_time()`` the lease length in microseconds (read each round: ALTER SYSTEM SET
    applies at the next renewal). ``db_clock`` replaces the database's clock (unit tests pass
    their FakeClock); None reads the database's. Callbacks: ``on_elected(epoch)`` takes office
    (in the round that won; raising makes the round step down again),
    ``on_deposed_now(reason)`` must only flip state (any thread), ``on_step_down(reason)``
    cleans up (election thread). ``wake()`` asks for a round as soon as possible.

    ``supervised`` is False until :meth:`start_supervision`: without the periodic rounds (unit
    tests that call ``run_once`` themselves) the lease is trusted without the margin check.
    Public state: ``epoch`` (0 = not leader), ``leader`` (last known leader, "" = unknown).
    """

    name = "rs_election"

    def __init__(
        self,
        store: MetaStore,
        clock: Clock,
        *,
        address: Callable[[], str],
        lease_time: Callable[[], int],
        on_elected: Callable[[int], None],
        on_deposed_now: Callable[[str], None],
        on_step_down: Callable[[str], None],
        metrics: Metrics | None = None,
        db_clock: Clock | None = None,
        wake: Callable[[], None] | None = None,
    ) -> None:
        """Start as a standby (epoch 0, leader unknown); nothing is read until a round."""
        self.store = store
        self.clock = clock
        self.address = address
        self.lease_time = lease_time
        self.on_elected = on_elected
        self.on_deposed_now = on_deposed_now
        self.on_step_down = on_step_down
        self.metrics = metrics or Metrics()
        self.db_clock = db_clock
        self.wake = wake or (lambda: None)
        self.supervised = False
        self.epoch = 0
        self.leader = ""
        self._renewed_mono = 0
        self._pending: str | None = None
        # Guards epoch / _pending / _renewed_mono; never held across I/O or callbacks that
        # take other locks, so any thread may request a step-down without waiting.
        self._lock = threading.Lock()
        # One round at a time (the scheduler already ensures it; tests and start() too).
        self._round = threading.Lock()
        # The thread running a round: a step-down it requests is finished by that round, so
        # it does not wake the scheduler (which would only log a skipped run).
        self._round_thread: int | None = None

    # --- queries (any thread) ------------------------------------------------------------

    def start_supervision(self) -> None:
        """From now on the lease is only trusted within the safety margin (see module doc)."""
        self.supervised = True

    def guard(self) -> str | None:
        """Why this RS must not act as leader now, or None when it may: not leader, or (when
        supervised) no successful renewal within ``lease_time - margin`` on the monotonic
        clock. Cheap (one clock reading): called for every fenced write and lease answer."""
        epoch = self.epoch
        renewed = self._renewed_mono
        if epoch == 0:
            return "not the leader"
        if not self.supervised:
            return None
        lease = self.lease_time()
        _, margin = lease_timings(lease)
        since = self.clock.monotonic_us() - renewed
        if since >= lease - margin:
            return f"lease of epoch {epoch} not renewed for {since // 1000} ms"
        return None

    def holds_lease(self) -> bool:
        """True while this RS is the leader and :meth:`guard` has no objection."""
        return self.guard() is None

    # --- stepping down -------------------------------------------------------------------

    def request_step_down(self, reason: str, epoch: int | None = None) -> bool:
        """Stop being the leader now (any thread; never blocks on I/O).

        ``epoch`` limits the request to that term (a refusal seen by a write of an older term
        must not depose a newer one). The epoch fenced writes use becomes 0 at once, then
        ``on_deposed_now(reason)`` runs; the clean-up (``on_step_down``) follows in the
        election thread, which is woken. Returns False when there was nothing to step down.
        """
        with self._lock:
            if self.epoch == 0 or (epoch is not None and epoch != self.epoch):
                return False
            old = self.epoch
            self.epoch = 0
            self.store.epoch = 0
            self._pending = reason
        log.error("stepping down from epoch %d: %s", old, reason)
        self.metrics.inc("rs_step_down_total")
        self.on_deposed_now(reason)
        if threading.get_ident() != self._round_thread:
            self.wake()
        return True

    def check_lease(self) -> bool:
        """The watchdog (every ``heartbeat_check_interval``): request a step-down when
        :meth:`guard` objects to a leader. Returns True when it did."""
        epoch = self.epoch
        if epoch == 0:
            return False
        why = self.guard()
        return why is not None and self.request_step_down(why, epoch)

    def _finish_step_down(self) -> None:
        with self._lock:
            reason, self._pending = self._pending, None
        if reason is not None:
            self.on_step_down(reason)

    # --- rounds --------------------------------------------------------------------------

    def run_once(self) -> bool:
        """One election round; returns True when this RS is the leader afterwards.

        Finishes a pending step-down first. A leader renews (stepping down when that fails);
        a standby takes office when the lease has run out, calling ``on_elected`` inline.
        Never raises: database errors fail the round (logged, ``rs_election_errors_total``).
        """
        with self._round:
            self._round_thread = threading.get_ident()
            try:
                self._finish_step_down()
                if self.epoch:
                    self._renew()
                else:
                    self._try_take_office()
                self._finish_step_down()
                return self.epoch != 0
            finally:
                self._round_thread = None

    def _db_now(self, conn: sa.Connection) -> int:
        return self.db_clock.now_us() if self.db_clock is not None else lease_repo.db_now_us(conn)

    def _begin_round(self, conn: sa.Connection) -> None:
        # Bounded waits: a round must fail rather than hang behind a paused RS's lock. And a
        # round of ours must not hold the row for ever if this process is paused between its
        # UPDATE and COMMIT: the server ends the session once it has been idle that long
        # (MetaStore does the same for fenced transactions).
        if conn.dialect.name != "postgresql":
            return
        renew, _ = lease_timings(self.lease_time())
        ms = str(max(MIN_ROUND_TIMEOUT_US, renew) // 1000)
        for name in ("lock_timeout", "statement_timeout", "idle_in_transaction_session_timeout"):
            conn.execute(sa.text("SELECT set_config(:n, :v, true)"), {"n": name, "v": ms})

    def _me(self) -> tuple[str, tuple[str, int]]:
        addr = self.address()
        return addr, parse_server(addr)

    def _renew(self) -> None:
        epoch = self.epoch
        me, holder = self._me()
        started = self.clock.monotonic_us()
        lease = self.lease_time()
        try:
            with self.store.engine.begin() as conn:
                self._begin_round(conn)
                now = self._db_now(conn)
                row = None
                if not lease_repo.renew_lease(conn, epoch, holder, now, now + lease):
                    row = lease_repo.read_lease(conn)
        except sa.exc.SQLAlchemyError as e:
            self.metrics.inc("rs_election_errors_total")
            self.request_step_down(f"lease renewal failed: {db_error_summary(e)}", epoch)
            return
        if row is None:
            with self._lock:
                if self.epoch == epoch:
                    self._renewed_mono = started
            self.metrics.inc("rs_lease_renewals_total")
            return
        self.leader = row.holder if row.holder != me else ""
        self.request_step_down(
            f"the lease is now epoch {row.epoch} held by {row.holder or 'nobody'}", epoch
        )

    def _try_take_office(self) -> None:
        me, holder = self._me()
        started = self.clock.monotonic_us()
        lease = self.lease_time()
        try:
            with self.store.engine.begin() as conn:
                self._begin_round(conn)
                row = lease_repo.read_lease(conn, lock=True)
                now = self._db_now(conn)
                # Our own address in the row is a lease left by an earlier process (or term)
                # of this RS: binding the same port proves that process is gone. Not so for
                # a wildcard address, which several hosts may be configured with.
                own = row.holder == me and not is_wildcard(holder[0])
                if row.holder and not own and now < row.expire_us:
                    self.leader = row.holder
                    return
                epoch = lease_repo.take_lease(conn, row, holder, now, now + lease)
        except sa.exc.SQLAlchemyError as e:
            self.metrics.inc("rs_election_errors_total")
            log.warning("election round failed: %s", db_error_summary(e))
            return
        with self._lock:
            # In this order: guard() reads epoch first, so it never pairs the new epoch
            # with the previous term's renewal time.
            self._renewed_mono = started
            self.epoch = epoch
        self.leader = me
        self.metrics.inc("rs_elected_total")
        log.info(
            "won the RS lease with epoch %d (previous: epoch %d held by %s)",
            epoch,
            row.epoch,
            row.holder or "nobody",
        )
        try:
            self.on_elected(epoch)
        except Exception as e:
            log.exception("taking office with epoch %d failed", epoch)
            if self.request_step_down(f"taking office failed: {e}", epoch):
                self._finish_step_down()
            # Let this RS (or another) try again from scratch at once instead of after the
            # lease runs out.
            self._release(epoch, holder)

    # --- clean stop --------------------------------------------------------------------

    def release(self) -> bool:
        """Give the lease up (a clean stop): step down, then end the lease now by the
        database's clock so a standby takes office at its next round. Returns True when the
        lease was ours and is released; database errors are only logged."""
        epoch = self.epoch
        if epoch == 0:
            return False
        self.request_step_down("stopping", epoch)
        with self._round:
            self._finish_step_down()
        return self._release(epoch, self._me()[1])

    def _release(self, epoch: int, holder: tuple[str, int]) -> bool:
        try:
            with self.store.engine.begin() as conn:
                self._begin_round(conn)
                done = lease_repo.release_lease(conn, epoch, holder, self._db_now(conn))
        except sa.exc.SQLAlchemyError as e:
            log.warning("releasing the RS lease failed: %s", db_error_summary(e))
            return False
        if done:
            log.info("released the RS lease of epoch %d", epoch)
        return done
