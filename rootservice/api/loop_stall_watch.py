"""LoopStallWatch: says what the gRPC event loop was doing when it stopped answering.

Every lease stream is answered on one asyncio event loop. When that loop does not run for a
few hundred milliseconds, every agent's heartbeat waits, and a latency figure alone does not
say why (a collector pause, a lock held by a background thread, a slow call on the loop).
A watcher thread that does not need the loop reads the loop thread's Python stack while
the stall is still going on and logs it once per stall, with what the other threads were
running: the same idea as asyncio's debug mode (``loop.slow_callback_duration``), which
only reports after the fact and without the stack, and Go's scheduler trace.
"""

from __future__ import annotations

import logging
import sys
import threading
import traceback

from obcommon.clock import Clock
from rootservice.metrics import Metrics
from rootservice.timers import PeriodicThread

log = logging.getLogger(__name__)

#: The loop counts as stalled when it has not beaten for this long (microseconds): well
#: above the intake probe's 100 ms period plus its own scheduling noise, well below the 2 s
#: heartbeat period that a stall eats into.
STALL_THRESHOLD_US = 300_000
#: How often the watcher looks (microseconds).
WATCH_PERIOD_US = 50_000
#: Frames of the loop thread's stack logged (innermost last).
STACK_FRAMES = 25


class LoopStallWatch:
    """``beat()`` on the event loop (the intake probe calls it every 100 ms:
    :meth:`rootservice.servers.intake_health.IntakeHealth.run_probe`), ``check_once()`` from
    a watcher thread.

    ``check_once() -> stalled_us`` (0 while the loop beats) logs one WARNING per stall
    when the loop thread has not called :meth:`beat` for more than ``threshold_us``: the
    loop thread's stack at that moment and the innermost frame of every other Python thread.
    It counts ``event_loop_stalls_total``; when the loop beats again, the stall's length
    (microseconds) goes to the ``event_loop_stall_us`` window. Nothing is reported before
    the first beat (the loop has not started). :meth:`start` runs the checks every
    ``period_us`` on a daemon thread; :meth:`stop` ends it. Raises nothing.
    """

    name = "loop_stall_watch"

    def __init__(
        self,
        clock: Clock,
        metrics: Metrics,
        *,
        threshold_us: int = STALL_THRESHOLD_US,
        period_us: int = WATCH_PERIOD_US,
    ) -> None:
        """Watch with ``clock``'s monotonic readings; count into ``metrics``."""
        self.clock = clock
        self.metrics = metrics
        self.threshold_us = threshold_us
        self.period_us = period_us
        self._last_beat_us: int | None = None
        self._loop_thread: int | None = None
        # Monotonic start of the stall being reported (its last beat), None between stalls.
        self._reported: int | None = None
        # Beat and look exclude each other, so a beat landing while a look decides cannot
        # leave a stall reported after it ended (with its length overstated). Held for a few
        # attribute reads, every 50 ms on each side; never while logging.
        self._lock = threading.Lock()
        self._thread = PeriodicThread(self.name, period_us, self.check_once)

    def beat(self) -> None:
        """The loop ran (called on the event loop thread, by the intake probe)."""
        now = self.clock.monotonic_us()
        with self._lock:
            reported, self._reported = self._reported, None
            self._loop_thread = threading.get_ident()
            self._last_beat_us = now
        if reported is not None:
            stalled = now - reported
            self.metrics.window("event_loop_stall_us").record(stalled)
            log.warning("the gRPC event loop runs again after %.0f ms", stalled / 1000)

    def check_once(self) -> int:
        """One look; returns how long (microseconds) the loop has not run when that is over
        the threshold, else 0."""
        with self._lock:
            last, tid = self._last_beat_us, self._loop_thread
            if last is None or tid is None:
                return 0
            stalled = self.clock.monotonic_us() - last
            if stalled <= self.threshold_us:
                return 0
            if self._reported == last:
                return stalled
            self._reported = last
        self.metrics.inc("event_loop_stalls_total")
        frames = sys._current_frames()
        loop_frame = frames.get(tid)
        stack = (
            "".join(traceback.format_stack(loop_frame, limit=STACK_FRAMES)).rstrip()
            if loop_frame is not None
            else "(no Python frame: in native code)"
        )
        names = {t.ident: t.name for t in threading.enumerate()}
        others = []
        for ident, frame in frames.items():
            if ident in (tid, threading.get_ident()):
                continue
            code = frame.f_code
            others.append(
                f"{names.get(ident, ident)}: {code.co_name} "
                f"({code.co_filename.rsplit('/', 2)[-1]}:{frame.f_lineno})"
            )
        log.warning(
            "the gRPC event loop has not run for %.0f ms (every lease stream waits); it is "
            "in:\n%s\nother threads: %s",
            stalled / 1000,
            stack,
            "; ".join(sorted(others)) or "none",
        )
        return stalled

    def start(self) -> None:
        """Check every ``period_us`` on a daemon thread (idempotent)."""
        self._thread.start()

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop the thread and wait up to ``timeout_s`` seconds for it."""
        self._thread.stop(timeout_s)
