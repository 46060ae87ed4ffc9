"""obadmin (sql/obadmin.py): mysql-client style output, statement splitting, and talking to
RootServices (failover, leader hints, unreachable RS), against in-process fake AdminServices: they check what the client sends
(verbatim statements) and how it treats standby RS answers, which a single real RS cannot
produce yet; the same paths against a real RS are in test_obadmin_real.py."""

from __future__ import annotations

import io
import json
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import grpc
import pytest

from obcommon.errors import ObError, error_to_proto
from obcommon.proto import obrpc_pb2, obrpc_pb2_grpc
from sql.client import RsUnreachableError, cell_value, execute
from sql.formatting import format_response
from sql.obadmin import main
from sql.shell import is_exit_command, split_statements
from tests.support.ports import free_port

Answer = Callable[[str], obrpc_pb2.SqlResponse]


# --- helpers -------------------------------------------------------------------------------


def cell(value: Any) -> obrpc_pb2.Cell:
    if value is None:
        return obrpc_pb2.Cell(is_null=True)
    if isinstance(value, int):
        return obrpc_pb2.Cell(int_value=value)
    if isinstance(value, float):
        return obrpc_pb2.Cell(double_value=value)
    return obrpc_pb2.Cell(string_value=value)


def result_set(columns: list[str], rows: list[list[Any]]) -> obrpc_pb2.SqlResponse:
    return obrpc_pb2.SqlResponse(
        is_result_set=True,
        columns=columns,
        rows=[obrpc_pb2.Row(cells=[cell(v) for v in row]) for row in rows],
    )


def error_response(err: ObError, leader_hint: str = "") -> obrpc_pb2.SqlResponse:
    resp = obrpc_pb2.SqlResponse(leader_hint=leader_hint)
    error_to_proto(err, resp.error)
    return resp


def ok(affected: int = 0, info: str = "") -> obrpc_pb2.SqlResponse:
    return obrpc_pb2.SqlResponse(affected_rows=affected, info=info)


class FakeAdmin(obrpc_pb2_grpc.AdminServiceServicer):
    """An AdminService that records the statements it gets and answers with ``answer``."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.received: list[str] = []
        self.lock = threading.Lock()

    def ExecuteSql(self, request: obrpc_pb2.SqlRequest, context: Any) -> obrpc_pb2.SqlResponse:
        with self.lock:
            self.received.append(request.statement)
        return self.answer(request.statement)


@contextmanager
def fake_rs(answer: Answer) -> Iterator[tuple[str, FakeAdmin]]:
    server = grpc.server(ThreadPoolExecutor(max_workers=4))
    servicer = FakeAdmin(answer)
    obrpc_pb2_grpc.add_AdminServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}", servicer
    finally:
        server.stop(grace=None)


NOT_MASTER = ObError("OB_RS_NOT_MASTER")


# --- formatting ------------------------------------------------------------------------------


def test_table_format_is_the_mysql_clients() -> None:
    resp = result_set(
        ["svr_ip", "svr_port", "status", "ratio"],
        [["10.0.0.1", 2882, "ACTIVE", 0.5], ["10.0.0.22", 12882, None, None]],
    )
    assert format_response(resp, "table") == (
        "+-----------+----------+--------+-------+\n"
        "| svr_ip    | svr_port | status | ratio |\n"
        "+-----------+----------+--------+-------+\n"
        "| 10.0.0.1  |     2882 | ACTIVE |   0.5 |\n"
        "| 10.0.0.22 |    12882 | NULL   |  NULL |\n"
        "+-----------+----------+--------+-------+\n"
        "2 rows in set"
    )


def test_table_format_one_row_keeps_strings_as_written() -> None:
    resp = result_set(["name", "value"], [["code", "007"]])
    text = format_response(resp, "table")
    # '007' is a string: not turned into 7, and left-aligned.
    assert "| code | 007   |" in text
    assert text.endswith("\n1 row in set")


def test_empty_result_set() -> None:
    resp = result_set(["svr_ip"], [])
    assert format_response(resp, "table") == "Empty set"
    assert json.loads(format_response(resp, "json")) == []
    assert format_response(resp, "csv") == "svr_ip"


def test_json_format() -> None:
    resp = result_set(["svr_ip", "svr_port", "stop_time", "ratio"], [["10.0.0.1", 2882, None, 1.5]])
    objects = json.loads(format_response(resp, "json"))
    assert objects == [{"svr_ip": "10.0.0.1", "svr_port": 2882, "stop_time": None, "ratio": 1.5}]
    assert isinstance(objects[0]["svr_port"], int)


def test_csv_format() -> None:
    resp = result_set(["name", "value", "n"], [["a,b", 'say "hi"', 3], ["plain", None, -1]])
    assert format_response(resp, "csv") == ('name,value,n\n"a,b","say ""hi""",3\nplain,,-1')


