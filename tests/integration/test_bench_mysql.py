"""``make bench-mysql`` smoke run: the MySQL-endpoint benchmark with ``--quick`` on
SQLite over 50 servers and one client, real RS and client processes. No figure is asserted,
only its counts: every (query, target) case ran statements, and the endpoint returned the
same number of rows as the database read directly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench import mysql_bench

pytestmark = pytest.mark.integration

SERVERS = 50


def test_quick_run_answers_both_queries_through_the_endpoint_and_directly(tmp_path: Path) -> None:
    out = tmp_path / "mysql.json"
    argv = ["--quick", "--db", "sqlite", "--servers", str(SERVERS), "--clients", "1"]
    assert mysql_bench.main([*argv, "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["servers"] == SERVERS
    cases = {(r["db"], r["query"], r["target"]): r for r in doc["results"]}
    assert set(cases) == {
        ("sqlite", q, t) for q in mysql_bench.QUERIES for t in ("mysql", "direct")
    }
    for key, r in cases.items():
        assert r["statements"] > 0, key
    # The same rows either way: every seeded server, and one group per zone (none heartbeats,
    # so all share one status).
    for query, rows in (("servers", SERVERS), ("group_by", 3)):
        assert cases[("sqlite", query, "mysql")]["rows"] == rows
        assert cases[("sqlite", query, "direct")]["rows"] == rows
