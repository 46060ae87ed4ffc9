"""The user statements through dispatch and the admin servicer's login path:
1045 / 1227 in-band, GRANT / REVOKE / SHOW GRANTS as MySQL prints them, root's rules, and
the audit trail (log line + event row, passwords masked, a failed audit write harmless)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from obcommon.errors import error_from_proto
from rootservice.api.admin_servicer import authenticated_execute, client_addr, metadata_value
from rootservice.api.dispatch import execute_sql
from rootservice.app import RootService
from rootservice.auth.audit import redact
from rootservice.auth.principal import Principal
from tests.support.harness import ROOT, SEEDED, events, make_rs

ADDR = "10.0.0.9:5555"
ALICE = Principal("alice", ADDR)


def run(rs: RootService, text: str, who: Principal = ROOT) -> str:
    """The statement's error line ('' when it succeeded)."""
    err = error_from_proto(execute_sql(rs, text, who).error)
    return err.to_sql_text() if err else ""


def audit_rows(rs: RootService) -> list[dict[str, str]]:
    return [
        {r[f"name{i}"]: r[f"value{i}"] for i in range(1, 5)} | {"event": r["event"]}
        for r in events(rs)
        if r["module"] == "audit"
    ]


@pytest.fixture
def rs(db_url: str, tmp_path: Path) -> RootService:
    service = make_rs(db_url, tmp_path)
    yield service  # type: ignore[misc]
    service.shutdown()


def test_grants_revoke_and_show_grants(rs: RootService) -> None:
    assert run(rs, "CREATE USER 'alice'@'%' IDENTIFIED BY 'pw'") == ""
    stop = f"ALTER SYSTEM STOP SERVER '{SEEDED[0][0]}'"
    assert run(rs, stop, ALICE) == (
        "ERROR 1227 (42000): Access denied; you need (at least one of) the ALTER SYSTEM "
        "privilege(s) for this operation"
    )
    assert "the SELECT privilege" in run(rs, "SELECT * FROM __all_server", ALICE)
    assert "the CREATE USER privilege" in run(rs, "CREATE USER bob IDENTIFIED BY 'x'", ALICE)
    assert run(rs, "GRANT SELECT, ALTER SYSTEM ON *.* TO alice") == ""
    resp = execute_sql(rs, "SHOW GRANTS", ALICE)
    assert list(resp.columns) == ["Grants for alice@%"]
    assert [c.string_value for c in resp.rows[0].cells] == [
        "GRANT SELECT, ALTER SYSTEM ON *.* TO 'alice'"
    ]
    assert run(rs, "SELECT * FROM __all_server", ALICE) == ""
    assert run(rs, "ALTER USER alice IDENTIFIED BY 'new'", ALICE) == ""  # oneself: allowed
    assert "CREATE USER privilege" in run(rs, "SHOW GRANTS FOR root", ALICE)
    assert run(rs, "REVOKE ALTER SYSTEM ON *.* FROM 'alice'@'%'") == ""
    assert "ALTER SYSTEM privilege" in run(rs, stop, ALICE)
    resp = execute_sql(rs, "SHOW GRANTS FOR root", ROOT)
    assert resp.rows[0].cells[0].string_value == "GRANT ALL PRIVILEGES ON *.* TO 'root'"
    # root's rules and MySQL's errors for unknown users.
    assert run(rs, "DROP USER root").startswith("ERROR 4179 (HY000): OB_OP_NOT_ALLOW")
    assert "OB_OP_NOT_ALLOW" in run(rs, "REVOKE ALL PRIVILEGES ON *.* FROM root")
    assert run(rs, "DROP USER 'bob'") == (
        "ERROR 1396 (HY000): Operation DROP USER failed for 'bob'@'%'"
    )
    assert run(rs, "DROP USER IF EXISTS bob") == ""
    assert "ERROR 1396" in run(rs, "CREATE USER alice IDENTIFIED BY 'x'")
    assert run(rs, "CREATE USER IF NOT EXISTS alice IDENTIFIED BY 'x'") == ""
    assert "OB_NOT_SUPPORTED: privilege 'INSERT'" in run(rs, "GRANT INSERT ON *.* TO alice")
    assert run(rs, "DROP USER alice") == ""
    assert run(rs, "SELECT * FROM __all_server", ALICE).startswith("ERROR 1227")


def test_user_statements_are_leader_only(rs: RootService) -> None:
    assert rs.term.request_step_down("test")
    assert "OB_RS_NOT_MASTER" in run(rs, "CREATE USER alice IDENTIFIED BY 'pw'")
    assert "OB_RS_NOT_MASTER" in run(rs, "GRANT SELECT ON *.* TO root")
    assert run(rs, "SHOW GRANTS") == ""  # a read: standbys answer it


