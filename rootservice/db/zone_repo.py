"""``__all_zone``: zones with their status, region and IDC (docs/design/statements.md).

Every function takes a connection inside the caller's transaction and never commits.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

from rootservice.db.tables import (
    all_zone,
)
from rootservice.db.timestamps import us_to_datetime

# OceanBase's DEFAULT_REGION_NAME: the region of a zone created without one.
DEFAULT_REGION = "default_region"

# OceanBase's zone types as common::zone_type_to_str spells them (src/common/ob_zone_type.cpp);
# a zone without a ``zone_type`` row (created before the row existed) is ReadWrite, as
# ObZoneManagerBase::add_zone makes a zone given none.
ZONE_TYPES = ("ReadWrite", "ReadOnly", "Encryption")
READ_WRITE = "ReadWrite"


@dataclass
class ZoneInfo:
    """A zone as kept in ``__all_zone`` rows (name = status / region / idc / zone_type)."""

    zone: str
    status: str = "ACTIVE"
    region: str = DEFAULT_REGION
    idc: str = ""
    zone_type: str = READ_WRITE

    @property
    def active(self) -> bool:
        """True when the zone's status is ``ACTIVE`` (ADD SERVER needs it, docs/design/statements.md)."""
        return self.status == "ACTIVE"


def load_zones(conn: sa.Connection) -> dict[str, ZoneInfo]:
    """Zones by name, assembled from their ``__all_zone`` rows (status / region / idc /
    zone_type; a missing ``zone_type`` row reads ReadWrite)."""
    zones: dict[str, ZoneInfo] = {}
    for r in conn.execute(
        sa.select(all_zone.c.zone, all_zone.c.name, all_zone.c.info).where(all_zone.c.zone != "")
    ):
        z = zones.setdefault(r.zone, ZoneInfo(r.zone))
        if r.name in ("status", "region", "idc", "zone_type"):
            setattr(z, r.name, r.info)
    return zones


def upsert_zone(conn: sa.Connection, zone: ZoneInfo, now_us: int) -> None:
    """Write a zone's status / region / idc / zone_type rows (insert or update); the
    ``zone_type`` row's value is OceanBase's ObZoneType number (0 ReadWrite, 1 ReadOnly, 2
    Encryption)."""
    ts = us_to_datetime(now_us)
    type_no = ZONE_TYPES.index(zone.zone_type) if zone.zone_type in ZONE_TYPES else 0
    for name, info, value in (
        ("status", zone.status, 1 if zone.active else 0),
        ("region", zone.region, 0),
        ("idc", zone.idc, 0),
        ("zone_type", zone.zone_type, type_no),
    ):
        updated = conn.execute(
            all_zone.update()
            .where(all_zone.c.zone == zone.zone, all_zone.c.name == name)
            .values(info=info, value=value, gmt_modified=ts)
        ).rowcount
        if not updated:
            conn.execute(
                all_zone.insert().values(
                    zone=zone.zone,
                    name=name,
                    info=info,
                    value=value,
                    gmt_create=ts,
                    gmt_modified=ts,
                )
            )


def delete_zone(conn: sa.Connection, zone: str) -> None:
    """Delete every ``__all_zone`` row (status / region / idc) of ``zone``; no-op if absent."""
    conn.execute(all_zone.delete().where(all_zone.c.zone == zone))


def split_zone_list(text: str) -> tuple[str, ...]:
    """A ``zone_list`` column (``'z1;z2;z3'``, as OceanBase stores it) as a tuple of zones."""
    return tuple(z for z in text.split(";") if z)
