"""Full read-only SELECT, SHOW TABLES / DATABASES / COLUMNS and DESC through run_statement, on SQLite and PostgreSQL: real RootService, real database."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from obcommon.errors import ObError
from rootservice.api.dispatch import run_statement
from rootservice.api.statements import Result
from rootservice.app import RootService
from tests.support.harness import ROOT, make_rs


@pytest.fixture
def rs(db_url: str, tmp_path: Path) -> Iterator[RootService]:
    r = make_rs(db_url, tmp_path)
    try:
        yield r
    finally:
        r.shutdown()


def q(rs: RootService, text: str) -> Result:
    return run_statement(rs, text, ROOT)


def refused(rs: RootService, text: str) -> ObError:
    with pytest.raises(ObError) as e:
        q(rs, text)
    return e.value


def counts(rs: RootService) -> dict[str, int]:
    with rs.store.read() as conn:
        return {
            t: conn.execute(sa.text(f"SELECT count(*) FROM {t}")).scalar_one()
            for t in ("__all_server", "__all_zone", "__all_sys_parameter", "__all_user")
        }


def test_select_without_from(rs: RootService) -> None:
    r = q(rs, "SELECT 1, DATABASE(), NOW() IS NOT NULL AS ok")
    assert r.columns == ["1", "DATABASE()", "ok"]
    assert r.rows == [(1, "oceanbase", 1)] or r.rows == [(1, "oceanbase", True)]
    assert r.types is not None and r.types[0] == "BIGINT"


def test_star_headers_types_and_default_order(rs: RootService) -> None:
    r = q(rs, "select * from dba_ob_servers")
    assert r.columns[:3] == ["SVR_IP", "SVR_PORT", "ID"]
    assert r.types is not None and r.types[:3] == ["VARCHAR", "BIGINT", "BIGINT"]
    assert [row[1] for row in r.rows] == sorted(row[1] for row in r.rows)
    base = q(rs, "SELECT * FROM __ALL_SERVER")
    assert base.columns[:2] == ["svr_ip", "svr_port"] and len(base.rows) == len(r.rows)


def test_names_case_insensitive_and_headers_as_written(rs: RootService) -> None:
    r = q(rs, "SELECT Svr_Port, ZONE AS Z FROM oceanbase.__All_Server WHERE Zone = 'z1'")
    assert r.columns == ["Svr_Port", "Z"]
    assert {row[1] for row in r.rows} == {"z1"}


def test_expression_headers_are_the_text_as_typed(rs: RootService) -> None:
    # MySQL names an unaliased expression column by its text as typed.
    r = q(
        rs,
        "SELECT count(*), max( svr_port )+1, upper(zone), zone = 'z1', "
        "CASE WHEN zone = 'z1' THEN 1 ELSE 0 END FROM __all_server GROUP BY zone",
    )
    assert r.columns[:4] == ["count(*)", "max( svr_port )+1", "upper(zone)", "zone = 'z1'"]
    # A CASE's keywords carry no position in sqlglot: its canonical SQL is the header.
    assert r.columns[4] == "CASE WHEN zone = 'z1' THEN 1 ELSE 0 END"


def test_aggregates_group_by_having_order_limit(rs: RootService) -> None:
    r = q(
        rs,
        "SELECT zone, count(*) AS n, max(svr_port) AS top, sum(svr_port) s, avg(id) a "
        "FROM __all_server GROUP BY zone HAVING count(*) >= 1 ORDER BY n DESC, zone LIMIT 1",
    )
    assert r.columns == ["zone", "n", "top", "s", "a"]
    assert len(r.rows) == 1 and r.rows[0][1] >= 1
    assert r.types is not None and r.types[1] == "BIGINT"


def test_join_table_and_view_subquery_cte_union_case(rs: RootService) -> None:
    joined = q(
        rs,
        "SELECT s.svr_ip, s.svr_port, d.STATUS FROM __all_server s "
        "JOIN DBA_OB_SERVERS d ON s.svr_ip = d.SVR_IP AND s.svr_port = d.svr_port "
        "ORDER BY s.svr_port",
    )
    assert len(joined.rows) == len(q(rs, "SELECT * FROM __all_server").rows) > 0
    sub = q(rs, "SELECT svr_port FROM __all_server WHERE id = (SELECT max(id) FROM __all_server)")
    assert len(sub.rows) == 1
    cte = q(rs, "WITH c AS (SELECT zone FROM __all_server) SELECT count(DISTINCT zone) FROM c")
    assert cte.rows[0][0] >= 1
    union = q(rs, "SELECT zone FROM __all_server UNION SELECT zone FROM dba_ob_zones")
    assert len(union.rows) >= 1
    case = q(rs, "SELECT CASE WHEN svr_port > 0 THEN 'up' ELSE 'x' END AS c FROM __all_server")
    assert {row[0] for row in case.rows} == {"up"}


def test_string_and_date_functions(rs: RootService) -> None:
    r = q(
        rs,
        "SELECT upper(zone), concat(zone, '-', svr_port), concat_ws(':', svr_ip, svr_port), "
        "lpad(zone, 4, '*'), rpad(zone, 4, '*'), left(zone, 1), right(zone, 1), length(zone), "
        "substring(zone, 2), replace(zone, 'z', 'Z'), locate('1', zone), trim('  a '), "
        "ifnull(NULL, 'd'), coalesce(NULL, 2), nullif(1, 1), if(1 > 0, 'y', 'n'), "
        "round(2.567, 1), abs(-3), mod(7, 3), greatest(1, 5), least(1, 5), 7 DIV 2, "
        "date_format(gmt_create, '%Y'), date(gmt_create), "
        "timestampdiff(SECOND, gmt_create, date_add(gmt_create, INTERVAL 1 HOUR)), "
        "datediff(date_add(gmt_create, INTERVAL 2 DAY), gmt_create), "
        "unix_timestamp(gmt_create) > 0, from_unixtime(0) IS NOT NULL "
        "FROM __all_server WHERE zone = 'z1' ORDER BY svr_port LIMIT 1",
    )
    row = r.rows[0]
    assert row[:12] == (
        "Z1",
        "z1-3001",
        "127.0.0.1:3001",
        "**z1",
        "z1**",
        "z",
        "1",
        2,
        "1",
        "Z1",
        2,
        "a",
    )
    assert row[12:22] == ("d", 2, None, "y", 2.6, 3, 1, 5, 1, 3)
    assert row[22] == "2026" and str(row[23]).startswith("2026-01-01")
    assert (row[24], row[25]) == (3600, 2)
    assert bool(row[26]) and bool(row[27])


def test_like_is_case_insensitive(rs: RootService) -> None:
    assert q(rs, "SELECT svr_ip FROM __all_server WHERE zone LIKE 'Z%'").rows
    assert not q(rs, "SELECT svr_ip FROM __all_server WHERE zone NOT LIKE 'Z%'").rows


def test_substring_index_and_unix_timestamp_with_microseconds(rs: RootService) -> None:
    """OceanBase's upgrade checkers group servers by SUBSTRING_INDEX(build_version, '_', 1);
    obagent reads a server's start time as FLOOR(UNIX_TIMESTAMP(start_service_time) *
    1000000), which needs the microseconds MySQL keeps in UNIX_TIMESTAMP of a DATETIME(6)."""
    r = q(
        rs,
        "SELECT substring_index('4.2.1_abc_x', '_', 1), substring_index('4.2.1_abc_x', '_', 2), "
        "substring_index('4.2.1_abc_x', '_', -1), substring_index('a', '_', 1), "
        "substring_index('a_b', '_', 0), substring_index(NULL, '_', 1)",
    )
    assert r.rows == [("4.2.1", "4.2.1_abc", "x", "a", "", None)]
    usec = 1_767_225_601_123_457  # 2026-01-01 00:00:01.123457 UTC
    with rs.store.txn() as conn:
        conn.execute(
            sa.text("UPDATE __all_server SET start_service_time = :u WHERE zone = 'z1'"),
            {"u": usec},
        )
    got = q(
        rs,
        "SELECT floor(unix_timestamp(start_service_time) * 1000000) FROM dba_ob_servers "
        "WHERE zone = 'z1'",
    )
    # Exact on PostgreSQL (numeric); SQLite's double may round the last microsecond.
    assert got.rows and all(abs(int(g[0]) - usec) <= 1 for g in got.rows), got.rows


def test_text_compared_with_literals_without_regard_to_case(rs: RootService) -> None:
    """MySQL's default collation: OceanBase's upgrade checker counts the servers out of
    service with ``status != "active"`` of a column holding ``ACTIVE``."""
    statuses = [row[0] for row in q(rs, "SELECT status FROM __all_server").rows]
    status = statuses[0]
    assert status == status.upper()
    same = statuses.count(status)
    low, mixed = status.lower(), status.capitalize()
    assert q(rs, f"SELECT count(*) FROM __all_server WHERE status = '{low}'").rows == [(same,)]
    others = len(statuses) - same
    assert q(rs, f'SELECT count(*) FROM __all_server WHERE status != "{low}"').rows == [(others,)]
    assert q(rs, f"SELECT count(*) FROM __all_server WHERE '{mixed}' <> status").rows == [(others,)]
    assert q(rs, "SELECT count(*) FROM dba_ob_zones WHERE zone IN ('Z1', 'z2')").rows == [(2,)]
    # Numbers and columns compared with columns keep their meaning.
    assert q(rs, "SELECT count(*) FROM __all_server WHERE svr_port = 3001").rows == [(1,)]
    assert q(rs, "SELECT count(*) FROM __all_server WHERE status = 'NOPE'").rows == [(0,)]


def test_unknown_table_and_column(rs: RootService) -> None:
    assert refused(rs, "SELECT * FROM nope").name == "OB_TABLE_NOT_EXIST"
    assert refused(rs, "SELECT * FROM __all_user").name == "OB_TABLE_NOT_EXIST"
    assert refused(rs, "SELECT nope FROM __all_server").name == "OB_ERR_BAD_FIELD_ERROR"


FORBIDDEN = [
    ("SELECT pg_sleep(5)", "ER_NOT_SUPPORTED_YET"),
    ("SELECT sleep(5)", "ER_NOT_SUPPORTED_YET"),
    ("SELECT benchmark(1000, 1)", "ER_NOT_SUPPORTED_YET"),
    ("SELECT load_extension('x')", "ER_NOT_SUPPORTED_YET"),
    ("SELECT set_config('a', 'b', false)", "ER_NOT_SUPPORTED_YET"),
    ("WITH x AS (DELETE FROM __all_server RETURNING *) SELECT * FROM x", None),
    ("WITH x AS (DELETE FROM __all_server) SELECT 1", "ER_NOT_SUPPORTED_YET"),
    ("SELECT 1; DROP TABLE __all_server", "ER_PARSE_ERROR"),
    ("SELECT * FROM __all_server; DELETE FROM __all_server", "ER_PARSE_ERROR"),
    ("SELECT * FROM pg_catalog.pg_user", "OB_TABLE_NOT_EXIST"),
    ("SELECT * FROM pg_user", "OB_TABLE_NOT_EXIST"),
    ("SELECT * FROM sqlite_master", "OB_TABLE_NOT_EXIST"),
    ("SELECT * FROM main.__all_server", "OB_TABLE_NOT_EXIST"),
    ("SELECT * FROM information_schema.tables", "ER_NOT_SUPPORTED_YET"),
    ("SELECT * FROM __all_server INTO OUTFILE '/tmp/ob_x'", "ER_PARSE_ERROR"),
    ("SELECT * INTO OUTFILE '/tmp/ob_x' FROM __all_server", "ER_PARSE_ERROR"),
    ("SELECT * FROM __all_server FOR UPDATE", "ER_NOT_SUPPORTED_YET"),
    ("SELECT * FROM __all_server LOCK IN SHARE MODE", "ER_NOT_SUPPORTED_YET"),
    ("INSERT INTO __all_zone SELECT * FROM __all_zone", "ER_PARSE_ERROR"),
    ("SELECT @@version_comment", "ER_NOT_SUPPORTED_YET"),
    ("SELECT (SELECT pg_sleep(1)) FROM __all_server", "ER_NOT_SUPPORTED_YET"),
]


@pytest.mark.parametrize(("text", "error"), FORBIDDEN, ids=[t for t, _ in FORBIDDEN])
def test_forbidden_shapes_refused_and_nothing_changed(
    rs: RootService, text: str, error: str | None
) -> None:
    before = counts(rs)
    e = refused(rs, text)
    if error is not None:
        assert e.name == error, e
    assert counts(rs) == before


def test_row_limit_both_boundaries(db_url: str, tmp_path: Path) -> None:
    rs = make_rs(db_url, tmp_path, select_max_rows=4)
    try:
        exact = q(rs, "SELECT * FROM __all_server")  # the harness seeds 4 servers
        assert (len(exact.rows), exact.info) == (4, "")
        over = q(rs, "SELECT a.svr_port FROM __all_server a, __all_server b")
        assert (len(over.rows), over.info) == (4, "result truncated")
    finally:
        rs.shutdown()


def test_timeout_stops_a_heavy_cross_join(db_url: str, tmp_path: Path) -> None:
    rs = make_rs(db_url, tmp_path, select_timeout=1_000, allow_short_timings=True)
    try:
        heavy = (
            "SELECT count(*) FROM __all_zone a, __all_zone b, __all_zone c, __all_zone d, "
            "__all_zone e, __all_zone f, __all_zone g"
        )
        assert refused(rs, heavy).name == "OB_TIMEOUT"
        assert q(rs, "SELECT 1").rows == [(1,)]  # the connection is usable again
    finally:
        rs.shutdown()


def test_show_tables_databases_columns_desc(rs: RootService) -> None:
    tables = q(rs, "SHOW TABLES")
    assert tables.columns == ["Tables_in_oceanbase"]
    names = [r[0] for r in tables.rows]
    assert "__all_server" in names and "DBA_OB_SERVERS" in names and "__all_user" not in names
    full = q(rs, "SHOW FULL TABLES FROM oceanbase LIKE 'dba_ob_s%'")
    assert full.columns == ["Tables_in_oceanbase (dba_ob_s%)", "Table_type"]
    assert full.rows == [
        ("DBA_OB_SERVERS", "VIEW"),
        ("DBA_OB_SERVER_TOMBSTONES", "VIEW"),
        ("DBA_OB_SERVER_DRAINS", "VIEW"),
        ("DBA_OB_SERVER_EVENT_HISTORY", "VIEW"),
        ("DBA_OB_SERVER_JOBS", "VIEW"),
    ]
    assert q(rs, "SHOW DATABASES").rows == [("information_schema",), ("oceanbase",)]
    desc = q(rs, "DESC __all_zone")
    assert desc.columns == ["Field", "Type", "Null", "Key", "Default", "Extra"]
    assert desc.rows[0] == ("zone", "varchar(128)", "NO", "PRI", None, "")
    assert q(rs, "SHOW COLUMNS FROM __all_zone").rows == desc.rows
    assert q(rs, "show fields from oceanbase.__all_zone like 'na%'").rows == [desc.rows[1]]
    assert q(rs, "DESCRIBE dba_ob_zones").rows[0][0] == "ZONE"
    assert refused(rs, "DESC nope").name == "OB_TABLE_NOT_EXIST"
    assert refused(rs, "SHOW TABLES FROM mysql").name == "ER_BAD_DB_ERROR"
