"""The RS's own intake delay, so that an overloaded RS does not mistake its backlog for dead
servers.

A lease expires when ``now - last_hb_time >= lease_time`` (docs/design/leases.md). That rule
assumes the RS hears a heartbeat as soon as it is sent. When the RS itself is behind - its one
Python core cannot serve the heartbeat rate, a CPU hog starves it, it was SIGSTOPped or
paused by the GIL - heartbeats wait in the kernel's socket buffers and gRPC's queues, and
live servers look silent. :class:`IntakeHealth` estimates that delay from three signals and
the lease checker waits ``lease_time + allowance`` before expiring a lease:

- ``tick``: how late the 100 ms checker tick runs (the RS was stopped or starved: the
  heartbeats of the whole gap are unread);
- ``loop``: how late a 100 ms probe on the gRPC event loop runs (the loop is busy: what it
  has not read yet waits at least that long);
- ``transit``: how long heartbeats waited before the RS handled them, measured on the
  heartbeats themselves: each carries the agent's ``current_server_time`` at sending; for
  one server, ``received - sent`` minus the smallest such difference seen for it is the time
  the request waited in the RS's queues (the clock skew between the two hosts cancels out;
  a difference more than ``lease_time`` above the smallest is an agent's clock step and
  starts a new baseline). Every :data:`TRANSIT_WINDOW_US`, the :data:`TRANSIT_QUANTILE`
  quantile of the heartbeats handled in it. Dead servers send nothing and weigh nothing, so
  a mass expiry does not lengthen the leases: the first version of this signal, the rate
  deficit ``alive / heartbeats served per second - heartbeat_interval``, took 3,000 silenced
  agents of 10,000 for backlog and detected them 3.7 s after their lease ended.

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
import math
import threading
from collections import deque
from collections.abc import Callable

from obcommon.clock import Clock
from rootservice.config import RsSettings

log = logging.getLogger(__name__)

#: Period of the event-loop probe and of the checker (microseconds).
PROBE_PERIOD_US = 100_000
#: The ``transit`` signal is one quantile per this long (microseconds).
TRANSIT_WINDOW_US = 1_000_000
#: At most this many transit samples wait for the checker: during a take-office grace (up to
#: 10 leases) the checker does not tick and would otherwise let the list grow with every
#: heartbeat.
MAX_TRANSIT_SAMPLES = 100_000
#: The quantile of a window's transit delays taken as the RS's intake delay: most heartbeats
#: waited at most that long (one agent's slow network does not lengthen every lease).
TRANSIT_QUANTILE = 0.9
#: The allowance above which a WARNING is logged (and below which, again, an INFO).
LOG_THRESHOLD_US = 1_000_000
#: At most one such log line per this long (microseconds).
LOG_EVERY_US = 10_000_000


class IntakeHealth:
    """``allowance_us()`` -> the extra time (microseconds, ``0..lease_time``) the lease
    checker grants before expiring a lease. Fed by :meth:`checker_tick` (the checker, each
    tick), :meth:`loop_lag` (the probe :meth:`run_probe` on the gRPC event loop) and
    :meth:`transit` (every accepted heartbeat).

    ``measure_ticks`` is False when the checker is not run by the timers (unit tests drive it
    by hand, with FakeClock jumps that are not lateness)."""

    def __init__(self, clock: Clock, settings: RsSettings, measure_ticks: bool = True) -> None:
        """Measure against ``settings.lease_time`` / ``heartbeat_check_interval`` (read each
        time)."""
        self.clock = clock
        self.settings = settings
        self.measure_ticks = measure_ticks
        # (monotonic_us, value_us, signal) of the samples above zero within lease_time.
        self._samples: deque[tuple[int, int, str]] = deque()
        self._last_tick: int | None = None
        # server -> smallest received - sent seen (us); the current window's excesses. Both
        # written by the heartbeat path only; the checker swaps the list out.
        self._transit_base: dict[str, int] = {}
        self._transits: list[int] = []
        self._transit_since: int | None = None
        self._above = False
        self._last_log = -LOG_EVERY_US
        #: The latest value of each signal (microseconds), for the status API.
        self.latest: dict[str, int] = {"tick": 0, "loop": 0, "transit": 0}
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
            self._sample(now, lag_us, "loop")

    async def run_probe(self, stop: asyncio.Event, beat: Callable[[], None] | None = None) -> None:
        """Run on the gRPC event loop until ``stop``: every 100 ms, how late did we wake?
        ``beat`` is called at every wake too (the loop stall watch's proof that the loop
        runs, :meth:`rootservice.api.loop_stall_watch.LoopStallWatch.beat`): one periodic
        task on the loop serves both."""
        period = PROBE_PERIOD_US / 1e6
        while not stop.is_set():
            if beat is not None:
                beat()
            t0 = self.clock.monotonic_us()
            try:
                await asyncio.wait_for(stop.wait(), period)
                return
            except TimeoutError:
                pass
            self.loop_lag(max(0, self.clock.monotonic_us() - t0 - PROBE_PERIOD_US))

    def transit(self, server: str, sent_us: int, received_us: int) -> None:
        """The heartbeat path, for every accepted heartbeat (5,000 a second at 10,000
        agents: a dict lookup and an append): ``server`` sent it at ``sent_us`` (its
        ``current_server_time``, the agent's wall clock) and the RS handled it at
        ``received_us`` (its wall clock), both microseconds since the epoch."""
        d = received_us - sent_us
        base = self._transit_base.get(server)
        if base is None or d < base or d - base > self.settings.lease_time:
            self._transit_base[server] = d
            return
        if len(self._transits) < MAX_TRANSIT_SAMPLES:
            self._transits.append(d - base)

    def checker_tick(self) -> int:
        """Called by the lease checker at the start of each tick: records the tick's lateness
        and, once per :data:`TRANSIT_WINDOW_US`, the window's transit quantile; returns
        :meth:`allowance_us`."""
        now = self.clock.monotonic_us()
        with self._lock:
            if self.measure_ticks:
                if self._last_tick is not None:
                    late = now - self._last_tick - self.settings.heartbeat_check_interval
                    self._sample(now, max(0, late), "tick")
                self._last_tick = now
            if self._transit_since is None:
                self._transit_since = now
            elif now - self._transit_since >= TRANSIT_WINDOW_US:
                # Swapped, not copied: the heartbeat path appends to whichever list is current.
                window, self._transits = self._transits, []
                self._transit_since = now
                value = 0
                if window:
                    window.sort()
                    # The smallest wait that at least TRANSIT_QUANTILE of them did not exceed.
                    value = window[max(0, math.ceil(len(window) * TRANSIT_QUANTILE) - 1)]
                self._sample(now, value, "transit")
        return self.allowance_us()

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
                "%.3fs late, event loop %.3fs late, heartbeats waited %.3fs): leases expire "
                "%.1fs later than lease_time",
                self.current_us / 1e6,
                self.source,
                self.latest["tick"] / 1e6,
                self.latest["loop"] / 1e6,
                self.latest["transit"] / 1e6,
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
