"""The Alembic migrations on SQLite and PostgreSQL: the schema of docs/design/servers.md#the-tables, the
DBA_OB_SERVERS / DBA_OB_ZONES views, and a repeatable walk up to head and back to base."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa

from rootservice.db import tables
from rootservice.db.engine import current_revision, downgrade, head_revision, make_engine, upgrade

# docs/design/servers.md#the-tables: column -> the SQLAlchemy type family it must reflect as.
ALL_SERVER_COLUMNS: dict[str, str] = {
    "svr_ip": "varchar",
    "svr_port": "int",
    "id": "int",
    "zone": "varchar",
    "inner_port": "int",
    "with_rootserver": "int",
    "status": "varchar",
    "block_migrate_in_time": "bigint",
    "build_version": "varchar",
    "stop_time": "bigint",
    "start_service_time": "bigint",
    "first_sessid": "bigint",
    "with_partition": "int",
    "last_offline_time": "bigint",
    "gmt_create": "timestamp",
    "gmt_modified": "timestamp",
    "suspect_end_time": "bigint",
    "maintenance_end_time": "bigint",
    "lagging_time": "bigint",
}

OTHER_TABLES = {
    "__all_zone",
    "__all_sys_parameter",
    "__all_rootservice_job",
    "__all_rootservice_event_history",
    "__all_service_epoch",
}

# OceanBase 4.x column order of the two views.
DBA_OB_SERVERS_COLUMNS = [
    "SVR_IP",
    "SVR_PORT",
    "ID",
    "ZONE",
    "SQL_PORT",
    "WITH_ROOTSERVER",
    "STATUS",
    "START_SERVICE_TIME",
    "STOP_TIME",
    "BLOCK_MIGRATE_IN_TIME",
    "CREATE_TIME",
    "MODIFY_TIME",
    "BUILD_VERSION",
    "LAST_OFFLINE_TIME",
    "SUSPECT_END_TIME",
    "MAINTENANCE_END_TIME",
    "LAGGING",
    "LAGGING_TIME",
]
DBA_OB_ZONES_COLUMNS = ["ZONE", "CREATE_TIME", "MODIFY_TIME", "STATUS", "IDC", "REGION", "TYPE"]

JAN_1_2026_US = 1_767_225_600_000_000  # 2026-01-01 00:00:00 UTC in microseconds


def _type_family(t: sa.types.TypeEngine[Any]) -> str:
    # BigInteger is a subclass of Integer, so test it first.
    if isinstance(t, sa.BigInteger):
        return "bigint"
    if isinstance(t, sa.Integer):
        return "int"
    if isinstance(t, sa.String):
        return "varchar"
    if isinstance(t, sa.DateTime):
        return "timestamp"
    return repr(t)


def _as_utc(v: Any) -> datetime | None:
    """A view's time as an aware UTC datetime. The views return naive UTC times like
    gmt_create (natively on PostgreSQL, as ISO text on SQLite); an aware value would mean
    the view leaks the session's time zone."""
    if v is None:
        return None
    dt = v if isinstance(v, datetime) else datetime.fromisoformat(str(v))
    assert dt.tzinfo is None, f"expected a naive UTC time, got {dt!r}"
    return dt.replace(tzinfo=UTC)


def _lower_keys(row: sa.Row[Any]) -> dict[str, Any]:
    # PostgreSQL folds unquoted identifiers to lower case; SQLite keeps them as written.
    return {k.lower(): v for k, v in row._mapping.items()}


def _insert_server(conn: sa.Connection, ip: str, port: int, sid: int, **extra: Any) -> None:
    cols = {"svr_ip": ip, "svr_port": port, "id": sid, "zone": "z1", "inner_port": 2881}
    cols.setdefault("status", "ACTIVE")
    cols.update(extra)
    names = ", ".join(cols)
    params = ", ".join(f":{c}" for c in cols)
    conn.execute(sa.text(f"INSERT INTO __all_server ({names}) VALUES ({params})"), cols)


