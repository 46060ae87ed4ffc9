"""OceanBase's views with OceanBase's columns: ``GV$OB_SERVERS`` / ``V$OB_SERVERS``,
``GV$OB_UNITS``, ``GV$OB_LOG_STAT``, ``DBA_OB_ROOTSERVICE_EVENT_HISTORY``,
``DBA_OB_SERVER_EVENT_HISTORY``, ``DBA_OB_SERVER_JOBS`` / ``UNIT_JOBS`` / ``TENANT_JOBS``,
``CDB_OB_LS`` and ``CDB_OB_LS_REPLICA_TASKS``; ``DBA_OB_TENANTS``, ``DBA_OB_LS_LOCATIONS`` and
``CDB_OB_LS_LOCATIONS`` brought to OceanBase's columns and meanings.

Columns, their order and their meanings are OceanBase 4.x's
(src/share/inner_table/ob_inner_table_schema_def.py in oceanbase/oceanbase, table ids 21158,
21164-21169, 21214-21217, 21302, 21319, 21324, 21330). A column with no meaning in this
project holds NULL or OceanBase's neutral value; the project's own columns come after
OceanBase's.

Expand-only, so an RS of the previous revision keeps working on the upgraded schema (a rolling
upgrade):

- ``__all_rootservice_job.result_code`` (OceanBase's name) is new; every writer of this
  revision sets it with ``return_code``, which stays. The views read
  ``COALESCE(result_code, return_code)``, so a row finished by an older RS shows its result.
- ``__all_ls_meta_table.in_sync`` (1: the replica's log is within ``ls_log_sync_threshold``
  of its leader's, the measure the RS already uses for STOP SERVER and leader moves) and
  ``copy_from`` (the member a replica being built copies from, '' otherwise), written by the
  meta sync; their defaults (1, '') are what a row written by an older RS means.
- ``__all_server_report``: the last resource and data-disk report of every server whose
  lease is alive, written by the RS leader's ``server_report_sync`` task. A server that does
  not heartbeat has no row, so ``GV$OB_SERVERS`` lists the servers that answer now, as
  OceanBase's ``__all_virtual_server`` does (each observer answers for itself).
- ``__all_server_event_history`` (OceanBase's table): the events of the RS history that
  happened on one server (its data disk, its replicas built, copied, dropped or lagging),
  written in the same transaction as the RS's own row (rootservice/db/server_event_repo.py).

``V$OB_SERVERS`` is OceanBase's "this node's rows" (``SVR_IP = host_ip() AND SVR_PORT =
rpc_port()``): for the RS the node is the server co-located with it, ``__all_server``'s
``with_rootserver = 1`` row; no row when the RS runs alone.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def _pg() -> bool:
    return op.get_context().dialect.name == "postgresql"


def _usec_to_time(expr: str) -> str:
    # As migration 0001's (migrations cannot import one another): NULL for 0.
    if _pg():
        conv = f"(to_timestamp({expr} / 1000000.0) AT TIME ZONE 'UTC')"
    else:
        conv = (
            f"strftime('%Y-%m-%d %H:%M:%S', {expr} / 1000000, 'unixepoch')"
            f" || '.' || printf('%06d', {expr} % 1000000)"
        )
    return f"CASE WHEN {expr} IS NULL OR {expr} = 0 THEN NULL ELSE {conv} END"


def _server_key(ip: str, port: str) -> str:
    """SQL of the 'ip:port' text the RS writes in member lists (IPv6 in brackets)."""
    return f"(CASE WHEN {ip} LIKE '%:%' THEN '[' || {ip} || ']' ELSE {ip} END || ':' || {port})"


def _version_prefix(expr: str) -> str:
    """SQL of the version part of a build version ('4.2.0.0-ob-rootservice-py' -> '4.2.0.0')."""
    if _pg():
        return f"split_part({expr}, '-', 1)"
    return f"(CASE WHEN instr({expr}, '-') > 0 THEN substr({expr}, 1, instr({expr}, '-') - 1) ELSE {expr} END)"


# A fresh LEADER row at its log stream's highest proposal id (migration 0013's rule).
_LEADS = """m.role = 1 AND m.stale = 0 AND NOT EXISTS (
                   SELECT 1 FROM __all_ls_meta_table o
                   WHERE o.tenant_id = m.tenant_id AND o.ls_id = m.ls_id
                     AND o.proposal_id > m.proposal_id)"""

# Units occupy both servers while they migrate (OceanBase's ObServerResourceInfo counts
# every unit an observer hosts).
_UNITS_ON = """(SELECT u.svr_ip AS svr_ip, u.svr_port AS svr_port, c.min_cpu AS min_cpu,
                       c.max_cpu AS max_cpu, c.memory_size AS memory_size,
                       c.log_disk_size AS log_disk_size
                FROM __all_unit u
                JOIN __all_resource_pool p ON p.resource_pool_id = u.resource_pool_id
                JOIN __all_unit_config c ON c.unit_config_id = p.unit_config_id
                UNION ALL
                SELECT u.migrate_from_svr_ip, u.migrate_from_svr_port, c.min_cpu, c.max_cpu,
                       c.memory_size, c.log_disk_size
                FROM __all_unit u
                JOIN __all_resource_pool p ON p.resource_pool_id = u.resource_pool_id
                JOIN __all_unit_config c ON c.unit_config_id = p.unit_config_id
                WHERE u.migrate_from_svr_ip <> '')"""


def _gv_servers() -> str:
    return f"""
        SELECT s.svr_ip AS SVR_IP, s.svr_port AS SVR_PORT, s.zone AS ZONE,
               s.inner_port AS SQL_PORT,
               r.cpu_capacity AS CPU_CAPACITY, r.cpu_capacity AS CPU_CAPACITY_MAX,
               COALESCE(a.cpu_assigned, 0) AS CPU_ASSIGNED,
               COALESCE(a.cpu_assigned_max, 0) AS CPU_ASSIGNED_MAX,
               r.mem_capacity AS MEM_CAPACITY, COALESCE(a.mem_assigned, 0) AS MEM_ASSIGNED,
               r.log_disk_capacity AS LOG_DISK_CAPACITY,
               COALESCE(a.log_disk_assigned, 0) AS LOG_DISK_ASSIGNED,
               r.log_disk_in_use AS LOG_DISK_IN_USE,
               r.data_disk_capacity AS DATA_DISK_CAPACITY,
               r.data_disk_in_use AS DATA_DISK_IN_USE,
               r.data_disk_health_status AS DATA_DISK_HEALTH_STATUS,
               r.mem_capacity AS MEMORY_LIMIT,
               r.data_disk_capacity AS DATA_DISK_ALLOCATED,
               {_usec_to_time("r.data_disk_abnormal_time")} AS DATA_DISK_ABNORMAL_TIME,
               CAST(NULL AS TIMESTAMP) AS SSL_CERT_EXPIRED_TIME,
               r.mem_in_use AS MEM_IN_USE
        FROM __all_server s
        JOIN __all_server_report r ON r.svr_ip = s.svr_ip AND r.svr_port = s.svr_port
        LEFT JOIN (SELECT svr_ip, svr_port, SUM(min_cpu) AS cpu_assigned,
                          SUM(max_cpu) AS cpu_assigned_max, SUM(memory_size) AS mem_assigned,
                          SUM(log_disk_size) AS log_disk_assigned
                   FROM {_UNITS_ON} h
                   GROUP BY svr_ip, svr_port) a
            ON a.svr_ip = s.svr_ip AND a.svr_port = s.svr_port
        """


def _gv_units() -> str:
    def side(ip: str, port: str, status: str, where: str) -> str:
        return f"""
        SELECT {ip} AS SVR_IP, {port} AS SVR_PORT, u.unit_id AS UNIT_ID,
               p.tenant_id AS TENANT_ID, u.zone AS ZONE,
               COALESCE((SELECT NULLIF(t.info, '') FROM __all_zone t
                         WHERE t.zone = u.zone AND t.name = 'zone_type'), 'ReadWrite')
                   AS ZONE_TYPE,
               (SELECT g.info FROM __all_zone g WHERE g.zone = u.zone AND g.name = 'region')
                   AS REGION,
               c.max_cpu AS MAX_CPU, c.min_cpu AS MIN_CPU, c.memory_size AS MEMORY_SIZE,
               c.max_iops AS MAX_IOPS, c.min_iops AS MIN_IOPS, c.iops_weight AS IOPS_WEIGHT,
               c.log_disk_size AS LOG_DISK_SIZE,
               COALESCE((SELECT SUM(x.used_size - x.data_size) FROM __all_space_usage x
                         WHERE x.tenant_id = p.tenant_id AND x.svr_ip = {ip}
                           AND x.svr_port = {port}), 0) AS LOG_DISK_IN_USE,
               COALESCE((SELECT SUM(x.data_size) FROM __all_space_usage x
                         WHERE x.tenant_id = p.tenant_id AND x.svr_ip = {ip}
                           AND x.svr_port = {port}), 0) AS DATA_DISK_IN_USE,
               {status} AS STATUS,
               u.gmt_create AS CREATE_TIME
        FROM __all_unit u
        JOIN __all_resource_pool p ON p.resource_pool_id = u.resource_pool_id
        JOIN __all_unit_config c ON c.unit_config_id = p.unit_config_id
        WHERE p.tenant_id <> -1{where}"""

    here = side(
        "u.svr_ip",
        "u.svr_port",
        "CASE WHEN u.migrate_from_svr_ip <> '' THEN 'MIGRATE_IN' ELSE 'NORMAL' END",
        "",
    )
    there = side(
        "u.migrate_from_svr_ip",
        "u.migrate_from_svr_port",
        "'MIGRATE_OUT'",
        " AND u.migrate_from_svr_ip <> ''",
    )
    return f"{here}\n        UNION ALL{there}"


def _gv_log_stat() -> str:
    return f"""
        SELECT m.tenant_id AS TENANT_ID, m.ls_id AS LS_ID, m.svr_ip AS SVR_IP,
               m.svr_port AS SVR_PORT,
               CASE WHEN {_LEADS} THEN 'LEADER' ELSE 'FOLLOWER' END AS ROLE,
               m.proposal_id AS PROPOSAL_ID, CAST(NULL AS VARCHAR(128)) AS CONFIG_VERSION,
               'APPEND' AS ACCESS_MODE, m.member_list AS PAXOS_MEMBER_LIST,
               m.paxos_replica_number AS PAXOS_REPLICA_NUM,
               CASE WHEN m.in_sync = 1 AND m.stale = 0 THEN 'YES' ELSE 'NO' END AS IN_SYNC,
               CAST(NULL AS BIGINT) AS BASE_LSN, CAST(NULL AS BIGINT) AS BEGIN_LSN,
               CAST(NULL AS BIGINT) AS BEGIN_SCN, CAST(NULL AS BIGINT) AS END_LSN,
               CAST(NULL AS BIGINT) AS END_SCN, CAST(NULL AS BIGINT) AS MAX_LSN,
               CAST(NULL AS BIGINT) AS MAX_SCN, '' AS ARBITRATION_MEMBER, '' AS DEGRADED_LIST,
               m.learner_list AS LEARNER_LIST
        FROM __all_ls_meta_table m
        """


def _history(table: str, server_cols: str, rs_cols: str) -> str:
    # TIMESTAMP is a keyword: quoted, and lower case on PostgreSQL, which folds the other
    # (unquoted) names so, and the SELECT engine quotes names in lower case.
    pairs = ", ".join(f"h.name{i} AS NAME{i}, h.value{i} AS VALUE{i}" for i in range(1, 7))
    return f"""
        SELECT h.gmt_create AS {'"timestamp"' if _pg() else '"TIMESTAMP"'},{server_cols}
               h.module AS MODULE, h.event AS EVENT, {pairs},
               h.extra_info AS EXTRA_INFO{rs_cols}
        FROM {table} h
        """


# OceanBase's job types of each view (ob_inner_table_schema_def.py 21165-21167), then this
# project's own: RECOVER_LS (FORCE DELETE SERVER / RECOVER LS, a server job here) and
# ADD_REPLICA (a tenant's log stream gets a member back in a zone).
TENANT_JOB_TYPES = (
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
UNIT_JOB_TYPES = ("MIGRATE_UNIT",)
SERVER_JOB_TYPES = ("DELETE_SERVER", "RECOVER_LS")


def _jobs(scope_cols: str, types: tuple[str, ...], extra_where: str = "") -> str:
    listed = ", ".join(f"'{t}'" for t in types)
    return f"""
        SELECT j.job_id AS JOB_ID, j.job_type AS JOB_TYPE, j.job_status AS JOB_STATUS,
               COALESCE(j.result_code, j.return_code) AS RESULT_CODE, j.progress AS PROGRESS,
               j.gmt_create AS START_TIME, j.gmt_modified AS MODIFY_TIME,{scope_cols}
               j.sql_text AS SQL_TEXT, j.extra_info AS EXTRA_INFO,
               j.rs_svr_ip AS RS_SVR_IP, j.rs_svr_port AS RS_SVR_PORT
        FROM __all_rootservice_job j
        WHERE j.job_type IN ({listed}){extra_where}
        """


def _cdb_ls() -> str:
    return """
        SELECT s.tenant_id AS TENANT_ID, s.ls_id AS LS_ID, s.status AS STATUS,
               s.primary_zone AS PRIMARY_ZONE, s.unit_group_id AS UNIT_GROUP_ID,
               s.ls_group_id AS LS_GROUP_ID, CAST(NULL AS BIGINT) AS CREATE_SCN,
               CAST(NULL AS BIGINT) AS DROP_SCN, CAST(NULL AS BIGINT) AS SYNC_SCN,
               CAST(NULL AS BIGINT) AS READABLE_SCN, '' AS FLAG,
               s.gmt_create AS CREATE_TIME, s.gmt_modified AS MODIFY_TIME
        FROM __all_ls_status s
        """


def _replica_tasks() -> str:
    dest = _server_key("m.svr_ip", "m.svr_port")
    in_members = f"""EXISTS (SELECT 1 FROM __all_ls_meta_table l
                      WHERE l.tenant_id = m.tenant_id AND l.ls_id = m.ls_id
                        AND l.role = 1 AND l.stale = 0
                        AND (',' || l.member_list || ',') LIKE ('%,' || {dest} || ',%'))"""
    migrating = "u.migrate_from_svr_ip IS NOT NULL AND u.migrate_from_svr_ip <> ''"
    task_type = f"""CASE WHEN {in_members} THEN 'BUILD ONLY IN MEMBER LIST'
                    WHEN {migrating} THEN 'MIGRATE REPLICA' ELSE 'ADD REPLICA' END"""
    return f"""
        SELECT m.tenant_id AS TENANT_ID, m.ls_id AS LS_ID, {task_type} AS TASK_TYPE,
               CAST(NULL AS VARCHAR(64)) AS TASK_ID, 'INPROGRESS' AS TASK_STATUS,
               CASE WHEN {migrating} AND NOT {in_members} THEN 'LOW' ELSE 'HIGH' END
                   AS PRIORITY,
               m.svr_ip AS TARGET_REPLICA_SVR_IP, m.svr_port AS TARGET_REPLICA_SVR_PORT,
               m.paxos_replica_number AS TARGET_PAXOS_REPLICA_NUMBER,
               'FULL' AS TARGET_REPLICA_TYPE,
               CASE WHEN {migrating} THEN u.migrate_from_svr_ip ELSE NULL END
                   AS SOURCE_REPLICA_SVR_IP,
               CASE WHEN {migrating} THEN u.migrate_from_svr_port ELSE NULL END
                   AS SOURCE_REPLICA_SVR_PORT,
               CASE WHEN {migrating} THEN m.paxos_replica_number ELSE NULL END
                   AS SOURCE_PAXOS_REPLICA_NUMBER,
               CASE WHEN {migrating} THEN 'FULL' ELSE NULL END AS SOURCE_REPLICA_TYPE,
               m.svr_ip AS TASK_EXEC_SVR_IP, m.svr_port AS TASK_EXEC_SVR_PORT,
               m.gmt_create AS CREATE_TIME, m.gmt_create AS START_TIME,
               m.gmt_modified AS MODIFY_TIME,
               CASE WHEN m.copy_from <> '' THEN 'copying from ' || m.copy_from
                    ELSE 'building' END AS COMMENT,
               m.data_size AS DATA_SIZE, m.copy_from AS DATA_SOURCE
        FROM __all_ls_meta_table m
        LEFT JOIN __all_unit u ON u.unit_id = m.unit_id
        WHERE m.replica_status = 'OFFLINE' AND m.stale = 0
        """


def _tenants(oceanbase_4x: bool) -> str:
    extra = ""
    if oceanbase_4x:
        version = _version_prefix("v.build_version")
        extra = f""",
               'PRIMARY' AS TENANT_ROLE, 'NORMAL' AS SWITCHOVER_STATUS,
               0 AS SWITCHOVER_EPOCH, CAST(NULL AS BIGINT) AS SYNC_SCN,
               CAST(NULL AS BIGINT) AS REPLAYABLE_SCN, CAST(NULL AS BIGINT) AS READABLE_SCN,
               CAST(NULL AS BIGINT) AS RECOVERY_UNTIL_SCN, 'NOARCHIVELOG' AS LOG_MODE,
               'DISABLED' AS ARBITRATION_SERVICE_STATUS,
               (SELECT MIN(p.unit_count) FROM __all_resource_pool p
                WHERE p.tenant_id = t.tenant_id) AS UNIT_NUM,
               COALESCE((SELECT y.value FROM __all_sys_parameter y WHERE y.name = 'compatible'),
                        (SELECT MIN({version}) FROM __all_server v
                         WHERE v.build_version <> '')) AS COMPATIBLE,
               (SELECT MAX(l.ls_id) FROM __all_ls_status l WHERE l.tenant_id = t.tenant_id)
                   AS MAX_LS_ID"""
    return f"""
        SELECT t.tenant_id AS TENANT_ID, t.tenant_name AS TENANT_NAME, 'USER' AS TENANT_TYPE,
               t.gmt_create AS CREATE_TIME, t.gmt_modified AS MODIFY_TIME,
               t.primary_zone AS PRIMARY_ZONE, t.locality AS LOCALITY,
               NULL AS PREVIOUS_LOCALITY, 'MYSQL' AS COMPATIBILITY_MODE, t.status AS STATUS,
               'NO' AS IN_RECYCLEBIN, CASE WHEN t.locked = 1 THEN 'YES' ELSE 'NO' END AS LOCKED{extra}
        FROM __all_tenant t
        """


def _locations(name: str, oceanbase_4x: bool) -> str:
    # OceanBase shows the member list and the replica number only on the leader's row, and
    # an empty learner list on the followers' (DBA_OB_LS_LOCATIONS, table id 21168).
    replicas = (
        f"CASE WHEN {_LEADS} THEN m.paxos_replica_number ELSE NULL END"
        if oceanbase_4x
        else "m.paxos_replica_number"
    )
    learners = "''" if oceanbase_4x else "NULL"
    return f"""
        CREATE VIEW {name} AS
        SELECT m.gmt_create AS CREATE_TIME, m.gmt_modified AS MODIFY_TIME,
               m.tenant_id AS TENANT_ID, m.ls_id AS LS_ID, m.svr_ip AS SVR_IP,
               m.svr_port AS SVR_PORT, m.sql_port AS SQL_PORT, m.zone AS ZONE,
               CASE WHEN {_LEADS} THEN 'LEADER' ELSE 'FOLLOWER' END AS ROLE,
               CASE WHEN {_LEADS} THEN m.member_list ELSE NULL END AS MEMBER_LIST,
               {replicas} AS PAXOS_REPLICA_NUMBER,
               'FULL' AS REPLICA_TYPE,
               CASE WHEN {_LEADS} THEN m.learner_list ELSE {learners} END AS LEARNER_LIST,
               CASE WHEN m.rebuild = 1 THEN 'TRUE' ELSE 'FALSE' END AS REBUILD,
               m.replica_status AS REPLICA_STATUS, m.unit_id AS UNIT_ID,
               m.data_size AS DATA_SIZE, m.required_size AS REQUIRED_SIZE,
               CASE WHEN m.stale = 1 THEN 'YES' ELSE 'NO' END AS STALE,
               {_usec_to_time("m.last_report_time")} AS LAST_REPORT_TIME
        FROM __all_ls_meta_table m
        """


def _rootservice_jobs(result_code: str) -> str:
    # The project's own name, kept as an alias over every job (OceanBase has the three
    # views by kind instead).
    return f"""
        CREATE VIEW dba_ob_rootservice_jobs AS
        SELECT j.job_id AS JOB_ID, j.job_type AS JOB_TYPE, j.job_status AS JOB_STATUS,
               {result_code} AS RESULT_CODE, j.progress AS PROGRESS,
               j.gmt_create AS CREATE_TIME, j.gmt_modified AS MODIFY_TIME,
               j.tenant_id AS TENANT_ID, j.svr_ip AS SVR_IP, j.svr_port AS SVR_PORT,
               j.rs_svr_ip AS RS_SVR_IP, j.rs_svr_port AS RS_SVR_PORT,
               j.sql_text AS SQL_TEXT, j.extra_info AS EXTRA_INFO
        FROM __all_rootservice_job j
        """


def _new_views() -> dict[str, str]:
    event_pairs = "\n               h.svr_ip AS SVR_IP, h.svr_port AS SVR_PORT,"
    rs_addr = ",\n               h.rs_svr_ip AS RS_SVR_IP, h.rs_svr_port AS RS_SVR_PORT"
    return {
        "gv$ob_servers": _gv_servers(),
        "v$ob_servers": """
        SELECT g.* FROM gv$ob_servers g
        JOIN __all_server s ON s.svr_ip = g.SVR_IP AND s.svr_port = g.SVR_PORT
        WHERE s.with_rootserver = 1
        """,
        "gv$ob_units": _gv_units(),
        "gv$ob_log_stat": _gv_log_stat(),
        "dba_ob_rootservice_event_history": _history(
            "__all_rootservice_event_history", "", rs_addr
        ),
        "dba_ob_server_event_history": _history("__all_server_event_history", event_pairs, ""),
        "dba_ob_server_jobs": _jobs(
            "\n               j.svr_ip AS SVR_IP, j.svr_port AS SVR_PORT,", SERVER_JOB_TYPES
        ),
        "dba_ob_unit_jobs": _jobs(
            "\n               CASE WHEN j.tenant_id = -1 THEN NULL ELSE j.tenant_id END"
            " AS TENANT_ID,\n               j.unit_id AS UNIT_ID,",
            UNIT_JOB_TYPES,
        ),
        "dba_ob_tenant_jobs": _jobs(
            "\n               j.tenant_id AS TENANT_ID,", TENANT_JOB_TYPES, " AND j.tenant_id <> 0"
        ),
        "cdb_ob_ls": _cdb_ls(),
        "cdb_ob_ls_replica_tasks": _replica_tasks(),
    }


def _gmt() -> list[sa.Column]:
    return [
        sa.Column(
            "gmt_create", sa.DateTime, nullable=False, server_default=sa.func.current_timestamp()
        ),
        sa.Column(
            "gmt_modified", sa.DateTime, nullable=False, server_default=sa.func.current_timestamp()
        ),
    ]


_REPLACED = (
    "dba_ob_ls_locations",
    "cdb_ob_ls_locations",
    "dba_ob_tenants",
    "dba_ob_rootservice_jobs",
)


def upgrade() -> None:
    for name in _REPLACED:
        op.execute(f"DROP VIEW IF EXISTS {name}")
    with op.batch_alter_table("__all_rootservice_job") as batch:
        batch.add_column(sa.Column("result_code", sa.BigInteger, nullable=True))
    op.execute("UPDATE __all_rootservice_job SET result_code = return_code")
    with op.batch_alter_table("__all_ls_meta_table") as batch:
        batch.add_column(sa.Column("in_sync", sa.Integer, nullable=False, server_default="1"))
        batch.add_column(sa.Column("copy_from", sa.String(64), nullable=False, server_default=""))
    op.create_table(
        "__all_server_report",
        sa.Column("svr_ip", sa.String(46), primary_key=True),
        sa.Column("svr_port", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("cpu_capacity", sa.Float, nullable=False, server_default="0"),
        sa.Column("mem_capacity", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("mem_in_use", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("log_disk_capacity", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("log_disk_in_use", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("data_disk_capacity", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("data_disk_in_use", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column(
            "data_disk_health_status", sa.String(16), nullable=False, server_default="NORMAL"
        ),
        sa.Column("data_disk_abnormal_time", sa.BigInteger, nullable=False, server_default="0"),
        *_gmt(),
    )
    op.create_table(
        "__all_server_event_history",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer, "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sa.Column("gmt_create", sa.DateTime, nullable=False),
        sa.Column("event_time", sa.BigInteger, nullable=False),
        sa.Column("svr_ip", sa.String(46), nullable=False),
        sa.Column("svr_port", sa.Integer, nullable=False),
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
    )
    op.create_index("idx_server_event_time", "__all_server_event_history", ["event_time"])
    op.execute(_locations("dba_ob_ls_locations", oceanbase_4x=True))
    op.execute(_locations("cdb_ob_ls_locations", oceanbase_4x=True))
    op.execute(f"CREATE VIEW dba_ob_tenants AS {_tenants(oceanbase_4x=True)}")
    op.execute(_rootservice_jobs("COALESCE(j.result_code, j.return_code)"))
    for name, body in _new_views().items():
        op.execute(f"CREATE VIEW {name} AS {body}")


def downgrade() -> None:
    for name in reversed(list(_new_views())):
        op.execute(f"DROP VIEW IF EXISTS {name}")
    for name in _REPLACED:
        op.execute(f"DROP VIEW IF EXISTS {name}")
    op.drop_index("idx_server_event_time", table_name="__all_server_event_history")
    op.drop_table("__all_server_event_history")
    op.drop_table("__all_server_report")
    with op.batch_alter_table("__all_ls_meta_table") as batch:
        batch.drop_column("copy_from")
        batch.drop_column("in_sync")
    with op.batch_alter_table("__all_rootservice_job") as batch:
        batch.drop_column("result_code")
    op.execute(_locations("dba_ob_ls_locations", oceanbase_4x=False))
    op.execute(_locations("cdb_ob_ls_locations", oceanbase_4x=False))
    op.execute(f"CREATE VIEW dba_ob_tenants AS {_tenants(oceanbase_4x=False)}")
    op.execute(_rootservice_jobs("j.return_code"))
