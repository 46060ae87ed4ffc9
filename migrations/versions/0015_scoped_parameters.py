"""Parameters by zone and server: ``__all_sys_parameter_override``,
``__all_sys_parameter_info`` and the ``GV$OB_PARAMETERS`` / ``V$OB_PARAMETERS`` views.

``ALTER SYSTEM SET name = value ZONE 'z'`` (or ``SERVER 'ip:port'``) of an agent parameter
writes one ``__all_sys_parameter_override`` row: ``zone`` and ``svr_ip`` 'ANY' /
``svr_port`` 0 for a zone, ``zone`` '' and the server's address for a server, as OceanBase
keys them in its ``__all_sys_parameter`` (src/rootserver/ob_system_admin_util.cpp,
``ObAdminSetConfig::update_config``). The cluster-wide values stay in ``__all_sys_parameter``.
``__all_sys_parameter_info`` lists every parameter with its cluster-wide value in effect on
the RS leader, which writes it when it takes office and after each ALTER SYSTEM SET.

``GV$OB_PARAMETERS`` has OceanBase's columns (src/share/inner_table/ob_inner_table_schema_def.py)
and one row per server of ``__all_server`` and parameter: the value in effect on that server
(its own override, else its zone's, else the cluster-wide value). Every parameter here is a
cluster parameter (SCOPE 'CLUSTER', TENANT_ID NULL). ``V$OB_PARAMETERS`` is the rows of the
server co-located with the RS (``with_rootserver`` = 1), as OceanBase's V$ view is the local
server's.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def _gmt() -> list[sa.Column]:
    return [
        sa.Column(
            "gmt_create", sa.DateTime, nullable=False, server_default=sa.func.current_timestamp()
        ),
        sa.Column(
            "gmt_modified", sa.DateTime, nullable=False, server_default=sa.func.current_timestamp()
        ),
    ]


_VALUE = "COALESCE(ps.value, pz.value, d.value)"


def _parameters_view(name: str, local_only: bool) -> str:
    where = "WHERE s.with_rootserver = 1" if local_only else ""
    return f"""
        CREATE VIEW {name} AS
        SELECT s.svr_ip AS SVR_IP, s.svr_port AS SVR_PORT, s.zone AS ZONE,
               d.scope AS SCOPE, CAST(NULL AS BIGINT) AS TENANT_ID, d.name AS NAME,
               d.data_type AS DATA_TYPE, {_VALUE} AS VALUE, d.info AS INFO,
               d.section AS SECTION, d.edit_level AS EDIT_LEVEL,
               d.default_value AS DEFAULT_VALUE,
               CASE WHEN {_VALUE} = d.default_value THEN 'YES' ELSE 'NO' END AS ISDEFAULT
        FROM __all_server s
        CROSS JOIN __all_sys_parameter_info d
        LEFT JOIN __all_sys_parameter_override ps
               ON ps.name = d.name AND ps.svr_ip = s.svr_ip AND ps.svr_port = s.svr_port
        LEFT JOIN __all_sys_parameter_override pz
               ON pz.name = d.name AND pz.svr_ip = 'ANY' AND pz.svr_port = 0
              AND pz.zone = s.zone
        {where}
        """


def upgrade() -> None:
    op.create_table(
        "__all_sys_parameter_override",
        sa.Column("zone", sa.String(128), primary_key=True),
        sa.Column("svr_ip", sa.String(46), primary_key=True),
        sa.Column("svr_port", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("value", sa.String(65536), nullable=False),
        sa.Column("info", sa.String(4096), nullable=False, server_default=""),
        sa.Column("config_version", sa.BigInteger, nullable=False, server_default="0"),
        *_gmt(),
    )
    op.create_table(
        "__all_sys_parameter_info",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("data_type", sa.String(128), nullable=False),
        sa.Column("value", sa.String(65536), nullable=False),
        sa.Column("default_value", sa.String(65536), nullable=False),
        sa.Column("info", sa.String(4096), nullable=False, server_default=""),
        sa.Column("section", sa.String(128), nullable=False),
        sa.Column("scope", sa.String(64), nullable=False),
        sa.Column("source", sa.String(64), nullable=False),
        sa.Column("edit_level", sa.String(128), nullable=False),
        sa.Column("value_range", sa.String(256), nullable=False, server_default=""),
        *_gmt(),
    )
    op.execute(_parameters_view("gv$ob_parameters", local_only=False))
    op.execute(_parameters_view("v$ob_parameters", local_only=True))


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS v$ob_parameters")
    op.execute("DROP VIEW IF EXISTS gv$ob_parameters")
    op.drop_table("__all_sys_parameter_info")
    op.drop_table("__all_sys_parameter_override")
