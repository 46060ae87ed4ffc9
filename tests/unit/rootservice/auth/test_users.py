"""Users (rootservice.auth.users) and __all_user (rootservice.db.user_repo) on SQLite and
PostgreSQL: authentication as MySQL (1045), privilege checks (1227), the user statements
and root's rules."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from obcommon.errors import ObError
from rootservice.auth.principal import Principal
from rootservice.auth.privileges import REQUIRED, required_privilege
from rootservice.db import user_repo
from sql import ast
from sql.parser import parse
from tests.support.harness import error_name, make_rs

ADDR = "10.0.0.9:5555"


def denied(fn: object, *args: object) -> str:
    try:
        fn(*args)  # type: ignore[operator]
    except ObError as e:
        assert e.name == "ER_ACCESS_DENIED_ERROR"
        return e.to_sql_text()
    raise AssertionError("not refused")


def test_repository_rows(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        root = user_repo.get_user(conn, "root")
        assert root is not None and root.user_id == user_repo.ROOT_USER_ID
        assert root.passwd == "" and root.privileges == set(user_repo.PRIVILEGE_COLUMNS)
        uid = user_repo.insert_user(conn, "alice", "$hash", 1_000_000)
        assert uid == user_repo.ROOT_USER_ID + 1
        assert user_repo.insert_user(conn, "Alice", "", 1_000_000) == uid + 1  # case-sensitive
        with pytest.raises(KeyError):
            user_repo.set_privileges(conn, "alice", ["INSERT"], 2_000_000)
        assert user_repo.set_privileges(conn, "alice", ["SELECT", "CREATE USER"], 2_000_000)
        assert user_repo.set_password(conn, "alice", "$other", 2_000_000)
        alice = user_repo.get_user(conn, "alice")
        assert alice is not None
        assert alice.passwd == "$other" and alice.privileges == {"SELECT", "CREATE USER"}
        assert [u.user_name for u in user_repo.list_users(conn)] == ["root", "alice", "Alice"]
        assert not user_repo.set_password(conn, "bob", "$x", 1)
        assert not user_repo.set_privileges(conn, "bob", [], 1)
        assert user_repo.delete_user(conn, "alice") and not user_repo.delete_user(conn, "alice")
        assert user_repo.get_user(conn, "alice") is None
        # Ids are never reused.
        assert user_repo.insert_user(conn, "carol", "", 3_000_000) == uid + 2


def test_authentication_as_mysql(db_url: str, tmp_path: Path) -> None:
    rs = make_rs(db_url, tmp_path)
    users = rs.users
    try:
        assert users.create_user("alice", "pw1")
        # With a password: the user must exist and the password verify.
        assert users.authenticate("alice", "pw1", None, ADDR) == Principal("alice", ADDR)
        assert denied(users.authenticate, "alice", "bad", None, ADDR) == (
            "ERROR 1045 (28000): Access denied for user 'alice'@'10.0.0.9' (using password: YES)"
        )
        assert "'nobody'@" in denied(users.authenticate, "nobody", "pw1", None, ADDR)
        # root has no password until ALTER USER gives it one: no password login.
        denied(users.authenticate, "root", "", None, ADDR)
        # Without a password the certificate names the user; a different -u is refused.
        assert users.authenticate(None, None, "alice", ADDR).user == "alice"
        assert users.authenticate("alice", None, "alice", ADDR).user == "alice"
        assert "(using password: NO)" in denied(users.authenticate, "root", None, "alice", ADDR)
        assert "(using password: NO)" in denied(users.authenticate, "alice", None, None, ADDR)
        assert "'ghost'@" in denied(users.authenticate, None, None, "ghost", ADDR)
        assert users.authenticate(None, None, "root", ADDR).user == "root"
        # A successful verification is cached; ALTER USER invalidates it.
        assert len(users.cache) == 1
        users.alter_password("alice", "pw2")
        assert len(users.cache) == 0
        denied(users.authenticate, "alice", "pw1", None, ADDR)
        assert users.authenticate("alice", "pw2", None, ADDR).user == "alice"
        users.alter_password("root", "rootpw")
        assert users.authenticate("root", "rootpw", None, ADDR).user == "root"
        # A dropped user can log in neither way.
        assert users.drop_user("alice")
        denied(users.authenticate, "alice", "pw2", None, ADDR)
        denied(users.authenticate, None, None, "alice", ADDR)
    finally:
        rs.shutdown()


def test_insecure_mode_makes_everyone_root(db_url: str, tmp_path: Path) -> None:
    rs = make_rs(db_url, tmp_path, insecure=True)
    try:
        assert rs.users.authenticate(None, None, None, ADDR) == Principal("root", ADDR)
        assert rs.users.authenticate("x", "y", None, ADDR).user == "root"
    finally:
        rs.shutdown()


def test_privileges_and_root_rules(db_url: str, tmp_path: Path) -> None:
    rs = make_rs(db_url, tmp_path)
    users = rs.users
    alice = Principal("alice", ADDR)
    try:
        assert users.create_user("alice", "")
        assert not users.create_user("alice", "x", if_not_exists=True)
        with pytest.raises(ObError) as e:
            users.create_user("alice", "x")
        assert e.value.to_sql_text() == (
            "ERROR 1396 (HY000): Operation CREATE USER failed for 'alice'@'%'"
        )
        assert users.show_grants("alice") == ["GRANT USAGE ON *.* TO 'alice'"]
        stop = parse("ALTER SYSTEM STOP SERVER '127.0.0.1:3001'")
        with pytest.raises(ObError) as e:
            users.check(alice, stop)
        assert e.value.to_sql_text() == (
            "ERROR 1227 (42000): Access denied; you need (at least one of) the ALTER SYSTEM "
            "privilege(s) for this operation"
        )
        # Oneself: SHOW GRANTS and ALTER USER need nothing.
        users.check(alice, ast.ShowGrants())
        users.check(alice, ast.ShowGrants("alice"))
        users.check(alice, ast.AlterUser("alice", "new"))
        assert error_name(users.check, alice, ast.ShowGrants("root")) == (
            "ER_SPECIFIC_ACCESS_DENIED_ERROR"
        )
        users.grant("alice", ("SELECT", "ALTER SYSTEM"))
        users.check(alice, stop)
        assert users.show_grants("alice") == ["GRANT SELECT, ALTER SYSTEM ON *.* TO 'alice'"]
        users.revoke("alice", ("ALTER SYSTEM",))
        assert error_name(users.check, alice, stop) == "ER_SPECIFIC_ACCESS_DENIED_ERROR"
        # root: every privilege, never dropped, never revoked; GRANT to it changes nothing.
        root = Principal("root", ADDR)
        for kind in REQUIRED:
            assert required_privilege(parse_any(kind), "someone") is not None
        users.check(root, stop)
        assert users.show_grants("root") == ["GRANT ALL PRIVILEGES ON *.* TO 'root'"]
        assert error_name(users.drop_user, "root") == "OB_OP_NOT_ALLOW"
        assert error_name(users.revoke, "root", ("SELECT",)) == "OB_OP_NOT_ALLOW"
        users.grant("root", ("SELECT",))
        # Unknown users: MySQL's errors.
        assert error_name(users.drop_user, "bob") == "ER_CANNOT_USER"
        assert not users.drop_user("bob", if_exists=True)
        assert error_name(users.alter_password, "bob", "x") == "ER_CANNOT_USER"
        assert error_name(users.grant, "bob", ("SELECT",)) == "ER_CANT_CREATE_USER_WITH_GRANT"
        assert error_name(users.revoke, "bob", ("SELECT",)) == "ER_NONEXISTING_GRANT"
        assert error_name(users.show_grants, "bob") == "ER_NONEXISTING_GRANT"
        assert error_name(users.create_user, "x" * 65, "") == "OB_INVALID_ARGUMENT"
        # No password is ever stored in the clear.
        users.alter_password("alice", "visible?")
        with rs.store.read() as conn:
            stored = [u.passwd for u in user_repo.list_users(conn)]
        assert all("visible?" not in p for p in stored)
    finally:
        rs.shutdown()


def test_user_writes_are_leader_only(db_url: str, tmp_path: Path) -> None:
    rs = make_rs(db_url, tmp_path)
    try:
        assert rs.term.request_step_down("test")
        assert error_name(rs.users.create_user, "alice", "pw") == "OB_RS_NOT_MASTER"
        with rs.store.read() as conn:
            assert user_repo.get_user(conn, "alice") is None
        # Reads still answer on a standby.
        assert rs.users.authenticate(None, None, "root", ADDR).user == "root"
    finally:
        rs.shutdown()


_EXAMPLES = {
    ast.Query: "SELECT * FROM __all_server",
    ast.ShowTables: "SHOW TABLES",
    ast.ShowDatabases: "SHOW DATABASES",
    ast.Describe: "DESC __all_server",
    ast.ShowParameters: "SHOW PARAMETERS",
    ast.Bootstrap: "ALTER SYSTEM BOOTSTRAP ZONE 'z1' SERVER '1.1.1.1:1'",
    ast.ServerOp: "ALTER SYSTEM ADD SERVER '1.1.1.1:1'",
    ast.DrainServer: "ALTER SYSTEM DRAIN SERVER '1.1.1.1:1'",
    ast.ExplainDeleteServer: "EXPLAIN ALTER SYSTEM DELETE SERVER '1.1.1.1:1'",
    ast.ReloadServer: "ALTER SYSTEM RELOAD SERVER",
    ast.ReloadZone: "ALTER SYSTEM RELOAD ZONE",
    ast.ReloadUnit: "ALTER SYSTEM RELOAD UNIT",
    ast.RunJob: "ALTER SYSTEM RUN JOB 'ROOT_INSPECTION'",
    ast.EndRollingUpgrade: "ALTER SYSTEM END ROLLING UPGRADE",
    ast.BeginUpgrade: "ALTER SYSTEM BEGIN UPGRADE",
    ast.BeginRollingUpgrade: "ALTER SYSTEM BEGIN ROLLING UPGRADE",
    ast.EndUpgrade: "ALTER SYSTEM END UPGRADE",
    ast.ZoneOp: "ALTER SYSTEM ADD ZONE z",
    ast.SetParameters: "ALTER SYSTEM SET lease_time = '10s'",
    ast.SwitchLeader: "ALTER SYSTEM SWITCH REPLICA LEADER LS 1 SERVER '1.1.1.1:1' TENANT t",
    ast.SwitchRootService: "ALTER SYSTEM SWITCH ROOTSERVICE LEADER SERVER '1.1.1.1:1'",
    ast.RecoverLs: "ALTER SYSTEM RECOVER LS FROM LOST SERVERS '1.1.1.1:1' DRY RUN",
    ast.RevokeCertificate: "ALTER SYSTEM REVOKE CERTIFICATE SERIAL '0a'",
    ast.CreateResourceUnit: "CREATE RESOURCE UNIT u",
    ast.DropResourceUnit: "DROP RESOURCE UNIT u",
    ast.CreateResourcePool: "CREATE RESOURCE POOL p",
    ast.DropResourcePool: "DROP RESOURCE POOL p",
    ast.CreateTenant: "CREATE TENANT t",
    ast.DropTenant: "DROP TENANT t",
    ast.AlterResourceUnit: "ALTER RESOURCE UNIT u MAX_CPU 2",
    ast.AlterResourcePool: "ALTER RESOURCE POOL p UNIT_NUM 2",
    ast.AlterTenant: "ALTER TENANT t PRIMARY_ZONE 'z1'",
    ast.MigrateUnit: "ALTER SYSTEM MIGRATE UNIT 1001 DESTINATION '1.1.1.1:1'",
    ast.CancelMigrateUnit: "ALTER SYSTEM CANCEL MIGRATE UNIT 1001",
    ast.CreateUser: "CREATE USER u IDENTIFIED BY 'p'",
    ast.DropUser: "DROP USER u",
    ast.AlterUser: "ALTER USER u IDENTIFIED BY 'p'",
    ast.Grant: "GRANT SELECT ON *.* TO u",
    ast.Revoke: "REVOKE SELECT ON *.* FROM u",
    ast.ShowGrants: "SHOW GRANTS FOR u",
}


def parse_any(kind: type) -> ast.Statement:
    statement = parse(_EXAMPLES[kind])
    assert type(statement) is kind
    return statement


def test_the_privilege_table_covers_every_statement() -> None:
    kinds = set(ast.Statement.__args__)  # type: ignore[attr-defined]
    assert set(REQUIRED) == kinds == set(_EXAMPLES)
    needs = {kind: required_privilege(parse_any(kind), "me") for kind in kinds}
    assert {k for k, p in needs.items() if p == "SELECT"} == {
        ast.Query,
        ast.ShowTables,
        ast.ShowDatabases,
        ast.Describe,
        ast.ShowParameters,
    }
    assert {k for k, p in needs.items() if p == "CREATE USER"} == {
        ast.CreateUser,
        ast.DropUser,
        ast.AlterUser,
        ast.Grant,
        ast.Revoke,
        ast.ShowGrants,
    }
    assert required_privilege(ast.ShowGrants("me"), "me") is None
    assert required_privilege(ast.AlterUser("me", "x"), "me") is None
    assert required_privilege(ast.DropUser("me"), "me") == "CREATE USER"
