"""Rate-limited log lines: a warning that a loop could repeat forever is logged the first time,
then at most once per interval, with how many like it were not logged.

The RS's failed background rounds, its refused gRPC peers (:class:`obcommon.security.gate.
PeerGate`) and an agent whose lease requests are refused all go through one
:class:`RateLimitedLog`, so a database outage or a deleted server's agent costs one line a
minute instead of one per round. Pacing uses the injected clock's monotonic time, so tests
drive it with :class:`obcommon.clock.FakeClock`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from obcommon.clock import Clock


class RateLimitedLog:
    """Logs on ``logger`` at most once per ``interval_us`` (microseconds) per key.

    A key names one kind of repeated line (e.g. ``"lease_refused"``, a task's name). The first
    call for a key logs; later calls within ``interval_us`` of the last logged line are only
    counted; the next logged line ends with ``" (N similar suppressed)"``. :meth:`reset` forgets
    a key (its condition cleared), so the next occurrence logs at once.
    """

    def __init__(
        self,
        logger: logging.Logger | logging.LoggerAdapter,  # type: ignore[type-arg]
        clock: Clock,
        interval_us: int,
    ) -> None:
        """Pace ``logger``'s (or an adapter's) lines by ``clock.monotonic_us()``;
        ``interval_us`` > 0, else ``ValueError``."""
        if interval_us <= 0:
            raise ValueError("interval_us must be positive")
        self.logger = logger
        self.clock = clock
        self.interval_us = interval_us
        self._last: dict[str, int] = {}
        self._suppressed: dict[str, int] = {}
        self._lock = threading.Lock()

    def log(
        self,
        level: int,
        key: str,
        msg: str,
        *args: Any,
        extra: Mapping[str, Any] | None = None,
        exc_info: Any = None,
    ) -> bool:
        """Log ``msg % args`` at ``level`` unless ``key`` was logged less than ``interval_us``
        ago; returns whether it was logged. A logged line that follows suppressed ones gets
        ``" (N similar suppressed)"`` appended and ``suppressed=N`` in its extra fields."""
        now = self.clock.monotonic_us()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self.interval_us:
                self._suppressed[key] = self._suppressed.get(key, 0) + 1
                return False
            self._last[key] = now
            suppressed = self._suppressed.pop(key, 0)
        fields = dict(extra or {})
        if suppressed:
            msg = f"{msg} ({suppressed} similar suppressed)"
            fields["suppressed"] = suppressed
        self.logger.log(level, msg, *args, extra=fields, exc_info=exc_info)
        return True

    def warning(
        self, key: str, msg: str, *args: Any, extra: Mapping[str, Any] | None = None
    ) -> bool:
        """:meth:`log` at WARNING."""
        return self.log(logging.WARNING, key, msg, *args, extra=extra)

    def reset(self, key: str) -> None:
        """Forget ``key``: its condition is over, the next occurrence is logged at once (the
        lines suppressed meanwhile are dropped from the count)."""
        with self._lock:
            self._last.pop(key, None)
            self._suppressed.pop(key, None)

    def clear(self) -> None:
        """Forget every key (:meth:`reset` of all)."""
        with self._lock:
            self._last.clear()
            self._suppressed.clear()

    def suppressed(self, key: str) -> int:
        """Lines of ``key`` not logged since its last logged line."""
        with self._lock:
            return self._suppressed.get(key, 0)
