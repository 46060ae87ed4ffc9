"""The compiled-read cache of rootservice.db.query_repo and the parse cache of sql.reads
("Benchmark": dashboards repeat the same queries): a cached plan answers exactly
what a fresh one does, follows the data, never crosses catalogs, and long texts are never
kept."""

from __future__ import annotations

import sqlalchemy as sa

from rootservice.db import query_repo
from rootservice.db.catalog import Catalog
from rootservice.db.tables import all_zone
from sql import reads
from sql.ast import Query

GROUP_BY = "SELECT zone, count(*) AS n FROM __all_zone GROUP BY zone ORDER BY zone"


def _run(engine: sa.Engine, catalog: Catalog, text: str) -> query_repo.QueryResult:
    q = reads.parse_read(text)
    assert isinstance(q, Query)
    with engine.connect() as conn:
        conn.execution_options(read_only=True)
        return query_repo.run_query(conn, catalog, q, timeout_us=5_000_000, max_rows=1000)


def _add_zone(engine: sa.Engine, zone: str) -> None:
    with engine.begin() as conn:
        conn.execute(all_zone.insert().values(zone=zone, name="status", value=0, info="ACTIVE"))


def test_a_cached_plan_answers_as_a_fresh_one_and_follows_the_data(engine: sa.Engine) -> None:
    catalog = Catalog()
    query_repo._plans.clear()
    first = _run(engine, catalog, GROUP_BY)
    assert len(query_repo._plans) == 1
    _add_zone(engine, "zz")
    second = _run(engine, catalog, GROUP_BY)  # from the cache
    assert len(query_repo._plans) == 1
    assert (
        (second.columns, second.types)
        == (first.columns, first.types)
        == (
            ["zone", "n"],
            ["VARCHAR", "BIGINT"],
        )
    )
    assert second.rows == [*first.rows, ("zz", 1)]
    query_repo._plans.clear()
    assert _run(engine, catalog, GROUP_BY).rows == second.rows  # compiled afresh: the same


def test_plans_are_per_catalog_and_bounded(engine: sa.Engine) -> None:
    query_repo._plans.clear()
    a, b = Catalog(), Catalog()
    _run(engine, a, GROUP_BY)
    _run(engine, b, GROUP_BY)
    assert len(query_repo._plans) == 2
    for i in range(query_repo.PLAN_CACHE_SIZE + 5):
        _run(engine, a, f"SELECT {i} AS x")
    assert len(query_repo._plans) == query_repo.PLAN_CACHE_SIZE
    # The oldest went first: both GROUP BY plans are gone, the last SELECT is kept.
    assert all(k[1] != GROUP_BY for k in query_repo._plans)


def test_parse_cache_keeps_short_texts_only() -> None:
    reads._parse_read_cached.cache_clear()
    short = "SELECT 1"
    assert reads.parse_read(short) is reads.parse_read(short)
    long = "SELECT 1 AS x" + " " * reads.CACHED_TEXT_CHARS
    assert reads.parse_read(long) is not reads.parse_read(long)
    assert reads._parse_read_cached.cache_info().currsize == 1
