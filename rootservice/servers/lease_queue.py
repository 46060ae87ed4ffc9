"""The RS's own queue of lease requests: fair intake under overload, and the intake lag.

Every request a lease stream receives that is not answered at once (see
:meth:`LeaseQueue.take_now` below: on a loop that keeps up, a renewal with none waiting
before it is) is put here as it arrives (dated on the monotonic clock) and handled by one
worker on the event loop, in turns:

- first the renewals (requests of streams that had an answer before), oldest first: each
  stream has at most one request waiting (an agent sends the next one only after the
  answer), so first-in first-out is one turn per stream, and an admitted agent waits at most
  for the renewals queued before it;
- then the first requests of new streams (a first lease: the stream's identity and bounds
  checks, often the server's online transition), at least one per turn and more while the
  turn's budget (:data:`TURN_US` of handling) lasts. A reconnect storm is admitted at the
  rate the RS can afford without starving the renewals of the agents already admitted.

After each turn the worker yields to the event loop, so the streams keep reading and the
backlog stays in this queue, where it is seen, rather than in gRPC's buffers, where it is
not. The worker is a plain callback of the loop (``call_soon``), scheduled when the first
request arrives in an empty queue and again after each turn that left requests waiting:
not a task waiting on an ``asyncio.Event``, whose wake-up, extra yield and new future per
idle period cost each heartbeat of a lightly loaded RS two task steps more. A renewal that
would be the only one of the next turn (no renewal waiting, the loop not saturated) is
handled at once in its stream's task instead (:meth:`LeaseQueue.take_now`): on a loop
that keeps up, the queue holds only first requests and what the loop could not take at once.

**The intake lag** is the age of the oldest waiting request (:meth:`LeaseQueue.lag_us`).
From :data:`BEHIND_US` the RS is *behind*: it says so once (WARNING and event
``lease_intake`` / ``behind``, then ``caught_up`` with the episode's worst lag once the lag
is back under a quarter of that), in ``/readyz`` and in the metrics. Whatever the lag, the
lease checker expires no server with a request waiting here (:meth:`LeaseQueue.waiting`):
the request reached the RS, so the agent was alive when it sent it, and the time it waits
is the RS's own delay, not the agent's. A server that sent nothing has nothing waiting and
expires on its lease as before. (Kubernetes' node lifecycle controller likewise dates a
node's status from when the controller observed it, pkg/controller/nodelifecycle/
node_lifecycle_controller.go ``tryUpdateNodeHealth``; OceanBase's ObHeartbeatChecker
compares the last heartbeat the RS *received*, src/rootserver/ob_heartbeat_service.cpp.)

**Pacing.** While the event loop is saturated (within the last :data:`BUSY_HOLD_US`, a round
of it, measured from a turn's scheduling to its start, took :data:`BUSY_ROUND_US` or more,
or it hardly waited for I/O over a window: :mod:`rootservice.servers.loop_load`), a server's renewals are handled at most once per *pace* (``lease_time
/`` :data:`PACE_DIVISOR`, 1 s at the default 10 s lease: half the agents' 2 s period, so an
agent keeping its period is never held). On a loop that keeps up nothing is paced. A renewal
that comes sooner is held, not refused, until a pace after the server's previous answer,
then queued like any other; one that carries news (its ``server_status`` bits changed on the
stream: a disk error, a clean stop) is not. An agent sending faster than its period (misconfigured, or a load generator at a 0.5 s period) thus costs the
RS at most one renewal per pace, and the loop keeps the time to accept new streams: gRPC's
asyncio server accepts one call per round of the event loop, and a loop saturated by
renewals made its rounds so long that 5,000 agents at a 0.5 s period got about 4 new
streams a second in (``make bench``), while gRPC cancelled the calls waiting longer than
its unrequested-call limit. A held request waits in the queue (the lease checker does not
expire its server) but is not part of the intake lag: the RS holds it by choice. Kubernetes'
API Priority and Fairness likewise queues a flow's excess requests instead of refusing them
(``k8s.io/apiserver/pkg/util/flowcontrol``).

A renewal whose stream ends while it waits is still handled (it reached the RS); only its
answer is dropped. A *first* request whose stream ended before its turn is dropped unhandled
(counted as ``abandoned_first``): its agent gave up waiting (after
``MAX_LATE_ANSWER_TIMEOUTS`` x ``rpc_timeout``, observer_agent/lease_loop.py) and sends
another on a new stream, so handling it would spend the RS's admission budget on an answer
nobody reads.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from obcommon.clock import Clock
from rootservice.db.event_repo import Event

log = logging.getLogger(__name__)

#: Handling time (microseconds, measured) after which a turn ends and the loop runs again.
#: Short because gRPC's asyncio server accepts a new call only when the event loop comes
#: round to its accept task (one call request outstanding per method, re-armed from the
#: loop: ``_server_main_loop`` in grpc's src/python/grpcio/grpc/_cython/_cygrpc/aio/
#: server.pyx.pxi), so long turns slow down the admission of new streams. ``make bench`` at
#: 5,000 agents and a 1 s period (1.5x the RS's capacity): with 20 ms turns the last agent
#: had its first lease after 219 and 232 s, with 5 ms after 53 s, with 2 ms after 75 s.
TURN_US = 5_000
#: A server's renewals are handled at most once per ``lease_time / PACE_DIVISOR``.
PACE_DIVISOR = 10
#: A loop round this long (microseconds, from a turn's scheduling to its start) means the
#: event loop is saturated and turns the pacing on; on a loop that keeps up a round takes
#: well under a millisecond.
BUSY_ROUND_US = 50_000
#: The pacing stays on this long (microseconds) after the last saturated round.
BUSY_HOLD_US = 5_000_000
#: An intake lag of at least this (microseconds) makes the RS "behind".
BEHIND_US = 1_000_000
#: While renewals are handled at once (:meth:`LeaseQueue.take_now`), the loop's round is
#: still measured by an empty turn scheduled at most this often (nanoseconds).
PROBE_NS = 10_000_000
#: How often (microseconds) the servers' last-answer times that can no longer hold a renewal
#: (older than a pace) are dropped, so that servers gone since do not stay in memory.
PRUNE_US = 10_000_000
#: The module of the intake's events in ``__all_rootservice_event_history``.
MODULE = "lease_intake"

Resp = TypeVar("Resp")
_T = TypeVar("_T")


@dataclass(slots=True)
class _Waiting(Generic[Resp]):
    server: str
    arrived_us: int
    work: Callable[[int], Resp]
    reply: Callable[[Resp], object]
    fail: Callable[[BaseException], object] | None
    abandoned: Callable[[], bool] | None


class LeaseQueue(Generic[Resp]):
    """Waiting lease requests of ``server`` names, each a ``work(waited_us)`` that handles it
    (``waited_us``: microseconds it waited here) and returns the answer, run in
    :meth:`run_turn` (renewals first, then first requests), the answer given to the
    request's ``reply``. ``add_event`` queues the ``behind`` / ``caught_up`` events. Times on
    ``clock`` (monotonic microseconds); every method runs on the event loop's thread except
    :meth:`waiting`, :meth:`lag_us` and :meth:`status`, which only read. Turns run by
    themselves once :meth:`start` gave the queue its loop; before, only :meth:`run_turn`
    runs them."""

    def __init__(
        self,
        clock: Clock,
        add_event: Callable[[Event], None],
        *,
        behind_us: int = BEHIND_US,
        turn_us: int = TURN_US,
        pace_us: Callable[[], int] = lambda: 0,
        pace_always: bool = False,
        round_clock_ns: Callable[[], int] = time.perf_counter_ns,
        loop_saturated: Callable[[], bool] = lambda: False,
    ) -> None:
        """An empty queue; nothing runs until :meth:`start` (or :meth:`run_turn`).
        ``pace_us()``: the shortest time between two handled requests of one server while
        the loop is saturated (microseconds, read at each renewal; 0 paces nothing);
        ``pace_always``: whether the loop is saturated or not (unit tests).
        ``round_clock_ns`` times the loop's rounds (nanoseconds). ``loop_saturated()``, asked
        at each turn, is the other sign of saturation: the loop hardly waited for I/O over
        its last window (:meth:`rootservice.servers.loop_load.LoopLoad.saturated`)."""
        self.clock = clock
        self._loop_saturated = loop_saturated
        self.pace_us = pace_us
        self.pace_always = pace_always
        self._round_clock_ns = round_clock_ns
        # When the last turn was scheduled, and until when the loop counts as saturated
        # (round_clock_ns readings).
        self._scheduled_ns = 0
        self._busy_until_ns = 0
        # When take_now may next schedule an empty turn to time a round of the loop.
        self._probe_ns = 0
        # server -> monotonic time its last request was handled (for the pacing); one entry
        # per server answered within the last pace (older ones pruned every PRUNE_US).
        self._handled_mono: dict[str, int] = {}
        self._pruned_mono = clock.monotonic_us()
        # Renewals held by the pacing: (monotonic time they may go, sequence, request).
        self._held: list[tuple[int, int, _Waiting[Resp]]] = []
        self._held_seq = 0
        # The loop's timer that releases the held renewals, and when it fires.
        self._release_timer: asyncio.TimerHandle | None = None
        self._release_due_mono = 0
        self.add_event = add_event
        self.behind_us = behind_us
        self.turn_us = turn_us
        self._renewals: deque[_Waiting[Resp]] = deque()
        self._firsts: deque[_Waiting[Resp]] = deque()
        # server -> requests of it waiting (normally 0 or 1).
        self._count: dict[str, int] = {}
        # The event loop the turns run on (None: not started) and whether a turn is
        # scheduled on it.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._scheduled = False
        self.behind = False
        self._worst_us = 0
        #: Requests handled, and of them first requests of a stream (for the metrics).
        self.handled_total = 0
        self.firsts_total = 0
        #: First requests dropped unhandled because their stream had ended.
        self.abandoned_total = 0
        #: Renewals held by the pacing.
        self.paced_total = 0

    # --- the streams' side ----------------------------------------------------------------

    def submit(
        self,
        server: str,
        work: Callable[[int], Resp],
        reply: Callable[[Resp], object],
        first: bool,
        fail: Callable[[BaseException], object] | None = None,
        abandoned: Callable[[], bool] | None = None,
        paced: bool = True,
    ) -> None:
        """Queue a request of ``server`` (``first``: the first of its stream; ``paced``
        False: a renewal that carries news, never held by the pacing):
        ``work(waited_us)`` handles it and returns the answer, which goes to ``reply``; an
        exception it raises goes to ``fail`` (and is logged), never into the worker.
        ``abandoned()`` (first requests only) is true once nobody waits for the answer: such
        a request is dropped at its turn, unhandled."""
        now = self.clock.monotonic_us()
        item = _Waiting(server, now, work, reply, fail, abandoned)
        self._count[server] = self._count.get(server, 0) + 1
        if paced and not first and self.saturated:
            last = self._handled_mono.get(server)
            if last is not None:
                due = last + self.pace_us()
                if now < due:
                    heapq.heappush(self._held, (due, self._held_seq, item))
                    self._held_seq += 1
                    self.paced_total += 1
                    self._release_at(due, now)
                    return
        (self._firsts if first else self._renewals).append(item)
        if not self._scheduled and self._loop is not None:
            self._schedule(self._loop)

    def take_now(self, server: str, first: bool) -> bool:
        """Whether a request of ``server`` (``first``: the first of its stream) skips the
        queue, to be handled at once by the caller: a renewal, on a started queue whose
        loop is not saturated, with no renewal waiting before it. Such a request would be
        the only renewal of the next turn anyway; handling it in its stream's own task saves
        each heartbeat a future, its wake-up and a queue entry (``make bench``: most of the
        RS's steady cost above the bare gRPC echo was the asyncio work per heartbeat).

        When True, the request is dated and counted here like a queued one is at its turn,
        so the pacing knows when the server was last answered; and while no turn runs, an
        empty one is scheduled at most every :data:`PROBE_NS` to time the loop's round (that
        turn is what turns the pacing on). Raises nothing."""
        loop = self._loop
        if first or loop is None or self._renewals:
            return False
        now_ns = self._round_clock_ns()
        if self.pace_always or now_ns < self._busy_until_ns:
            return False
        self._handled_mono[server] = self.clock.monotonic_us()
        self.handled_total += 1
        if not self._scheduled and now_ns >= self._probe_ns:
            self._probe_ns = now_ns + PROBE_NS
            self._schedule(loop)
        return True

    # --- what the rest of the RS reads ----------------------------------------------------

    def waiting(self, server: str) -> bool:
        """True while a request of ``server`` waits in the queue (it reached the RS)."""
        return server in self._count

    def depth(self) -> int:
        """Requests waiting for their turn (not those held by the pacing)."""
        return len(self._renewals) + len(self._firsts)

    def held(self) -> int:
        """Renewals held by the pacing."""
        return len(self._held)

    def lag_us(self) -> int:
        """The intake lag: microseconds the oldest waiting request has waited (0: none)."""
        oldest = [q[0].arrived_us for q in (self._renewals, self._firsts) if q]
        if not oldest:
            return 0
        return max(0, self.clock.monotonic_us() - min(oldest))

    def status(self) -> dict[str, object]:
        """``behind``, ``lag_us``, ``waiting``, ``waiting_first``, ``abandoned_first`` (first
        requests dropped because their stream had ended), ``saturated`` (the pacing is on),
        ``paced`` (renewals held by the pacing now) and ``paced_total`` (the status API)."""
        return {
            "behind": self.behind,
            "lag_us": self.lag_us(),
            "waiting": self.depth(),
            "waiting_first": len(self._firsts),
            "abandoned_first": self.abandoned_total,
            "saturated": self.saturated,
            "paced": len(self._held),
            "paced_total": self.paced_total,
        }

    def describe(self) -> str:
        """One line for ``/readyz`` while behind ("" otherwise)."""
        if not self.behind:
            return ""
        return (
            f"behind on lease intake: {self.depth()} lease requests waiting, the oldest for "
            f"{self.lag_us() / 1e6:.1f}s (their leases do not expire while they wait)"
        )

    # --- the worker -----------------------------------------------------------------------

    def run_turn(self) -> int:
        """One turn: the renewals waiting, oldest first, then the first requests, at least
        one; stops once :attr:`turn_us` of handling is spent (measured). Returns how many
        were handled."""
        start = time.perf_counter_ns()
        budget = self.turn_us * 1000
        n = 0
        if self._held:
            self._release_due()
        renewals, firsts = self._renewals, self._firsts
        while renewals:
            self._one(renewals.popleft())
            n += 1
            if time.perf_counter_ns() - start >= budget:
                break
        taken = 0
        while firsts:
            item = firsts.popleft()
            if item.abandoned is not None and item.abandoned():
                self._forget(item)
                self.abandoned_total += 1
                continue
            self._one(item)
            n += 1
            taken += 1
            if time.perf_counter_ns() - start >= budget:
                break
        self.firsts_total += taken
        self.handled_total += n
        self._judge()
        return n

    def _forget(self, item: _Waiting[Resp]) -> None:
        """``item`` no longer waits."""
        left = self._count.get(item.server, 1) - 1
        if left > 0:
            self._count[item.server] = left
        else:
            self._count.pop(item.server, None)

    def _one(self, item: _Waiting[Resp]) -> None:
        self._forget(item)
        now = self._handled_mono[item.server] = self.clock.monotonic_us()
        try:
            resp = item.work(max(0, now - item.arrived_us))
        except Exception as e:  # noqa: BLE001 - one bad request must not stop the worker
            log.exception("lease request of %s failed", item.server)
            if item.fail is not None:
                _ended(item.fail, e)
            return
        _ended(item.reply, resp)

    def _release_due(self) -> None:
        """Move the held renewals whose time has come to the renewals' queue."""
        now = self.clock.monotonic_us()
        held = self._held
        while held and held[0][0] <= now:
            self._renewals.append(heapq.heappop(held)[2])

    def _release_at(self, due: int, now: int) -> None:
        """Have the loop release held renewals at the monotonic time ``due`` (one timer, for
        the earliest)."""
        loop = self._loop
        if loop is None:
            return  # run_turn releases them (unit tests)
        if self._release_timer is not None:
            if self._release_due_mono <= due:
                return
            self._release_timer.cancel()
        self._release_due_mono = due
        self._release_timer = loop.call_later((due - now) / 1e6, self._on_release)

    def _on_release(self) -> None:
        self._release_timer = None
        self._release_due()
        if self._held:
            self._release_at(self._held[0][0], self.clock.monotonic_us())
        if (self._renewals or self._firsts) and not self._scheduled and self._loop is not None:
            self._schedule(self._loop)

    def _judge(self) -> None:
        """Enter or leave the behind state (event and log line once per change)."""
        lag = self.lag_us()
        if lag > self._worst_us:
            self._worst_us = lag
        if not self.behind and lag >= self.behind_us:
            self.behind = True
            self._worst_us = lag
            self._event("behind", lag)
            log.warning(
                "lease intake behind: the oldest of %d waiting lease requests has waited "
                "%.1fs (their servers' leases are not expired while they wait)",
                self.depth(),
                lag / 1e6,
            )
        elif self.behind and lag < self.behind_us // 4:
            self.behind = False
            self._event("caught_up", self._worst_us)
            log.info("lease intake caught up (worst lag %.1fs)", self._worst_us / 1e6)
            self._worst_us = 0

    def _event(self, event: str, lag_us: int) -> None:
        self.add_event(
            Event(
                self.clock.now_us(),
                MODULE,
                event,
                (("lag", f"{lag_us / 1e6:.3f}s"), ("waiting", self.depth())),
            )
        )

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Run the turns on ``loop`` from now on (the loop every lease stream is served on;
        called from it): one turn as soon as requests wait, then one more per loop
        iteration while any are left."""
        self._loop = loop
        # A turn or a timer of an earlier loop (closed since) will never run.
        self._release_timer = None
        self._scheduled = False
        if self._renewals or self._firsts:
            self._schedule(loop)
        if self._held:
            self._release_at(self._held[0][0], self.clock.monotonic_us())

    @property
    def started(self) -> bool:
        """Whether :meth:`start` gave the queue its loop."""
        return self._loop is not None

    @property
    def saturated(self) -> bool:
        """Whether the loop counts as saturated (the pacing is on)."""
        return self.pace_always or self._round_clock_ns() < self._busy_until_ns

    def _schedule(self, loop: asyncio.AbstractEventLoop) -> None:
        self._scheduled = True
        self._scheduled_ns = self._round_clock_ns()
        loop.call_soon(self._drain)

    def _drain(self) -> None:
        # One turn, then the rest of the loop's ready callbacks (the streams' reads) before
        # the next one, as an ``await asyncio.sleep(0)`` between turns would. The time since
        # this turn was scheduled is one round of the loop.
        self._scheduled = False
        now_ns = self._round_clock_ns()
        # Saturated: a long round, or short rounds with no time left to wait for I/O (a
        # loop answering every renewal at once at its capacity).
        if now_ns - self._scheduled_ns >= BUSY_ROUND_US * 1000 or self._loop_saturated():
            self._busy_until_ns = now_ns + BUSY_HOLD_US * 1000
        if self._renewals or self._firsts:
            self.run_turn()
        if (self._renewals or self._firsts) and self._loop is not None:
            self._schedule(self._loop)
        else:
            self._judge()
        self._prune()

    def _prune(self) -> None:
        """Every :data:`PRUNE_US` at most: forget the last-answer times older than a pace
        (they hold nothing: a renewal is held only until a pace after its server's last
        answer)."""
        now = self.clock.monotonic_us()
        if now - self._pruned_mono < PRUNE_US:
            return
        self._pruned_mono = now
        oldest = now - self.pace_us()
        self._handled_mono = {k: t for k, t in self._handled_mono.items() if t > oldest}


def _ended(give: Callable[[_T], object], value: _T) -> bool:
    """``give(value)``; True when the stream ended while the request waited (its future is
    cancelled: only the answer is dropped)."""
    try:
        give(value)
    except asyncio.InvalidStateError:
        return True
    return False
