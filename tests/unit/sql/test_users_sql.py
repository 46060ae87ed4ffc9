"""The user statements of the admin language and obadmin's credentials: -u, -p,
--password-file, OB_PASSWORD, sent as ob-user / ob-password metadata on every call."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest

from obcommon.errors import ObError
from obcommon.proto import obrpc_pb2, obrpc_pb2_grpc
from sql import ast
from sql.client import Credentials
from sql.obadmin import main
from sql.parser import parse

# --- grammar ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("CREATE USER 'u' IDENTIFIED BY 'pw'", ast.CreateUser("u", "pw")),
        (
            "create user if not exists `U`@'%' identified by \"p'w\"",
            ast.CreateUser("U", "p'w", if_not_exists=True),
        ),
        ("DROP USER 'u'@'localhost'", ast.DropUser("u")),
        ("DROP USER IF EXISTS u", ast.DropUser("u", if_exists=True)),
        ("ALTER USER root IDENTIFIED BY 'x';", ast.AlterUser("root", "x")),
        (
            "GRANT alter system, SELECT ON *.* TO 'u'@'%'",
            ast.Grant(("SELECT", "ALTER SYSTEM"), "u"),
        ),
        ("GRANT ALL ON *.* TO u", ast.Grant(ast.PRIVILEGES, "u")),
        ("GRANT ALL PRIVILEGES, SELECT ON *.* TO u", ast.Grant(ast.PRIVILEGES, "u")),
        ("REVOKE CREATE USER ON *.* FROM 'u'", ast.Revoke(("CREATE USER",), "u")),
        ("SHOW GRANTS", ast.ShowGrants()),
        ("SHOW GRANTS FOR 'u'@'%'", ast.ShowGrants("u")),
    ],
)
def test_user_statements_parse(text: str, expected: ast.Statement) -> None:
    assert parse(text) == expected


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("GRANT INSERT ON *.* TO u", "privilege 'INSERT' not supported"),
        ("GRANT SELECT, DELETE ON *.* TO u", "privilege 'DELETE' not supported"),
        ("GRANT SELECT ON db.* TO u", "near 'db.* TO u'"),
        ("CREATE USER u", "near ''"),
        ("CREATE USER '' IDENTIFIED BY 'x'", "user name"),
        ("SHOW GRANTS FOR", "near ''"),
    ],
)
def test_bad_user_statements(text: str, error: str) -> None:
    with pytest.raises(ObError) as e:
        parse(text)
    assert error in e.value.message


def test_the_password_is_not_in_the_repr() -> None:
    assert "secret" not in repr(parse("CREATE USER u IDENTIFIED BY 'secret'"))
    assert "secret" not in repr(parse("ALTER USER u IDENTIFIED BY 'secret'"))
    assert "secret" not in repr(Credentials("u", "secret"))


# --- obadmin credentials ---------------------------------------------------------------------


class RecordingAdmin(obrpc_pb2_grpc.AdminServiceServicer):
    """An AdminService that records the metadata of each call and answers OK."""

    def __init__(self) -> None:
        self.metadata: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def ExecuteSql(self, request: obrpc_pb2.SqlRequest, context: Any) -> obrpc_pb2.SqlResponse:  # noqa: N802
        with self.lock:
            self.metadata.append(
                {k: v for k, v in context.invocation_metadata() if k.startswith("ob-")}
            )
        return obrpc_pb2.SqlResponse(affected_rows=0)


@contextmanager
def recording_rs() -> Iterator[tuple[str, RecordingAdmin]]:
    server = grpc.server(ThreadPoolExecutor(max_workers=2))
    servicer = RecordingAdmin()
    obrpc_pb2_grpc.add_AdminServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}", servicer
    finally:
        server.stop(grace=None)


def run(argv: list[str], monkeypatch: pytest.MonkeyPatch, env: str | None = None) -> Any:
    if env is None:
        monkeypatch.delenv("OB_PASSWORD", raising=False)
    else:
        monkeypatch.setenv("OB_PASSWORD", env)
    with recording_rs() as (addr, servicer):
        assert main(["--insecure", "--rs", addr, *argv, "-e", "SELECT 1 FROM t; SHOW GRANTS"]) == 0
    return servicer.metadata


def test_user_and_password_travel_on_every_call(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        run(["-u", "alice", "-p", "pw1"], monkeypatch, env="from-env")
        == [{"ob-user": "alice", "ob-password": "pw1"}] * 2
    )
    out = capsys.readouterr()
    assert "pw1" not in out.out + out.err


def test_password_precedence(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pw_file = tmp_path / "pw"
    pw_file.write_text("from-file\r\nsecond line\n", encoding="utf-8")
    file_args = ["--user", "bob", "--password-file", str(pw_file)]
    assert run(file_args, monkeypatch, env="from-env")[0] == {
        "ob-user": "bob",
        "ob-password": "from-file",
    }
    assert run(["-u", "bob"], monkeypatch, env="from-env")[0] == {
        "ob-user": "bob",
        "ob-password": "from-env",
    }
    # No password anywhere: only the user (the certificate authenticates); no user: nothing.
    assert run(["-u", "bob"], monkeypatch, env="")[0] == {"ob-user": "bob"}
    assert run([], monkeypatch)[0] == {}
    # A password that is not ASCII travels as UTF-8 under the -bin key.
    assert run(["-u", "bob", "-p", "pässword"], monkeypatch)[0] == {
        "ob-user": "bob",
        "ob-password-bin": "pässword".encode(),
    }


def test_unreadable_password_file_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        main(
            [
                "--insecure",
                "--rs",
                "127.0.0.1:1",
                "--password-file",
                str(tmp_path / "missing"),
                "-e",
                "x",
            ]
        )
    assert e.value.code == 2
    assert "--password-file" in capsys.readouterr().err
