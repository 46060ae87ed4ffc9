"""The one clock seam of the project.

Every component that needs the time takes a :class:`Clock`. Production code passes
:class:`SystemClock`; unit tests pass :class:`FakeClock` and call :meth:`FakeClock.advance`
instead of sleeping. Direct wall-clock calls elsewhere are banned by ruff (TID251).
All times are integer microseconds since the Unix epoch, as in OceanBase.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol

US_PER_MS = 1_000
US_PER_S = 1_000_000


class Clock(Protocol):
    """Source of time for the RS and the agent.

    ``now_us()`` is wall time in microseconds since the epoch (what OceanBase stores in
    ``last_hb_time``, ``stop_time``...). ``monotonic_us()`` never goes backwards and is used
    for measuring durations and deadlines of waits.
    """

    def now_us(self) -> int:
        """Wall-clock time, integer microseconds since the Unix epoch."""
        ...

    def monotonic_us(self) -> int:
        """Monotonic time in microseconds from an arbitrary origin; only differences matter."""
        ...


class SystemClock:
    """The real clock: ``time.time_ns`` and ``time.monotonic_ns`` in microseconds."""

    def now_us(self) -> int:
        """``time.time_ns()`` truncated to integer microseconds since the Unix epoch."""
        return time.time_ns() // 1_000

    def monotonic_us(self) -> int:
        """``time.monotonic_ns()`` truncated to integer microseconds (arbitrary origin)."""
        return time.monotonic_ns() // 1_000


class FakeClock:
    """A clock that only moves when a test calls :meth:`advance` or :meth:`set`.

    Thread-safe, so a test may advance it while background threads read it.
    Starts at ``start_us`` (default 2026-01-01T00:00:00Z in microseconds).
    """

    def __init__(self, start_us: int = 1_767_225_600_000_000) -> None:
        """Start wall time at ``start_us`` (microseconds since the epoch), monotonic at 0."""
        self._now = start_us
        self._mono = 0
        self._lock = threading.Lock()

    def now_us(self) -> int:
        """The current fake wall time, integer microseconds since the Unix epoch."""
        with self._lock:
            return self._now

    def monotonic_us(self) -> int:
        """The fake monotonic time in microseconds; starts at 0, moved only by :meth:`advance`."""
        with self._lock:
            return self._mono

    def advance(self, delta_us: int) -> int:
        """Move both clocks forward by ``delta_us`` (>= 0); returns the new ``now_us``."""
        if delta_us < 0:
            raise ValueError("a fake clock only moves forward")
        with self._lock:
            self._now += delta_us
            self._mono += delta_us
            return self._now

    def set(self, now_us: int) -> None:
        """Jump wall time to ``now_us`` (may go backwards, to model a clock step)."""
        with self._lock:
            self._now = now_us

    def jump(self, delta_us: int) -> int:
        """Step wall time by ``delta_us`` (either sign; an NTP step or an operator's
        ``date -s``) without moving monotonic time; returns the new ``now_us``."""
        with self._lock:
            self._now += delta_us
            return self._now


def wall_seconds(clock: Clock) -> float:
    """``clock.now_us()`` as float seconds, for log lines only."""
    return clock.now_us() / US_PER_S
