"""How busy the event loop that serves the lease streams is: the share of wall time it does
not spend waiting for I/O.

The lease queue (:mod:`rootservice.servers.lease_queue`) paces renewals while the loop is
saturated. Its first sign of saturation is a long round of the loop; but a loop that answers
every renewal at once in its stream's task can be busy with short rounds (each round handles
what arrived during the last), and in that state new streams started at about three a second
(``make bench``, 5,000 agents at a 0.5 s period: 141 agents waited about 50 s for their
first lease in one run, 137 were not admitted in 240 s in another; with the pacing on, 330-400
a second started). Such a loop hardly waits for I/O. So the loop is given a selector that
counts the time spent in ``select()`` (:meth:`LoopLoad.selector`), and a window in which it
waited less than :data:`SATURATED_IDLE` of the time counts as saturated. Wall time is what
counts, not the loop thread's CPU: on a machine whose cores are full, the loop thread is
runnable without running, and behind all the same.
"""

from __future__ import annotations

import selectors
import time
from collections.abc import Callable

#: A window in which the loop waited for I/O less than this share of the wall time counts
#: as saturated. A loop that keeps up waits most of the time (``make bench``, 5,000 agents at
#: 2 s: the loop thread busy 0.3 of the time); one at its capacity still waits now and then
#: for gRPC's poller thread to hand it the next completions (the same bench at a 0.5 s
#: period, 6,000-7,500 of 10,000 renewals a second answered: it waited 5-11 % of the time).
SATURATED_IDLE = 0.10
#: The shortest window (nanoseconds) judged: shorter ones are noise (one GC pause).
WINDOW_NS = 500_000_000


class _TimedSelector(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    """The platform's default selector, counting into ``load`` the time spent in ``select``."""

    def __init__(self, load: LoopLoad) -> None:
        super().__init__()
        self._load = load

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        t0 = time.perf_counter_ns()
        try:
            ready: list[tuple[selectors.SelectorKey, int]] = super().select(timeout)
            return ready
        finally:
            self._load.waited(time.perf_counter_ns() - t0)


class LoopLoad:
    """The wait counter of one event loop: :meth:`selector` makes the selector the loop is
    built with (``asyncio.SelectorEventLoop(load.selector())``), :meth:`waited_ns` reads the
    nanoseconds it has waited in ``select()`` so far, and :meth:`saturated` judges windows of
    at least :data:`WINDOW_NS`. Without a loop built on its selector (in-process tests),
    nothing is counted and no window is judged saturated. The counters are written by the
    loop's thread only (once per round of the loop, so without a lock) and read by any."""

    def __init__(self, clock_ns: Callable[[], int] = time.perf_counter_ns) -> None:
        """No selector made yet; ``clock_ns`` times the windows (nanoseconds)."""
        self._clock_ns = clock_ns
        self._waited_ns = 0
        self._selects = 0
        # The current window's start: (clock_ns, waited_ns, selects) then.
        self._since = (clock_ns(), 0, 0)
        #: The busy share of the last window judged (0.0-1.0), -1.0 before the first.
        self.last_busy = -1.0

    def selector(self) -> selectors.BaseSelector:
        """A new selector counting its waits here (one per event loop)."""
        return _TimedSelector(self)

    def waited(self, ns: int) -> None:
        """One ``select()`` took ``ns`` nanoseconds (called by the selector)."""
        self._waited_ns += ns
        self._selects += 1

    def waited_ns(self) -> int:
        """Nanoseconds waited in ``select()`` since the start."""
        return self._waited_ns

    def saturated(self) -> bool:
        """Whether the window that ends now, when it is at least :data:`WINDOW_NS` long and
        the loop went round in it, had the loop waiting less than :data:`SATURATED_IDLE` of
        its wall time; a judged window starts the next one. False for a window too short to
        judge. Raises nothing."""
        now = self._clock_ns()
        t0, waited0, selects0 = self._since
        span = now - t0
        if span < WINDOW_NS:
            return False
        waited, selects = self._waited_ns, self._selects
        self._since = (now, waited, selects)
        if selects == selects0:
            # No round at all (no loop on this selector, or one callback held it the whole
            # window): the lease queue's round probe judges the latter.
            return False
        idle = (waited - waited0) / span
        self.last_busy = max(0.0, 1.0 - idle)
        return idle < SATURATED_IDLE
