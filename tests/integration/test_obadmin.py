"""obadmin against a real ``rootservice`` process (SQLite, not bootstrapped): what an
operator sees for results, refusals and scripts. The client-protocol details (statement
forwarded verbatim, leader hints from standby RS) are in test_obadmin.py."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from sql.obadmin import main
from tests.support import pki
from tests.support.cluster import ProcSet, rs_cmd
from tests.support.ports import free_port


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
        "ERROR 4002 (HY000): OB_INVALID_ARGUMENT: Incorrect arguments to lease_time"
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
