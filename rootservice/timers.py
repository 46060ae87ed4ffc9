"""The RS's two sets of timers: the leader's background tasks, registered when it takes office
and removed when it steps down, and the election's rounds, which run for the whole life of
the process (docs/design/ha.md#taking-office).

Each set is one APScheduler (:func:`rootservice.tasks.make_scheduler`) so that the leader's
timers can be stopped and started without touching the election's. Registration goes
through :func:`rootservice.tasks.register_tasks` (``max_instances=1``, ``coalesce=True``, a
failed round logged and counted). Intervals are integer microseconds.

:class:`WallClockWatchdog` guards both against steps of the wall clock:
APScheduler schedules on wall time, so a backward step of 1 h would stop every timer (the
lease checker, the election's renewals) for an hour. The watchdog notices a step within
:data:`WALL_JUMP_CHECK_US` on the monotonic clock and makes every job due now.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from obcommon.clock import US_PER_S, Clock
from rootservice.metrics import Metrics
from rootservice.tasks import (
    Task,
    make_all_due,
    make_scheduler,
    register_tasks,
    reschedule,
    wake,
)

log = logging.getLogger(__name__)

#: ``(task, interval_us)`` pairs.
Schedule = Sequence[tuple[Task, int]]


class DueWaker:
    """Wakes tasks at monotonic deadlines: one daemon thread, started by the first
    :meth:`due`, that calls ``wake(name)`` (:meth:`Timers.wake`) once ``clock.monotonic_us()``
    reaches the earliest pending deadline.

    It serves the tasks whose work can come due between their ticks
    (:class:`rootservice.tasks.EarlyDue`): APScheduler runs a job on its period only, and
    waking the job through :func:`rootservice.tasks.wake` rather than moving its next run
    keeps the case where the job still runs right then (the wake runs it once more).
    A task has at most one pending deadline (a sooner one replaces it); nothing is
    pending in steady state, where no lease expires before the checker's next tick.
    It waits on a :class:`threading.Condition` (monotonic timeouts), so wall-clock steps
    do not move the deadlines."""

    def __init__(self, clock: Clock, wake: Callable[[str], None]) -> None:
        """Nothing pending, no thread yet."""
        self.clock = clock
        self._wake = wake
        self._cond = threading.Condition()
        self._pending: dict[str, int] = {}
        self._stopping = False
        self._thread: threading.Thread | None = None

    def due(self, name: str, at_mono_us: int) -> None:
        """Wake ``name`` at ``at_mono_us`` (monotonic microseconds) unless an earlier wake of
        it is pending; a no-op once :meth:`stop` was called."""
        with self._cond:
            if self._stopping:
                return
            current = self._pending.get(name)
            if current is not None and current <= at_mono_us:
                return
            self._pending[name] = at_mono_us
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="due_waker", daemon=True)
                self._thread.start()
            self._cond.notify()

    def pending(self) -> dict[str, int]:
        """The pending deadlines, ``{name: at_mono_us}``."""
        with self._cond:
            return dict(self._pending)

    def clear(self) -> None:
        """Drop every pending deadline (the tasks were removed: a step-down)."""
        with self._cond:
            self._pending.clear()

    def _loop(self) -> None:
        while True:
            ready: list[str] = []
            with self._cond:
                while not self._stopping:
                    now = self.clock.monotonic_us()
                    ready = [n for n, at in self._pending.items() if at <= now]
                    if ready:
                        for n in ready:
                            del self._pending[n]
                        break
                    wait = min(self._pending.values(), default=None)
                    self._cond.wait(None if wait is None else (wait - now) / US_PER_S)
                if self._stopping:
                    return
            for name in ready:
                try:
                    self._wake(name)
                except Exception:  # a surprise must not end the waker
                    log.exception("waking %s failed", name)

    def stop(self, timeout_s: float = 5.0) -> None:
        """End the thread (waiting up to ``timeout_s`` seconds) and drop what is pending."""
        with self._cond:
            self._stopping = True
            self._pending.clear()
            thread, self._thread = self._thread, None
            self._cond.notify()
        if thread is not None:
            thread.join(timeout_s)


class Timers:
    """One scheduler and the tasks registered on it.

    ``enabled`` False (unit tests that call ``run_once`` themselves) makes :meth:`start` a
    no-op and :meth:`wake` only note the name for :meth:`take_woken`, so such tests can run
    what the RS woke. ``phase_step_us`` staggers the first runs (see :func:`register_tasks`).
    """

    def __init__(
        self, clock: Clock, metrics: Metrics, *, enabled: bool, phase_step_us: int = 1_700_000
    ) -> None:
        """No task registered and the scheduler not started yet."""
        self.clock = clock
        self.metrics = metrics
        self.enabled = enabled
        self.phase_step_us = phase_step_us
        self.scheduler = make_scheduler()
        self._registered: set[str] = set()
        self._woken: list[str] = []
        # Early deadlines of the registered tasks (the lease checker's next expiry).
        self.waker = DueWaker(clock, self.wake)

    @property
    def running(self) -> bool:
        """The scheduler runs (started and not shut down)."""
        return bool(self.scheduler.running)

    def start(self, tasks: Schedule) -> None:
        """Register ``tasks`` (replacing jobs of the same names) and start the scheduler."""
        if not self.enabled:
            return
        register_tasks(
            self.scheduler,
            list(tasks),
            self.metrics,
            self.clock,
            phase_step_us=self.phase_step_us,
            due=self.waker,
        )
        self._registered = {task.name for task, _ in tasks}
        if not self.scheduler.running:
            self.scheduler.start()

    def stop(self) -> None:
        """Remove every registered task; the scheduler keeps running for a later start."""
        names, self._registered = self._registered, set()
        self.waker.clear()
        for name in names:
            try:
                self.scheduler.remove_job(name)
            except Exception:  # JobLookupError, or the scheduler is shut down
                log.debug("no job %s to remove", name)

    def wake(self, name: str) -> None:
        """Run task ``name`` now (OceanBase's checker ``wakeup()``); a no-op for a task that is
        not registered."""
        # Called on the heartbeat path for every transition: a name with no job must cost
        # nothing.
        if name in self._registered and self.scheduler.running:
            wake(self.scheduler, self.clock, name)
        elif not self.enabled:
            self._woken.append(name)

    def take_woken(self) -> list[str]:
        """The names :meth:`wake` was called with since the last call, in order, while the
        timers are not ``enabled`` (empty otherwise)."""
        woken, self._woken = self._woken, []
        return woken

    def reschedule(self, tasks: Schedule) -> None:
        """Apply new intervals to registered tasks (ALTER SYSTEM SET of an ``*_interval``)."""
        if not self.scheduler.running:
            return
        for task, interval in tasks:
            reschedule(self.scheduler, task.name, interval)

    def make_all_due(self) -> int:
        """Run every registered task now (after a step of the wall clock, see
        :func:`rootservice.tasks.make_all_due`); returns how many jobs. A no-op (0) while the
        scheduler is not running."""
        if not self.scheduler.running:
            return 0
        return make_all_due(self.scheduler, self.clock)

    def shutdown(self) -> None:
        """Stop the scheduler, waiting for running rounds, and the waker."""
        self.waker.stop()
        if self.scheduler.running:
            self.scheduler.shutdown(wait=True)

    def registered(self) -> set[str]:
        """Names of the tasks registered now."""
        return set(self._registered)


class PeriodicThread:
    """Calls ``check()`` every ``period_us`` microseconds on a daemon thread named ``name``,
    from :meth:`start` until :meth:`stop`: the watchers that must run whatever the
    scheduler and the event loop are doing (:class:`WallClockWatchdog`,
    :class:`rootservice.api.loop_stall_watch.LoopStallWatch`). It waits on a
    :class:`threading.Event`, which times out on the monotonic clock, so a step of the wall
    clock cannot stretch the period. An exception from ``check`` is logged and the thread
    lives on."""

    def __init__(self, name: str, period_us: int, check: Callable[[], object]) -> None:
        """Not started."""
        self.name = name
        self.period_us = period_us
        self.check = check
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        """True between :meth:`start` and :meth:`stop`."""
        return self._thread is not None

    def start(self) -> None:
        """Start the thread (idempotent)."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.period_us / US_PER_S):
            try:
                self.check()
            except Exception:  # a surprise must not end the watch
                log.exception("%s check failed", self.name)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the thread and wait up to ``timeout_s`` seconds for it."""
        thread, self._thread = self._thread, None
        self._stop.set()
        if thread is not None:
            thread.join(timeout_s)


#: How often :class:`WallClockWatchdog` compares the two clocks, in microseconds (monotonic).
#: A step is noticed (and the timers rescheduled) within this much: a few lease checker
#: periods, well inside any ``lease_time``, and cheap (two clock reads per period).
WALL_JUMP_CHECK_US = 500_000

#: A step is a difference of more than this many microseconds between how far the wall
#: clock and the monotonic clock moved over one check. NTP slews by at most 500 ppm
#: (0.25 ms per check) and a paused or descheduled process sees both clocks move alike, so
#: only a real step (``date -s``, an NTP step, a VM restored or migrated) exceeds it; 1 s is
#: also the smallest step that matters to leases counted in seconds.
WALL_JUMP_THRESHOLD_US = 1_000_000


class WallClockWatchdog:
    """Detects steps of the wall clock by comparing it with the monotonic clock.

    ``check_once() -> jump_us`` (0 when none) compares how far ``clock.now_us()`` and
    ``clock.monotonic_us()`` moved since the last check; a difference beyond
    ``threshold_us`` (either sign; positive: the wall clock jumped forward) is logged once
    at WARNING and passed to ``on_jump(jump_us)`` (the RS counts it, records a
    ``wall_clock_jump`` event and makes every timer due; an exception there is logged, the
    watchdog lives on). The comparison then restarts from the new readings, so one step is
    reported once. :meth:`start` runs it every ``period_us`` in a daemon thread that waits
    on a :class:`threading.Event` (monotonic) and :meth:`stop` ends it.

    Why: the lease checker measures ages on the monotonic clock (a step cannot expire a
    server), but APScheduler, which runs it, does not (see
    :func:`rootservice.tasks.make_all_due`). Watching for jumps rather than trusting the
    wall clock to move smoothly follows CockroachDB's HLC (cluster setting
    ``server.clock.forward_jump_check_enabled``: "forward clock jumps > max_offset/2 will
    cause a panic"); an RS has nothing to protect by dying, so it reschedules instead, in
    both directions.
    """

    name = "wall_clock_watchdog"

    def __init__(
        self,
        clock: Clock,
        on_jump: Callable[[int], None],
        *,
        period_us: int = WALL_JUMP_CHECK_US,
        threshold_us: int = WALL_JUMP_THRESHOLD_US,
    ) -> None:
        """Not started; the first check only takes the readings it compares with."""
        self.clock = clock
        self.on_jump = on_jump
        self.period_us = period_us
        self.threshold_us = threshold_us
        self._last: tuple[int, int] | None = None
        self._thread = PeriodicThread(self.name, period_us, self.check_once)

    def check_once(self) -> int:
        """One comparison; returns the step in microseconds (0: none, or the first check)."""
        wall, mono = self.clock.now_us(), self.clock.monotonic_us()
        last, self._last = self._last, (wall, mono)
        if last is None:
            return 0
        jump = (wall - last[0]) - (mono - last[1])
        if abs(jump) <= self.threshold_us:
            return 0
        log.warning(
            "the wall clock jumped %s by %.3f s (monotonic clock as reference): lease ages "
            "are monotonic and unaffected; rescheduling every timer",
            "forward" if jump > 0 else "backward",
            abs(jump) / US_PER_S,
            extra={"jump_us": jump},
        )
        try:
            self.on_jump(jump)
        except Exception:
            log.exception("handling a wall-clock jump of %d us failed", jump)
        return jump

    def run_once(self) -> int:
        """:meth:`check_once` (the :class:`rootservice.tasks.Task` shape, for tests)."""
        return self.check_once()

    def start(self) -> None:
        """Take the first readings and check every ``period_us`` in a daemon thread
        (idempotent)."""
        if self._thread.running:
            return
        self.check_once()
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the thread and wait up to ``timeout_s`` seconds for it."""
        self._thread.stop(timeout_s)
