"""The persistence queue of heartbeat-derived changes to ``__all_server`` and the event
history (docs/design/servers.md#memory-and-the-table): the task ``persist_queue``.

Admin operations are write-through (they write their rows themselves); only what heartbeats and
the lease checker change in memory goes through this queue.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Any, Protocol

from obcommon.clock import Clock
from obcommon.errors import ObError
from obcommon.ratelimit_log import RateLimitedLog
from rootservice.db import event_repo, server_repo
from rootservice.db.event_repo import Event
from rootservice.ha.store import MetaStore
from rootservice.metrics import Metrics

log = logging.getLogger(__name__)

#: A failed flush (the database is down) logs at most this often, in microseconds.
FAILURE_LOG_US = 60_000_000


class RowSource(Protocol):
    """Where the queue reads the rows it writes (satisfied by
    :class:`rootservice.servers.whitelist.Whitelist`)."""

    def rows_for(self, keys: list[str]) -> list[dict[str, Any]]:
        """The current ``__all_server`` rows of those of ``keys`` still whitelisted."""
        ...


class PersistQueue:
    """Retrying, coalescing persistence of heartbeat-derived changes (docs/design/servers.md#memory-and-the-table).

    ``mark(key)`` records that a server's row is stale; ``run_once()`` writes the *current*
    in-memory row of every stale server in one transaction, so repeated changes coalesce and
    a retry after an outage can never write an older value over a newer one. Events raised
    on the heartbeat path are appended in the same transaction. A failed flush keeps
    everything for the next run.

    ``rows`` gives the current rows of the stale servers (the :class:`Whitelist`); the task
    registry runs it every ``persist_interval`` as ``persist_queue``.
    """

    name = "persist_queue"

    def __init__(
        self,
        store: MetaStore,
        clock: Clock,
        rows: RowSource,
        metrics: Metrics,
        max_events: int = 100_000,
    ) -> None:
        self.store = store
        self.clock = clock
        self._rows = rows
        self.metrics = metrics
        self._lock = threading.Lock()
        self._dirty: dict[str, int] = {}
        # Bounded so a long outage with flapping servers cannot exhaust memory.
        self._events: deque[tuple[int, Event]] = deque(maxlen=max_events)
        self._event_seq = 0
        # Failed flushes repeat every persist_interval while the database is down.
        self._failures = RateLimitedLog(log, clock, FAILURE_LOG_US)

    def mark(self, key: str) -> None:
        """Record that the row of ``key`` ('ip:port') must be rewritten from memory."""
        with self._lock:
            self._dirty[key] = self._dirty.get(key, 0) + 1

    def add_event(self, event: Event) -> None:
        """Queue an event row (dropping the oldest beyond ``max_events``)."""
        with self._lock:
            if len(self._events) == self._events.maxlen:
                self.metrics.inc("events_dropped_total")
            self._event_seq += 1
            self._events.append((self._event_seq, event))

    def clear(self) -> int:
        """Forget every queued row and event; returns how many were dropped.

        Called when the RS steps down: what a deposed leader queued must never be
        written by a later term of this process, which loads fresh state instead.
        """
        with self._lock:
            n = len(self._dirty) + len(self._events)
            self._dirty.clear()
            self._events.clear()
            return n

    def pending_keys(self) -> set[str]:
        """Servers whose rows are queued."""
        with self._lock:
            return set(self._dirty)

    def depth(self) -> int:
        """Stale rows + queued events."""
        with self._lock:
            return len(self._dirty) + len(self._events)

    def run_once(self) -> int:
        """Flush; returns rows + events written. Raises nothing: failures are logged
        (at most once per :data:`FAILURE_LOG_US`) and counted, and the work stays queued."""
        with self.store.write_lock:
            with self._lock:
                dirty = dict(self._dirty)
                queued = list(self._events)
            events = [e for _, e in queued]
            if not dirty and not events:
                return 0
            t0 = time.perf_counter_ns()
            rows = self._rows.rows_for(list(dirty))
            now = self.clock.now_us()
            try:
                with self.store.txn() as conn:
                    server_repo.update_servers(conn, rows, now)
                    event_repo.insert_events(conn, events, self.store.rs_addr)
            except ObError as e:
                self.metrics.inc("persist_failures_total")
                self._failures.warning(
                    "flush",
                    "persisting %d server rows and %d events failed, will retry: %s",
                    len(dirty),
                    len(events),
                    e,
                )
                return 0
            self._failures.reset("flush")
            with self._lock:
                for key, version in dirty.items():
                    if self._dirty.get(key) == version:
                        del self._dirty[key]
                # By sequence, not count: the bounded deque may have dropped old entries
                # while this flush ran.
                last = queued[-1][0] if queued else 0
                while self._events and self._events[0][0] <= last:
                    self._events.popleft()
            self.metrics.inc("persist_flushes_total")
            self.metrics.window("persist_flush_us").record((time.perf_counter_ns() - t0) // 1000)
            self.metrics.inc("persist_rows_total", len(rows))
            return len(rows) + len(events)
