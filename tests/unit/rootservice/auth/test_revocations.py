"""The revocation list of the RS on SQLite and PostgreSQL, with the fake
clock: ALTER SYSTEM REVOKE CERTIFICATE through dispatch (privilege, audit, the row and its
view, the set the front ends check replaced at once), a row written by another RS picked up
by the refresh timer, and the lease answers that carry the list only when the agent's
version differs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from obcommon.errors import ObError, error_from_proto
from obcommon.security.revocation import list_version
from rootservice.api.dispatch import execute_sql
from rootservice.api.lease_servicer import LeaseServicer
from rootservice.app import RootService
from rootservice.auth.principal import Principal
from rootservice.db import revoked_cert_repo
from rootservice.db.revoked_cert_repo import RevokedCert
from sql import ast
from sql.parser import parse
from tests.support.harness import ROOT, SEEDED, events, hb, make_rs

ALICE = Principal("alice", "10.0.0.9:5555")
SUBJECT = "CN=127.0.0.1:4001,OU=node,O=ob-rootservice"


@pytest.fixture
def rs(db_url: str, tmp_path: Path) -> Iterator[RootService]:
    service = make_rs(db_url, tmp_path)
    yield service
    service.shutdown()


def run(rs: RootService, text: str, who: Principal = ROOT) -> tuple[str, int, str]:
    """(error line or '', affected rows, info)."""
    resp = execute_sql(rs, text, who)
    err = error_from_proto(resp.error)
    return (err.to_sql_text() if err else "", resp.affected_rows, resp.info)


def test_revoke_certificate_statement(rs: RootService) -> None:
    revoked = rs.peer_gate.revoked
    at = rs.clock.now_us()
    assert run(rs, "CREATE USER alice IDENTIFIED BY 'pw'")[0] == ""
    stmt = f"ALTER SYSTEM REVOKE CERTIFICATE SERIAL '0A:1B' SUBJECT '{SUBJECT}' REASON 'stolen'"
    assert run(rs, stmt, ALICE)[0].startswith("ERROR 1227")
    assert "a1b" not in revoked
    assert run(rs, stmt) == ("", 1, "certificate a1b revoked")
    # The set the front ends check changed before the statement returned.
    assert "a1b" in revoked and revoked.version == list_version(["a1b"])
    assert rs.revocations.list() == [
        RevokedCert("a1b", SUBJECT, "127.0.0.1:4001", at, "stolen", "root")
    ]
    # A second revocation keeps the first row (its time, reason and author).
    rs.clock.advance(5_000_000)
    assert run(rs, "ALTER SYSTEM REVOKE CERTIFICATE SERIAL 'serial=A1B' REASON 'again'") == (
        "",
        0,
        "certificate a1b already revoked",
    )
    assert [r.revoked_at_us for r in rs.revocations.list()] == [at]
    err, _, _ = run(rs, "ALTER SYSTEM REVOKE CERTIFICATE SERIAL 'not hex'")
    assert "Invalid argument" in err or "invalid" in err.lower(), err
    err, _, _ = run(rs, "ALTER SYSTEM REVOKE CERTIFICATE SERIAL '1' SUBJECT 'no equals sign'")
    assert err, "a malformed subject is refused"
    assert revoked.serials == {"a1b"}
    # Audited as every admin statement, with its author.
    audit = [
        {r[f"name{i}"]: r[f"value{i}"] for i in range(1, 5)}
        for r in events(rs)
        if r["module"] == "audit" and "REVOKE CERTIFICATE" in str(r["value4"])
    ]
    assert [(a["user"], a["outcome"]) for a in audit][:2] == [
        ("alice", "ER_SPECIFIC_ACCESS_DENIED_ERROR"),
        ("root", "OK"),
    ]
    # Readable by operators through the view, with the time as DATETIME.
    resp = execute_sql(
        rs, "SELECT SERIAL, COMMON_NAME, REASON, REVOKED_BY FROM DBA_OB_REVOKED_CERTIFICATES", ROOT
    )
    assert resp.error.code == 0
    assert [[c.string_value for c in r.cells] for r in resp.rows] == [
        ["a1b", "127.0.0.1:4001", "stolen", "root"]
    ]


def test_the_refresh_takes_rows_written_by_another_rs(rs: RootService) -> None:
    seen: list[frozenset[str]] = []
    rs.peer_gate.revoked.on_change(seen.append)
    assert not rs.revocations.run_once()  # nothing revoked yet: nothing changes
    with rs.store.txn() as conn:  # what the leader of the moment wrote
        revoked_cert_repo.insert(conn, RevokedCert("ff", "", "", rs.clock.now_us(), "", "bob"))
    assert "ff" not in rs.peer_gate.revoked
    assert rs.revocations.run_once()
    assert "ff" in rs.peer_gate.revoked and seen == [frozenset({"ff"})]
    assert not rs.revocations.run_once()


def test_lease_answers_carry_the_list_when_the_agent_lacks_it(rs: RootService) -> None:
    server, zone = SEEDED[0][0], SEEDED[0][1]
    servicer = LeaseServicer(rs)
    empty = servicer._handle(hb(server, zone))
    assert empty.error.code == 0
    assert empty.revocation_version == 0 and list(empty.revoked_serials) == []
    rs.revocations.revoke("0b")
    rs.revocations.revoke("0a")
    version = list_version(["a", "b"])
    first = servicer._handle(hb(server, zone, revocation_version=0))
    assert first.revocation_version == version and list(first.revoked_serials) == ["a", "b"]
    # An agent that holds this version gets the version only (one integer per heartbeat).
    again = servicer._handle(hb(server, zone, revocation_version=version))
    assert again.revocation_version == version and list(again.revoked_serials) == []


def test_the_statement_parses_with_its_optional_clauses() -> None:
    assert parse("alter system revoke certificate serial = '0a'") == ast.RevokeCertificate("0a")
    assert parse(
        "ALTER SYSTEM REVOKE CERTIFICATE SERIAL '0a' SUBJECT = 'CN=x' REASON 'it''s gone';"
    ) == ast.RevokeCertificate("0a", "CN=x", "it's gone")
    for bad in (
        "ALTER SYSTEM REVOKE CERTIFICATE '0a'",
        "ALTER SYSTEM REVOKE CERTIFICATE SERIAL '0a' REASON 'r' SUBJECT 's'",
        "ALTER SYSTEM REVOKE CERTIFICATE SERIAL 0a",
    ):
        with pytest.raises(ObError) as e:
            parse(bad)
        assert e.value.name == "ER_PARSE_ERROR", bad
