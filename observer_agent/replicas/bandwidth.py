"""The copy bandwidth limit of one agent: one token bucket shared by every
replica copy this agent receives, refilled at the RS's ``migration_max_bytes_per_second``.

OceanBase keeps one ``ObInOutBandwidthThrottle`` per observer for all its background copy
traffic (migration, rebuild, backup), and ``ObServer::reload_bandwidth_throttle_limit``
(``src/observer/ob_server.cpp``) changes its rate in place when ``sys_bkgd_net_percentage``
changes, without restarting the copies. Here the rate is a byte count the RS sends in each
lease response (:meth:`observer_agent.lease_loop.LeaseClient.handle_response` calls
:meth:`CopyBandwidth.set_rate`), and a copy takes tokens for each data chunk it received
before it reads the next one (:func:`observer_agent.replicas.copy_stream.receive_data_file`),
so a stalled reader also stalls the gRPC stream (its flow-control window) and the network.

The bucket is kept as two running totals (bytes): ``granted``, every byte a caller asked
for, and ``credit``, every byte the rate has allowed so far (at most :attr:`burst` above
``granted``: an idle bucket does not save up more). A caller asking for ``n`` bytes gets the
ticket ``granted + n`` and may go once ``credit`` reaches it; callers thus go in the order
they asked, and the bytes let through by time ``t`` never exceed ``burst + rate * (t - t0)``
after any ``t0``. A chunk larger than the burst simply waits longer (chunk granularity).
Times are seconds of a monotonic source (``time.monotonic`` unless one is passed in).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable

#: Seconds of traffic the bucket lets through at once after an idle spell.
BURST_S = 0.1
#: Longest single sleep of a waiting copy, seconds: a rate changed meanwhile (a higher one,
#: or 0 = unlimited) is seen within this long, not after the wait the old rate asked for.
MAX_SLICE_S = 0.2


class CopyBandwidth:
    """One agent's copy bandwidth limit: a token bucket of :attr:`rate` bytes per second
    (0 = unlimited, the start) shared by all the copies the agent runs at once.

    ``monotonic`` gives the time in seconds; ``sleep`` waits a number of seconds (default
    ``asyncio.sleep``; tests pass one that advances a fake ``monotonic``). :meth:`set_rate`
    may be called from any thread; :meth:`take` runs on the event loop. :attr:`throttled_s`
    counts the seconds copies spent waiting here (``ob_agent_copy_throttled_seconds_total``).
    """

    def __init__(
        self,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        """Unlimited until :meth:`set_rate`."""
        self._now = monotonic
        self._sleep = sleep
        self._lock = threading.Lock()
        self._rate = 0
        self._granted = 0.0
        self._credit = 0.0
        self._stamp = monotonic()
        self.throttled_s = 0.0

    @property
    def rate(self) -> int:
        """The limit in bytes per second; 0 = unlimited."""
        return self._rate

    @property
    def burst(self) -> float:
        """Bytes let through at once after an idle spell: :data:`BURST_S` of the rate (0 when
        unlimited)."""
        return self._rate * BURST_S

    def set_rate(self, bytes_per_s: int) -> bool:
        """Change the limit to ``bytes_per_s`` (0 = unlimited; negative counts as 0); True
        when it changed. Tokens earned at the old rate are kept; waiting copies see the new
        rate within :data:`MAX_SLICE_S`. Going from unlimited to a limit starts with a full
        burst."""
        rate = max(0, int(bytes_per_s))
        with self._lock:
            if rate == self._rate:
                return False
            self._refill(self._now())
            was_unlimited = self._rate == 0
            self._rate = rate
            if was_unlimited:
                self._credit = self._granted + self.burst
            elif rate:
                self._credit = min(self._credit, self._granted + self.burst)
            return True

    def reserve(self, n: int) -> float:
        """Ask for ``n`` bytes (>= 0): returns the ticket to pass to :meth:`wait_s`. With no
        limit the ticket is already due."""
        with self._lock:
            self._refill(self._now())
            self._granted += n
            if self._rate == 0:
                self._credit = self._granted
            return self._granted

    def wait_s(self, ticket: float) -> float:
        """Seconds until ``ticket`` is due at the current rate (0 = go now)."""
        with self._lock:
            self._refill(self._now())
            # A thousandth of a byte short is due: float rounding of the refill must not
            # leave a copy sleeping for nanoseconds again and again.
            if self._rate == 0 or self._credit >= ticket - 1e-3:
                return 0.0
            return (ticket - self._credit) / self._rate

    def cancel(self, n: int) -> None:
        """Give back the ``n`` bytes of a reservation that will not be used (its copy was
        cancelled while waiting), so later tickets are not delayed by bytes never sent."""
        with self._lock:
            self._credit = min(self._credit + n, self._granted + self.burst)

    async def take(self, n: int) -> None:
        """Wait until ``n`` bytes (a received chunk) may pass; returns at once when unlimited
        or within the burst. Cancellable (the reservation is given back)."""
        ticket = self.reserve(n)
        try:
            while (w := self.wait_s(ticket)) > 0:
                step = min(w, MAX_SLICE_S)
                await self._sleep(step)
                with self._lock:
                    self.throttled_s += step
        except asyncio.CancelledError:
            self.cancel(n)
            raise

    def _refill(self, now: float) -> None:
        # Under the lock. The credit never runs more than a burst ahead of what was asked,
        # so an idle copy destination does not save up a flood for later.
        if now > self._stamp and self._rate:
            self._credit = min(
                self._credit + self._rate * (now - self._stamp), self._granted + self.burst
            )
        self._stamp = max(self._stamp, now)
