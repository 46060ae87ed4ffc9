"""MySQL's loose GROUP BY (columns listed without an aggregate nor in the GROUP BY) answered
on PostgreSQL as MySQL answers it: the rewrite itself, and ob-operator's
``ListParametersGroupByName`` through the SELECT engine on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlglot

from rootservice.app import RootService
from rootservice.db.loose_group_by import any_value_of_ungrouped
from sql.client import result_rows
from tests.support.tenants import make_tenant_rs, sql


def rewritten(query: str) -> tuple[bool, str]:
    tree = sqlglot.parse_one(query, read="mysql")
    assert isinstance(tree, sqlglot.exp.Select)
    changed = any_value_of_ungrouped(tree)
    return changed, tree.sql("postgres")


def test_ungrouped_columns_take_the_first_row_of_the_group() -> None:
    changed, text = rewritten(
        "SELECT name, value, IFNULL(data_type, 'unknown') AS data_type, COUNT(*) AS n "
        "FROM t GROUP BY name"
    )
    assert changed
    assert text == (
        "SELECT name, (ARRAY_AGG(value))[1], "
        "(ARRAY_AGG(COALESCE(data_type, 'unknown')))[1] AS data_type, COUNT(*) AS n "
        "FROM t GROUP BY name"
    )


def test_grouped_aggregated_and_constant_columns_stay_as_written() -> None:
    for query in (
        "SELECT name, UPPER(name) AS u, MAX(value) AS m, 1 AS one FROM t GROUP BY name",
        "SELECT zone, svr_port + 1 AS p FROM t GROUP BY zone, svr_port",
        "SELECT name, value FROM t",  # no GROUP BY: nothing to do
        "SELECT name, (SELECT MAX(x) FROM u) AS s FROM t GROUP BY name",
    ):
        changed, text = rewritten(query)
        assert not changed, text
        assert text == sqlglot.parse_one(query, read="mysql").sql("postgres")


@pytest.fixture
def rs(db_url: str, tmp_path: Path) -> Iterator[RootService]:
    """An RS with servers A..D (z1, z2, z3, z1) heartbeating."""
    r = make_tenant_rs(db_url, tmp_path)
    yield r
    r.shutdown()


def test_ob_operators_parameters_by_name_answer_one_row_each_from_one_server(
    rs: RootService,
) -> None:
    resp = sql(
        rs,
        "select name, value, IFNULL(data_type, 'unknown') as data_type, info, section, "
        "edit_level, scope, svr_ip, zone, svr_port, IFNULL(tenant_id, 0) as tenant_id "
        "from GV$OB_PARAMETERS group by name",
    )
    assert list(resp.columns)[:3] == ["name", "value", "data_type"]
    rows = result_rows(resp)
    names = [r[0] for r in rows]
    assert names and len(names) == len(set(names))
    assert "lease_time" in names and "min_observer_version" in names
    servers = {
        (ip, port, zone)
        for ip, port, zone in result_rows(
            sql(rs, "SELECT svr_ip, svr_port, zone FROM __all_server")
        )
    }
    # Each row's server columns are one server's, not a mix of several rows.
    assert {(r[7], r[9], r[8]) for r in rows} <= servers
    assert {r[10] for r in rows} == {0}


def test_strict_group_bys_read_as_before(rs: RootService) -> None:
    """Positional and alias keys, expressions of keys, HAVING: nothing to rewrite, same
    answer on both engines."""
    rs.persist.run_once()
    want = [("z1", 2), ("z2", 1), ("z3", 1)]
    for query in (
        "SELECT zone, COUNT(*) FROM __all_server GROUP BY 1 ORDER BY 1",
        "SELECT zone AS z, COUNT(*) AS n FROM __all_server GROUP BY z ORDER BY z",
        "SELECT LOWER(zone) AS z, COUNT(*) FROM __all_server GROUP BY LOWER(zone) ORDER BY z",
        "SELECT zone, COUNT(*) AS n FROM __all_server GROUP BY zone HAVING COUNT(*) >= 1 "
        "ORDER BY zone",
    ):
        assert [tuple(r) for r in result_rows(sql(rs, query))] == want, query
