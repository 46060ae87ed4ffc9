"""SQLAlchemy Core definitions of the system tables (docs/design/servers.md#the-tables).

These mirror what the Alembic migrations create; the migrations, not ``metadata.create_all``,
are the source of the schema. Table and column names are part of the product: ops
dashboards read them directly. Times are ``BigInteger`` microseconds since the epoch except
``gmt_create`` / ``gmt_modified``, which are naive UTC timestamps as in OceanBase.
"""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()

all_server = sa.Table(
    "__all_server",
    metadata,
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
    sa.Column(
        "gmt_create", sa.DateTime, nullable=False, server_default=sa.func.current_timestamp()
    ),
    sa.Column(
        "gmt_modified", sa.DateTime, nullable=False, server_default=sa.func.current_timestamp()
    ),
    # Migration 0010: end of the SUSPECT period, 0 when not SUSPECT.
    sa.Column("suspect_end_time", sa.BigInteger, nullable=False, server_default="0"),
    # Migration 0011: end of a STOP ... FOR MAINTENANCE window, 0: none.
    sa.Column("maintenance_end_time", sa.BigInteger, nullable=False, server_default="0"),
    # Migration 0012: when the server became LAGGING, 0 when it is not.
    sa.Column("lagging_time", sa.BigInteger, nullable=False, server_default="0"),
)

