"""Tenants, resource pools, unit configs, units, log streams and their replicas, with
OceanBase's DBA_OB_UNIT_CONFIGS / RESOURCE_POOLS / UNITS / TENANTS / LS / LS_LOCATIONS views,
and DBA_OB_ROOTSERVICE_JOBS over __all_rootservice_job (jobs now carry migration progress).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
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


VIEWS = {
    "dba_ob_unit_configs": """
        SELECT c.unit_config_id AS UNIT_CONFIG_ID, c.name AS NAME,
               c.gmt_create AS CREATE_TIME, c.gmt_modified AS MODIFY_TIME,
               c.max_cpu AS MAX_CPU, c.min_cpu AS MIN_CPU, c.memory_size AS MEMORY_SIZE,
               c.log_disk_size AS LOG_DISK_SIZE, c.max_iops AS MAX_IOPS, c.min_iops AS MIN_IOPS,
               c.iops_weight AS IOPS_WEIGHT
        FROM __all_unit_config c
    """,
    "dba_ob_resource_pools": """
        SELECT p.resource_pool_id AS RESOURCE_POOL_ID, p.name AS NAME,
               CASE WHEN p.tenant_id = -1 THEN NULL ELSE p.tenant_id END AS TENANT_ID,
               p.gmt_create AS CREATE_TIME, p.gmt_modified AS MODIFY_TIME,
               p.unit_count AS UNIT_COUNT, p.unit_config_id AS UNIT_CONFIG_ID,
               p.zone_list AS ZONE_LIST, 'FULL' AS REPLICA_TYPE
        FROM __all_resource_pool p
    """,
    "dba_ob_units": """
        SELECT u.unit_id AS UNIT_ID,
               CASE WHEN p.tenant_id = -1 THEN NULL ELSE p.tenant_id END AS TENANT_ID,
               u.status AS STATUS, u.resource_pool_id AS RESOURCE_POOL_ID,
               u.unit_group_id AS UNIT_GROUP_ID,
               u.gmt_create AS CREATE_TIME, u.gmt_modified AS MODIFY_TIME,
               u.zone AS ZONE, u.svr_ip AS SVR_IP, u.svr_port AS SVR_PORT,
               CASE WHEN u.migrate_from_svr_ip = '' THEN NULL ELSE u.migrate_from_svr_ip END
                   AS MIGRATE_FROM_SVR_IP,
               CASE WHEN u.migrate_from_svr_ip = '' THEN NULL ELSE u.migrate_from_svr_port END
                   AS MIGRATE_FROM_SVR_PORT,
               CASE WHEN u.manual_migrate = 1 THEN 'YES' ELSE 'NO' END AS MANUAL_MIGRATE,
               c.unit_config_id AS UNIT_CONFIG_ID, c.max_cpu AS MAX_CPU, c.min_cpu AS MIN_CPU,
               c.memory_size AS MEMORY_SIZE, c.log_disk_size AS LOG_DISK_SIZE,
               c.max_iops AS MAX_IOPS, c.min_iops AS MIN_IOPS, c.iops_weight AS IOPS_WEIGHT
        FROM __all_unit u
        JOIN __all_resource_pool p ON p.resource_pool_id = u.resource_pool_id
        JOIN __all_unit_config c ON c.unit_config_id = p.unit_config_id
    """,
    "dba_ob_tenants": """
        SELECT t.tenant_id AS TENANT_ID, t.tenant_name AS TENANT_NAME, 'USER' AS TENANT_TYPE,
               t.gmt_create AS CREATE_TIME, t.gmt_modified AS MODIFY_TIME,
               t.primary_zone AS PRIMARY_ZONE, t.locality AS LOCALITY,
               NULL AS PREVIOUS_LOCALITY, 'MYSQL' AS COMPATIBILITY_MODE, t.status AS STATUS,
               'NO' AS IN_RECYCLEBIN, CASE WHEN t.locked = 1 THEN 'YES' ELSE 'NO' END AS LOCKED
        FROM __all_tenant t
    """,
    "dba_ob_ls": """
        SELECT s.tenant_id AS TENANT_ID, s.ls_id AS LS_ID, s.status AS STATUS,
               s.primary_zone AS PRIMARY_ZONE, s.unit_group_id AS UNIT_GROUP_ID,
               s.ls_group_id AS LS_GROUP_ID,
               s.gmt_create AS CREATE_TIME, s.gmt_modified AS MODIFY_TIME
        FROM __all_ls_status s
    """,
    "dba_ob_ls_locations": """
        SELECT m.gmt_create AS CREATE_TIME, m.gmt_modified AS MODIFY_TIME,
               m.tenant_id AS TENANT_ID, m.ls_id AS LS_ID, m.svr_ip AS SVR_IP,
               m.svr_port AS SVR_PORT, m.sql_port AS SQL_PORT, m.zone AS ZONE,
               CASE WHEN m.role = 1 THEN 'LEADER' ELSE 'FOLLOWER' END AS ROLE,
               CASE WHEN m.role = 1 THEN m.member_list ELSE NULL END AS MEMBER_LIST,
               m.paxos_replica_number AS PAXOS_REPLICA_NUMBER,
               'FULL' AS REPLICA_TYPE,
               CASE WHEN m.role = 1 THEN m.learner_list ELSE NULL END AS LEARNER_LIST,
               CASE WHEN m.rebuild = 1 THEN 'TRUE' ELSE 'FALSE' END AS REBUILD,
               m.replica_status AS REPLICA_STATUS, m.unit_id AS UNIT_ID,
               m.data_size AS DATA_SIZE, m.required_size AS REQUIRED_SIZE
        FROM __all_ls_meta_table m
    """,
    "dba_ob_rootservice_jobs": """
        SELECT j.job_id AS JOB_ID, j.job_type AS JOB_TYPE, j.job_status AS JOB_STATUS,
               j.return_code AS RESULT_CODE, j.progress AS PROGRESS,
               j.gmt_create AS CREATE_TIME, j.gmt_modified AS MODIFY_TIME,
               j.tenant_id AS TENANT_ID, j.svr_ip AS SVR_IP, j.svr_port AS SVR_PORT,
               j.rs_svr_ip AS RS_SVR_IP, j.rs_svr_port AS RS_SVR_PORT,
               j.sql_text AS SQL_TEXT, j.extra_info AS EXTRA_INFO
        FROM __all_rootservice_job j
    """,
}


def upgrade() -> None:
    op.create_table(
        "__all_unit_config",
        sa.Column("unit_config_id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("name", sa.String(128), nullable=False, unique=True),
        sa.Column("max_cpu", sa.Float, nullable=False),
        sa.Column("min_cpu", sa.Float, nullable=False),
        sa.Column("memory_size", sa.BigInteger, nullable=False),
        sa.Column("log_disk_size", sa.BigInteger, nullable=False),
        sa.Column("max_iops", sa.BigInteger, nullable=False),
        sa.Column("min_iops", sa.BigInteger, nullable=False),
        sa.Column("iops_weight", sa.BigInteger, nullable=False),
        *_gm(),
    )
    op.create_table(
        "__all_resource_pool",
        sa.Column("resource_pool_id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("name", sa.String(128), nullable=False, unique=True),
        sa.Column("unit_count", sa.BigInteger, nullable=False),
        sa.Column("unit_config_id", sa.BigInteger, nullable=False),
        sa.Column("zone_list", sa.String(8192), nullable=False),
        sa.Column("tenant_id", sa.BigInteger, nullable=False, server_default="-1"),
        sa.Column("replica_type", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("is_tenant_sys_pool", sa.Integer, nullable=False, server_default="0"),
        *_gm(),
    )
    op.create_table(
        "__all_unit",
        sa.Column("unit_id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("resource_pool_id", sa.BigInteger, nullable=False),
        sa.Column("unit_group_id", sa.BigInteger, nullable=False),
        sa.Column("zone", sa.String(128), nullable=False),
        sa.Column("svr_ip", sa.String(46), nullable=False),
        sa.Column("svr_port", sa.Integer, nullable=False),
        sa.Column("migrate_from_svr_ip", sa.String(46), nullable=False, server_default=""),
        sa.Column("migrate_from_svr_port", sa.Integer, nullable=False, server_default="0"),
        sa.Column("manual_migrate", sa.Integer, nullable=False, server_default="0"),
        sa.Column("status", sa.String(128), nullable=False, server_default="ACTIVE"),
        sa.Column("replica_type", sa.BigInteger, nullable=False, server_default="0"),
        *_gm(),
    )
    op.create_index("idx_unit_server", "__all_unit", ["svr_ip", "svr_port"])
    op.create_index(
        "idx_unit_migrate_from", "__all_unit", ["migrate_from_svr_ip", "migrate_from_svr_port"]
    )
    op.create_index("idx_unit_pool", "__all_unit", ["resource_pool_id"])
    op.create_table(
        "__all_tenant",
        sa.Column("tenant_id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("tenant_name", sa.String(128), nullable=False, unique=True),
        sa.Column("zone_list", sa.String(8192), nullable=False),
        sa.Column("primary_zone", sa.String(8192), nullable=False, server_default="RANDOM"),
        sa.Column("locked", sa.Integer, nullable=False, server_default="0"),
        sa.Column("status", sa.String(64), nullable=False, server_default="NORMAL"),
        sa.Column("info", sa.String(4096), nullable=False, server_default=""),
        sa.Column("locality", sa.String(8192), nullable=False, server_default=""),
        sa.Column("compatibility_mode", sa.Integer, nullable=False, server_default="0"),
        *_gm(),
    )
    op.create_table(
        "__all_ls_status",
        sa.Column("tenant_id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("ls_id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("status", sa.String(100), nullable=False, server_default="NORMAL"),
        sa.Column("ls_group_id", sa.BigInteger, nullable=False),
        sa.Column("unit_group_id", sa.BigInteger, nullable=False),
        sa.Column("primary_zone", sa.String(128), nullable=False, server_default=""),
        *_gm(),
    )
    op.create_table(
        "__all_ls_meta_table",
        sa.Column("tenant_id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("ls_id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("svr_ip", sa.String(46), primary_key=True),
        sa.Column("svr_port", sa.Integer, primary_key=True),
        sa.Column("sql_port", sa.Integer, nullable=False),
        sa.Column("role", sa.Integer, nullable=False),
        sa.Column("member_list", sa.String(65536), nullable=False, server_default=""),
        sa.Column("proposal_id", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("replica_type", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("replica_status", sa.String(64), nullable=False, server_default="NORMAL"),
        sa.Column("restore_status", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("memstore_percent", sa.BigInteger, nullable=False, server_default="100"),
        sa.Column("unit_id", sa.BigInteger, nullable=False),
        sa.Column("zone", sa.String(128), nullable=False),
        sa.Column("paxos_replica_number", sa.BigInteger, nullable=False),
        sa.Column("data_size", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("required_size", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("learner_list", sa.String(65536), nullable=False, server_default=""),
        sa.Column("rebuild", sa.Integer, nullable=False, server_default="0"),
        *_gm(),
    )
    op.create_index("idx_ls_meta_server", "__all_ls_meta_table", ["svr_ip", "svr_port"])
    op.create_table(
        "__all_space_usage",
        sa.Column("tenant_id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("svr_ip", sa.String(46), primary_key=True),
        sa.Column("svr_port", sa.Integer, primary_key=True),
        sa.Column("start_seq", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("file_type", sa.String(32), primary_key=True),
        sa.Column("data_size", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("used_size", sa.BigInteger, nullable=False, server_default="0"),
        *_gm(),
    )
    for name, body in VIEWS.items():
        op.execute(f"CREATE VIEW {name} AS {body}")


def downgrade() -> None:
    for name in reversed(list(VIEWS)):
        op.execute(f"DROP VIEW IF EXISTS {name}")
    op.drop_table("__all_space_usage")
    op.drop_index("idx_ls_meta_server", table_name="__all_ls_meta_table")
    op.drop_table("__all_ls_meta_table")
    op.drop_table("__all_ls_status")
    op.drop_table("__all_tenant")
    op.drop_index("idx_unit_pool", table_name="__all_unit")
    op.drop_index("idx_unit_migrate_from", table_name="__all_unit")
    op.drop_index("idx_unit_server", table_name="__all_unit")
    op.drop_table("__all_unit")
    op.drop_table("__all_resource_pool")
    op.drop_table("__all_unit_config")
