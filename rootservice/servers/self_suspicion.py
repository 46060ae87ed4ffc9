"""Self-suspicion of the RS: when a large share of the servers' leases
expire at once, the likelier cause is this RS (a partition between it and most agents while
it keeps its database lease, a broken network card, a firewall rule) rather than a mass
death; the RS then holds the disruptive follow-ups of an expiry.

The rule (after Kubernetes' node lifecycle controller, pkg/controller/nodelifecycle/
node_lifecycle_controller.go: ``ComputeZoneState`` calls a zone partially disrupted when
more than 2 nodes and at least ``--unhealthy-zone-threshold`` (0.55) of them are not ready,
fully disrupted when none is ready, and ``handleDisruption`` stops evicting pods while every
zone is fully disrupted - "the master is probably partitioned"):

- start: within one ``lease_time`` window, the servers whose lease expired number at least
  ``server_mass_expire_min_count`` and more than ``server_mass_expire_percentage`` percent of
  the servers alive at the window's start (alive now + expired in the window);
- while suspected the lease checker still marks leases expired (the truth: it cannot hear
  them) but declares no server permanently offline, so neither the balancer nor the
  lost-replica checker is woken and no replica migrates;
- end: the servers of the episode that are still expired fall to the minimum count or to
  the percentage or below (their agents heartbeat again); the held permanent-offline
  deadlines then apply as usual (each ``last_hb_time + server_permanent_offline_time``).

OceanBase has no equivalent: ObHeartbeatChecker / ObServerManager (src/rootserver/
ob_heartbeat_service.cpp, ob_server_manager.cpp) expire each lease and declare permanent
offline server by server; its only guard is that a follower RS does not act.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from obcommon.clock import Clock
from rootservice.config import RsSettings
from rootservice.db.event_repo import Event

log = logging.getLogger(__name__)

MODULE = "root_service"


class SelfSuspicion:
    """``observe(now, expired, alive)`` once per checker tick -> whether the RS suspects
    itself; ``suspected`` is the current answer. ``is_alive(key)`` tells whether a server is
    alive now; ``add_event`` queues an ``__all_rootservice_event_history`` row."""

    def __init__(
        self,
        clock: Clock,
        settings: RsSettings,
        is_alive: Callable[[str], bool],
        add_event: Callable[[Event], None],
    ) -> None:
        """Judge with ``settings.lease_time``, ``server_mass_expire_percentage`` and
        ``server_mass_expire_min_count`` (read on every tick)."""
        self.clock = clock
        self.settings = settings
        self.is_alive = is_alive
        self.add_event = add_event
        # key -> monotonic_us of its lease expiry, in the current window (or episode).
        self._expired: dict[str, int] = {}
        # Monotonic end of the hold that follows an episode (0: none).
        self._hold_until = 0
        self.suspected = False
        self.since_us = 0
        #: (down, base) of the last judgement: expired servers of the window / episode still
        #: down, and the servers alive at the window's start.
        self.down = 0
        self.base = 0
        self.episodes = 0

    def observe(self, now: int, expired: list[str], alive: int) -> bool:
        """One tick at ``now`` (wall microseconds, for the event row): ``expired`` the keys
        whose lease expired in this tick, ``alive`` the servers alive after it. Returns
        :attr:`suspected`. Caller holds the whitelist lock (``is_alive`` reads it)."""
        mono = self.clock.monotonic_us()
        held = self._hold_until > mono
        for key in expired:
            self._expired[key] = mono
        if not self.suspected:
            # The window slides only outside an episode; in one, its servers stay counted
            # until they come back.
            lease = self.settings.lease_time
            for key in [k for k, t in self._expired.items() if mono - t > lease]:
                del self._expired[key]
        if not self._expired:
            self.down = self.base = 0
            return self.suspected or held
        for key in [k for k in self._expired if self.is_alive(k)]:
            del self._expired[key]
        self.down = len(self._expired)
        self.base = alive + self.down
        mass = self.is_mass(self.down, self.base)
        if mass and not self.suspected:
            self._start(now)
        elif not mass and self.suspected:
            self._end(now)
            # The stragglers of a healed partition get one more lease to heartbeat before
            # their held deadlines fire (CI: one server still reconnecting when the episode
            # ended went permanently offline at once).
            self._hold_until = mono + self.settings.lease_time
            held = True
        return self.suspected or held

    def is_mass(self, down: int, base: int) -> bool:
        """``down`` of ``base`` servers lost is a mass expiry: ``down >= min_count`` and
        ``down * 100 > percentage * base``."""
        s = self.settings
        return (
            down >= s.server_mass_expire_min_count
            and down * 100 > s.server_mass_expire_percentage * base
        )

    def _start(self, now: int) -> None:
        self.suspected, self.since_us = True, now
        self.episodes += 1
        pct = self.settings.server_mass_expire_percentage
        self.add_event(
            Event(
                now,
                MODULE,
                "self_suspect",
                (("expired", self.down), ("alive_at_start", self.base), ("percentage", pct)),
            )
        )
        log.warning(
            "this root service suspects itself: %d of %d servers lost their lease within "
            "lease_time (more than %d%%); more likely this RS cannot hear them than that they "
            "died, so no server is declared permanently offline (no migration) until they "
            "heartbeat again",
            self.down,
            self.base,
            pct,
        )

    def _end(self, now: int) -> None:
        self.suspected = False
        self.add_event(
            Event(
                now,
                MODULE,
                "self_suspect_end",
                (("still_expired", self.down), ("servers", self.base)),
            )
        )
        log.warning(
            "this root service no longer suspects itself: %d of %d servers still expired; "
            "permanent-offline deadlines apply again",
            self.down,
            self.base,
        )

    def reset(self) -> None:
        """Forget everything (step down: a new term judges afresh)."""
        self._expired.clear()
        self._hold_until = 0
        self.suspected = False
        self.down = self.base = 0

    def status(self) -> dict[str, object]:
        """For the status API: ``suspected``, ``since_us``, ``expired`` (still down),
        ``servers`` (alive at the window's start), ``percentage``, ``min_count``."""
        return {
            "suspected": self.suspected,
            "since_us": self.since_us if self.suspected else 0,
            "expired": self.down,
            "servers": self.base,
            "percentage": self.settings.server_mass_expire_percentage,
            "min_count": self.settings.server_mass_expire_min_count,
        }
