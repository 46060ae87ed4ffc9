"""The lease checker (docs/design/leases.md): the 100 ms task ``heartbeat_checker`` that expires
leases and declares servers permanently offline.

Follows OceanBase's ``ObHeartbeatChecker``. Each tick touches only what expires: the alive
order of the whitelist has the next lease to expire at its front, and lease-expired servers
wait in a heap keyed by their permanent-offline deadline. Memory only; the changes go through
the persistence queue.

The permanent-offline clock is the offline total within a sliding window
(:mod:`rootservice.servers.offline_window`), so a flapping server gets there too, declared
once per episode of being gone (event ``permanent_offline`` and the counter
``servers_permanent_offline_total``; its later outages in that episode turn it permanently
offline again without either); each expiry
feeds the SUSPECT damping (:mod:`rootservice.servers.suspect_policy`), and the tick clears
``suspect_end_time`` of the servers whose SUSPECT period is over (event ``suspect_end``).

Ages are measured on the monotonic clock (``ServerStatus.last_hb_mono_us``), never on the
wall clock: a +1 h step of the RS's wall clock used to expire every live server and declare
it permanently offline in one tick. Wall time is only written (events,
``last_offline_time``).
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable

from obcommon.clock import Clock
from obcommon.durations import format_duration
from rootservice.config import RsSettings
from rootservice.db.event_repo import Event
from rootservice.ha.term import Term
from rootservice.metrics import Metrics
from rootservice.servers.events import log_transitions, seconds, server_event
from rootservice.servers.loader import TakeOfficeGrace
from rootservice.servers.offline_window import (
    due_at,
    episode_over,
    offline_in_window,
    window_us,
)
from rootservice.servers.persist_queue import PersistQueue
from rootservice.servers.ports import (
    LeaseAllowance,
    MassExpiry,
    UpgradeHold,
    WaitingRequests,
    Wake,
)
from rootservice.servers.status import HeartbeatStatus
from rootservice.servers.suspect_policy import on_expiry
from rootservice.servers.whitelist import Whitelist


class LeaseChecker:
    """``run_once()`` -> number of transitions. ``wake`` is called with ``"balancer"`` and
    ``"lost_replica_checker"`` when a server turns permanently offline."""

    name = "heartbeat_checker"

    def __init__(
        self,
        whitelist: Whitelist,
        persist: PersistQueue,
        grace: TakeOfficeGrace,
        term: Term,
        clock: Clock,
        settings: RsSettings,
        metrics: Metrics,
        wake: Wake,
        allowance: LeaseAllowance | None = None,
        suspicion: MassExpiry | None = None,
        queued: WaitingRequests | None = None,
        upgrade: UpgradeHold | None = None,
    ) -> None:
        """Check ``whitelist`` against ``settings.lease_time`` (plus ``allowance``, the RS's
        own intake delay) and ``settings.server_permanent_offline_time``
        (read on every tick); while ``suspicion`` says so, hold permanent offline.
        A server with a request waiting in ``queued`` (the RS's own lease queue) is
        not expired, whatever its age: the request reached the RS. While ``upgrade`` says
        the cluster is in upgrade mode no server is declared permanently offline (OceanBase
        raises ``server_permanent_offline_time`` to 72h for an upgrade, tools/upgrade/
        upgrade_checker.py): the deadlines wait in the heap and apply once it ends."""
        self.whitelist = whitelist
        self.persist = persist
        self.grace = grace
        self.term = term
        self.clock = clock
        self.settings = settings
        self.metrics = metrics
        self.wake = wake
        self.allowance = allowance
        self.suspicion = suspicion
        self.queued = queued
        self.upgrade = upgrade
        # Set by each tick: when the next lease expires, if before the next tick.
        self._early_due: int | None = None

    def early_due_mono_us(self) -> int | None:
        """The monotonic time (microseconds) at which the next lease expires, as the last
        tick found it (its ``lease_time`` and allowance), when that is less than
        ``heartbeat_check_interval`` after the tick; None otherwise, or when the tick did
        not look (not in office, the take-office grace). The timers wake the checker then
        (:class:`rootservice.tasks.EarlyDue`), so a lease is found expired when it expires,
        not up to one tick later."""
        return self._early_due

    def run_once(self) -> int:
        """One tick of the 100 ms checker: expire leases (monotonic ``mono - last_hb_mono_us
        >= lease_time``, inclusive), declare permanent offline (offline for ``>=
        server_permanent_offline_time`` in total within the sliding window) and end
        SUSPECT periods (``mono >= suspect.until_mono_us``). Returns the number of
        transitions. Does nothing
        while this RS may not act (``Term.may_act``: not in office, not in service, lease not
        safely held) or in the first ``lease_time`` after the take office (docs/design/servers.md#memory-and-the-table).

        The take-office grace is per server (:class:`TakeOfficeGrace`): a
        server that came back is judged on its own lease from then on; the candidates still
        away are written INACTIVE only once the grace stops holding them, and no permanent
        offline is declared while it does (an INACTIVE server may be one of those reconnecting).
        """
        self._early_due = None
        if not self.term.may_act():
            return 0
        t0 = time.perf_counter_ns()
        mono = self.clock.monotonic_us()
        if self.grace.first_lease(mono):
            return 0
        held = self.grace.holds(mono, self.settings.lease_time)
        now = self.clock.now_us()
        # An overloaded RS must not mistake its own backlog for dead servers.
        lease = self.settings.lease_time + (self.allowance.checker_tick() if self.allowance else 0)
        offline = self.settings.server_permanent_offline_time
        servers = self.whitelist.records
        alive = self.whitelist.alive
        heap = self.whitelist.offline_heap
        n = 0
        # (event, reason) of each transition, logged once the whitelist lock is released.
        logged: list[tuple[Event, str]] = []
        expired: list[str] = []
        waiting = self.queued.waiting if self.queued is not None else None
        with self.whitelist.lock:
            if self.grace.candidates and not held:
                n += self._expire_candidates(now, logged, waiting)
            # Oldest lease first. A server whose request waits in the RS's own queue stays
            # where it is (its request will renew it) and the scan goes on past it.
            due: list[str] = []
            for key in alive:
                s = servers.get(key)
                if s is None or not s.is_alive():
                    due.append(key)
                    continue
                end = s.last_hb_mono_us + lease
                if mono < end:
                    if end - mono < self.settings.heartbeat_check_interval:
                        self._early_due = end
                    break
                if waiting is None or not waiting(key):
                    due.append(key)
            for key in due:
                del alive[key]
                s = servers.get(key)
                if s is None or not s.is_alive():
                    continue
                age = mono - s.last_hb_mono_us
                s.hb_status = HeartbeatStatus.LEASE_EXPIRED
                s.last_offline_time = now
                s.start_service_time = 0
                s.suspect = on_expiry(
                    s.suspect, s.last_hb_mono_us, self.settings.server_suspect_time
                )
                s.suspect_end_time = 0
                if s.offline_declared and episode_over(
                    s.offline_spans, s.offline_start(s.last_hb_mono_us), offline
                ):
                    s.offline_declared = False  # back long enough: a new episode
                heapq.heappush(
                    heap,
                    (
                        due_at(s.offline_spans, s.offline_start(s.last_hb_mono_us), mono, offline),
                        key,
                    ),
                )
                self.persist.mark(key)
                expired.append(key)
                ev = server_event(now, "lease_expire", s, ("last_hb_time", s.last_hb_time))
                self.persist.add_event(ev)
                logged.append(
                    (
                        ev,
                        f"no heartbeat for {seconds(age)} (lease_time {format_duration(lease)})",
                    )
                )
                self.metrics.window("expire_detect_lag_us").record(age - lease)
                self.metrics.inc("leases_expired_total")
                n += 1
            # A mass expiry holds permanent offline: the heap keeps them.
            suspected = self.suspicion is not None and self.suspicion.observe(
                now, expired, len(alive)
            )
            # Upgrade mode holds it too: processes restarted one by one are not lost.
            upgrading = self.upgrade is not None and self.upgrade.in_upgrade_mode()
            while not held and not suspected and not upgrading and heap and heap[0][0] <= mono:
                _, key = heapq.heappop(heap)
                s = servers.get(key)
                if s is None or s.hb_status is not HeartbeatStatus.LEASE_EXPIRED:
                    continue
                age = mono - s.last_hb_mono_us
                # A maintenance window's downtime does not count.
                start = s.offline_start(s.last_hb_mono_us)
                total = offline_in_window(s.offline_spans, start, mono, offline)
                if total < offline:
                    # Not yet (a lower-bound entry, the setting changed, a reload, a
                    # maintenance window): re-queue at the earliest time it can get there.
                    heapq.heappush(heap, (due_at(s.offline_spans, start, mono, offline), key))
                    continue
                s.hb_status = HeartbeatStatus.PERMANENT_OFFLINE
                self.wake("balancer")
                self.wake("lost_replica_checker")
                n += 1
                if s.offline_declared:
                    continue  # the same episode of being gone: declared once
                s.offline_declared = True
                self.metrics.inc("servers_permanent_offline_total")
                ev = server_event(
                    now,
                    "permanent_offline",
                    s,
                    ("last_hb_time", s.last_hb_time),
                    ("offline_in_window", format_duration(total)),
                )
                self.persist.add_event(ev)
                logged.append(
                    (
                        ev,
                        f"no heartbeat for {seconds(age)}, offline {seconds(total)} within the "
                        f"last {format_duration(window_us(offline))} "
                        f"(server_permanent_offline_time {format_duration(offline)})",
                    )
                )
            n += self._end_suspects(mono, now, logged)
        self.metrics.window("checker_tick_us").record((time.perf_counter_ns() - t0) // 1000)
        log_transitions(logged)
        return n

    def _expire_candidates(
        self,
        now: int,
        logged: list[tuple[Event, str]],
        waiting: Callable[[str], bool] | None = None,
    ) -> int:
        """End of the take-office grace: the candidates that never heartbeated are written
        INACTIVE now, with event ``lease_expire`` (appended to ``logged`` with its reason).
        A candidate whose first request waits in the RS's own lease queue (``waiting``) stays
        a candidate, its row as it was: its request reached this RS, which has not handled it
        yet, so the agent is alive (the same rule as for a lease, see ``run_once``); it is
        judged again at the next tick. Caller holds the whitelist lock."""
        n = 0
        kept: set[str] = set()
        for key in sorted(self.grace.candidates):
            s = self.whitelist.records.get(key)
            if s is None or s.is_alive():
                continue
            if waiting is not None and waiting(key):
                kept.add(key)
                continue
            s.suspect_end_time = 0
            s.suspect = on_expiry(s.suspect, s.last_hb_mono_us, self.settings.server_suspect_time)
            self.persist.mark(key)
            ev = server_event(now, "lease_expire", s, ("last_hb_time", s.last_hb_time))
            self.persist.add_event(ev)
            logged.append((ev, "no heartbeat since this root service took office"))
            self.metrics.inc("leases_expired_total")
            n += 1
        self.grace.keep_only(kept)
        return n

    def _end_suspects(self, mono: int, now: int, logged: list[tuple[Event, str]]) -> int:
        """Clear ``suspect_end_time`` of the alive servers whose SUSPECT period ended by
        ``mono`` (event ``suspect_end``, appended to ``logged``). Placement never waits for
        this: it judges ``suspect.until_mono_us`` itself. Caller holds the whitelist lock."""
        heap = self.whitelist.suspect_heap
        n = 0
        while heap and heap[0][0] <= mono:
            until, key = heapq.heappop(heap)
            s = self.whitelist.records.get(key)
            if s is None or s.suspect.until_mono_us != until or not s.suspect_end_time:
                continue
            s.suspect_end_time = 0
            self.persist.mark(key)
            ev = server_event(now, "suspect_end", s)
            self.persist.add_event(ev)
            logged.append((ev, "gap-free heartbeats for its whole suspect time"))
            n += 1
        return n

    def resort_offline_deadlines(self) -> None:
        """Rebuild the permanent-offline heap (after ``server_permanent_offline_time`` changed)."""
        self.whitelist.rebuild_offline_heap(
            self.settings.server_permanent_offline_time, self.clock.monotonic_us()
        )
