"""obadmin's DRAIN SERVER: which statements it watches, the progress line,
and the wait that prints a line per poll of DBA_OB_SERVER_DRAINS until the answer comes;
plus the grammar of DRAIN and FOR MAINTENANCE."""

from __future__ import annotations

import io
import threading

import pytest

from obcommon.errors import ObError
from obcommon.proto import obrpc_pb2
from sql import ast
from sql.drain_watch import MARGIN_S, drain_target, progress_line, run_with_progress
from sql.parser import parse


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("ALTER SYSTEM DRAIN SERVER '127.0.0.1:2882'", ("127.0.0.1:2882", 600 + MARGIN_S)),
        (
            "alter system drain server '127.0.0.1:2882' timeout 10s",
            ("127.0.0.1:2882", 10 + MARGIN_S),
        ),
        ("ALTER SYSTEM STOP SERVER '127.0.0.1:2882'", None),
        ("ALTER SYSTEM DRAIN SERVER 'nonsense'", None),
    ],
)
def test_drain_target(text: str, want: tuple[str, float] | None) -> None:
    assert drain_target(text) == want


def test_progress_line() -> None:
    assert (
        progress_line("a:1", ["DRAINING", 3, 0, ""])
        == "drain a:1 DRAINING: leaders left 3, copies left 0"
    )
    assert progress_line("a:1", ["DRAINING", -1, -1, ""]) == "drain a:1 DRAINING: counting"


def _rows(*values: object) -> obrpc_pb2.SqlResponse:
    resp = obrpc_pb2.SqlResponse(is_result_set=True, columns=["a", "b", "c", "d"])
    cells = [
        obrpc_pb2.Cell(int_value=v) if isinstance(v, int) else obrpc_pb2.Cell(string_value=str(v))
        for v in values
    ]
    resp.rows.append(obrpc_pb2.Row(cells=cells))
    return resp


def test_progress_lines_until_the_statement_answers() -> None:
    polls = threading.Semaphore(0)
    answer = obrpc_pb2.SqlResponse(info="drained")
    left = iter([2, 1, 0])

    def send(_: str) -> obrpc_pb2.SqlResponse:
        for _ in range(3):
            polls.acquire()  # the statement answers after three polls
        return answer

    def query(sql: str) -> obrpc_pb2.SqlResponse:
        assert "DBA_OB_SERVER_DRAINS" in sql and "SVR_PORT = 2882" in sql
        resp = _rows("DRAINING", next(left, 0), 0, "")
        polls.release()
        return resp

    err = io.StringIO()
    got = run_with_progress("DRAIN", "127.0.0.1:2882", send, query, err, poll_s=0.001)
    assert got is answer
    lines = err.getvalue().splitlines()
    assert lines[:3] == [
        f"drain 127.0.0.1:2882 DRAINING: leaders left {n}, copies left 0" for n in (2, 1, 0)
    ]


def test_grammar_of_drain_and_maintenance() -> None:
    assert parse("ALTER SYSTEM DRAIN SERVER '1.2.3.4:5' TIMEOUT 10m") == ast.DrainServer(
        "1.2.3.4:5", "10m"
    )
    assert parse("ALTER SYSTEM DRAIN SERVER '1.2.3.4:5'") == ast.DrainServer("1.2.3.4:5", None)
    st = parse("ALTER SYSTEM STOP SERVER '1.2.3.4:5' ZONE 'z1' FOR MAINTENANCE 2h")
    assert st == ast.ServerOp("STOP", ("1.2.3.4:5",), "z1", maintenance="2h")
    assert parse("ALTER SYSTEM STOP ZONE 'z1' FOR MAINTENANCE '90m'") == ast.ZoneOp(
        "STOP", "z1", maintenance="90m"
    )
    # No window without an end: FOR MAINTENANCE needs its duration.
    with pytest.raises(ObError) as e:
        parse("ALTER SYSTEM STOP SERVER '1.2.3.4:5' FOR MAINTENANCE")
    assert e.value.name == "ER_PARSE_ERROR"
