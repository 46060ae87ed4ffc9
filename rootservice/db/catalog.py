"""The catalog of what operators may read: the system tables and the ``DBA_OB_*`` views.

One :class:`Catalog` per RS process (``RootService.catalog``) reads the database's catalog
once, through SQLAlchemy's inspector, and answers three kinds of callers: the read-only
SELECT engine (:mod:`rootservice.db.query_repo`; names resolved case-insensitively),
``SHOW TABLES`` / ``DESC`` and the MySQL endpoint's ``information_schema`` (
:meth:`Catalog.tables`).

Names are spelled as the product spells them (OceanBase's): tables lower case
(``__all_server``), views and their columns upper case (``DBA_OB_SERVERS.SVR_IP``), whatever
the database did to them (PostgreSQL folds the unquoted view column aliases to lower case;
SQLite keeps them). Types are MySQL column types (``bigint(20)``, ``varchar(128)``,
``datetime(6)``...), the same on SQLite and PostgreSQL: a base table's come from
:mod:`rootservice.db.tables`, a view column's from the database's reflection, except the
columns computed by an expression, which SQLite cannot type and which are listed in
:data:`VIEW_EXPRESSION_TYPES`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Literal

import sqlalchemy as sa

from obcommon.errors import ObError
from rootservice.db.tables import SYSTEM_TABLES, SYSTEM_VIEWS, metadata

TableKind = Literal["BASE TABLE", "VIEW"]

# View columns computed by an expression (CASE, a literal, usec_to_time): SQLite reports no
# type for them and PostgreSQL reports ``text`` / ``timestamp``; one fixed MySQL type keeps
# both engines' DESC alike. Keys are lower-case ``view.column``.
VIEW_EXPRESSION_TYPES: dict[str, str] = {
    "dba_ob_servers.with_rootserver": "varchar(3)",
    "dba_ob_rootservices.build_version": "varchar(256)",
    "dba_ob_servers.start_service_time": "datetime(6)",
    "dba_ob_servers.stop_time": "datetime(6)",
    "dba_ob_servers.block_migrate_in_time": "datetime(6)",
    "dba_ob_servers.last_offline_time": "datetime(6)",
    "dba_ob_servers.suspect_end_time": "datetime(6)",
    "dba_ob_servers.maintenance_end_time": "datetime(6)",
    "dba_ob_server_drains.start_time": "datetime(6)",
    "dba_ob_server_drains.deadline": "datetime(6)",
    "dba_ob_server_drains.end_time": "datetime(6)",
    "dba_ob_server_drains.progress_time": "datetime(6)",
    "dba_ob_servers.lagging_time": "datetime(6)",
    "dba_ob_servers.lagging": "varchar(3)",
    "dba_ob_zones.type": "varchar(9)",
    "dba_ob_resource_pools.tenant_id": "bigint(20)",
    "dba_ob_resource_pools.replica_type": "varchar(4)",
    "dba_ob_units.tenant_id": "bigint(20)",
    "dba_ob_units.migrate_from_svr_ip": "varchar(46)",
    "dba_ob_units.migrate_from_svr_port": "int(11)",
    "dba_ob_units.manual_migrate": "varchar(3)",
    "dba_ob_tenants.tenant_type": "varchar(4)",
    "dba_ob_tenants.previous_locality": "varchar(8192)",
    "dba_ob_tenants.compatibility_mode": "varchar(5)",
    "dba_ob_tenants.in_recyclebin": "varchar(3)",
    "dba_ob_tenants.locked": "varchar(3)",
    "dba_ob_ls_locations.role": "varchar(8)",
    "dba_ob_ls_locations.member_list": "varchar(65536)",
    "dba_ob_ls_locations.replica_type": "varchar(4)",
    "dba_ob_ls_locations.learner_list": "varchar(65536)",
    "dba_ob_ls_locations.rebuild": "varchar(5)",
    "dba_ob_ls_locations.stale": "varchar(3)",
    "dba_ob_ls_locations.last_report_time": "datetime(6)",
    "cdb_ob_ls_locations.role": "varchar(8)",
    "cdb_ob_ls_locations.member_list": "varchar(65536)",
    "cdb_ob_ls_locations.replica_type": "varchar(4)",
    "cdb_ob_ls_locations.learner_list": "varchar(65536)",
    "cdb_ob_ls_locations.rebuild": "varchar(5)",
    "cdb_ob_ls_locations.stale": "varchar(3)",
    "cdb_ob_ls_locations.last_report_time": "datetime(6)",
    "dba_ob_revoked_certificates.revoked_time": "datetime(6)",
    "dba_ob_server_tombstones.delete_time": "datetime(6)",
    # Migration 0014 (OceanBase's types where it has the column).
    "dba_ob_tenants.tenant_role": "varchar(100)",
    "dba_ob_tenants.switchover_status": "varchar(100)",
    "dba_ob_tenants.switchover_epoch": "bigint(20)",
    "dba_ob_tenants.sync_scn": "bigint(20)",
    "dba_ob_tenants.replayable_scn": "bigint(20)",
    "dba_ob_tenants.readable_scn": "bigint(20)",
    "dba_ob_tenants.recovery_until_scn": "bigint(20)",
    "dba_ob_tenants.log_mode": "varchar(100)",
    "dba_ob_tenants.arbitration_service_status": "varchar(64)",
    "dba_ob_tenants.unit_num": "bigint(20)",
    "dba_ob_tenants.compatible": "varchar(128)",
    "dba_ob_tenants.max_ls_id": "bigint(20)",
    "dba_ob_ls_locations.paxos_replica_number": "bigint(20)",
    "cdb_ob_ls_locations.paxos_replica_number": "bigint(20)",
    "dba_ob_rootservice_jobs.result_code": "bigint(20)",
    "gv$ob_servers.cpu_assigned": "double",
    "gv$ob_servers.cpu_assigned_max": "double",
    "gv$ob_servers.mem_assigned": "bigint(20)",
    "gv$ob_servers.log_disk_assigned": "bigint(20)",
    "gv$ob_servers.data_disk_abnormal_time": "datetime(6)",
    "gv$ob_servers.ssl_cert_expired_time": "datetime(6)",
    "gv$ob_units.zone_type": "varchar(128)",
    "gv$ob_units.log_disk_in_use": "bigint(20)",
    "gv$ob_units.data_disk_in_use": "bigint(20)",
    "gv$ob_units.status": "varchar(64)",
    "gv$ob_log_stat.role": "varchar(8)",
    "gv$ob_log_stat.config_version": "varchar(128)",
    "gv$ob_log_stat.access_mode": "varchar(32)",
    "gv$ob_log_stat.in_sync": "varchar(3)",
    "gv$ob_log_stat.base_lsn": "bigint(20)",
    "gv$ob_log_stat.begin_lsn": "bigint(20)",
    "gv$ob_log_stat.begin_scn": "bigint(20)",
    "gv$ob_log_stat.end_lsn": "bigint(20)",
    "gv$ob_log_stat.end_scn": "bigint(20)",
    "gv$ob_log_stat.max_lsn": "bigint(20)",
    "gv$ob_log_stat.max_scn": "bigint(20)",
    "gv$ob_log_stat.arbitration_member": "varchar(128)",
    "gv$ob_log_stat.degraded_list": "varchar(1024)",
    "dba_ob_server_jobs.result_code": "bigint(20)",
    "dba_ob_unit_jobs.result_code": "bigint(20)",
    "dba_ob_unit_jobs.tenant_id": "bigint(20)",
    "dba_ob_tenant_jobs.result_code": "bigint(20)",
    "dba_ob_tenant_jobs.tenant_name": "varchar(128)",
    "cdb_ob_ls.create_scn": "bigint(20)",
    "cdb_ob_ls.drop_scn": "bigint(20)",
    "cdb_ob_ls.sync_scn": "bigint(20)",
    "cdb_ob_ls.readable_scn": "bigint(20)",
    "cdb_ob_ls.flag": "varchar(2048)",
    "cdb_ob_ls_replica_tasks.task_type": "varchar(64)",
    "cdb_ob_ls_replica_tasks.task_id": "varchar(64)",
    "cdb_ob_ls_replica_tasks.task_status": "varchar(64)",
    "cdb_ob_ls_replica_tasks.priority": "varchar(5)",
    "cdb_ob_ls_replica_tasks.target_replica_type": "varchar(16)",
    "cdb_ob_ls_replica_tasks.source_replica_svr_ip": "varchar(46)",
    "cdb_ob_ls_replica_tasks.source_replica_svr_port": "int(11)",
    "cdb_ob_ls_replica_tasks.source_paxos_replica_number": "bigint(20)",
    "cdb_ob_ls_replica_tasks.source_replica_type": "varchar(16)",
    "cdb_ob_ls_replica_tasks.comment": "varchar(4096)",
    "v$ob_servers.cpu_assigned": "double",
    "v$ob_servers.cpu_assigned_max": "double",
    "v$ob_servers.mem_assigned": "bigint(20)",
    "v$ob_servers.log_disk_assigned": "bigint(20)",
    "v$ob_servers.data_disk_abnormal_time": "datetime(6)",
    "v$ob_servers.ssl_cert_expired_time": "datetime(6)",
    # Migration 0020: the parameter rows are a UNION of the table's columns and literals.
    "gv$ob_parameters.scope": "varchar(64)",
    "gv$ob_parameters.tenant_id": "bigint(20)",
    "gv$ob_parameters.name": "varchar(128)",
    "gv$ob_parameters.data_type": "varchar(128)",
    "gv$ob_parameters.value": "varchar(65536)",
    "gv$ob_parameters.info": "varchar(4096)",
    "gv$ob_parameters.section": "varchar(128)",
    "gv$ob_parameters.edit_level": "varchar(128)",
    "gv$ob_parameters.default_value": "varchar(65536)",
    "gv$ob_parameters.isdefault": "varchar(3)",
    "v$ob_parameters.scope": "varchar(64)",
    "v$ob_parameters.tenant_id": "bigint(20)",
    "v$ob_parameters.name": "varchar(128)",
    "v$ob_parameters.data_type": "varchar(128)",
    "v$ob_parameters.value": "varchar(65536)",
    "v$ob_parameters.info": "varchar(4096)",
    "v$ob_parameters.section": "varchar(128)",
    "v$ob_parameters.edit_level": "varchar(128)",
    "v$ob_parameters.default_value": "varchar(65536)",
    "v$ob_parameters.isdefault": "varchar(3)",
}


@dataclass(frozen=True)
class ColumnInfo:
    """One column as DESC shows it: ``name`` as the product spells it, ``mysql_type`` a MySQL
    column type (``bigint(20)``, ``int(11)``, ``varchar(128)``, ``double``, ``longtext``,
    ``datetime(6)``), ``nullable``, ``key`` ``"PRI"`` for a primary-key column else ``""``,
    ``default`` the default as MySQL prints it (``'0'`` -> ``0``; ``CURRENT_TIMESTAMP``) or
    None. ``db_name`` is the name in the database (for the SELECT engine)."""

    name: str
    mysql_type: str
    nullable: bool
    key: Literal["PRI", ""] = ""
    default: str | None = None
    db_name: str = ""


@dataclass(frozen=True)
class TableInfo:
    """A system table or view: ``name`` as the product spells it (``__all_server``,
    ``DBA_OB_SERVERS``), ``kind`` as ``information_schema.TABLES.TABLE_TYPE`` says it, its
    ``columns`` in the database's order, ``db_name`` its name in the database."""

    name: str
    kind: TableKind
    columns: list[ColumnInfo] = field(default_factory=list)
    db_name: str = ""

    def column(self, name: str) -> ColumnInfo | None:
        """The column called ``name`` (any case), or None."""
        lower = name.lower()
        return next((c for c in self.columns if c.name.lower() == lower), None)


