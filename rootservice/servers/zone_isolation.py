"""ALTER SYSTEM ISOLATE ZONE 'z' (OceanBase's ``ObRootService::stop_zone`` with
``ObAdminZoneArg::ISOLATE``, src/rootserver/ob_root_service.cpp).

ISOLATE ZONE takes the leaders away from a zone without taking it out of service: the zone
turns INACTIVE in ``__all_zone`` (as STOP ZONE), so no replica of it may lead, while its
servers go on heartbeating and keep their replicas as followers (their ``stop_time`` is not
set: they stay ACTIVE in ``DBA_OB_SERVERS``). Unlike STOP ZONE it checks neither the log
streams' majority nor their log sync ("isolate server no need to check count and status of
replicas", OceanBase says), nor whether another zone is stopped; it checks
``check_can_stop``'s primary-region rule instead (:mod:`rootservice.tenants.stop_rules`).
START ZONE undoes it, as it undoes STOP ZONE. OceanBase's statement answers without waiting
for the leaders; here, as for ISOLATE SERVER, it answers once they have left the zone.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Protocol

from obcommon.errors import ObError
from rootservice.servers.status import ServerStatus, check_zone_name
from rootservice.servers.whitelist import Whitelist
from rootservice.servers.zones import ZoneManager


class IsolateZoneCheck(Protocol):
    """The tenant layer's rule (:meth:`rootservice.tenants.pre_checks.ServerPreChecks.
    check_isolate_zone`)."""

    def check_isolate_zone(self, zone: str, members: list[ServerStatus], /) -> None:
        """Raises OB_OP_NOT_ALLOW when isolating ``zone`` would stop a tenant's whole
        primary region."""
        ...


class LeadersOff(Protocol):
    """Moves every leader off servers and waits for it
    (:class:`rootservice.tenants.leaders.LeaderCoordinator`)."""

    def move_leaders_off(self, servers: Iterable[str], /) -> None:
        """Move every leader off ``servers``."""
        ...


class Budget(Protocol):
    """The disruption budget (:class:`rootservice.tenants.drain_work.DrainWork`)."""

    def check_budget(self, targets: set[str], action: str, /) -> None:
        """Raises OB_OP_NOT_ALLOW naming each LS that would fall below its majority."""
        ...


class ZoneIsolation:
    """ISOLATE ZONE over the zone cache, the whitelist, the tenant rule, the leaders and
    (when given) the disruption budget, which judges ISOLATE ZONE as it judges ISOLATE
    SERVER."""

    def __init__(
        self,
        zones: ZoneManager,
        whitelist: Whitelist,
        checks: IsolateZoneCheck,
        leaders: LeadersOff,
        budget: Budget | None = None,
    ) -> None:
        """Keep the collaborators; nothing is read until :meth:`isolate_zone`."""
        self.zones = zones
        self.whitelist = whitelist
        self.checks = checks
        self.leaders = leaders
        self.budget = budget

    def isolate_zone(self, zone: str) -> list[str]:
        """ISOLATE ZONE: OB_ENTRY_NOT_EXIST "zone not exist" for an unknown zone; an INACTIVE
        zone is left as it is (the statement succeeds, so it can be retried); then the
        tenant rule (OB_OP_NOT_ALLOW), the disruption budget for the zone's live servers,
        the zone INACTIVE with event ``isolate_zone`` (OB_OP_NOT_ALLOW for the last ACTIVE
        zone), and the leaders moved off its servers. Returns the zone's servers
        (``'ip:port'``), empty when nothing changed."""
        z = check_zone_name(zone)
        cur = self.zones.get(z)
        if cur is None:
            raise ObError("OB_ENTRY_NOT_EXIST", "zone not exist")
        if not cur.active:
            return []
        with self.whitelist.lock:
            members = [replace(s) for s in self.whitelist.records.values() if s.zone == z]
        self.checks.check_isolate_zone(z, members)
        live = {s.key for s in members if not s.is_stopped() and s.is_alive()}
        if live and self.budget is not None:
            self.budget.check_budget(live, "isolated")
        self.zones.stop_zone(z, isolate=True)
        keys = [s.key for s in members]
        self.leaders.move_leaders_off(keys)
        return keys
