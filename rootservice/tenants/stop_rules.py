"""ISOLATE ZONE's tenant rule, pure: OceanBase's ``ObRootService::check_can_stop`` with
``is_stop_zone`` (src/rootserver/ob_root_service.cpp) and the ``ObRootUtils`` helpers it calls
(``get_stopped_zone_list``, ``get_tenant_intersection``, ``check_primary_region_in_zonelist``,
``check_left_f_in_primary_zone``, ``get_primary_zone``; src/rootserver/ob_root_utils.cpp).

The rule only looks at tenants that already have a unit on a stopped server (a server with
``stop_time`` set or in an INACTIVE zone) AND a unit in the zone to isolate: when nothing is
stopped, any zone may be isolated, its leaders go elsewhere. Such a tenant blocks the
isolation when every zone of its pools would then be stopped, or when no ReadWrite zone of
its primary region (the regions of its first-priority primary zones) would still hold a
full replica outside the stopped zones. A RANDOM primary zone never blocks (OceanBase:
``no_need_to_check_primary_zone``). Every replica here is a full one, so "holds a full
replica" is "is one of the tenant's pool zones".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass

from obcommon.errors import ObError
from rootservice.tenants.vocabulary import parse_primary_zone

# ObRootService::stop_zone's LOG_USER_ERROR argument for OB_OP_NOT_ALLOW; the code's
# "%s not allowed" makes it "... is disabled not allowed", as OceanBase's clients read it.
PRIMARY_REGION_MESSAGE = "Stop all server in primary region is disabled"


@dataclass(frozen=True)
class TenantZones:
    """What the rule needs of one tenant: its name, its pools' zones and its primary zone
    as written (``'z1;z2,z3'`` or ``RANDOM``)."""

    name: str
    zone_list: tuple[str, ...]
    primary_zone: str


def primary_region_stopped(
    zone: str,
    zone_tenants: Set[int],
    stopped_tenants: Set[int],
    stopped_zones: Set[str],
    tenants: Mapping[int, TenantZones],
    regions: Mapping[str, str],
    read_write: Set[str],
) -> str | None:
    """The name of the first tenant (by id) that blocks isolating ``zone``, or None.

    ``zone_tenants``: tenants with a unit on a server of ``zone``; ``stopped_tenants``:
    tenants with a unit on a stopped server; ``stopped_zones``: the INACTIVE zones and the
    zones of stopped servers (``zone`` itself is added here); ``regions``: zone -> region;
    ``read_write``: the ReadWrite zones."""
    stopped = set(stopped_zones) | {zone}
    for tenant_id in sorted(zone_tenants & stopped_tenants):
        t = tenants.get(tenant_id)
        if t is None:
            continue
        if set(t.zone_list) <= stopped:
            return t.name
        if t.primary_zone.strip().upper() in ("", "RANDOM"):
            continue
        try:
            first = parse_primary_zone(t.primary_zone, t.zone_list)[0]
        except ObError:
            continue
        primary_regions = {regions.get(z, "") for z in first}
        left = [
            z
            for z in t.zone_list
            if regions.get(z, "") in primary_regions and z in read_write and z not in stopped
        ]
        if not left:
            return t.name
    return None


def tenants_on(servers: Sequence[str], members: Mapping[str, Set[int]]) -> set[int]:
    """The tenants with a unit on any of ``servers`` (``members``: server -> tenant ids)."""
    out: set[int] = set()
    for s in servers:
        out |= members.get(s, set())
    return out
