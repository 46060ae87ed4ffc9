"""obadmin against a real ``rootservice`` process (SQLite, not bootstrapped): what an
operator sees for results, refusals and scripts. The client-protocol details (statement
forwarded verbatim, leader hints from standby RS) are in test_obadmin.py."""

from __future__ import annotations

import io
import json
import os
import pty
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sql.obadmin import main
from tests.support import pki
from tests.support.cluster import ProcSet, rs_cmd
from tests.support.ports import free_port
from tests.support.timescale import scaled


def csv_rows(rs_addr: str, statement: str, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """Run ``statement`` through obadmin --format csv; its output lines (header first)."""
    assert main([*pki.obadmin_flags(), "--rs", rs_addr, "--format", "csv", "-e", statement]) == 0
    return capsys.readouterr().out.splitlines()


@pytest.fixture
def rs_addr(procs: ProcSet, tmp_path: Path) -> Iterator[str]:
    addr = f"127.0.0.1:{free_port()}"
    p = procs.start(rs_cmd(f"sqlite:///{tmp_path}/rs.db", addr, tmp_path / "rs"), "rs")
    p.wait_healthy(addr, timeout_s=30)
    yield addr


def test_show_parameters_table(rs_addr: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*pki.obadmin_flags(), "--rs", rs_addr, "-e", "SHOW PARAMETERS LIKE 'lease%'"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("+") and "| name" in lines[1] and "| value" in lines[1]
    assert "| lease_time " in out and "| 10s " in out
    assert lines[-1] == "1 row in set"


def test_select_json_and_csv(rs_addr: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                *pki.obadmin_flags(),
                "--rs",
                rs_addr,
                "--format",
                "json",
                "-e",
                "SELECT name FROM __all_service_epoch",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out) == [{"name": "rootservice_epoch"}]
    assert csv_rows(rs_addr, "SELECT name, value FROM __all_service_epoch", capsys) == [
        "name,value",
        "rootservice_epoch,1",
    ]


def test_refusals_print_the_mysql_error_line(
    rs_addr: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*pki.obadmin_flags(), "--rs", rs_addr, "-e", "SELECT * FROM nope"]) == 1
    assert (
        capsys.readouterr().err
        == "ERROR 5019 (42S02): OB_TABLE_NOT_EXIST: Table 'oceanbase.nope' doesn't exist\n"
    )
    assert (
        main([*pki.obadmin_flags(), "--rs", rs_addr, "-e", "ALTER SYSTEM SET lease_time = '1s'"])
        == 1
    )
    assert capsys.readouterr().err.startswith(
        "ERROR 4147 (HY000): OB_INVALID_CONFIG: lease_time = 1s"
    )


def test_script_stops_at_the_first_error(rs_addr: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(
        [
            *pki.obadmin_flags(),
            "--rs",
            rs_addr,
            "-e",
            "ALTER SYSTEM SET lease_time = '20s'; bad statement; ALTER SYSTEM SET lease_time = '30s'",
        ]
    )
    assert rc == 1
    out, err = capsys.readouterr()
    assert out == "Query OK, 0 rows affected\n"
    assert (
        err.startswith("ERROR 1064 (42000): You have an error in your SQL syntax")
        and "near 'bad statement'" in err
    )
    assert csv_rows(
        rs_addr, "SELECT value FROM __all_sys_parameter WHERE name = 'lease_time'", capsys
    ) == ["value", "20s"]  # the third statement never ran


def test_stdin_script_and_a_dead_first_address(
    rs_addr: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(
        "sys.stdin",
        io.StringIO(
            "-- as with mysql < file\nSHOW PARAMETERS LIKE 'rpc%';\nSELECT name FROM __all_service_epoch"
        ),
    )
    dead = f"127.0.0.1:{free_port()}"
    assert main([*pki.obadmin_flags(), "--rs", f"{dead},{rs_addr}", "--format", "json"]) == 0
    out = capsys.readouterr().out
    assert '"name": "rpc_timeout"' in out and '"name": "rootservice_epoch"' in out


def test_help_vertical_output_and_json_errors(
    rs_addr: str, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = [*pki.obadmin_flags(), "--rs", rs_addr]
    assert main([*flags, "-e", "help; SHOW PARAMETERS LIKE 'lease_time'\\G"]) == 0
    out = capsys.readouterr().out
    assert "  ALTER SYSTEM BOOTSTRAP " in out and "  SHOW PARAMETERS " in out
    assert "*************************** 1. row ***************************\n" in out
    assert " value: 10s\n" in out and out.endswith("1 row in set\n")
    assert main([*flags, "--format", "json", "-e", "SELECT * FROM nope"]) == 1
    assert json.loads(capsys.readouterr().out) == {
        "error": {
            "code": 5019,
            "sqlstate": "42S02",
            "name": "OB_TABLE_NOT_EXIST",
            "message": "Table 'oceanbase.nope' doesn't exist",
        }
    }


def read_until(fd: int, wanted: bytes, then_prompt: bool = False, timeout_s: float = 30.0) -> bytes:
    """What the pty shows until ``wanted`` appears, and the next prompt after it with
    ``then_prompt`` (AssertionError after ``timeout_s``)."""
    seen = b""
    end = time.monotonic() + scaled(timeout_s)

    def done() -> bool:
        before, found, after = seen.partition(wanted)
        return bool(found) and (not then_prompt or b"obadmin>" in after)

    while not done():
        left = end - time.monotonic()
        assert left > 0, f"{wanted!r} never came; got {seen[-2000:]!r}"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                seen += os.read(fd, 65536)
            except OSError:  # the child closed the terminal
                break
    return seen


def test_interactive_obadmin_in_a_terminal(rs_addr: str, tmp_path: Path) -> None:
    """The real console script on a pseudo-terminal: a statement typed over two lines and
    ended by \\G, help, then Ctrl-D; the statement is one history entry."""
    master, slave = pty.openpty()
    env = {**os.environ, "HOME": str(tmp_path), "OB_RS": rs_addr, "PROMPT_TOOLKIT_NO_CPR": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sql.obadmin", *pki.obadmin_flags()],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        close_fds=True,
    )
    os.close(slave)
    try:
        read_until(master, b"obadmin>")
        os.write(master, b"SHOW PARAMETERS\r")
        os.write(master, b"LIKE 'lease_time'\\G\r")
        shown = read_until(master, b"1 row in set", then_prompt=True)
        assert b"1. row" in shown and b"value: 10s" in shown
        os.write(master, b"help alter system set\r")
        assert b"ALTER SYSTEM [SET] name = value" in read_until(
            master, b"name = value", then_prompt=True
        )
        # Only once the prompt is up (the terminal in raw mode): in cooked mode the line
        # discipline would take Ctrl-D as end of file itself.
        os.write(master, b"\x04")
        read_until(master, b"Bye")
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    history = (tmp_path / ".obadmin_history").read_text()
    assert "+SHOW PARAMETERS\n+LIKE 'lease_time'\\G\n" in history
