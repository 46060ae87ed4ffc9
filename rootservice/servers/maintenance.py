"""The maintenance ticker (task ``maintenance_ticker``): ends the
``STOP SERVER / ZONE ... FOR MAINTENANCE`` windows.

During a window (``__all_server.maintenance_end_time`` in the future) the server is stopped
as by STOP SERVER: its leaders moved off when the statement ran, and a lease expiry is
recorded (INACTIVE, event ``lease_expire``) but its downtime does not count towards
permanent offline (``ServerStatus.offline_start``), so the lost-replica checker and the
rebuilder, which act on permanently offline servers only, start nothing. At the end (this
task, every second):

- the server heartbeats: it is started (``stop_time = 0``), event ``maintenance_end``
  ``started``;
- it does not: the window is cleared and it stays stopped, event ``maintenance_end``
  ``agent_down``; its downtime counts from the end of the window, so it turns permanently
  offline ``server_permanent_offline_time`` after it, not after its last heartbeat;
- the servers of a zone stopped for maintenance: the zone is started once none of its
  servers is in a window any more and every one of them heartbeats.

A new RS leader reads ``maintenance_end_time`` with the rows and goes on (the loader maps it
to the monotonic clock). Kubernetes' node maintenance and PD's evict-leader schedulers have
no end time (tiup#369: schedulers left behind by a crashed tool); this one always ends.
"""

from __future__ import annotations

import logging
from typing import Protocol

from obcommon.clock import Clock
from obcommon.errors import ObError
from rootservice.servers.maintenance_window import ended
from rootservice.servers.ports import Gate
from rootservice.servers.whitelist import Whitelist
from rootservice.servers.zones import ZoneManager

log = logging.getLogger(__name__)

#: Period of the ticker, microseconds.
MAINTENANCE_TICK_US = 1_000_000


class MaintenanceEnd(Protocol):
    """:meth:`rootservice.servers.admin.ServerAdmin.end_maintenance`."""

    def end_maintenance(self, key: str, /) -> bool:
        """End ``key``'s window; True when the server was started."""
        ...


class MaintenanceTicker:
    """``run_once()`` -> windows ended."""

    name = "maintenance_ticker"

    def __init__(
        self,
        whitelist: Whitelist,
        zones: ZoneManager,
        admin: MaintenanceEnd,
        term: Gate,
        clock: Clock,
    ) -> None:
        """Judge ``whitelist``'s ``maintenance_end_time`` on ``clock``'s wall time."""
        self.whitelist = whitelist
        self.zones = zones
        self.admin = admin
        self.term = term
        self.clock = clock

    def run_once(self) -> int:
        """End every window whose ``maintenance_end_time <= now`` (exactly at the end is
        over), then start the stopped zones none of whose servers is in a window and all
        of whose servers heartbeat, when one of them was in a window this tick. Does
        nothing unless this RS may act. Returns windows ended."""
        if not self.term.may_act():
            return 0
        now = self.clock.now_us()
        with self.whitelist.lock:
            due = sorted(
                (s.key, s.zone)
                for s in self.whitelist.records.values()
                if ended(s.maintenance_end_time, now)
            )
        n = 0
        for key, _ in due:
            try:
                self.admin.end_maintenance(key)
                n += 1
            except ObError as e:
                log.warning("ending the maintenance window of %s failed: %s", key, e)
        for zone in sorted({z for _, z in due}):
            z = self.zones.get(zone)
            if z is None or z.active:
                continue
            with self.whitelist.lock:
                members = [s for s in self.whitelist.records.values() if s.zone == zone]
                ready = all(s.is_alive() and not s.maintenance_end_time for s in members)
            if ready:
                try:
                    self.zones.start_zone(zone)
                except ObError as e:
                    log.warning("starting zone %s after its maintenance failed: %s", zone, e)
        return n