def test_ok_format() -> None:
    assert format_response(ok(0), "table") == "Query OK, 0 rows affected"
    assert format_response(ok(3, "Servers: 3"), "csv") == "Query OK, 3 rows affected\nServers: 3"


def test_json_for_every_reply_is_one_line_each() -> None:
    assert json.loads(format_response(ok(1, "Servers: 3"), "json")) == {
        "affected_rows": 1,
        "info": "Servers: 3",
    }
    err = format_response(error_response(ObError("OB_SERVER_NOT_IN_WHITE_LIST")), "json")
    assert "\n" not in err
    assert json.loads(err) == {
        "error": {
            "code": 4630,
            "sqlstate": "HY000",
            "name": "OB_SERVER_NOT_IN_WHITE_LIST",
            "message": "server not in server white list",
        }
    }
    rows = format_response(result_set(["a", "b"], [[1, None], [2, "x"]]), "json")
    assert "\n" not in rows
    assert json.loads(rows) == [{"a": 1, "b": None}, {"a": 2, "b": "x"}]


def test_vertical_format_is_the_mysql_clients_backslash_g() -> None:
    resp = result_set(["svr_ip", "port", "stop_time"], [["10.0.0.1", 2882, None], ["b", 1, "t"]])
    assert format_response(resp, "table", vertical=True) == (
        "*************************** 1. row ***************************\n"
        "   svr_ip: 10.0.0.1\n"
        "     port: 2882\n"
        "stop_time: NULL\n"
        "*************************** 2. row ***************************\n"
        "   svr_ip: b\n"
        "     port: 1\n"
        "stop_time: t\n"
        "2 rows in set"
    )
    assert format_response(result_set(["a"], []), "table", vertical=True) == "Empty set"
    # OK replies and the machine formats ignore \G
    assert format_response(ok(1), "table", vertical=True) == "Query OK, 1 row affected"
    assert format_response(resp, "csv", vertical=True).startswith("svr_ip,port,stop_time\n")


def test_error_format_is_the_mysql_error_line() -> None:
    resp = error_response(ObError("OB_SERVER_NOT_IN_WHITE_LIST"))
    expected = "ERROR 4630 (HY000): OB_SERVER_NOT_IN_WHITE_LIST: server not in server white list"
    assert format_response(resp, "table") == expected
    parse_error = error_response(ObError("ER_PARSE_ERROR", "near 'x' at line 1"))
    assert format_response(parse_error) == (
        "ERROR 1064 (42000): You have an error in your SQL syntax; near 'x' at line 1"
    )


def test_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="xml"):
        format_response(ok(), "xml")


def test_cell_values() -> None:
    assert cell_value(obrpc_pb2.Cell()) is None  # nothing set reads as NULL
    assert cell_value(obrpc_pb2.Cell(is_null=True)) is None
    assert cell_value(obrpc_pb2.Cell(int_value=0)) == 0
    assert cell_value(obrpc_pb2.Cell(double_value=2.5)) == 2.5
    assert cell_value(obrpc_pb2.Cell(string_value="")) == ""


# --- splitting -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "statements", "rest"),
    [
        ("a; b;", ["a", "b"], ""),
        ("a;\n b", ["a"], "\n b"),
        ("ALTER SYSTEM SET p = 'x;y';", ["ALTER SYSTEM SET p = 'x;y'"], ""),
        ('SET p = "x;\\";y";', ['SET p = "x;\\";y"'], ""),
        ("SET p = 'it''s;';", ["SET p = 'it''s;'"], ""),
        ("SELECT `a;b` FROM t;", ["SELECT `a;b` FROM t"], ""),
        ("a -- c;omment\n;", ["a -- c;omment"], ""),
        ("a # c;\n;", ["a # c;"], ""),
        ("a /* ; */;", ["a /* ; */"], ""),
        ("a--x;", ["a--x"], ""),  # -- without a blank is no comment (MySQL)
        ("; ;  -- only comments\n", [], ""),
        ("/* still open ;", [], "/* still open ;"),
        ("SET p = 'open;", [], "SET p = 'open;"),
        ("", [], ""),
    ],
)
def test_split_statements(text: str, statements: list[str], rest: str) -> None:
    assert split_statements(text) == (statements, rest)