def mysql_type(t: sa.types.TypeEngine[object]) -> str:
    """The MySQL column type of a SQLAlchemy type (as MySQL 5.7 / OceanBase print it in
    DESC); an unknown type is ``longtext``."""
    if isinstance(t, sa.BigInteger):
        return "bigint(20)"
    if isinstance(t, sa.SmallInteger):
        return "smallint(6)"
    if isinstance(t, sa.Integer):
        return "int(11)"
    if isinstance(t, sa.Float):  # before Numeric: Float is a Numeric
        return "double"
    if isinstance(t, sa.Numeric):
        if t.precision is not None:
            return f"decimal({t.precision},{t.scale or 0})"
        return "decimal(65,30)"
    if isinstance(t, sa.DateTime):
        return "datetime(6)"
    if isinstance(t, sa.Date):
        return "date"
    if isinstance(t, sa.Boolean):
        return "tinyint(1)"
    if isinstance(t, sa.String) and not isinstance(t, sa.Text) and t.length is not None:
        return f"varchar({t.length})"
    return "longtext"


def _default(col: sa.Column[object]) -> str | None:
    sd = col.server_default
    if sd is None or not isinstance(sd, sa.DefaultClause):
        return None
    arg = sd.arg
    if isinstance(arg, str):
        return arg
    # A SQL function (current_timestamp()): MySQL prints CURRENT_TIMESTAMP.
    return "CURRENT_TIMESTAMP"