def test_login_refusals_are_1045_in_band_and_audited(
    rs: RootService, caplog: pytest.LogCaptureFixture
) -> None:
    assert run(rs, "CREATE USER alice IDENTIFIED BY 'pw'") == ""
    stop = f"ALTER SYSTEM STOP SERVER '{SEEDED[0][0]}'"
    with caplog.at_level(logging.INFO, logger="rootservice.audit"):
        resp = authenticated_execute(rs, stop, "alice", "wrong", None, ADDR)
        assert error_from_proto(resp.error).to_sql_text() == (  # type: ignore[union-attr]
            "ERROR 1045 (28000): Access denied for user 'alice'@'10.0.0.9' (using password: YES)"
        )
        resp = authenticated_execute(rs, "SELECT * FROM __all_server", None, None, None, ADDR)
        assert "(using password: NO)" in resp.error.message
        ok = authenticated_execute(rs, "SHOW GRANTS", "alice", "pw", None, ADDR)
        assert ok.error.code == 0 and ok.rows[0].cells[0].string_value.endswith("'alice'")
    logins = [r for r in audit_rows(rs) if r["event"] == "login"]
    assert logins == [
        {
            "event": "login",
            "user": "alice",
            "client_addr": ADDR,
            "outcome": "ER_ACCESS_DENIED_ERROR",
            "statement": stop,
        },
        {
            "event": "login",
            "user": "",
            "client_addr": ADDR,
            "outcome": "ER_ACCESS_DENIED_ERROR",
            "statement": "SELECT * FROM __all_server",
        },
    ]
    assert rs.metrics.snapshot()["logins_refused_total"] == 2
    assert any("ER_ACCESS_DENIED_ERROR" in r.getMessage() for r in caplog.records)
    # Nothing was changed by the refused statement.
    assert rs.whitelist.get(SEEDED[0][0]).stop_time == 0  # type: ignore[union-attr]


def test_audit_records_changes_and_refusals_not_reads(
    rs: RootService, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="rootservice.audit"):
        run(rs, "CREATE USER alice IDENTIFIED BY 'pa''ss word'")
        run(rs, "SELECT * FROM __all_server")
        run(rs, "SHOW PARAMETERS")
        run(rs, "ALTER SYSTEM ADD ZONE z9", ALICE)
        run(rs, "SELECT * FROM __all_zone", ALICE)
        run(rs, "ALTER SYSTEM ADD ZONE z9")
        run(rs, "DROP USER 'nobody'")
        run(rs, "FROB", ROOT)
    assert audit_rows(rs) == [
        {
            "event": "statement",
            "user": "root",
            "client_addr": ROOT.client_addr,
            "outcome": "OK",
            "statement": "CREATE USER alice IDENTIFIED BY '***'",
        },
        {
            "event": "statement",
            "user": "alice",
            "client_addr": ADDR,
            "outcome": "ER_SPECIFIC_ACCESS_DENIED_ERROR",
            "statement": "ALTER SYSTEM ADD ZONE z9",
        },
        {
            "event": "statement",
            "user": "alice",
            "client_addr": ADDR,
            "outcome": "ER_SPECIFIC_ACCESS_DENIED_ERROR",
            "statement": "SELECT * FROM __all_zone",
        },
        {
            "event": "statement",
            "user": "root",
            "client_addr": ROOT.client_addr,
            "outcome": "OK",
            "statement": "ALTER SYSTEM ADD ZONE z9",
        },
        {
            "event": "statement",
            "user": "root",
            "client_addr": ROOT.client_addr,
            "outcome": "ER_CANNOT_USER",
            "statement": "DROP USER 'nobody'",
        },
        {
            "event": "statement",
            "user": "root",
            "client_addr": ROOT.client_addr,
            "outcome": "ER_PARSE_ERROR",
            "statement": "FROB",
        },
    ]
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "ss word" not in text and "IDENTIFIED BY '***'" in text
    assert text.count("outcome=") == 6


def test_a_failed_audit_write_does_not_fail_the_statement(
    rs: RootService, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*args: object, **kwargs: object) -> object:
        raise RuntimeError("event table unavailable")

    rs.store.txn = broken  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO, logger="rootservice.audit"):
        resp = execute_sql(rs, "ALTER SYSTEM RELOAD SERVER", ROOT)
    assert resp.error.code == 0
    assert rs.audit.failures == 1
    assert any("not written" in r.getMessage() for r in caplog.records)


def test_redaction_and_peer_parsing() -> None:
    assert redact("ALTER USER u IDENTIFIED BY 'a\\'b' ") == "ALTER USER u IDENTIFIED BY '***' "
    assert redact('create user u identified by "x""y"') == "create user u identified by '***'"
    assert redact("CREATE USER u IDENTIFIED BY 'unterminated rest") == (
        "CREATE USER u IDENTIFIED BY '***'"
    )
    assert redact("x" * 600).endswith("...") and len(redact("x" * 600)) == 515
    # A 4 MiB password: masked whole (no byte of it kept), only the kept part is scanned.
    huge = redact("CREATE USER u IDENTIFIED BY '" + "p" * (4 << 20) + "'")
    assert huge == "CREATE USER u IDENTIFIED BY '***'"
    # Cut after the limit, a second password starting before the cut is masked too.
    two = redact("ALTER USER a IDENTIFIED BY 'x'" + " " * 480 + "IDENTIFIED BY 'secret-tail'")
    assert "secret" not in two and two.endswith("...")
    assert client_addr("ipv4:10.0.0.5:51234") == "10.0.0.5:51234"
    assert client_addr("ipv6:[::1]:51234") == "[::1]:51234"
    assert client_addr("unix:/tmp/s") == "unix:/tmp/s"
    meta = (("ob-user", "alice"), ("ob-password-bin", "pässword".encode()))
    assert metadata_value(meta, "ob-user") == "alice"
    assert metadata_value(meta, "ob-password") == "pässword"
    assert metadata_value(meta, "other") is None
    assert metadata_value(None, "ob-user") is None
