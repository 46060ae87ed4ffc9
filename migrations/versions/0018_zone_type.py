"""``DBA_OB_ZONES.TYPE`` from each zone's ``zone_type`` row of ``__all_zone``.

OceanBase keeps a zone's type as one more ``__all_zone`` row (``name = 'zone_type'``, ``info``
``ReadWrite`` / ``ReadOnly`` / ``Encryption``, ``value`` the ObZoneType number;
``ObZoneInfo::zone_type_``, src/share/ob_zone_info.h) and ``DBA_OB_ZONES.TYPE`` shows it. ADD
ZONE ... ZONE_TYPE writes that row; a zone added before it existed has none and reads
``ReadWrite``, the type ObZoneManagerBase::add_zone gives a zone added without one.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-29
"""

from __future__ import annotations

from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def _zones_view(type_expr: str) -> str:
    return f"""
        CREATE VIEW dba_ob_zones AS
        SELECT z.zone AS ZONE, z.gmt_create AS CREATE_TIME, z.gmt_modified AS MODIFY_TIME,
               z.info AS STATUS,
               (SELECT i.info FROM __all_zone i WHERE i.zone = z.zone AND i.name = 'idc') AS IDC,
               (SELECT r.info FROM __all_zone r WHERE r.zone = z.zone AND r.name = 'region') AS REGION,
               {type_expr} AS TYPE
        FROM __all_zone z
        WHERE z.name = 'status' AND z.zone <> ''
        """


def upgrade() -> None:
    op.execute("DROP VIEW IF EXISTS dba_ob_zones")
    op.execute(
        _zones_view(
            "COALESCE((SELECT t.info FROM __all_zone t "
            "WHERE t.zone = z.zone AND t.name = 'zone_type'), 'ReadWrite')"
        )
    )


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS dba_ob_zones")
    op.execute(_zones_view("'ReadWrite'"))
    op.execute("DELETE FROM __all_zone WHERE name = 'zone_type'")