def _table_info(table: sa.Table, db_name: str, db_columns: dict[str, str]) -> TableInfo:
    cols = [
        ColumnInfo(
            name=c.name,
            mysql_type=mysql_type(c.type),
            nullable=bool(c.nullable),
            key="PRI" if c.primary_key else "",
            default=_default(c),
            db_name=db_columns.get(c.name, c.name),
        )
        for c in table.columns
        if c.name in db_columns
    ]
    return TableInfo(table.name, "BASE TABLE", cols, db_name)


def _view_info(view: str, db_name: str, reflected: list[dict[str, object]]) -> TableInfo:
    cols = []
    for c in reflected:
        actual = str(c["name"])
        t = c["type"]
        fixed = VIEW_EXPRESSION_TYPES.get(f"{view}.{actual.lower()}")
        typ = fixed or (mysql_type(t) if isinstance(t, sa.types.TypeEngine) else "longtext")
        cols.append(ColumnInfo(actual.upper(), typ, True, "", None, actual))
    return TableInfo(view.upper(), "VIEW", cols, db_name)


class Catalog:
    """The system tables and views of one database, read once (later schema changes are not
    seen; the schema changes only with a migration, which restarts the RS). Thread-safe."""

    def __init__(self) -> None:
        """Empty until the first call, which reads the whole catalog through its connection."""
        self._tables: dict[str, TableInfo] | None = None
        self._lock = threading.Lock()

    def _load(self, conn: sa.Connection) -> dict[str, TableInfo]:
        with self._lock:
            if self._tables is None:
                insp = sa.inspect(conn)
                actual = {n.lower(): n for n in insp.get_table_names()}
                views = {n.lower(): n for n in insp.get_view_names()}
                out: dict[str, TableInfo] = {}
                for name in SYSTEM_TABLES:
                    if name in actual:
                        db_cols = {
                            c["name"].lower(): c["name"] for c in insp.get_columns(actual[name])
                        }
                        out[name] = _table_info(metadata.tables[name], actual[name], db_cols)
                for name in SYSTEM_VIEWS:
                    if name in views:
                        reflected = [dict(c) for c in insp.get_columns(views[name])]
                        out[name] = _view_info(name, views[name], reflected)
                self._tables = out
            return self._tables

    def tables(self, conn: sa.Connection) -> list[TableInfo]:
        """Every system table and view present in the database (``conn``'s), tables first,
        each group in :data:`~rootservice.db.tables.SYSTEM_TABLES` /
        :data:`~rootservice.db.tables.SYSTEM_VIEWS` order (the MySQL endpoint's
        ``information_schema`` and ``SHOW TABLES``)."""
        return list(self._load(conn).values())

    def find(self, conn: sa.Connection, name: str) -> TableInfo | None:
        """The table or view called ``name`` (any case), or None."""
        return self._load(conn).get(name.lower())

    def get(self, conn: sa.Connection, name: str) -> TableInfo:
        """The table or view called ``name`` (any case). Raises ``ObError(OB_TABLE_NOT_EXIST)``
        (MySQL's 1146 ``Table 'oceanbase.x' doesn't exist``) when there is none."""
        found = self.find(conn, name)
        if found is None:
            raise ObError("OB_TABLE_NOT_EXIST", f"oceanbase.{name[:64]}")
        return found
