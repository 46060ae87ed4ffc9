"""Every statement is one line on the ``rootservice.audit`` logger from the one statement path: user, client, front end, kind, outcome, duration; passwords masked; reads
at DEBUG, changes and refusals at INFO."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from obcommon.errors import ObError
from rootservice.api.dispatch import run_statement
from rootservice.app import RootService
from rootservice.auth.principal import Principal
from tests.support.harness import ROOT, make_rs

ALICE = Principal("alice", "10.0.0.9:5555")


@pytest.fixture
def rs(db_url: str, tmp_path: Path) -> Iterator[RootService]:
    service = make_rs(db_url, tmp_path)
    yield service
    service.shutdown()


def _run(rs: RootService, text: str, who: Principal = ROOT, front_end: str = "grpc") -> str:
    try:
        run_statement(rs, text, who, front_end=front_end)
    except ObError as e:
        return e.name
    return "OK"


def test_one_line_per_statement_with_its_fields(
    rs: RootService, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="rootservice.audit"):
        assert _run(rs, "CREATE USER alice IDENTIFIED BY 'secret pw'", front_end="mysql") == "OK"
        assert _run(rs, 'ALTER USER alice IDENTIFIED BY "other\'pw"') == "OK"
        assert _run(rs, "SELECT * FROM __all_server") == "OK"
        assert _run(rs, "ALTER SYSTEM ADD ZONE z9", ALICE, "http") == (
            "ER_SPECIFIC_ACCESS_DENIED_ERROR"
        )
        assert _run(rs, "FROB") == "ER_PARSE_ERROR"
    recs = [r for r in caplog.records if r.getMessage().startswith("statement ")]
    got = [
        (r.levelname, r.user, r.front_end, r.kind, r.outcome)  # type: ignore[attr-defined]
        for r in recs
    ]
    assert got == [
        ("INFO", "root", "mysql", "CreateUser", "OK"),
        ("INFO", "root", "grpc", "AlterUser", "OK"),
        ("DEBUG", "root", "grpc", "Query", "OK"),
        ("INFO", "alice", "http", "ZoneOp", "ER_SPECIFIC_ACCESS_DENIED_ERROR"),
        ("INFO", "root", "grpc", "unparsed", "ER_PARSE_ERROR"),
    ]
    assert all(r.duration_us >= 0 for r in recs)  # type: ignore[attr-defined]
    assert recs[3].client == ALICE.client_addr  # type: ignore[attr-defined]
    # Exactly one line per statement (the audit table's writer adds none), no password.
    text = "\n".join(r.getMessage() + str(r.__dict__) for r in caplog.records)
    assert len(caplog.records) == 5
    assert "secret" not in text and "other" not in text
    assert "IDENTIFIED BY '***'" in recs[0].getMessage()