all_zone = sa.Table(
    "__all_zone",
    metadata,
    sa.Column("zone", sa.String(128), primary_key=True),
    sa.Column("name", sa.String(128), primary_key=True),
    sa.Column("value", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("info", sa.String(4096), nullable=False, server_default=""),
    sa.Column(
        "gmt_create", sa.DateTime, nullable=False, server_default=sa.func.current_timestamp()
    ),
    sa.Column(
        "gmt_modified", sa.DateTime, nullable=False, server_default=sa.func.current_timestamp()
    ),
)

all_sys_parameter = sa.Table(
    "__all_sys_parameter",
    metadata,
    sa.Column("name", sa.String(128), primary_key=True),
    sa.Column("value", sa.String(65536), nullable=False),
    sa.Column("info", sa.String(4096), nullable=False, server_default=""),
    sa.Column("config_version", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column(
        "gmt_create", sa.DateTime, nullable=False, server_default=sa.func.current_timestamp()
    ),
    sa.Column(
        "gmt_modified", sa.DateTime, nullable=False, server_default=sa.func.current_timestamp()
    ),
)

all_rootservice_job = sa.Table(
    "__all_rootservice_job",
    metadata,
    sa.Column("job_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("job_type", sa.String(128), nullable=False),
    sa.Column("job_status", sa.String(128), nullable=False),
    # OceanBase's name is result_code (migration 0014 adds it, kept equal to return_code by
    # every writer; return_code stays for readers and writers of the earlier schema).
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
    sa.Column(
        "gmt_create", sa.DateTime, nullable=False, server_default=sa.func.current_timestamp()
    ),
    sa.Column(
        "gmt_modified", sa.DateTime, nullable=False, server_default=sa.func.current_timestamp()
    ),
    # Migration 0014: the job's result under OceanBase's name (NULL while it runs).
    sa.Column("result_code", sa.BigInteger, nullable=True),
)

all_rootservice_event_history = sa.Table(
    "__all_rootservice_event_history",
    metadata,
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

all_service_epoch = sa.Table(
    "__all_service_epoch",
    metadata,
    sa.Column("name", sa.String(128), primary_key=True),
    sa.Column("value", sa.BigInteger, nullable=False),
    sa.Column(
        "gmt_create", sa.DateTime, nullable=False, server_default=sa.func.current_timestamp()
    ),
    sa.Column(
        "gmt_modified", sa.DateTime, nullable=False, server_default=sa.func.current_timestamp()
    ),
    # The RS election lease on the rootservice_epoch row (migration 0002 appends
    # them after gmt_*): the holder's RPC address, and when the lease was last renewed and
    # when it expires, in microseconds by the database's clock.
    sa.Column("svr_ip", sa.String(46), nullable=False, server_default=""),
    sa.Column("svr_port", sa.Integer, nullable=False, server_default="0"),
    sa.Column("lease_expire_time", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("lease_renew_time", sa.BigInteger, nullable=False, server_default="0"),
    # The fencing token's incarnation and the PostgreSQL server's identity (
    # migration 0008): NULL identity on SQLite.
    sa.Column("incarnation", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("pg_system_id", sa.BigInteger, nullable=True),
    sa.Column("pg_timeline", sa.BigInteger, nullable=True),
    # The designated successor of ALTER SYSTEM SWITCH ROOTSERVICE LEADER (migration 0017):
    # until handover_expire_time (microseconds by the database's clock) only it may take
    # office; '' / 0 = none.
    sa.Column("successor_ip", sa.String(46), nullable=False, server_default=""),
    sa.Column("successor_port", sa.Integer, nullable=False, server_default="0"),
    sa.Column("handover_expire_time", sa.BigInteger, nullable=False, server_default="0"),
)


def _gmt() -> list[sa.Column]:
    return [
        sa.Column(
            "gmt_create", sa.DateTime, nullable=False, server_default=sa.func.current_timestamp()
        ),
        sa.Column(
            "gmt_modified", sa.DateTime, nullable=False, server_default=sa.func.current_timestamp()
        ),
    ]


# --- tenants, units and log streams (OceanBase 4.x inner tables) -------------------

all_unit_config = sa.Table(
    "__all_unit_config",
    metadata,
    sa.Column("unit_config_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("name", sa.String(128), nullable=False, unique=True),
    sa.Column("max_cpu", sa.Float, nullable=False),
    sa.Column("min_cpu", sa.Float, nullable=False),
    sa.Column("memory_size", sa.BigInteger, nullable=False),
    sa.Column("log_disk_size", sa.BigInteger, nullable=False),
    sa.Column("max_iops", sa.BigInteger, nullable=False),
    sa.Column("min_iops", sa.BigInteger, nullable=False),
    sa.Column("iops_weight", sa.BigInteger, nullable=False),
    *_gmt(),
)

all_resource_pool = sa.Table(
    "__all_resource_pool",
    metadata,
    sa.Column("resource_pool_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("name", sa.String(128), nullable=False, unique=True),
    sa.Column("unit_count", sa.BigInteger, nullable=False),
    sa.Column("unit_config_id", sa.BigInteger, nullable=False),
    # 'z1;z2;z3', as OceanBase stores it
    sa.Column("zone_list", sa.String(8192), nullable=False),
    # -1 until the pool is granted to a tenant (OB_INVALID_ID in OceanBase)
    sa.Column("tenant_id", sa.BigInteger, nullable=False, server_default="-1"),
    sa.Column("replica_type", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("is_tenant_sys_pool", sa.Integer, nullable=False, server_default="0"),
    *_gmt(),
)

all_unit = sa.Table(
    "__all_unit",
    metadata,
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
    *_gmt(),
)

all_tenant = sa.Table(
    "__all_tenant",
    metadata,
    sa.Column("tenant_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("tenant_name", sa.String(128), nullable=False, unique=True),
    sa.Column("zone_list", sa.String(8192), nullable=False),
    sa.Column("primary_zone", sa.String(8192), nullable=False, server_default="RANDOM"),
    sa.Column("locked", sa.Integer, nullable=False, server_default="0"),
    sa.Column("status", sa.String(64), nullable=False, server_default="NORMAL"),
    sa.Column("info", sa.String(4096), nullable=False, server_default=""),
    sa.Column("locality", sa.String(8192), nullable=False, server_default=""),
    sa.Column("compatibility_mode", sa.Integer, nullable=False, server_default="0"),
    *_gmt(),
)

all_ls_status = sa.Table(
    "__all_ls_status",
    metadata,
    sa.Column("tenant_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("ls_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("status", sa.String(100), nullable=False, server_default="NORMAL"),
    sa.Column("ls_group_id", sa.BigInteger, nullable=False),
    sa.Column("unit_group_id", sa.BigInteger, nullable=False),
    sa.Column("primary_zone", sa.String(128), nullable=False, server_default=""),
    *_gmt(),
)

# OceanBase's leader preferences per log stream (migration 0017): SWITCH REPLICA LEADER's
# manual leader ('' = none) and SWITCH REPLICA FOLLOWER's blacklist ("ip:port" joined by ";").
all_ls_election_reference_info = sa.Table(
    "__all_ls_election_reference_info",
    metadata,
    sa.Column("tenant_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("ls_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("manual_leader_server", sa.String(64), nullable=False, server_default=""),
    sa.Column("blacklist", sa.String(4096), nullable=False, server_default=""),
    *_gmt(),
)

all_ls_meta_table = sa.Table(
    "__all_ls_meta_table",
    metadata,
    sa.Column("tenant_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("ls_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("svr_ip", sa.String(46), primary_key=True),
    sa.Column("svr_port", sa.Integer, primary_key=True),
    sa.Column("sql_port", sa.Integer, nullable=False),
    # 1 = leader, 2 = follower (OceanBase's common::ObRole)
    sa.Column("role", sa.Integer, nullable=False),
    # 'ip:port,ip:port' of the Paxos members as this replica knows them
    sa.Column("member_list", sa.String(65536), nullable=False, server_default=""),
    sa.Column("proposal_id", sa.BigInteger, nullable=False, server_default="0"),
    # 0 = FULL (OceanBase's common::REPLICA_TYPE_FULL)
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
    *_gmt(),
    # 1: not the replica's current state (its server's lease expired, or a deposed leader's
    # report of an older term), shown FOLLOWER; migration 0013.
    sa.Column("stale", sa.Integer, nullable=False, server_default="0"),
    # Of a stale row: its server's last heartbeat (us since the epoch) before it went stale.
    sa.Column("last_report_time", sa.BigInteger, nullable=False, server_default="0"),
    # Migration 0014: 1 when the replica's log is within ls_log_sync_threshold of its
    # leader's (the leader itself, and any replica of a leaderless LS, count as in sync).
    sa.Column("in_sync", sa.Integer, nullable=False, server_default="1"),
    # Migration 0014: 'ip:port' the replica is being copied from while it is built, else ''.
    sa.Column("copy_from", sa.String(64), nullable=False, server_default=""),
    # Migration 0020: log entries the replica no longer keeps (its report's log_base_index),
    # GV$OB_LOG_STAT's BEGIN_LSN; NULL until an RS of that revision wrote the row.
    sa.Column("begin_lsn", sa.BigInteger, nullable=True),
)

all_space_usage = sa.Table(
    "__all_space_usage",
    metadata,
    sa.Column("tenant_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("svr_ip", sa.String(46), primary_key=True),
    sa.Column("svr_port", sa.Integer, primary_key=True),
    sa.Column("start_seq", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("file_type", sa.String(32), primary_key=True),
    sa.Column("data_size", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("used_size", sa.BigInteger, nullable=False, server_default="0"),
    *_gmt(),
)

# --- retired server identities (migration 0009) -----------------------

all_server_tombstone = sa.Table(
    "__all_server_tombstone",
    metadata,
    sa.Column("svr_ip", sa.String(46), primary_key=True),
    sa.Column("svr_port", sa.Integer, primary_key=True, autoincrement=False),
    # The id the server had: an agent presenting it under another address is refused too.
    sa.Column("server_id", sa.BigInteger, nullable=False),
    sa.Column("zone", sa.String(128), nullable=False, server_default=""),
    # When it was buried, microseconds since the epoch (the RS's clock).
    sa.Column("deleted_at", sa.BigInteger, nullable=False),
    # FORCE DELETE SERVER, or RECOVER LS with its plan id.
    sa.Column("reason", sa.String(1024), nullable=False, server_default=""),
    *_gmt(),
)

all_ls_log_mark = sa.Table(
    "__all_ls_log_mark",
    metadata,
    sa.Column("tenant_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("ls_id", sa.BigInteger, primary_key=True, autoincrement=False),
    # The highest log end index any replica of the LS ever reported, its term and server.
    sa.Column("log_end_index", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("term", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("svr_ip", sa.String(46), nullable=False, server_default=""),
    sa.Column("svr_port", sa.Integer, nullable=False, server_default="0"),
    *_gmt(),
)

# --- what the agents report, and the events of the servers (migration 0014) --------

all_server_report = sa.Table(
    "__all_server_report",
    metadata,
    sa.Column("svr_ip", sa.String(46), primary_key=True),
    sa.Column("svr_port", sa.Integer, primary_key=True, autoincrement=False),
    # The agent's last report (ObServerResourceInfo): CPU in cores, the rest in bytes.
    sa.Column("cpu_capacity", sa.Float, nullable=False, server_default="0"),
    sa.Column("mem_capacity", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("mem_in_use", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("log_disk_capacity", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("log_disk_in_use", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("data_disk_capacity", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("data_disk_in_use", sa.BigInteger, nullable=False, server_default="0"),
    # NORMAL, or ERROR while the agent reports its data disk broken.
    sa.Column("data_disk_health_status", sa.String(16), nullable=False, server_default="NORMAL"),
    # When the RS first saw the ERROR (us since the epoch), 0 while NORMAL.
    sa.Column("data_disk_abnormal_time", sa.BigInteger, nullable=False, server_default="0"),
    *_gmt(),
)

all_server_event_history = sa.Table(
    "__all_server_event_history",
    metadata,
    sa.Column(
        "id",
        sa.BigInteger().with_variant(sa.Integer, "sqlite"),
        primary_key=True,
        autoincrement=True,
    ),
    sa.Column("gmt_create", sa.DateTime, nullable=False),
    sa.Column("event_time", sa.BigInteger, nullable=False),
    # The server the event happened on.
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

# --- the cluster version (migration 0019) ----------------------------------

all_cluster_version = sa.Table(
    "__all_cluster_version",
    metadata,
    # Always 1: one row.
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    # The release, "0.2.0", and it as major << 32 | minor << 16 | patch (compared on raise).
    sa.Column("version", sa.String(64), nullable=False),
    sa.Column("version_code", sa.BigInteger, nullable=False),
    *_gmt(),
)

# How far the schema was contracted (rootservice.db.schema_upgrade): one row, raised by each
# contract migration, read by an RS that finds the database at a revision it does not know.
all_schema_contract = sa.Table(
    "__all_schema_contract",
    metadata,
    # Always 1: one row.
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("contract_level", sa.Integer, nullable=False, server_default="0"),
)

# ALTER SYSTEM SET ... ZONE / SERVER: one row per parameter and zone (svr_ip 'ANY',
# svr_port 0) or server (zone ''), as OceanBase keeps them in its __all_sys_parameter
# (src/rootserver/ob_system_admin_util.cpp, ObAdminSetConfig::update_config). The cluster-wide
# values stay in __all_sys_parameter. ``info`` is the statement's COMMENT.
all_sys_parameter_override = sa.Table(
    "__all_sys_parameter_override",
    metadata,
    sa.Column("zone", sa.String(128), primary_key=True),
    sa.Column("svr_ip", sa.String(46), primary_key=True),
    sa.Column("svr_port", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("name", sa.String(128), primary_key=True),
    sa.Column("value", sa.String(65536), nullable=False),
    sa.Column("info", sa.String(4096), nullable=False, server_default=""),
    sa.Column("config_version", sa.BigInteger, nullable=False, server_default="0"),
    *_gmt(),
)

# Every run-time parameter as the RS leader has it (written when it takes office and after
# each ALTER SYSTEM SET): what GV$OB_PARAMETERS shows besides the per-server value. ``value``
# is the cluster-wide value in effect (a command-line flag's, the table's or the default).
all_sys_parameter_info = sa.Table(
    "__all_sys_parameter_info",
    metadata,
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

# Names of the tables and views operators may SELECT from (lower case).
SYSTEM_TABLES = tuple(t.name for t in metadata.sorted_tables)
SYSTEM_VIEWS = (
    "dba_ob_servers",
    "dba_ob_zones",
    "dba_ob_unit_configs",
    "dba_ob_resource_pools",
    "dba_ob_units",
    "dba_ob_tenants",
    "dba_ob_ls",
    "dba_ob_ls_locations",
    "cdb_ob_ls_locations",
    "dba_ob_rootservice_jobs",
    "dba_ob_revoked_certificates",
    "dba_ob_server_tombstones",
    "dba_ob_server_drains",
    # Migration 0014: OceanBase's views over what the agents report, the event histories,
    # the jobs by kind, the log streams and the copies in flight.
    "gv$ob_servers",
    "v$ob_servers",
    "gv$ob_units",
    "gv$ob_log_stat",
    "dba_ob_rootservice_event_history",
    "dba_ob_server_event_history",
    "dba_ob_server_jobs",
    "dba_ob_unit_jobs",
    "dba_ob_tenant_jobs",
    "cdb_ob_ls",
    "cdb_ob_ls_replica_tasks",
    "dba_ob_rootservices",
    "gv$ob_parameters",
    "v$ob_parameters",
)


# --- users and privileges (OceanBase's __all_user, migration 0004) ---------------

all_user = sa.Table(
    "__all_user",
    metadata,
    sa.Column("user_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("user_name", sa.String(64), nullable=False, unique=True),
    # The argon2 hash (salt and parameters included); '' = no password (certificate only).
    sa.Column("passwd", sa.String(512), nullable=False, server_default=""),
    # One column per global privilege: 1 granted, 0 not.
    sa.Column("priv_select", sa.Integer, nullable=False, server_default="0"),
    sa.Column("priv_alter_system", sa.Integer, nullable=False, server_default="0"),
    sa.Column("priv_create_user", sa.Integer, nullable=False, server_default="0"),
    *_gmt(),
    # mysql_native_password's verifier, hex SHA1(SHA1(password)) (40 chars), last
    # as migration 0005 appended it; NULL for no password and for users created before 0005.
    sa.Column("native_passwd", sa.String(40), nullable=True),
)


# --- root services seen (migration 0006) ------------------------------------------

all_rootservice_member = sa.Table(
    "__all_rootservice_member",
    metadata,
    # The RS's RPC address ("ip:port" split as elsewhere).
    sa.Column("svr_ip", sa.String(46), primary_key=True),
    sa.Column("svr_port", sa.Integer, primary_key=True, autoincrement=False),
    # When its election round last ran, microseconds by the database's clock (the lease's).
    sa.Column("last_seen_time", sa.BigInteger, nullable=False, server_default="0"),
    *_gmt(),
    # Migration 0019: the release its rounds report; NULL from a 0.1.0 RS.
    sa.Column("build_version", sa.String(256), nullable=True),
)

# --- revoked certificates (migration 0007) ---------------------------------

all_revoked_certificate = sa.Table(
    "__all_revoked_certificate",
    metadata,
    # The certificate's serial number, lower-case hex without separators (up to 20 octets).
    sa.Column("serial", sa.String(64), primary_key=True),
    # Its subject (RFC 4514) and common name, when the revocation was given the certificate.
    sa.Column("subject", sa.String(1024), nullable=False, server_default=""),
    sa.Column("common_name", sa.String(256), nullable=False, server_default=""),
    # When it was revoked, microseconds since the epoch (the revoking RS's clock).
    sa.Column("revoked_at", sa.BigInteger, nullable=False),
    sa.Column("reason", sa.String(1024), nullable=False, server_default=""),
    # The user who revoked it (the statement's principal, or the CLI's certificate user).
    sa.Column("revoked_by", sa.String(128), nullable=False, server_default=""),
    *_gmt(),
)


# --- server drains (migration 0011) ----------------------------------------

all_server_drain = sa.Table(
    "__all_server_drain",
    metadata,
    sa.Column("svr_ip", sa.String(46), primary_key=True),
    sa.Column("svr_port", sa.Integer, primary_key=True, autoincrement=False),
    # DRAINING, FINISHED, TIMEOUT or CANCELED (rootservice/servers/drain.py).
    sa.Column("status", sa.String(16), nullable=False),
    # Microseconds since the epoch (the RS's clock); deadline = start + the statement's TIMEOUT.
    sa.Column("start_time", sa.BigInteger, nullable=False),
    sa.Column("deadline", sa.BigInteger, nullable=False),
    sa.Column("end_time", sa.BigInteger, nullable=False, server_default="0"),
    # The last progress write (at least every 5 s while DRAINING) and what it counted.
    sa.Column("progress_time", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("leaders_left", sa.BigInteger, nullable=False, server_default="-1"),
    sa.Column("copies_left", sa.BigInteger, nullable=False, server_default="-1"),
    # "LS 1001: ..." per blocking log stream, "; "-separated ("" when nothing blocks).
    sa.Column("blockers", sa.String(4096), nullable=False, server_default=""),
    # The RS that wrote the row last ('ip:port').
    sa.Column("rs_svr", sa.String(64), nullable=False, server_default=""),
    *_gmt(),
)
