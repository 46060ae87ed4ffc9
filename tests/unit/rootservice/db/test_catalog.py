"""rootservice.db.catalog: the tables and views operators may read, with MySQL column types,
alike on SQLite and PostgreSQL (SHOW TABLES, DESC, information_schema)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from obcommon.errors import ObError
from rootservice.db.catalog import Catalog
from rootservice.db.tables import SYSTEM_TABLES, SYSTEM_VIEWS


def test_tables_lists_every_system_table_and_view_as_the_product_spells_them(
    engine: sa.Engine,
) -> None:
    with engine.connect() as conn:
        tables = Catalog().tables(conn)
    assert [t.name for t in tables] == [*SYSTEM_TABLES, *[v.upper() for v in SYSTEM_VIEWS]]
    kinds = {t.name: t.kind for t in tables}
    assert kinds["__all_server"] == "BASE TABLE" and kinds["DBA_OB_SERVERS"] == "VIEW"
    assert "__all_user" not in kinds  # password hashes are not for SELECT


def test_columns_have_mysql_types_keys_and_defaults(engine: sa.Engine) -> None:
    with engine.connect() as conn:
        server = Catalog().get(conn, "__ALL_SERVER")
        view = Catalog().get(conn, "dba_ob_servers")
    cols = {c.name: c for c in server.columns}
    assert [c.name for c in server.columns][:3] == ["svr_ip", "svr_port", "id"]
    assert (cols["svr_ip"].mysql_type, cols["svr_ip"].key, cols["svr_ip"].nullable) == (
        "varchar(46)",
        "PRI",
        False,
    )
    assert (cols["svr_port"].mysql_type, cols["stop_time"].mysql_type) == ("int(11)", "bigint(20)")
    assert (cols["stop_time"].default, cols["zone"].default) == ("0", None)
    assert cols["gmt_create"].mysql_type == "datetime(6)"
    assert cols["gmt_create"].default == "CURRENT_TIMESTAMP"
    vcols = {c.name: c for c in view.columns}
    assert list(vcols)[:2] == ["SVR_IP", "SVR_PORT"]
    assert vcols["STOP_TIME"].mysql_type == "datetime(6)"
    assert vcols["WITH_ROOTSERVER"].mysql_type == "varchar(3)"
    assert view.column("svr_ip") is vcols["SVR_IP"]


def test_every_view_column_has_the_same_type_on_both_engines(engine: sa.Engine) -> None:
    # The expected types are written out for the columns SQLite cannot type; the others come
    # from the database: a type PostgreSQL reports differently would show up here.
    with engine.connect() as conn:
        views = [t for t in Catalog().tables(conn) if t.kind == "VIEW"]
    got = {f"{t.name}.{c.name}": c.mysql_type for t in views for c in t.columns}
    assert got["DBA_OB_UNIT_CONFIGS.MAX_CPU"] == "double"
    assert got["DBA_OB_LS_LOCATIONS.ROLE"] == "varchar(8)"
    assert got["DBA_OB_ROOTSERVICE_JOBS.SQL_TEXT"] == "longtext"
    assert got["DBA_OB_ZONES.IDC"] == "varchar(4096)"
    assert got["DBA_OB_SERVERS.CREATE_TIME"] == "datetime(6)"
    assert got["DBA_OB_LS.TENANT_ID"] == "bigint(20)"
    # The jobs' SQL_TEXT is a TEXT column (the four job views); nothing else is untyped.
    assert "longtext" not in {v for k, v in got.items() if not k.endswith("_JOBS.SQL_TEXT")}


def test_unknown_table_is_mysql_1146(engine: sa.Engine) -> None:
    with engine.connect() as conn, pytest.raises(ObError) as e:
        Catalog().get(conn, "nope")
    assert e.value.name == "OB_TABLE_NOT_EXIST" and "oceanbase.nope" in str(e.value)
