"""Statement dispatch (rootservice.api.dispatch): the term's gate asked once per statement,
with what each statement needs (docs/design/statements.md and docs/design/ha.md; the standbys)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rootservice.api.dispatch import LEADER_ONLY, UNGATED, execute_sql
from sql import ast
from tests.support.harness import ROOT, SEEDED, make_rs

SERVER = SEEDED[0][0]
NEEDS_SERVICE = [
    f"ALTER SYSTEM STOP SERVER '{SERVER}'",
    f"ALTER SYSTEM START SERVER '{SERVER}'",
    f"ALTER SYSTEM DELETE SERVER '{SERVER}'",
    f"ALTER SYSTEM CANCEL DELETE SERVER '{SERVER}'",
    "ALTER SYSTEM ADD SERVER '127.0.0.1:3999' ZONE 'z1'",
    "ALTER SYSTEM RELOAD SERVER",
    "ALTER SYSTEM ADD ZONE z9",
    "CREATE RESOURCE UNIT u1 MAX_CPU 1, MEMORY_SIZE '1G'",
    "DROP RESOURCE POOL p1",
    "DROP TENANT t1",
    "ALTER SYSTEM SWITCH REPLICA LEADER LS 1001 SERVER '127.0.0.1:3001' TENANT t1",
]
UNGATED_STATEMENTS = ["SELECT * FROM __all_server", "SHOW PARAMETERS LIKE 'lease%'"]


def error(rs: object, statement: str) -> str:
    return execute_sql(rs, statement, ROOT).error.name  # type: ignore[arg-type]


def test_the_gate_table_names_statements() -> None:
    assert {
        ast.Bootstrap,
        ast.SetParameters,
        ast.CreateUser,
        ast.DropUser,
        ast.AlterUser,
        ast.Grant,
        ast.Revoke,
        ast.RevokeCertificate,
    } == LEADER_ONLY
    assert {
        ast.Query,
        ast.ShowTables,
        ast.ShowDatabases,
        ast.Describe,
        ast.ShowParameters,
        ast.ShowGrants,
    } == UNGATED


@pytest.mark.parametrize("statement", NEEDS_SERVICE)
def test_a_standby_refuses_what_needs_the_leader(
    statement: str, db_url: str, tmp_path: Path
) -> None:
    rs = make_rs(db_url, tmp_path)
    try:
        assert rs.term.request_step_down("test")
        assert error(rs, statement) == "OB_RS_NOT_MASTER"
        assert error(rs, "ALTER SYSTEM SET lease_time = '9s'") == "OB_RS_NOT_MASTER"
        for read in UNGATED_STATEMENTS:
            assert error(rs, read) == ""
        assert rs.settings.lease_time == 10_000_000
    finally:
        rs.shutdown()


def test_before_bootstrap_only_bootstrap_set_and_reads_pass(db_url: str, tmp_path: Path) -> None:
    rs = make_rs(db_url, tmp_path, seed=False)
    try:
        assert rs.term.state.value == "WAIT_BOOTSTRAP"
        for statement in NEEDS_SERVICE:
            assert error(rs, statement) == "OB_RS_NOT_MASTER", statement
        for read in UNGATED_STATEMENTS:
            assert error(rs, read) == ""
        assert error(rs, "ALTER SYSTEM SET lease_time = '9s'") == ""
        assert rs.settings.lease_time == 9_000_000
        # BOOTSTRAP passes the gate and fails further on (no agent listens there).
        assert error(rs, "ALTER SYSTEM BOOTSTRAP ZONE 'z1' SERVER '127.0.0.1:1'") not in (
            "",
            "OB_RS_NOT_MASTER",
        )
    finally:
        rs.shutdown()
