"""Tenant parameters and the cluster version in ``GV$OB_PARAMETERS`` / ``V$OB_PARAMETERS``,
the tenant's data version in ``DBA_OB_TENANTS.COMPATIBLE``, ``DBA_OB_TENANT_JOBS.TENANT_NAME``
and ``GV$OB_LOG_STAT``'s ``BASE_LSN`` / ``BEGIN_LSN``.

OceanBase's ``GV$OB_PARAMETERS`` (src/share/inner_table/ob_inner_table_schema_def.py, table
id 21219) reads ``__all_virtual_tenant_parameter_stat``: every observer lists the cluster
parameters (``TENANT_ID`` NULL) and then the tenant parameters of each tenant it hosts
(src/observer/virtual_table/ob_all_virtual_tenant_parameter_stat.cpp: ``get_mtl_tenant_ids``,
``TENANT_ID`` set, ``SCOPE`` 'TENANT'). Here the one tenant parameter is ``compatible``, the
tenant's data version (that file prints ``GET_MIN_DATA_VERSION`` there, four numbers); it is on
the rows of every server that holds a unit of the tenant (also the server a unit migrates
from, which holds it until the move ends). ``min_observer_version`` (a cluster parameter in
OceanBase) is one row per server, read from ``__all_cluster_version``.

Versions are shown in OceanBase's four-number form: OceanBase's versions are
``major.minor.major_patch.minor_patch`` (``CALC_VERSION``), this project's releases
``major.minor.patch``, whose patch is OceanBase's major patch and which have no minor patch,
so release 0.2.0 is ``0.2.0.0``. A tenant's data version is ``__all_sys_parameter``'s
``compatible`` when one is set, else the cluster version: the release every process is known
to run at least, which gates what is stored as OceanBase's data version does.
``DBA_OB_TENANTS.COMPATIBLE`` shows the same value (it showed the servers' lowest build
version, which agents since 0.2.0 spell ``0.2.0_ob-rootservice-py``, not a version).

``DBA_OB_TENANT_JOBS`` gets ``TENANT_NAME`` after OceanBase's columns (a project column:
OceanBase's view, table id 21165, has none, though its ``__all_rootservice_job`` keeps the
name; ob-operator's ``GetRsJob`` filters on it), the tenant's current name.

``__all_ls_meta_table.begin_lsn`` (new, nullable: NULL where no report of the replica's log
start reached an RS of this revision) is the count of log entries the replica no longer keeps
(``log_base_index`` of its report: compacted, or cut away when it restarted its log from a
leader's snapshot). Log positions here count entries, not bytes, so the replica's log
``[BEGIN_LSN, END_LSN)`` holds entries ``BEGIN_LSN + 1 .. END_LSN``. ``GV$OB_LOG_STAT`` shows
it as ``BASE_LSN`` and ``BEGIN_LSN`` (the data file covers everything before it, as
OceanBase's base LSN). ``END_LSN`` / ``MAX_LSN`` stay NULL: the end moves with every entry a
leader appends, and the RS keeps it in memory (the reports) rather than rewriting every
replica's row each sync.

Additive for the tables (one nullable column); the views are replaced.

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

# --------------------------------------------------------------------------- versions

#: The cluster version in OceanBase's four-number form ('0.2.0' -> '0.2.0.0').
_CLUSTER_VERSION = "(SELECT v.version || '.0' FROM __all_cluster_version v WHERE v.id = 1)"

#: A tenant's data version: the one set, else the cluster version.
_DATA_VERSION = (
    f"COALESCE((SELECT y.value FROM __all_sys_parameter y WHERE y.name = 'compatible'), "
    f"{_CLUSTER_VERSION})"
)

#: The cluster version of a database older than ``__all_cluster_version`` (migration 0019's
#: first row): what the row starts at, so ``min_observer_version``'s default.
_FIRST_CLUSTER_VERSION = "0.1.0.0"

_COMPATIBLE_INFO = (
    "the data version of the tenant: compatible when set, else the cluster version "
    "(min_observer_version)"
)
_MIN_OBSERVER_VERSION_INFO = (
    "the cluster version: the release every process runs at least; raised only by ALTER "
    "SYSTEM END ROLLING UPGRADE (or BOOTSTRAP of a new cluster), never lowered"
)


# --------------------------------------------------------------------------- parameters

_VALUE = "COALESCE(ps.value, pz.value, d.value)"

# Each server holding a unit of a tenant, once: its units' servers and the servers units
# migrate from.
_TENANT_SERVERS = """(SELECT DISTINCT p.tenant_id AS tenant_id, h.svr_ip AS svr_ip,
                              h.svr_port AS svr_port
                       FROM (SELECT u.resource_pool_id AS pool, u.svr_ip AS svr_ip,
                                    u.svr_port AS svr_port
                             FROM __all_unit u
                             UNION
                             SELECT u.resource_pool_id, u.migrate_from_svr_ip,
                                    u.migrate_from_svr_port
                             FROM __all_unit u WHERE u.migrate_from_svr_ip <> '') h
                       JOIN __all_resource_pool p ON p.resource_pool_id = h.pool
                       JOIN __all_tenant t ON t.tenant_id = p.tenant_id)"""


def _parameters_view(name: str, local_only: bool, with_tenants: bool) -> str:
    local = "s.with_rootserver = 1" if local_only else ""
    where = f"WHERE {local}" if local else ""
    cluster = f"""
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
        {where}"""
    if not with_tenants:
        return f"CREATE VIEW {name} AS {cluster}"
    version = f"""
        SELECT s.svr_ip, s.svr_port, s.zone, 'CLUSTER', CAST(NULL AS BIGINT),
               'min_observer_version', 'STRING', {_CLUSTER_VERSION},
               '{_MIN_OBSERVER_VERSION_INFO}', 'ROOT_SERVICE', 'READONLY',
               '{_FIRST_CLUSTER_VERSION}',
               CASE WHEN {_CLUSTER_VERSION} = '{_FIRST_CLUSTER_VERSION}' THEN 'YES' ELSE 'NO' END
        FROM __all_server s
        {where}"""
    tenants = f"""
        SELECT s.svr_ip, s.svr_port, s.zone, 'TENANT', h.tenant_id, 'compatible', 'STRING',
               {_DATA_VERSION}, '{_COMPATIBLE_INFO}', 'TENANT', 'DYNAMIC_EFFECTIVE',
               {_CLUSTER_VERSION},
               CASE WHEN {_DATA_VERSION} = {_CLUSTER_VERSION} THEN 'YES' ELSE 'NO' END
        FROM {_TENANT_SERVERS} h
        JOIN __all_server s ON s.svr_ip = h.svr_ip AND s.svr_port = h.svr_port
        {where}"""
    return (
        f"CREATE VIEW {name} AS {cluster}\n        UNION ALL{version}\n        UNION ALL{tenants}"
    )


# --------------------------------------------------------------------------- DBA_OB_TENANTS


def _pg() -> bool:
    return op.get_context().dialect.name == "postgresql"


def _version_prefix(expr: str) -> str:
    """SQL of the part of a build version before its first '-' (migration 0014's rule)."""
    if _pg():
        return f"split_part({expr}, '-', 1)"
    return f"(CASE WHEN instr({expr}, '-') > 0 THEN substr({expr}, 1, instr({expr}, '-') - 1) ELSE {expr} END)"


def _tenants(compatible: str) -> str:
    # Migration 0014's DBA_OB_TENANTS but for COMPATIBLE (migrations cannot import one
    # another).
    return f"""
        CREATE VIEW dba_ob_tenants AS
        SELECT t.tenant_id AS TENANT_ID, t.tenant_name AS TENANT_NAME, 'USER' AS TENANT_TYPE,
               t.gmt_create AS CREATE_TIME, t.gmt_modified AS MODIFY_TIME,
               t.primary_zone AS PRIMARY_ZONE, t.locality AS LOCALITY,
               NULL AS PREVIOUS_LOCALITY, 'MYSQL' AS COMPATIBILITY_MODE, t.status AS STATUS,
               'NO' AS IN_RECYCLEBIN, CASE WHEN t.locked = 1 THEN 'YES' ELSE 'NO' END AS LOCKED,
               'PRIMARY' AS TENANT_ROLE, 'NORMAL' AS SWITCHOVER_STATUS,
               0 AS SWITCHOVER_EPOCH, CAST(NULL AS BIGINT) AS SYNC_SCN,
               CAST(NULL AS BIGINT) AS REPLAYABLE_SCN, CAST(NULL AS BIGINT) AS READABLE_SCN,
               CAST(NULL AS BIGINT) AS RECOVERY_UNTIL_SCN, 'NOARCHIVELOG' AS LOG_MODE,
               'DISABLED' AS ARBITRATION_SERVICE_STATUS,
               (SELECT MIN(p.unit_count) FROM __all_resource_pool p
                WHERE p.tenant_id = t.tenant_id) AS UNIT_NUM,
               {compatible} AS COMPATIBLE,
               (SELECT MAX(l.ls_id) FROM __all_ls_status l WHERE l.tenant_id = t.tenant_id)
                   AS MAX_LS_ID
        FROM __all_tenant t
        """


def _old_compatible() -> str:
    version = _version_prefix("v.build_version")
    return f"""COALESCE((SELECT y.value FROM __all_sys_parameter y WHERE y.name = 'compatible'),
                        (SELECT MIN({version}) FROM __all_server v
                         WHERE v.build_version <> ''))"""


# --------------------------------------------------------------------------- jobs

# Migration 0014's list (OceanBase's tenant job types, then this project's ADD_REPLICA).
_TENANT_JOB_TYPES = (
    "ALTER_TENANT_LOCALITY",
    "ROLLBACK_ALTER_TENANT_LOCALITY",
    "SHRINK_RESOURCE_TENANT_UNIT_NUM",
    "ALTER_TENANT_PRIMARY_ZONE",
    "ALTER_RESOURCE_TENANT_UNIT_NUM",
    "UPGRADE_POST_ACTION",
    "UPGRADE_SYSTEM_VARIABLE",
    "UPGRADE_SYSTEM_TABLE",
    "UPGRADE_BEGIN",
    "UPGRADE_VIRTUAL_SCHEMA",
    "UPGRADE_SYSTEM_PACKAGE",
    "UPGRADE_ALL_POST_ACTION",
    "UPGRADE_INSPECTION",
    "UPGRADE_END",
    "UPGRADE_ALL",
    "ADD_REPLICA",
)


def _tenant_jobs(with_name: bool) -> str:
    listed = ", ".join(f"'{t}'" for t in _TENANT_JOB_TYPES)
    name = (
        """,
               (SELECT t.tenant_name FROM __all_tenant t WHERE t.tenant_id = j.tenant_id)
                   AS TENANT_NAME"""
        if with_name
        else ""
    )
    return f"""
        CREATE VIEW dba_ob_tenant_jobs AS
        SELECT j.job_id AS JOB_ID, j.job_type AS JOB_TYPE, j.job_status AS JOB_STATUS,
               COALESCE(j.result_code, j.return_code) AS RESULT_CODE, j.progress AS PROGRESS,
               j.gmt_create AS START_TIME, j.gmt_modified AS MODIFY_TIME,
               j.tenant_id AS TENANT_ID,
               j.sql_text AS SQL_TEXT, j.extra_info AS EXTRA_INFO,
               j.rs_svr_ip AS RS_SVR_IP, j.rs_svr_port AS RS_SVR_PORT{name}
        FROM __all_rootservice_job j
        WHERE j.job_type IN ({listed}) AND j.tenant_id <> 0
        """


# --------------------------------------------------------------------------- log stat

# A fresh LEADER row at its log stream's highest proposal id (migration 0013's rule).
_LEADS = """m.role = 1 AND m.stale = 0 AND NOT EXISTS (
                   SELECT 1 FROM __all_ls_meta_table o
                   WHERE o.tenant_id = m.tenant_id AND o.ls_id = m.ls_id
                     AND o.proposal_id > m.proposal_id)"""


def _log_stat(begin: str) -> str:
    return f"""
        CREATE VIEW gv$ob_log_stat AS
        SELECT m.tenant_id AS TENANT_ID, m.ls_id AS LS_ID, m.svr_ip AS SVR_IP,
               m.svr_port AS SVR_PORT,
               CASE WHEN {_LEADS} THEN 'LEADER' ELSE 'FOLLOWER' END AS ROLE,
               m.proposal_id AS PROPOSAL_ID, CAST(NULL AS VARCHAR(128)) AS CONFIG_VERSION,
               'APPEND' AS ACCESS_MODE, m.member_list AS PAXOS_MEMBER_LIST,
               m.paxos_replica_number AS PAXOS_REPLICA_NUM,
               CASE WHEN m.in_sync = 1 AND m.stale = 0 THEN 'YES' ELSE 'NO' END AS IN_SYNC,
               {begin} AS BASE_LSN, {begin} AS BEGIN_LSN,
               CAST(NULL AS BIGINT) AS BEGIN_SCN, CAST(NULL AS BIGINT) AS END_LSN,
               CAST(NULL AS BIGINT) AS END_SCN, CAST(NULL AS BIGINT) AS MAX_LSN,
               CAST(NULL AS BIGINT) AS MAX_SCN, '' AS ARBITRATION_MEMBER, '' AS DEGRADED_LIST,
               m.learner_list AS LEARNER_LIST
        FROM __all_ls_meta_table m
        """


_VIEWS = (
    "v$ob_parameters",
    "gv$ob_parameters",
    "dba_ob_tenants",
    "dba_ob_tenant_jobs",
    "gv$ob_log_stat",
)


def upgrade() -> None:
    for view in _VIEWS:
        op.execute(f"DROP VIEW IF EXISTS {view}")
    with op.batch_alter_table("__all_ls_meta_table") as batch:
        batch.add_column(sa.Column("begin_lsn", sa.BigInteger, nullable=True))
    op.execute(_parameters_view("gv$ob_parameters", local_only=False, with_tenants=True))
    op.execute(_parameters_view("v$ob_parameters", local_only=True, with_tenants=True))
    op.execute(_tenants(_DATA_VERSION))
    op.execute(_tenant_jobs(with_name=True))
    op.execute(_log_stat("m.begin_lsn"))


def downgrade() -> None:
    for view in _VIEWS:
        op.execute(f"DROP VIEW IF EXISTS {view}")
    # Not batch mode: SQLite would copy the table, and the views on it refuse the rename.
    op.execute("ALTER TABLE __all_ls_meta_table DROP COLUMN begin_lsn")
    op.execute(_parameters_view("gv$ob_parameters", local_only=False, with_tenants=False))
    op.execute(_parameters_view("v$ob_parameters", local_only=True, with_tenants=False))
    op.execute(_tenants(_old_compatible()))
    op.execute(_tenant_jobs(with_name=False))
    op.execute(_log_stat("CAST(NULL AS BIGINT)"))
