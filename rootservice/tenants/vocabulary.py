"""The tenant layer's vocabulary: object names, OceanBase's limits of units, pools and log
streams, the primary-zone grammar and what a unit takes from its server (docs/design/statements.md;
OceanBase's ``ObUnitResource`` and ``ObPrimaryZoneUtil``).

Pure functions and constants shared by the DDL, the layout (:mod:`rootservice.tenants.topology`)
and the pre-checks; nothing here touches the database or the network.
"""

from __future__ import annotations

import re
from collections.abc import Hashable

from obcommon.errors import ObError
from rootservice.db.unit_repo import ResourcePool, UnitConfig
from rootservice.tenants.placement import GIB, Demand

LsKey = tuple[int, int]  # (tenant_id, ls_id)
# The only replica type this control plane creates (OceanBase's FULL / F replica).
FULL = "FULL"

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")

# OceanBase 4.x lower bounds of a unit config (ObUnitResource: 1 CPU, 1G memory, 2G log
# disk); LOG_DISK_SIZE defaults to three times MEMORY_SIZE.
MIN_UNIT_CPU = 1.0
MIN_UNIT_MEMORY = 1 * GIB
MIN_UNIT_LOG_DISK = 2 * GIB
DEFAULT_LOG_DISK_FACTOR = 3
DEFAULT_MAX_IOPS = (1 << 63) - 1
MAX_UNIT_NUM = 1000
MAX_LS_COUNT = 1024

UNIT_OPTIONS = (
    "max_cpu",
    "min_cpu",
    "memory_size",
    "log_disk_size",
    "max_iops",
    "min_iops",
    "iops_weight",
)


def check_name(kind: str, name: str) -> str:
    """An object name: letters, digits, ``_``, not starting with a digit, <= 128 chars.
    Returns it lower-cased. Raises ``ObError(OB_INVALID_ARGUMENT)``."""
    if not _NAME_RE.match(name):
        raise ObError("OB_INVALID_ARGUMENT", f"{kind} name '{name[:140]}'")
    return name.lower()


def parse_primary_zone(text: str, zones: tuple[str, ...]) -> list[list[str]]:
    """``'z1;z2,z3'`` -> ``[['z1'], ['z2', 'z3']]`` (``;`` separates priorities, ``,`` zones
    of equal priority); ``RANDOM`` -> every zone at one priority. Raises
    OB_PRIMARY_ZONE_NOT_IN_ZONE_LIST for a zone outside ``zones`` and OB_INVALID_ARGUMENT for
    an empty part or a zone named twice."""
    if text.strip().upper() == "RANDOM":
        return [list(zones)]
    levels: list[list[str]] = []
    seen: set[str] = set()
    for part in text.split(";"):
        level = [z.strip() for z in part.split(",")]
        if not all(level):
            raise ObError("OB_INVALID_ARGUMENT", f"primary_zone '{text}'")
        for z in level:
            if z not in zones:
                raise ObError("OB_PRIMARY_ZONE_NOT_IN_ZONE_LIST", z, f"'{';'.join(zones)}'")
            if z in seen:
                raise ObError(
                    "OB_INVALID_ARGUMENT", f"primary_zone '{text}'", detail=f"zone {z} twice"
                )
            seen.add(z)
        levels.append(level)
    return levels


def zone_priority(primary_zone: str, zones: tuple[str, ...]) -> dict[str, int]:
    """Zone -> priority (0 is the most preferred) of a tenant's primary zone; zones outside
    the primary zone get ``len(levels)``. A malformed value counts as RANDOM."""
    try:
        levels = parse_primary_zone(primary_zone, zones)
    except ObError:
        levels = [list(zones)]
    out = {z: len(levels) for z in zones}
    for i, level in enumerate(levels):
        for z in level:
            out[z] = i
    return out


def demand_of(c: UnitConfig) -> Demand:
    """What a unit of config ``c`` takes from its server."""
    return Demand(c.min_cpu, c.max_cpu, c.memory_size, c.log_disk_size)


def affinity_of(pool: ResourcePool) -> Hashable:
    """Anti-affinity key of a pool's units: its tenant once granted, else the pool itself."""
    return ("tenant", pool.tenant_id) if pool.tenant_id != -1 else ("pool", pool.resource_pool_id)