def test_upgrade_walks_from_empty_to_head(db_url: str) -> None:
    eng = make_engine(db_url)
    try:
        assert current_revision(eng) is None
        assert sa.inspect(eng).get_table_names() == []
        head = head_revision()
        assert head is not None
        upgrade(eng)
        assert current_revision(eng) == head
        # Upgrading a database already at head is a no-op, not an error (every RS start
        # runs it).
        upgrade(eng)
        assert current_revision(eng) == head
        assert "__all_server" in sa.inspect(eng).get_table_names()
    finally:
        eng.dispose()


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_two_root_services_migrating_at_once_both_finish_at_head(db_url: str) -> None:
    """Two RS processes starting together on an empty PostgreSQL both run ``upgrade``: the
    migration lock makes the second wait and find the schema at head, instead of creating
    the same tables beside the first (SQLite has one writer: nothing to test there)."""
    engines = [make_engine(db_url) for _ in range(2)]
    start = threading.Barrier(2)
    failed: list[BaseException] = []

    def migrate(eng: sa.Engine) -> None:
        try:
            start.wait(30)
            upgrade(eng)
        except BaseException as e:  # noqa: BLE001 - reported by the assertion below
            failed.append(e)

    threads = [threading.Thread(target=migrate, args=(e,), daemon=True) for e in engines]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads), "an upgrade still runs after 60 s"
        assert failed == []
        assert current_revision(engines[0]) == head_revision()
    finally:
        for e in engines:
            e.dispose()


def test_all_server_has_exactly_the_spec_columns_and_key(engine: sa.Engine) -> None:
    insp = sa.inspect(engine)
    cols = {c["name"]: c for c in insp.get_columns("__all_server")}
    assert set(cols) == set(ALL_SERVER_COLUMNS)
    families = {name: _type_family(c["type"]) for name, c in cols.items()}
    assert families == ALL_SERVER_COLUMNS
    assert insp.get_pk_constraint("__all_server")["constrained_columns"] == ["svr_ip", "svr_port"]