def test_exit_commands() -> None:
    assert all(is_exit_command(c) for c in ["exit", "QUIT;", "  \\q  ", "exit ;"])
    assert not any(is_exit_command(c) for c in ["exiting", "select 1", ""])


# --- talking to the RS ---------------------------------------------------------------------


def test_no_rs_listening_prints_error_2003_and_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    addr = f"127.0.0.1:{free_port()}"
    # Retried until the deadline: a short one.
    assert (
        main(["--insecure", "--rs", addr, "--timeout", "1", "-e", "ALTER SYSTEM RELOAD SERVER"])
        == 1
    )
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"ERROR 2003 (HY000): Can't connect to RootService on '{addr}' (")
    assert err.rstrip("\n").endswith(")")
    assert err.count("\n") == 1


def test_execute_raises_when_no_rs_is_reachable() -> None:
    addrs = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
    with pytest.raises(RsUnreachableError) as info:
        execute(addrs, "SHOW PARAMETERS", 1)
    # Every address tried is named, each with why it failed; rounds were retried.
    assert info.value.addrs == addrs
    assert set(info.value.failures) == set(addrs) and all(info.value.failures.values())
    assert info.value.attempts > len(addrs)
    assert all(a in info.value.to_sql_text() for a in addrs)


def test_statement_is_sent_verbatim_and_result_printed(capsys: pytest.CaptureFixture[str]) -> None:
    with fake_rs(lambda s: result_set(["name"], [["lease_time"]])) as (addr, rs):
        assert (
            main(["--insecure", "--rs", addr, "-e", "show /* c */ PARAMETERS like 'lease%';"]) == 0
        )
    assert rs.received == ["show /* c */ PARAMETERS like 'lease%'"]
    out, err = capsys.readouterr()
    assert err == ""
    assert out.endswith("| lease_time |\n+------------+\n1 row in set\n")


def test_unreachable_rs_is_skipped_for_the_next_one(capsys: pytest.CaptureFixture[str]) -> None:
    down = f"127.0.0.1:{free_port()}"
    with fake_rs(lambda s: ok(1)) as (addr, rs):
        assert (
            main(["--insecure", "--rs", f"{down}, {addr}", "-e", "ALTER SYSTEM RELOAD SERVER"]) == 0
        )
    assert rs.received == ["ALTER SYSTEM RELOAD SERVER"]
    assert capsys.readouterr().out == "Query OK, 1 row affected\n"


def test_not_master_follows_the_leader_hint_once() -> None:
    with (
        fake_rs(lambda s: ok(2)) as (leader, leader_rs),
        fake_rs(lambda s: error_response(NOT_MASTER, leader_hint=leader)) as (
            follower,
            follower_rs,
        ),
    ):
        resp = execute([follower], "ALTER SYSTEM STOP SERVER 'a:1'", 5)
    assert resp.error.code == 0
    assert resp.affected_rows == 2
    assert follower_rs.received == ["ALTER SYSTEM STOP SERVER 'a:1'"]
    assert leader_rs.received == ["ALTER SYSTEM STOP SERVER 'a:1'"]


