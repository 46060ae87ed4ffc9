"""Core system tables of the server manager and the DBA_OB_SERVERS / DBA_OB_ZONES views.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _gm() -> list[sa.Column]:
    return [
        sa.Column(
            "gmt_create", sa.DateTime, nullable=False, server_default=sa.func.current_timestamp()
        ),
        sa.Column(
            "gmt_modified", sa.DateTime, nullable=False, server_default=sa.func.current_timestamp()
        ),
    ]


def _usec_to_time(expr: str) -> str:
    """SQL turning a microsecond column into a UTC timestamp, NULL for 0 (OceanBase's
    ``usec_to_time`` as used by DBA_OB_SERVERS)."""
    if op.get_context().dialect.name == "postgresql":
        conv = f"(to_timestamp({expr} / 1000000.0) AT TIME ZONE 'UTC')"
    else:
        # strftime's %f stops at milliseconds: append the microseconds exactly, so both
        # databases show the same text.
        conv = (
            f"strftime('%Y-%m-%d %H:%M:%S', {expr} / 1000000, 'unixepoch')"
            f" || '.' || printf('%06d', {expr} % 1000000)"
        )
    return f"CASE WHEN {expr} IS NULL OR {expr} = 0 THEN NULL ELSE {conv} END"


def upgrade() -> None:
    op.create_table(
        "__all_server",
        sa.Column("svr_ip", sa.String(46), primary_key=True),
        sa.Column("svr_port", sa.Integer, primary_key=True),
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("zone", sa.String(128), nullable=False),
        sa.Column("inner_port", sa.Integer, nullable=False),
        sa.Column("with_rootserver", sa.Integer, nullable=False, server_default="0"),
        sa.Column("status", sa.String(64), nullable=False),
        sa.Column("block_migrate_in_time", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("build_version", sa.String(256), nullable=False, server_default=""),
        sa.Column("stop_time", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("start_service_time", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("first_sessid", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("with_partition", sa.Integer, nullable=False, server_default="0"),
        sa.Column("last_offline_time", sa.BigInteger, nullable=False, server_default="0"),
        *_gm(),
    )
    op.create_index("idx_all_server_id", "__all_server", ["id"], unique=True)
    op.create_table(
        "__all_zone",
        sa.Column("zone", sa.String(128), primary_key=True),
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("value", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("info", sa.String(4096), nullable=False, server_default=""),
        *_gm(),
    )
    op.create_table(
        "__all_sys_parameter",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("value", sa.String(65536), nullable=False),
        sa.Column("info", sa.String(4096), nullable=False, server_default=""),
        sa.Column("config_version", sa.BigInteger, nullable=False, server_default="0"),
        *_gm(),
    )
    op.create_table(
        "__all_rootservice_job",
        sa.Column("job_id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("job_type", sa.String(128), nullable=False),
        sa.Column("job_status", sa.String(128), nullable=False),
        sa.Column("return_code", sa.BigInteger, nullable=True),
        sa.Column("progress", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("tenant_id", sa.BigInteger, nullable=True),
        sa.Column("svr_ip", sa.String(46), nullable=True),
        sa.Column("svr_port", sa.Integer, nullable=True),
        sa.Column("unit_id", sa.BigInteger, nullable=True),
        sa.Column("rs_svr_ip", sa.String(46), nullable=False, server_default=""),
        sa.Column("rs_svr_port", sa.Integer, nullable=False, server_default="0"),
        sa.Column("sql_text", sa.Text, nullable=True),
        sa.Column("extra_info", sa.String(4096), nullable=True),
        *_gm(),
    )
    op.create_index(
        "idx_rs_job_server", "__all_rootservice_job", ["svr_ip", "svr_port", "job_type"]
    )
    op.create_table(
        "__all_rootservice_event_history",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer, "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sa.Column("gmt_create", sa.DateTime, nullable=False),
        sa.Column("event_time", sa.BigInteger, nullable=False),
        sa.Column("module", sa.String(256), nullable=False),
        sa.Column("event", sa.String(256), nullable=False),
        *[
            c
            for i in range(1, 7)
            for c in (
                sa.Column(f"name{i}", sa.String(256), nullable=False, server_default=""),
                sa.Column(f"value{i}", sa.String(4096), nullable=False, server_default=""),
            )
        ],
        sa.Column("extra_info", sa.String(4096), nullable=False, server_default=""),
        sa.Column("rs_svr_ip", sa.String(46), nullable=False, server_default=""),
        sa.Column("rs_svr_port", sa.Integer, nullable=False, server_default="0"),
    )
    op.create_index("idx_rs_event_time", "__all_rootservice_event_history", ["event_time"])
    op.create_table(
        "__all_service_epoch",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("value", sa.BigInteger, nullable=False),
        *_gm(),
    )
    op.execute(
        f"""
        CREATE VIEW dba_ob_servers AS
        SELECT s.svr_ip AS SVR_IP, s.svr_port AS SVR_PORT, s.id AS ID, s.zone AS ZONE,
               s.inner_port AS SQL_PORT,
               CASE WHEN s.with_rootserver = 1 THEN 'YES' ELSE 'NO' END AS WITH_ROOTSERVER,
               s.status AS STATUS,
               {_usec_to_time("s.start_service_time")} AS START_SERVICE_TIME,
               {_usec_to_time("s.stop_time")} AS STOP_TIME,
               {_usec_to_time("s.block_migrate_in_time")} AS BLOCK_MIGRATE_IN_TIME,
               s.gmt_create AS CREATE_TIME, s.gmt_modified AS MODIFY_TIME,
               s.build_version AS BUILD_VERSION,
               {_usec_to_time("s.last_offline_time")} AS LAST_OFFLINE_TIME
        FROM __all_server s
        """
    )
    op.execute(
        """
        CREATE VIEW dba_ob_zones AS
        SELECT z.zone AS ZONE, z.gmt_create AS CREATE_TIME, z.gmt_modified AS MODIFY_TIME,
               z.info AS STATUS,
               (SELECT i.info FROM __all_zone i WHERE i.zone = z.zone AND i.name = 'idc') AS IDC,
               (SELECT r.info FROM __all_zone r WHERE r.zone = z.zone AND r.name = 'region') AS REGION,
               'ReadWrite' AS TYPE
        FROM __all_zone z
        WHERE z.name = 'status' AND z.zone <> ''
        """
    )


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS dba_ob_zones")
    op.execute("DROP VIEW IF EXISTS dba_ob_servers")
    op.drop_table("__all_service_epoch")
    op.drop_index("idx_rs_event_time", table_name="__all_rootservice_event_history")
    op.drop_table("__all_rootservice_event_history")
    op.drop_index("idx_rs_job_server", table_name="__all_rootservice_job")
    op.drop_table("__all_rootservice_job")
    op.drop_table("__all_sys_parameter")
    op.drop_table("__all_zone")
    op.drop_index("idx_all_server_id", table_name="__all_server")
    op.drop_table("__all_server")
