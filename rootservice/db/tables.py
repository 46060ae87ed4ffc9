"""SQLAlchemy Core definitions of the system tables (SPEC.md section 4).

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
)

# Names of the tables and views operators may SELECT from (lower case).
SYSTEM_TABLES = tuple(t.name for t in metadata.sorted_tables)
SYSTEM_VIEWS = ("dba_ob_servers", "dba_ob_zones")