def test_second_hint_is_not_followed_and_not_master_is_reported(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with (
        fake_rs(lambda s: ok()) as (third, third_rs),
        fake_rs(lambda s: error_response(NOT_MASTER, leader_hint=third)) as (second, _),
        fake_rs(lambda s: error_response(NOT_MASTER, leader_hint=second)) as (first, _),
    ):
        assert main(["--insecure", "--rs", first, "-e", "ALTER SYSTEM RELOAD SERVER"]) == 1
    assert third_rs.received == []
    assert capsys.readouterr().err == (
        "ERROR 4638 (HY000): OB_RS_NOT_MASTER: The RootServer is not the master\n"
    )


def test_not_master_without_hint_tries_the_next_address() -> None:
    not_master = ObError("OB_NOT_MASTER")
    with (
        fake_rs(lambda s: error_response(not_master)) as (first, first_rs),
        fake_rs(lambda s: result_set(["a"], [[1]])) as (second, second_rs),
    ):
        resp = execute([first, second], "SELECT a FROM t", 5)
    assert resp.is_result_set
    assert (first_rs.received, second_rs.received) == (["SELECT a FROM t"], ["SELECT a FROM t"])


def test_deadline_gives_ob_timeout_without_trying_another_rs() -> None:
    def slow(statement: str) -> obrpc_pb2.SqlResponse:
        time.sleep(1.0)
        return ok()

    with fake_rs(slow) as (first, _), fake_rs(lambda s: ok()) as (second, second_rs):
        resp = execute([first, second], "ALTER SYSTEM STOP SERVER 'a:1'", 0.2)
    assert format_response(resp) == "ERROR 4012 (HY000): OB_TIMEOUT: Timeout"
    assert second_rs.received == []


def test_script_stops_at_the_first_error(capsys: pytest.CaptureFixture[str]) -> None:
    def answer(statement: str) -> obrpc_pb2.SqlResponse:
        if statement.startswith("bad"):
            return error_response(ObError("ER_PARSE_ERROR", "near 'bad' at line 1"))
        return ok()

    with fake_rs(answer) as (addr, rs):
        rc = main(
            [
                "--insecure",
                "--rs",
                addr,
                "-e",
                "ALTER SYSTEM RELOAD SERVER; bad; ALTER SYSTEM RELOAD SERVER",
            ]
        )
    assert rc == 1
    assert rs.received == ["ALTER SYSTEM RELOAD SERVER", "bad"]
    out, err = capsys.readouterr()
    assert out == "Query OK, 0 rows affected\n"
    assert err == "ERROR 1064 (42000): You have an error in your SQL syntax; near 'bad' at line 1\n"


def test_statements_from_a_non_tty_stdin(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    script = (
        "-- a script, as with mysql < file\n"
        "SELECT svr_ip FROM __all_server\n  WHERE zone = 'z;1';\n"
        "ALTER SYSTEM RELOAD SERVER"  # the last statement needs no ;
    )
    monkeypatch.setattr("sys.stdin", io.StringIO(script))
    with fake_rs(lambda s: result_set(["svr_ip"], [["10.0.0.1"]])) as (addr, rs):
        assert main(["--insecure", "--rs", addr, "--format", "json"]) == 0
    assert rs.received == [
        "-- a script, as with mysql < file\nSELECT svr_ip FROM __all_server\n  WHERE zone = 'z;1'",
        "ALTER SYSTEM RELOAD SERVER",
    ]
    out = capsys.readouterr().out
    assert out.count('"svr_ip": "10.0.0.1"') == 2


def test_bad_arguments_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--insecure", "--rs", " , ", "-e", "SHOW PARAMETERS"])
    assert info.value.code == 2
    assert "--rs" in capsys.readouterr().err


def test_progress_line_shows_bar_counts_eta_and_stall() -> None:
    from sql.wait_job import progress_line

    extra = (
        '{"units_moved":1,"units_total":2,"replicas_moved":3,"replicas_total":6,'
        '"copied":"12M","eta":"4s","stalled":""}'
    )
    line = progress_line(7, "INPROGRESS", 50, extra, width=10)
    assert line.startswith("job 7 [#####.....]  50% INPROGRESS")
    assert "units 1/2 replicas 3/6 copied 12M" in line and "eta 4s" in line
    stalled = progress_line(
        7, "INPROGRESS", 50, extra.replace('"stalled":""', '"stalled":"no room"')
    )
    assert stalled.endswith("STALLED: no room")
    assert progress_line(8, "SUCCESS", 100, "", width=4) == "job 8 [####] 100% SUCCESS"
    # a malformed extra_info is shown without details, not an error
    assert progress_line(9, "INPROGRESS", 0, "{oops", width=2) == "job 9 [..]   0% INPROGRESS"


def test_rs_addresses_flag_then_environment_then_the_default() -> None:
    from sql.obadmin import DEFAULT_RS, rs_addresses

    env = {"OB_RS": "10.0.0.1:2882, 10.0.0.2:2882"}
    assert rs_addresses("10.0.0.9:1", env) == ["10.0.0.9:1"]
    assert rs_addresses(None, env) == ["10.0.0.1:2882", "10.0.0.2:2882"]
    assert rs_addresses(None, {}) == [DEFAULT_RS] == ["127.0.0.1:2882"]
    assert rs_addresses(" , ", {}) == []  # given but empty: main refuses it
