"""The interactive obadmin shell (sql/shell.py) driven through real prompt_toolkit (pipe input,
dummy output) against an in-process AdminService: whole statements, \\G, help, Ctrl-C,
Ctrl-D, history entries and completion of keywords, tables and columns; plus the -e paths
of \\G, help, JSON errors and the environment variables (sql/obadmin.py)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document
from prompt_toolkit.history import FileHistory
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput

from obcommon.errors import ObError
from obcommon.proto import obrpc_pb2
from sql.help import STATEMENTS, help_text, help_topic_of, keywords
from sql.obadmin import _build_arg_parser, credentials, main
from sql.shell import Catalog, Piece, Shell, SqlCompleter, input_is_complete, split_input
from tests.support.ports import free_port
from tests.unit.sql.test_obadmin import error_response, fake_rs, ok, result_set

TABLES = {"__all_server": ["svr_ip", "svr_port", "zone"], "__all_zone": ["zone", "status"]}


def catalog_answer(statement: str) -> obrpc_pb2.SqlResponse:
    """An RS that knows SHOW TABLES and DESC (as the read helper's RS does) and answers the
    rest with one row."""
    if statement == "SHOW TABLES":
        return result_set(["Tables_in_oceanbase"], [[t] for t in TABLES])
    if statement.startswith("DESC `"):
        name = statement[len("DESC `") : -1]
        return result_set(["Field", "Type"], [[c, "varchar"] for c in TABLES[name]])
    if statement.startswith("bogus"):
        return error_response(ObError("ER_PARSE_ERROR", "near 'bogus' at line 1"))
    if statement.startswith("ALTER"):
        return ok(1)
    return result_set(["name", "value"], [["lease_time", "10s"]])


def run_shell(addr: str, keys: str, tmp_path: Path) -> tuple[int, str, str, Path]:
    out, err = io.StringIO(), io.StringIO()
    history = tmp_path / "history"
    shell = Shell([addr], "table", 5.0, out, err)
    with create_pipe_input() as inp:
        inp.send_text(keys)
        rc = shell.interactive(input=inp, output=DummyOutput(), history=str(history))
    return rc, out.getvalue(), err.getvalue(), history


# --- splitting and help ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "pieces", "rest"),
    [
        ("SELECT a FROM t\\G", [Piece("SELECT a FROM t", True)], ""),
        ("a\\g b\\G c;", [Piece("a"), Piece("b", True), Piece("c")], ""),
        ("SET p = 'x\\G';", [Piece("SET p = 'x\\G'")], ""),  # inside quotes: no terminator
        ("a -- \\G\n", [], "a -- \\G\n"),
        ("a\\G more", [Piece("a", True)], " more"),
    ],
)
def test_split_input_knows_backslash_g(text: str, pieces: list[Piece], rest: str) -> None:
    assert split_input(text) == (pieces, rest)


def test_input_is_complete_decides_what_enter_does() -> None:
    assert input_is_complete("")
    assert input_is_complete("help")  # client commands need no ;
    assert input_is_complete("quit")
    assert input_is_complete("SELECT a FROM t\\G")
    assert input_is_complete("a;\nb;")
    assert not input_is_complete("SHOW PARAMETERS")
    assert not input_is_complete("a; b")
    assert not input_is_complete("SET p = 'x;")


def test_help_lists_every_statement_and_the_clients_commands() -> None:
    text = help_text()
    for topic in STATEMENTS:
        assert f"  {topic.name} " in text
    assert "\\G" in text and "exit" in text and "help" in text
    alter_system = help_text("alter   system")
    assert "ALTER SYSTEM BOOTSTRAP:" in alter_system and "ALTER SYSTEM SET:" in alter_system
    assert "CREATE TENANT" not in alter_system
    assert help_text("desc").startswith("DESC: ")
    assert help_text("explain").startswith("EXPLAIN ALTER SYSTEM DELETE SERVER: dry run")
    assert help_text("nothing here") == (
        "Nothing found for 'nothing here'. Type 'help' for the list of statements."
    )


def test_help_requests() -> None:
    assert help_topic_of("help") == ""
    assert help_topic_of("HELP alter system;") == "alter system"
    assert help_topic_of("\\h select") == "select"
    assert help_topic_of("?select") == "select"
    assert help_topic_of("helpful") is None
    assert help_topic_of("SELECT help FROM t") is None


def test_keywords_come_from_the_grammar() -> None:
    words = keywords()
    assert {"ALTER", "SYSTEM", "BOOTSTRAP", "PARAMETERS", "TENANT", "GRANTS"} <= set(words)
    assert {"TABLES", "DESC"} <= set(words)  # from the statement table
    assert "EXPLAIN" in words
    assert keywords('x: "FOO"i "bar"i') == sorted({"FOO", "BAR", *keywords("")})


# --- the interactive shell ----------------------------------------------------------------


def test_shell_runs_whole_statements_and_keeps_them_as_one_history_entry(
    tmp_path: Path,
) -> None:
    keys = (
        "SHOW PARAMETERS\rLIKE 'lease%';\r"  # Enter inside a statement continues it
        "bogus;\r"  # an error does not end the shell
        "SELECT name FROM t\\G\r"
        "help alter system\r"
        "ALTER SYSTEM half typed\x03"  # Ctrl-C drops it
        "ALTER SYSTEM RELOAD SERVER;\r"
        "\x04"  # Ctrl-D leaves
    )
    with fake_rs(catalog_answer) as (addr, rs):
        rc, out, err, history = run_shell(addr, keys, tmp_path)
    assert rc == 0
    assert rs.received == [
        "SHOW PARAMETERS\nLIKE 'lease%'",
        "bogus",
        "SELECT name FROM t",
        "ALTER SYSTEM RELOAD SERVER",
    ]
    assert "| lease_time | 10s   |" in out
    assert (
        "*************************** 1. row ***************************\n name: lease_time\n" in out
    )
    assert "ALTER SYSTEM BOOTSTRAP:" in out
    assert "Query OK, 1 row affected" in out
    assert out.rstrip().endswith("Bye")
    assert (
        err == "ERROR 1064 (42000): You have an error in your SQL syntax; near 'bogus' at line 1\n"
    )
    entries = list(FileHistory(str(history)).load_history_strings())
    assert "SHOW PARAMETERS\nLIKE 'lease%';" in entries
    assert "ALTER SYSTEM half typed" not in entries


def test_exit_command_leaves_the_shell(tmp_path: Path) -> None:
    with fake_rs(catalog_answer) as (addr, rs):
        rc, out, _, _ = run_shell(addr, "exit\rSELECT never;\r", tmp_path)
    assert (rc, rs.received) == (0, [])
    assert out.rstrip().endswith("Bye")


def test_tab_completes_a_table_name_fetched_from_the_rs(tmp_path: Path) -> None:
    with fake_rs(catalog_answer) as (addr, rs):
        rc, out, _, _ = run_shell(addr, "SELECT * FROM __all_se\t;\r\x04", tmp_path)
    assert rc == 0
    assert "SELECT * FROM __all_server" in rs.received
    assert rs.received[0] == "SHOW TABLES"


def completions(completer: SqlCompleter, text: str) -> list[str]:
    return [c.text for c in completer.get_completions(Document(text), CompleteEvent())]


def test_completer_offers_columns_tables_and_keywords_fetched_once() -> None:
    with fake_rs(catalog_answer) as (addr, rs):
        shell = Shell([addr], "table", 5.0, io.StringIO(), io.StringIO())
        completer = SqlCompleter(keywords(), shell.catalog)
        assert completions(completer, "SELECT svr") == []  # no table named yet, no keyword
        # columns of the tables named first, then keywords
        assert completions(completer, "SELECT z FROM __all_zone WHERE st") == [
            "status",
            "start",
            "stop",
        ]
        assert completions(completer, "SELECT * FROM __all_server WHERE sv") == [
            "svr_ip",
            "svr_port",
        ]
        assert completions(completer, "alter sys") == ["system"]  # typed case kept
        assert completions(completer, "SELECT * FROM __all_z") == ["__all_zone"]
        assert completions(completer, "") == []
        completions(completer, "SELECT * FROM __all_zone WHERE st")
    # one SHOW TABLES and one DESC per table for the whole session
    assert rs.received == ["SHOW TABLES", "DESC `__all_zone`", "DESC `__all_server`"]


def test_completion_fails_soft_without_an_rs() -> None:
    shell = Shell([f"127.0.0.1:{free_port()}"], "table", 5.0, io.StringIO(), io.StringIO())
    completer = SqlCompleter(keywords(), shell.catalog)
    assert completions(completer, "BOOTST") == ["BOOTSTRAP"]
    assert shell.catalog.tables() == []


def test_catalog_treats_an_error_answer_as_no_names() -> None:
    def refuse(statement: str) -> obrpc_pb2.SqlResponse:
        return error_response(ObError("ER_PARSE_ERROR", "near 'SHOW TABLES'"))

    with fake_rs(refuse) as (addr, rs):
        shell = Shell([addr], "table", 5.0, io.StringIO(), io.StringIO())
        assert shell.catalog.tables() == []
        assert shell.catalog.tables() == []
    assert rs.received == ["SHOW TABLES"]  # cached, not asked again


def test_catalog_quotes_table_names() -> None:
    asked: list[str] = []
    catalog = Catalog(lambda s: asked.append(s) or [["c"]])
    assert catalog.columns("we`ird") == ["c"]
    assert asked == ["DESC `we``ird`"]


# --- -e and the environment -----------------------------------------------------------------


def test_execute_with_backslash_g_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    with fake_rs(catalog_answer) as (addr, rs):
        assert main(["--insecure", "--rs", addr, "-e", "SELECT name FROM t\\G help select"]) == 0
    assert rs.received == ["SELECT name FROM t"]
    out = capsys.readouterr().out
    assert out.startswith("*************************** 1. row ***************************\n")
    assert " name: lease_time\nvalue: 10s\n1 row in set\nSELECT: " in out


def test_json_lines_for_every_reply_including_errors(capsys: pytest.CaptureFixture[str]) -> None:
    with fake_rs(catalog_answer) as (addr, _):
        rc = main(
            [
                "--insecure",
                "--rs",
                addr,
                "--format",
                "json",
                "-e",
                "SELECT 1; ALTER SYSTEM x; bogus",
            ]
        )
    assert rc == 1
    out, err = capsys.readouterr()
    docs = [json.loads(line) for line in out.splitlines()]
    assert docs == [
        [{"name": "lease_time", "value": "10s"}],
        {"affected_rows": 1, "info": ""},
        {
            "error": {
                "code": 1064,
                "sqlstate": "42000",
                "name": "ER_PARSE_ERROR",
                "message": "You have an error in your SQL syntax; near 'bogus' at line 1",
            }
        },
    ]
    assert err == ""


def test_json_error_when_no_rs_answers(capsys: pytest.CaptureFixture[str]) -> None:
    addr = f"127.0.0.1:{free_port()}"
    # --timeout 2: the client retries until its deadline; 60 s would only
    # slow the test down.
    argv = ["--insecure", "--rs", addr, "--format", "json", "--timeout", "2", "-e", "SELECT 1"]
    assert main(argv) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["error"]["code"] == 2003 and doc["error"]["sqlstate"] == "HY000"
    assert addr in doc["error"]["message"]


def test_rs_and_user_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with fake_rs(catalog_answer) as (addr, rs):
        monkeypatch.setenv("OB_RS", f"127.0.0.1:{free_port()}, {addr}")
        assert main(["--insecure", "-e", "ALTER SYSTEM RELOAD SERVER"]) == 0
    assert rs.received == ["ALTER SYSTEM RELOAD SERVER"]
    assert capsys.readouterr().out == "Query OK, 1 row affected\n"
    parser = _build_arg_parser()
    environ = {"OB_USER": "alice", "OB_PASSWORD": "pw"}
    creds = credentials(parser.parse_args(["--insecure"]), parser, environ)
    assert (creds.user, creds.password) == ("alice", "pw")
    creds = credentials(parser.parse_args(["--insecure", "-u", "bob"]), parser, environ)
    assert creds.user == "bob"  # -u wins


def test_no_rs_anywhere_means_the_default_address(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Nothing listens on 127.0.0.1:2882 in the tests (every test RS has a port of its own).
    monkeypatch.delenv("OB_RS", raising=False)
    assert main(["--insecure", "--timeout", "2", "-e", "SELECT 1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ERROR 2003") and "127.0.0.1:2882" in err, err


def test_an_empty_rs_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OB_RS", " , ")
    with pytest.raises(SystemExit) as info:
        main(["--insecure", "-e", "SELECT 1"])
    assert info.value.code == 2
    assert "OB_RS" in capsys.readouterr().err
