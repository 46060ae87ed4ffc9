"""The term: the one place that answers "may this root service act as the leader now?".

A term is one tenure of this process as leader, numbered by the epoch it won in the lease
row of ``__all_service_epoch`` (docs/design/ha.md). :class:`Term` holds
everything that answer depends on, written by the two places that change it:

- the :class:`rootservice.ha.election.Election` rounds: :meth:`Term.begin` when a round wins
  the lease, :meth:`Term.renewed` after each good renewal, :meth:`Term.request_step_down`
  when a renewal fails (and :meth:`Term.take_step_down` in the election thread to finish it);
- the root service's life cycle (:mod:`rootservice.app`, :mod:`rootservice.bootstrap`):
  :attr:`Term.state` (OceanBase's ObRootService states) and :meth:`Term.open_service` /
  :meth:`Term.close_service` around the time the whitelist is loaded and served.

Everything else only reads it: the fenced store before every write (:meth:`Term.guard`,
:attr:`Term.epoch`), the servicers and statement dispatch once per heartbeat or statement
(:meth:`Term.check`), the task registry once per background round (:meth:`Term.may_act`).
No other object keeps its own "am I leader" flag or message.

The lease safety margin (OceanBase's RS lease, HDFS QJM's epochs): once
supervised, the leader stops trusting its lease ``lease_time - margin`` after the start of
its last successful renewal, on its own monotonic clock, so it stops acting before a standby
can take over (a standby waits for ``renewal start + lease_time`` by the database's clock).
Times are integer microseconds.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from enum import StrEnum

from obcommon.clock import Clock
from obcommon.errors import ObError
from obcommon.fencing import FenceToken
from rootservice.metrics import Metrics

log = logging.getLogger(__name__)

#: The step-down reason of a clean stop (SIGTERM): the RS gives its office up on purpose.
CLEAN_STOP = "stopping"

#: The start of the step-down reason of ALTER SYSTEM SWITCH ROOTSERVICE LEADER (on purpose too).
HANDOVER = "handing the office over"

#: Longest renewal period of the leader (the issue's "renews every 2 s").
RENEW_INTERVAL_MAX_US = 2_000_000


def lease_timings(lease_us: int) -> tuple[int, int]:
    """``(renew_interval_us, margin_us)`` for an RS lease of ``lease_us`` microseconds.

    The leader renews every ``min(2 s, lease / 5)`` and trusts its lease for ``lease -
    margin`` after the start of its last successful renewal, ``margin = lease / 5``: with the
    default 10 s lease, renewals every 2 s and a step-down 8 s after the last good one, i.e.
    after three renewals in a row could not be made.
    """
    return min(RENEW_INTERVAL_MAX_US, lease_us // 5), lease_us // 5


class RsState(StrEnum):
    """States of the RS (OceanBase's ObRootService states, docs/design/ha.md#taking-office).

    ``WAIT_BOOTSTRAP`` on an empty database, ``BOOTSTRAPPING`` while BOOTSTRAP waits for the
    rs_list servers, ``IN_SERVICE`` while taking office and ``FULL_SERVICE`` once the timers
    run; ``NOT_MASTER`` for a standby and after stepping down.
    """

    INIT = "INIT"
    WAIT_BOOTSTRAP = "WAIT_BOOTSTRAP"
    BOOTSTRAPPING = "BOOTSTRAPPING"
    IN_SERVICE = "IN_SERVICE"
    FULL_SERVICE = "FULL_SERVICE"
    NOT_MASTER = "NOT_MASTER"
    STOPPED = "STOPPED"


class Term:
    """Whether this RS may act as the leader, with which epoch, and in which state.

    ``address()`` is this RS's ``ip:port`` (for messages); ``lease_time()`` the lease length
    in microseconds (read at each check: ALTER SYSTEM SET applies at once); ``wake_election()``
    asks the election for a round as soon as possible (to finish a step-down requested
    outside its thread). Public state, read by anyone: :attr:`epoch` (0 = not in office),
    :attr:`state`, :attr:`in_service`, :attr:`leader` (last known leader's address, "" =
    unknown).
    """

    def __init__(
        self,
        clock: Clock,
        *,
        address: Callable[[], str],
        lease_time: Callable[[], int],
        metrics: Metrics | None = None,
        wake_election: Callable[[], None] | None = None,
    ) -> None:
        """A standby's term: epoch 0, state INIT, not in service, not supervised."""
        self.clock = clock
        self.address = address
        self.lease_time = lease_time
        self.metrics = metrics or Metrics()
        self.wake_election = wake_election or (lambda: None)
        self.state = RsState.INIT
        self.leader = ""
        self.supervised = False
        # Plain attributes, not properties: the heartbeat path reads both for every lease
        # request (a property call there cost 7 % of a heartbeat's handling in make bench's
        # micro-benchmark). Only this class writes them.
        #: The epoch this RS holds (0 when not in office: nothing may be written).
        self.epoch = 0
        #: The random id drawn when this term began: with the epoch, the fencing token every
        #: command and lease answer carries.
        self.incarnation = 0
        #: The whitelist is loaded and served (between open_service and close_service).
        self.in_service = False
        self._renewed_mono = 0
        self._pending: str | None = None
        # Guards _epoch / _pending / _renewed_mono; never held across I/O or callbacks, so any
        # thread may request a step-down without waiting.
        self._lock = threading.Lock()
        # The thread running an election round: a step-down it requests is finished by that
        # round, so it does not wake the election scheduler.
        self.round_thread: int | None = None

    # --- the gate (any thread) --------------------------------------------------------------

    def guard(self) -> str | None:
        """Why this RS must not act as leader now, or None when it may: not in office, or
        (when supervised) no successful renewal within ``lease_time - margin`` on the
        monotonic clock. Cheap (one clock reading): asked before every fenced write and
        lease answer."""
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

    def trusted_us(self) -> int:
        """Microseconds the lease of the current term is still trusted for on the monotonic
        clock: ``lease_time - margin`` after the start of its last successful renewal, less
        the time since (0 when not in office or past it). Unlike :meth:`guard` it ignores
        :attr:`supervised`: a failed renewal retries only within it, in tests too."""
        epoch = self.epoch
        renewed = self._renewed_mono
        if epoch == 0:
            return 0
        lease = self.lease_time()
        _, margin = lease_timings(lease)
        return max(0, lease - margin - (self.clock.monotonic_us() - renewed))

    def token(self) -> FenceToken:
        """``(epoch, incarnation)``: the fencing token of this term (epoch 0 = none)."""
        epoch = self.epoch
        return FenceToken(epoch, self.incarnation if epoch else 0)

    def trust_left_us(self) -> int | None:
        """How much longer (microseconds, >= 0) :meth:`guard` trusts the lease, or None when
        it sets no limit (not supervised). 0 when not in office."""
        if self.epoch == 0:
            return 0
        if not self.supervised:
            return None
        lease = self.lease_time()
        _, margin = lease_timings(lease)
        return max(0, self._renewed_mono + lease - margin - self.clock.monotonic_us())

    def holds_lease(self) -> bool:
        """True while this RS is in office and :meth:`guard` has no objection."""
        return self.guard() is None

    def refusal(self, *, need_service: bool = True) -> str | None:
        """Why this RS may not act now, or None: not the leader (or its lease is not safely
        held), stopped, or (with ``need_service``) its whitelist not in service yet (before
        BOOTSTRAP, or while taking office)."""
        state = self.state
        if state is RsState.NOT_MASTER or state is RsState.STOPPED:
            return f"root service {self.address()} is {state.value}"
        why = self.guard()
        if why is not None:
            return f"root service {self.address()} is {state.value}: {why}"
        if need_service and not self.in_service:
            return "the root service is not in service (bootstrap first)"
        return None

    def check(self, *, need_service: bool = True) -> int:
        """The gate: returns the epoch to act with, or raises ``ObError(OB_RS_NOT_MASTER)``
        with :meth:`refusal`'s reason. Statements call it once (``need_service=False`` for
        those a leader answers before bootstrap: BOOTSTRAP itself, SET, SHOW, SELECT)."""
        why = self.refusal(need_service=need_service)
        if why is not None:
            raise ObError("OB_RS_NOT_MASTER", detail=why)
        return self.epoch

    def may_act(self) -> bool:
        """:meth:`check` without raising: a background round runs only when True."""
        return self.refusal() is None

    # --- the service window (the root service's life cycle) ------------------------------------

    def open_service(self) -> None:
        """The whitelist is loaded (taking office or BOOTSTRAP): heartbeats and statements on
        servers are served from now on."""
        self.in_service = True

    def close_service(self) -> None:
        """Stop serving (a failed BOOTSTRAP, a step-down, a clean stop)."""
        self.in_service = False

    # --- transitions (the election) ------------------------------------------------------------

    def supervise(self) -> None:
        """From now on the lease is only trusted within the safety margin (the periodic
        rounds run); unit tests that drive rounds by hand leave it unsupervised."""
        self.supervised = True

    def begin(self, epoch: int, renewal_started_mono: int, incarnation: int = 0) -> None:
        """A round won the lease with ``epoch`` and ``incarnation``; its renewal started at
        the monotonic time ``renewal_started_mono``."""
        with self._lock:
            # In this order: guard() reads the epoch first, so it never pairs the new epoch
            # with the previous term's renewal time.
            self._renewed_mono = renewal_started_mono
            self.incarnation = incarnation
            self.epoch = epoch
        self.leader = self.address()

    def renewed(self, epoch: int, renewal_started_mono: int) -> None:
        """A renewal of ``epoch`` that started at ``renewal_started_mono`` succeeded (ignored
        when the term has ended meanwhile)."""
        with self._lock:
            if self.epoch == epoch:
                self._renewed_mono = renewal_started_mono

    def request_step_down(self, reason: str, epoch: int | None = None) -> bool:
        """End the term now (any thread; never blocks on I/O).

        ``epoch`` limits the request to that term (a refusal seen by a write of an older term
        must not depose a newer one). The epoch becomes 0 at once, so nothing more can be
        written, the state NOT_MASTER and the service closed; the clean-up
        (:meth:`take_step_down`) follows in the election thread, which is woken. Returns
        False when there was nothing to step down from.
        """
        with self._lock:
            if self.epoch == 0 or (epoch is not None and epoch != self.epoch):
                return False
            old = self.epoch
            self.epoch = 0
            self._pending = reason
        self.state = RsState.NOT_MASTER
        self.in_service = False
        # A clean stop gives the office up on purpose (INFO); any other reason is a fault
        # the operator must look at (a clean SIGTERM logs nothing at ERROR).
        on_purpose = reason == CLEAN_STOP or reason.startswith(HANDOVER)
        level = logging.INFO if on_purpose else logging.ERROR
        log.log(level, "stepping down from epoch %d: %s", old, reason, extra={"reason": reason})
        self.metrics.inc("rs_step_down_total")
        if threading.get_ident() != self.round_thread:
            self.wake_election()
        return True

    def take_step_down(self) -> str | None:
        """The reason of a requested step-down not cleaned up yet (then forgotten), or None."""
        with self._lock:
            reason, self._pending = self._pending, None
        return reason
