"""The RS's own intake delay, so that an overloaded RS does not mistake its backlog for dead
servers (issue 14 item 3).

A lease expires when ``now - last_hb_time >= lease_time`` (SPEC.md section 5). That rule
assumes the RS hears a heartbeat as soon as it is sent. When the RS itself is behind - its one
Python core cannot serve the heartbeat rate, a CPU hog starves it, it was SIGSTOPped or
paused by the GIL - heartbeats wait in the kernel's socket buffers and gRPC's queues, and
live servers look silent. :class:`IntakeHealth` estimates that delay from three signals and
the lease checker waits ``lease_time + allowance`` before expiring a lease:

- ``tick``: how late the 100 ms checker tick runs (the RS was stopped or starved: the
  heartbeats of the whole gap are unread);
- ``loop``: how late a 100 ms probe on the gRPC event loop runs (the loop is busy: what it
  has not read yet waits at least that long);
- ``rate``: when the loop is saturated (its lag above :data:`SATURATED_LAG_US`), the
  heartbeats served per second against what the alive servers send: an agent waits for the
  answer before its next request (observer_agent/lease.py), so with ``alive`` agents and ``R``
  heartbeats served per second each agent is heard every ``alive / R`` seconds instead of
  every ``heartbeat_interval``; the difference is the allowance. Only counted while the loop
  is saturated: an idle RS whose rate dropped has lost servers, not time.

The allowance is the largest signal seen within the last ``lease_time`` (so it does not
flap between ticks) and capped at ``lease_time``: a permanently overloaded RS still detects
a dead server, within ``2 * lease_time``. Exported as ``ob_rs_lease_allowance_seconds``.

Sources: CockroachDB's node liveness has no such allowance (its leases are renewed through
Raft, so a slow leaseholder cannot expire others); Kubernetes' node lifecycle controller
only waits ``node-monitor-grace-period`` on its own monotonic observation time
(pkg/controller/nodelifecycle/node_lifecycle_controller.go, ``tryUpdateNodeHealth``: a
node's status is dated when the controller *observed* it change, not when it was sent),
which is the same idea: do not charge the node for the observer's delay. OceanBase's
ObHeartbeatChecker (src/rootserver/ob_heartbeat_service.cpp in 4.x) compares the last
heartbeat time with the lease without any such allowance.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from collections.abc import Callable

from obcommon.clock import Clock
from rootservice.config import RsSettings

log = logging.getLogger(__name__)

#: Period of the event-loop probe and of the checker (microseconds).
PROBE_PERIOD_US = 100_000
#: Loop lag from which the event loop counts as saturated (the ``rate`` signal applies).
SATURATED_LAG_US = 50_000
#: The ``rate`` signal is computed over at least this long (microseconds).
RATE_WINDOW_US = 1_000_000
#: The allowance above which a WARNING is logged (and below which, again, an INFO).
LOG_THRESHOLD_US = 1_000_000
#: At most one such log line per this long (microseconds).
LOG_EVERY_US = 10_000_000


class IntakeHealth:
    """``allowance_us()`` -> the extra time (microseconds, ``0..lease_time``) the lease
    checker grants before expiring a lease. Fed by :meth:`checker_tick` (the checker, each
    tick), :meth:`loop_lag` (the probe :meth:`run_probe` on the gRPC event loop).

    ``served()`` returns the heartbeats handled so far (a counter), ``alive()`` how many
    servers are alive now. ``measure_ticks`` is False when the checker is not run by the
    timers (unit tests drive it by hand, with FakeClock jumps that are not lateness)."""

    def __init__(
        self,
        clock: Clock,
        settings: RsSettings,
        served: Callable[[], int],
        alive: Callable[[], int],
        measure_ticks: bool = True,
    ) -> None:
        """Measure against ``settings.lease_time`` / ``heartbeat_interval`` /
        ``heartbeat_check_interval`` (read each time)."""
        self.clock = clock
        self.settings = settings
        self.served = served
        self.alive = alive
        self.measure_ticks = measure_ticks
        # (monotonic_us, value_us, signal) of the samples above zero within lease_time.
        self._samples: deque[tuple[int, int, str]] = deque()
        self._loop_lags: deque[tuple[int, int]] = deque()
        self._last_tick: int | None = None
        self._rate_since: int | None = None
        self._rate_served = 0
        self._above = False
        self._last_log = -LOG_EVERY_US
        #: The latest value of each signal (microseconds), for the status API.
        self.latest: dict[str, int] = {"tick": 0, "loop": 0, "rate": 0}
        self.current_us = 0
        self.source = ""
        # The probe runs on the gRPC event loop, the checker on a timer thread and the status
        # API on a worker: the deques are shared (a bench run hit "deque mutated during
        # iteration" in allowance_us, which failed the checker's rounds).
        self._lock = threading.Lock()

    # --- the signals ---------------------------------------------------------------------

    def loop_lag(self, lag_us: int) -> None:
        """One probe: the event loop ran the probe ``lag_us`` microseconds late."""
        now = self.clock.monotonic_us()
        with self._lock:
            self._loop_lags.append((now, lag_us))
            while self._loop_lags and now - self._loop_lags[0][0] > RATE_WINDOW_US:
                self._loop_lags.popleft()
            self._sample(now, lag_us, "loop")

    async def run_probe(self, stop: asyncio.Event) -> None:
        """Run on the gRPC event loop until ``stop``: every 100 ms, how late did we wake?"""
        period = PROBE_PERIOD_US / 1e6
        while not stop.is_set():
            t0 = self.clock.monotonic_us()
            try:
                await asyncio.wait_for(stop.wait(), period)
                return
            except TimeoutError:
                pass
            self.loop_lag(max(0, self.clock.monotonic_us() - t0 - PROBE_PERIOD_US))

    def checker_tick(self) -> int:
        """Called by the lease checker at the start of each tick: records the tick's lateness
        and the heartbeat rate, returns :meth:`allowance_us`."""
        now = self.clock.monotonic_us()
        served = self.served()
        with self._lock:
            if self.measure_ticks:
                if self._last_tick is not None:
                    late = now - self._last_tick - self.settings.heartbeat_check_interval
                    self._sample(now, max(0, late), "tick")
                self._last_tick = now
            if self._rate_since is None:
                self._rate_since, self._rate_served = now, served
            elif now - self._rate_since >= RATE_WINDOW_US:
                self._sample(now, self._rate_deficit(now, served), "rate")
                self._rate_since, self._rate_served = now, served
        return self.allowance_us()

    def _rate_deficit(self, now: int, served: int) -> int:
        assert self._rate_since is not None
        if not self._loop_lags or max(v for _, v in self._loop_lags) < SATURATED_LAG_US:
            return 0
        alive = self.alive()
        if alive <= 0:
            return 0
        dt = now - self._rate_since
        done = served - self._rate_served
        if done <= 0:
            return dt
        # Each agent is answered once every alive / rate seconds.
        return max(0, alive * dt // done - self.settings.heartbeat_interval)

    def _sample(self, now: int, value: int, signal: str) -> None:
        self.latest[signal] = value
        if value > 0:
            self._samples.append((now, value, signal))

    # --- the allowance -------------------------------------------------------------------

    def allowance_us(self) -> int:
        """The largest signal of the last ``lease_time``, capped at ``lease_time``
        (microseconds). Logs a WARNING when it rises above :data:`LOG_THRESHOLD_US` and an
        INFO when it falls back (at most once per :data:`LOG_EVERY_US`)."""
        now = self.clock.monotonic_us()
        lease = self.settings.lease_time
        with self._lock:
            while self._samples and now - self._samples[0][0] > lease:
                self._samples.popleft()
            best, source = 0, ""
            for _, value, signal in self._samples:
                if value > best:
                    best, source = value, signal
            self.current_us, self.source = min(best, lease), source
        self._log(now)
        return self.current_us

    def _log(self, now: int) -> None:
        above = self.current_us >= LOG_THRESHOLD_US
        if above == self._above or now - self._last_log < LOG_EVERY_US:
            return
        self._above, self._last_log = above, now
        if above:
            log.warning(
                "this root service is behind on heartbeats by about %.1fs (signal %s: tick "
                "%.3fs late, event loop %.3fs late, rate deficit %.3fs): leases expire "
                "%.1fs later than lease_time",
                self.current_us / 1e6,
                self.source,
                self.latest["tick"] / 1e6,
                self.latest["loop"] / 1e6,
                self.latest["rate"] / 1e6,
                self.current_us / 1e6,
            )
        else:
            log.info(
                "this root service keeps up with heartbeats again (lease allowance %.3fs)",
                self.current_us / 1e6,
            )

    def status(self) -> dict[str, object]:
        """For the status API: ``allowance_us``, ``source`` and the ``latest`` signals."""
        return {"allowance_us": self.current_us, "source": self.source, **self.latest}