def test_all_server_defaults_are_zero(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        _insert_server(conn, "10.0.0.1", 2882, 1)
    with engine.connect() as conn:
        row = conn.execute(
            sa.text(
                "SELECT stop_time, first_sessid, with_partition, last_offline_time, "
                "gmt_create, gmt_modified FROM __all_server WHERE svr_ip = '10.0.0.1'"
            )
        ).one()
    assert tuple(row[:4]) == (0, 0, 0, 0)
    assert row.gmt_create is not None and row.gmt_modified is not None


def test_other_system_tables_exist_and_match_tables_py(engine: sa.Engine) -> None:
    insp = sa.inspect(engine)
    names = set(insp.get_table_names())
    assert names >= OTHER_TABLES | {"__all_server"}
    # tables.py mirrors the migrations for the code's queries; a drift between the two
    # would only show up as a runtime SQL error, so compare them here.
    for table in tables.metadata.sorted_tables:
        reflected = [c["name"] for c in insp.get_columns(table.name)]
        assert reflected == [c.name for c in table.columns], table.name


def test_views_have_oceanbase_column_names(engine: sa.Engine) -> None:
    insp = sa.inspect(engine)
    assert {"dba_ob_servers", "dba_ob_zones"} <= {v.lower() for v in insp.get_view_names()}
    for view, expected in (
        ("dba_ob_servers", DBA_OB_SERVERS_COLUMNS),
        ("dba_ob_zones", DBA_OB_ZONES_COLUMNS),
    ):
        reflected = [c["name"].upper() for c in insp.get_columns(view)]
        assert reflected == expected, view
        with engine.connect() as conn:
            keys = list(conn.execute(sa.text(f"SELECT * FROM {view}")).keys())
        assert [k.upper() for k in keys] == expected, view


def test_dba_ob_servers_converts_times_and_flags(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        _insert_server(
            conn,
            "10.0.0.1",
            2882,
            1,
            with_rootserver=1,
            stop_time=JAN_1_2026_US,
            # 61.5 s later: checks the unit (microseconds, not milliseconds) and that
            # the fraction is kept or dropped, never rounded into the next second.
            block_migrate_in_time=JAN_1_2026_US + 61_500_000,
            build_version="4.2.1.0",
            suspect_end_time=JAN_1_2026_US + 30_000_000,
            lagging_time=JAN_1_2026_US + 45_000_000,
        )
        _insert_server(conn, "10.0.0.2", 2882, 2, status="INACTIVE")
    with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            # The view must show UTC whatever the session's time zone.
            conn.exec_driver_sql("SET TIME ZONE 'Asia/Shanghai'")
        rows = {
            r["svr_ip"]: r
            for r in map(
                _lower_keys, conn.execute(sa.text("SELECT * FROM dba_ob_servers")).fetchall()
            )
        }
    assert set(rows) == {"10.0.0.1", "10.0.0.2"}
    a, b = rows["10.0.0.1"], rows["10.0.0.2"]
    assert (a["svr_port"], a["id"], a["zone"], a["sql_port"]) == (2882, 1, "z1", 2881)
    assert a["with_rootserver"] == "YES"
    assert b["with_rootserver"] == "NO"
    assert _as_utc(a["stop_time"]) == datetime(2026, 1, 1, 0, 0, 0, tzinfo=UTC)
    blocked = _as_utc(a["block_migrate_in_time"])
    assert blocked is not None
    assert blocked.replace(microsecond=0) == datetime(2026, 1, 1, 0, 1, 1, tzinfo=UTC)
    # 0 means "never" and shows as NULL.
    assert a["start_service_time"] is None
    assert a["last_offline_time"] is None
    assert b["stop_time"] is None
    # SUSPECT until a time, NULL when not SUSPECT.
    assert _as_utc(a["suspect_end_time"]) == datetime(2026, 1, 1, 0, 0, 30, tzinfo=UTC)
    assert b["suspect_end_time"] is None
    # LAGGING since a time, NO / NULL when not.
    assert a["lagging"] == "YES" and b["lagging"] == "NO"
    assert _as_utc(a["lagging_time"]) == datetime(2026, 1, 1, 0, 0, 45, tzinfo=UTC)
    assert b["lagging_time"] is None
    assert a["status"] == "ACTIVE" and b["status"] == "INACTIVE"
    assert a["build_version"] == "4.2.1.0"
    assert a["create_time"] is not None and a["modify_time"] is not None


def test_dba_ob_zones_folds_zone_rows_into_one(engine: sa.Engine) -> None:
    rows = [
        ("z1", "status", "ACTIVE"),
        ("z1", "region", "hangzhou"),
        ("z1", "idc", "hz-idc1"),
        ("z2", "status", "INACTIVE"),
        # Cluster-wide rows live under the empty zone name and are not a zone.
        ("", "status", "ACTIVE"),
    ]
    with engine.begin() as conn:
        conn.execute(
            sa.text("INSERT INTO __all_zone (zone, name, value, info) VALUES (:z, :n, 0, :i)"),
            [{"z": z, "n": n, "i": i} for z, n, i in rows],
        )
    with engine.connect() as conn:
        result = [
            _lower_keys(r)
            for r in conn.execute(sa.text("SELECT * FROM dba_ob_zones ORDER BY zone")).fetchall()
        ]
    assert [r["zone"] for r in result] == ["z1", "z2"]
    z1 = result[0]
    assert (z1["status"], z1["region"], z1["idc"]) == ("ACTIVE", "hangzhou", "hz-idc1")
    assert z1["type"] == "ReadWrite"
    assert z1["create_time"] is not None
    assert result[1]["status"] == "INACTIVE"


def test_downgrade_to_base_removes_everything_and_upgrade_repeats(engine: sa.Engine) -> None:
    # Data in the tables must not stop the downgrade.
    with engine.begin() as conn:
        _insert_server(conn, "10.0.0.1", 2882, 1)
    downgrade(engine, "base")
    insp = sa.inspect(engine)
    # Alembic keeps its (now empty) bookkeeping table, and the previous release's stamp
    # (rootservice.db.schema_version) stays; nothing else of ours may remain.
    assert set(insp.get_table_names()) <= {"__all_schema_version", "alembic_version"}
    assert insp.get_view_names() == []
    assert current_revision(engine) is None

    upgrade(engine)
    assert current_revision(engine) == head_revision()
    insp = sa.inspect(engine)
    assert set(insp.get_table_names()) >= OTHER_TABLES | {"__all_server"}
    assert {"dba_ob_servers", "dba_ob_zones"} <= set(insp.get_view_names())
    with engine.connect() as conn:
        # A fresh schema: the row inserted before the downgrade is gone.
        assert conn.execute(sa.text("SELECT count(*) FROM __all_server")).scalar_one() == 0


# OceanBase 4.x column names of the tenant-layer views (TENANT_ID added to DBA_OB_LS and
# DBA_OB_LS_LOCATIONS, as in their CDB_ forms, because the RS sees every tenant).
TENANT_VIEW_COLUMNS = {
    "dba_ob_unit_configs": ["UNIT_CONFIG_ID", "NAME", "CREATE_TIME", "MODIFY_TIME", "MAX_CPU",
                            "MIN_CPU", "MEMORY_SIZE", "LOG_DISK_SIZE", "MAX_IOPS", "MIN_IOPS",
                            "IOPS_WEIGHT"],
    "dba_ob_resource_pools": ["RESOURCE_POOL_ID", "NAME", "TENANT_ID", "CREATE_TIME",
                              "MODIFY_TIME", "UNIT_COUNT", "UNIT_CONFIG_ID", "ZONE_LIST",
                              "REPLICA_TYPE"],
    "dba_ob_units": ["UNIT_ID", "TENANT_ID", "STATUS", "RESOURCE_POOL_ID", "UNIT_GROUP_ID",
                     "CREATE_TIME", "MODIFY_TIME", "ZONE", "SVR_IP", "SVR_PORT",
                     "MIGRATE_FROM_SVR_IP", "MIGRATE_FROM_SVR_PORT", "MANUAL_MIGRATE",
                     "UNIT_CONFIG_ID", "MAX_CPU", "MIN_CPU", "MEMORY_SIZE", "LOG_DISK_SIZE",
                     "MAX_IOPS", "MIN_IOPS", "IOPS_WEIGHT"],
    "dba_ob_tenants": ["TENANT_ID", "TENANT_NAME", "TENANT_TYPE", "CREATE_TIME", "MODIFY_TIME",
                       "PRIMARY_ZONE", "LOCALITY", "PREVIOUS_LOCALITY", "COMPATIBILITY_MODE",
                       "STATUS", "IN_RECYCLEBIN", "LOCKED", "TENANT_ROLE",
                       "SWITCHOVER_STATUS", "SWITCHOVER_EPOCH", "SYNC_SCN", "REPLAYABLE_SCN",
                       "READABLE_SCN", "RECOVERY_UNTIL_SCN", "LOG_MODE",
                       "ARBITRATION_SERVICE_STATUS", "UNIT_NUM", "COMPATIBLE", "MAX_LS_ID"],
    "dba_ob_ls": ["TENANT_ID", "LS_ID", "STATUS", "PRIMARY_ZONE", "UNIT_GROUP_ID",
                  "LS_GROUP_ID", "CREATE_TIME", "MODIFY_TIME"],
    "dba_ob_ls_locations": ["CREATE_TIME", "MODIFY_TIME", "TENANT_ID", "LS_ID", "SVR_IP",
                            "SVR_PORT", "SQL_PORT", "ZONE", "ROLE", "MEMBER_LIST",
                            "PAXOS_REPLICA_NUMBER", "REPLICA_TYPE", "LEARNER_LIST", "REBUILD",
                            "REPLICA_STATUS", "UNIT_ID", "DATA_SIZE", "REQUIRED_SIZE",
                            "STALE", "LAST_REPORT_TIME"],
}  # fmt: skip
TENANT_VIEW_COLUMNS["cdb_ob_ls_locations"] = TENANT_VIEW_COLUMNS["dba_ob_ls_locations"]


def test_tenant_views_have_oceanbase_column_names(engine: sa.Engine) -> None:
    for view, expected in TENANT_VIEW_COLUMNS.items():
        with engine.connect() as conn:
            cols = list(conn.execute(sa.text(f"SELECT * FROM {view} WHERE 1 = 0")).keys())
        assert [c.upper() for c in cols] == expected, view


def test_tenant_tables_downgrade_to_0002_and_back(engine: sa.Engine) -> None:
    downgrade(engine, "0002")
    insp = sa.inspect(engine)
    assert "__all_unit" not in insp.get_table_names()
    assert "dba_ob_units" not in {v.lower() for v in insp.get_view_names()}
    assert "__all_server" in insp.get_table_names()
    upgrade(engine)
    assert current_revision(engine) == head_revision()
    assert "__all_ls_meta_table" in sa.inspect(engine).get_table_names()
