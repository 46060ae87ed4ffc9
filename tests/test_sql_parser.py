"""The admin SQL parser (sql/parser.py, sql/grammar.lark): statement forms of SPEC.md section 7,
the AST of sql/ast.py, and MySQL-style errors (SPEC.md section 12)."""

from __future__ import annotations

import random
import time
import typing

import pytest

from rootservice.errors import ObError
from sql import ast
from sql.parser import MAX_EXPR_DEPTH, parse

MB = 1024 * 1024
STATEMENT_TYPES = typing.get_args(ast.Statement)


def parse_error(text: str, **kwargs: int) -> ObError:
    with pytest.raises(ObError) as info:
        parse(text, **kwargs)
    return info.value


def near(rest: str, line: int = 1) -> str:
    """The MySQL 1064 line for a syntax error at ``rest``."""
    return (
        "ERROR 1064 (42000): You have an error in your SQL syntax; check the manual that "
        "corresponds to your OceanBase version for the right syntax to use "
        f"near '{rest}' at line {line}"
    )


def where(condition: str) -> ast.Expr | None:
    statement = parse(f"SELECT * FROM __all_server WHERE {condition}")
    assert isinstance(statement, ast.Select)
    return statement.where


# --- ALTER SYSTEM BOOTSTRAP --------------------------------------------------------------


def test_bootstrap_single_entry() -> None:
    assert parse("ALTER SYSTEM BOOTSTRAP ZONE 'z1' SERVER '10.0.0.1:2882'") == ast.Bootstrap(
        entries=(ast.BootstrapEntry(region=None, zone="z1", server="10.0.0.1:2882"),)
    )


def test_bootstrap_several_entries_with_regions_equals_and_both_quote_styles() -> None:
    statement = parse(
        "alter system bootstrap REGION 'hz' ZONE = 'z1' SERVER = '10.0.0.1:2882', "
        'region = "sh" zone "z2" server "10.0.0.2:2882",\n ZONE z3 SERVER \'10.0.0.3:2882\';'
    )
    assert statement == ast.Bootstrap(
        entries=(
            ast.BootstrapEntry(region="hz", zone="z1", server="10.0.0.1:2882"),
            ast.BootstrapEntry(region="sh", zone="z2", server="10.0.0.2:2882"),
            ast.BootstrapEntry(region=None, zone="z3", server="10.0.0.3:2882"),
        )
    )


def test_bootstrap_needs_a_server() -> None:
    assert parse_error("ALTER SYSTEM BOOTSTRAP ZONE 'z1'").to_sql_text() == near("")


# --- ALTER SYSTEM ... SERVER ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("verb", "op"),
    [
        ("ADD", "ADD"),
        ("DELETE", "DELETE"),
        ("CANCEL DELETE", "CANCEL_DELETE"),
        ("START", "START"),
        ("STOP", "STOP"),
        ("FORCE STOP", "FORCE_STOP"),
        ("ISOLATE", "ISOLATE"),
        ("cancel   delete", "CANCEL_DELETE"),
        ("Force\nStop", "FORCE_STOP"),
    ],
)
def test_server_ops(verb: str, op: str) -> None:
    assert parse(f"ALTER SYSTEM {verb} SERVER '10.0.0.1:2882'") == ast.ServerOp(
        op=op,  # type: ignore[arg-type]
        servers=("10.0.0.1:2882",),
        zone=None,
    )


@pytest.mark.parametrize(
    "zone_clause",
    ["ZONE 'z1'", "ZONE='z1'", 'zone = "z1"', "ZONE z1", "zone = z1", "ZONE `z1`"],
)
def test_server_op_zone_clause_forms(zone_clause: str) -> None:
    statement = parse(f"alter system add server '10.0.0.1:2882', \"10.0.0.2:2882\" {zone_clause};")
    assert statement == ast.ServerOp(
        op="ADD", servers=("10.0.0.1:2882", "10.0.0.2:2882"), zone="z1"
    )


def test_server_addresses_are_kept_as_written_for_the_executor_to_validate() -> None:
    statement = parse("ALTER SYSTEM ADD SERVER 'not an address', ''")
    assert statement == ast.ServerOp(op="ADD", servers=("not an address", ""), zone=None)


def test_server_op_needs_quoted_addresses() -> None:
    assert parse_error("ALTER SYSTEM ADD SERVER 10.0.0.1:2882").to_sql_text() == near(
        "10.0.0.1:2882"
    )


def test_isolate_zone_is_not_a_statement() -> None:
    assert parse_error("ALTER SYSTEM ISOLATE ZONE z1").to_sql_text() == near("ZONE z1")


def test_reload_server() -> None:
    assert parse("alter system reload server ;") == ast.ReloadServer()


# --- ALTER SYSTEM ... ZONE -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("verb", "op"),
    [
        ("ADD", "ADD"),
        ("START", "START"),
        ("STOP", "STOP"),
        ("FORCE STOP", "FORCE_STOP"),
        ("DELETE", "DELETE"),
    ],
)
def test_zone_ops(verb: str, op: str) -> None:
    assert parse(f"ALTER SYSTEM {verb} ZONE 'z1'") == ast.ZoneOp(op=op, zone="z1")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "attrs",
    [
        "IDC 'idc1' REGION 'hz'",
        "IDC = 'idc1', REGION = 'hz'",
        "idc='idc1',region='hz'",
        "REGION 'hz' IDC 'idc1'",
        'region = "hz" , idc = "idc1"',
    ],
)
def test_zone_idc_and_region_in_either_order_comma_optional(attrs: str) -> None:
    assert parse(f"ALTER SYSTEM ADD ZONE z1 {attrs}") == ast.ZoneOp(
        op="ADD", zone="z1", idc="idc1", region="hz"
    )


def test_zone_with_only_region_or_only_idc() -> None:
    assert parse("ALTER SYSTEM ADD ZONE 'z1' REGION 'hz'") == ast.ZoneOp(
        op="ADD", zone="z1", region="hz"
    )
    assert parse("ALTER SYSTEM ADD ZONE \"z1\" IDC = 'i'") == ast.ZoneOp(
        op="ADD", zone="z1", idc="i"
    )


def test_zone_attribute_given_twice_is_a_syntax_error() -> None:
    err = parse_error("ALTER SYSTEM ADD ZONE z1 REGION 'a' REGION 'b'")
    assert err.to_sql_text() == near("REGION 'b'")


# --- ALTER SYSTEM SET / SHOW PARAMETERS ----------------------------------------------------


def test_set_parameters_value_kinds() -> None:
    statement = parse(
        "ALTER SYSTEM SET Lease_Time = 10s, server_permanent_offline_time='3600s', "
        'rpc_timeout = "2s", heartbeat_check_interval = 100ms, migration_disable_time = 1h, '
        "some_int = 42, some_negative = -7, some_decimal = 0.75, flag = true"
    )
    assert statement == ast.SetParameters(
        items=(
            ("lease_time", "10s"),
            ("server_permanent_offline_time", "3600s"),
            ("rpc_timeout", "2s"),
            ("heartbeat_check_interval", "100ms"),
            ("migration_disable_time", "1h"),
            ("some_int", 42),
            ("some_negative", -7),
            ("some_decimal", 0.75),
            ("flag", "true"),
        )
    )


def test_set_duration_then_letters_is_a_syntax_error() -> None:
    assert parse_error("ALTER SYSTEM SET lease_time = 10sx").to_sql_text() == near("sx")


def test_set_needs_a_value() -> None:
    assert parse_error("ALTER SYSTEM SET lease_time =;").to_sql_text() == near("")


def test_show_parameters() -> None:
    assert parse("SHOW PARAMETERS") == ast.ShowParameters(like=None)
    assert parse("show parameters like 'lease%';") == ast.ShowParameters(like="lease%")
    assert parse('Show Parameters Like "%time"') == ast.ShowParameters(like="%time")


# --- strings, comments, layout -------------------------------------------------------------


@pytest.mark.parametrize(
    ("literal", "value"),
    [
        ("'plain'", "plain"),
        ('"plain"', "plain"),
        ("'it''s'", "it's"),
        ('"say ""hi"""', 'say "hi"'),
        ("'say \"hi\"'", 'say "hi"'),
        ("'it\\'s'", "it's"),
        ('"a\\"b"', 'a"b'),
        ("'back\\\\slash'", "back\\slash"),
        ("'tab\\tnl\\ncr\\rnul\\0z\\Z'", "tab\tnl\ncr\rnul\x00z\x1a"),
        ("'\\x\\y'", "xy"),  # an unknown escape is the character itself (MySQL)
        ("'50\\%\\_'", "50\\%\\_"),  # kept for LIKE, as MySQL does
        ("''", ""),
        ("'multi\nline'", "multi\nline"),
        ("'ünïcødé 中文'", "ünïcødé 中文"),
    ],
)
def test_string_literals(literal: str, value: str) -> None:
    assert parse(f"ALTER SYSTEM SET p = {literal}") == ast.SetParameters(items=(("p", value),))


def test_comments_and_whitespace_anywhere() -> None:
    text = (
        "/* leading */ ALTER -- a line comment\n"
        "  SYSTEM # a hash comment\n"
        "\tADD /* inside */ SERVER\r\n"
        "'10.0.0.1:2882' /* multi\nline */ ZONE='z1' ; -- trailing\n"
    )
    assert parse(text) == ast.ServerOp(op="ADD", servers=("10.0.0.1:2882",), zone="z1")


def test_double_dash_needs_a_blank_to_start_a_comment_as_in_mysql() -> None:
    assert parse("SHOW PARAMETERS --") == ast.ShowParameters()
    assert parse_error("SHOW PARAMETERS --x").to_sql_text() == near("--x")


def test_comment_markers_inside_strings_are_text() -> None:
    assert parse("ALTER SYSTEM SET p = '-- #/* x */;'") == ast.SetParameters(
        items=(("p", "-- #/* x */;"),)
    )


# --- SELECT --------------------------------------------------------------------------------


def test_select_star() -> None:
    assert parse("SELECT * FROM __all_server") == ast.Select(columns=None, table="__all_server")


@pytest.mark.parametrize(
    "table",
    [
        "__all_server",
        "__ALL_SERVER",
        "oceanbase.__all_server",
        "OceanBase.__All_Server",
        "`__all_server`",
        "`oceanbase`.`__all_server`",
        "OCEANBASE . __all_server",
    ],
)
def test_select_table_names(table: str) -> None:
    statement = parse(f"select * from {table}")
    assert isinstance(statement, ast.Select)
    assert statement.table == "__all_server"


def test_other_schema_is_kept_for_the_executor_to_refuse() -> None:
    statement = parse("SELECT * FROM mysql.User")
    assert isinstance(statement, ast.Select)
    assert statement.table == "mysql.user"


def test_select_columns_keep_their_case_and_keyword_names_are_columns() -> None:
    statement = parse("SELECT svr_ip, Svr_Port, zone, status, `Order`, region FROM DBA_OB_SERVERS")
    assert statement == ast.Select(
        columns=("svr_ip", "Svr_Port", "zone", "status", "Order", "region"),
        table="dba_ob_servers",
    )


@pytest.mark.parametrize(
    ("op", "normalised"),
    [("=", "="), ("!=", "!="), ("<>", "!="), ("<", "<"), (">", ">"), ("<=", "<="), (">=", ">=")],
)
def test_comparison_operators(op: str, normalised: str) -> None:
    assert where(f"svr_port {op} 2882") == ast.Compare("svr_port", normalised, 2882)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("literal", "value"),
    [
        ("'ACTIVE'", "ACTIVE"),
        ('"ACTIVE"', "ACTIVE"),
        ("42", 42),
        ("-42", -42),
        ("- 42", -42),
        ("0", 0),
        ("1.5", 1.5),
        ("-0.25", -0.25),
        (".5", 0.5),
        ("1e3", 1000.0),
        ("NULL", None),
        ("null", None),
        ("TRUE", 1),
        ("false", 0),
        ("9223372036854775807", 2**63 - 1),
        ("-9223372036854775808", -(2**63)),
    ],
)
def test_where_literals(literal: str, value: ast.Literal_) -> None:
    condition = where(f"x = {literal}")
    assert condition == ast.Compare("x", "=", value)
    assert isinstance(condition, ast.Compare)
    assert type(condition.value) is type(value)


def test_in_and_not_in() -> None:
    assert where("zone IN ('z1', \"z2\", NULL, 3)") == ast.In("zone", ("z1", "z2", None, 3))
    assert where("zone not in ('z1')") == ast.In("zone", ("z1",), negated=True)


def test_like_and_not_like() -> None:
    assert where("svr_ip LIKE '10.%'") == ast.Like("svr_ip", "10.%")
    assert where("svr_ip NOT LIKE '10\\_%'") == ast.Like("svr_ip", "10\\_%", negated=True)


def test_is_null_and_is_not_null() -> None:
    assert where("build_version IS NULL") == ast.IsNull("build_version")
    assert where("build_version is not null") == ast.IsNull("build_version", negated=True)


def test_precedence_not_over_and_over_or() -> None:
    a, b, c = (ast.Compare(name, "=", 1) for name in "abc")
    assert where("a = 1 OR b = 1 AND c = 1") == ast.Or(a, ast.And(b, c))
    assert where("a = 1 AND b = 1 OR c = 1") == ast.Or(ast.And(a, b), c)
    assert where("NOT a = 1 AND b = 1") == ast.And(ast.Not(a), b)
    assert where("NOT (a = 1 AND b = 1)") == ast.Not(ast.And(a, b))
    assert where("(a = 1 OR b = 1) AND c = 1") == ast.And(ast.Or(a, b), c)
    assert where("a = 1 AND b = 1 AND c = 1") == ast.And(ast.And(a, b), c)  # left-associative
    assert where("NOT NOT a = 1") == ast.Not(ast.Not(a))


def test_order_by_and_limit_forms() -> None:
    statement = parse(
        "SELECT zone FROM __all_server ORDER BY zone DESC, svr_ip ASC, svr_port LIMIT 10 OFFSET 5"
    )
    assert statement == ast.Select(
        columns=("zone",),
        table="__all_server",
        order_by=(
            ast.OrderItem("zone", descending=True),
            ast.OrderItem("svr_ip"),
            ast.OrderItem("svr_port"),
        ),
        limit=10,
        offset=5,
    )
    # MySQL's LIMIT offset, row_count
    assert parse("SELECT * FROM t LIMIT 5, 10") == ast.Select(
        columns=None, table="t", limit=10, offset=5
    )
    assert parse("SELECT * FROM t LIMIT 0") == ast.Select(columns=None, table="t", limit=0)


def test_full_select() -> None:
    statement = parse(
        "select svr_ip, svr_port from oceanbase.__all_server\n"
        "where zone = 'z1' and status <> 'ACTIVE'\n"
        "order by svr_ip limit 3;"
    )
    assert statement == ast.Select(
        columns=("svr_ip", "svr_port"),
        table="__all_server",
        where=ast.And(ast.Compare("zone", "=", "z1"), ast.Compare("status", "!=", "ACTIVE")),
        order_by=(ast.OrderItem("svr_ip"),),
        limit=3,
    )


@pytest.mark.parametrize(
    ("text", "rest"),
    [
        ("SELECT * FROM t LIMIT -1", "-1"),
        ("SELECT * FROM t LIMIT 1.5", ".5"),
        ("SELECT * FROM t LIMIT 99999999999999999999", "99999999999999999999"),
        ("SELECT * FROM t LIMIT 1 OFFSET 9223372036854775808", "9223372036854775808"),
        ("SELECT * FROM t WHERE x = 9223372036854775808", "9223372036854775808"),
        ("SELECT * FROM t WHERE x = -9223372036854775809", "9223372036854775809"),
        ("SELECT * FROM t WHERE x = " + "9" * 5000, "9" * 80),
        ("SELECT * FROM t WHERE x = 1e999", "1e999"),
        ("SELECT * FROM t WHERE x IN ()", ")"),
        ("SELECT *, a FROM t", ", a FROM t"),
        ("SELECT * FROM t WHERE 1 = x", "1 = x"),
        ("SELECT `` FROM t", "`` FROM t"),
    ],
)
def test_select_syntax_errors(text: str, rest: str) -> None:
    assert parse_error(text).to_sql_text() == near(rest)


def test_deeply_nested_where_is_refused_not_a_crash() -> None:
    fine = "SELECT * FROM t WHERE " + "NOT " * (MAX_EXPR_DEPTH - 2) + "a = 1"
    assert isinstance(parse(fine), ast.Select)
    err = parse_error("SELECT * FROM t WHERE " + "NOT " * 50_000 + "a = 1")
    assert err.name == "OB_NOT_SUPPORTED"
    err = parse_error("SELECT * FROM t WHERE " + " OR ".join(["(a = 1"] * 5_000) + ")" * 5_000)
    assert err.name == "OB_NOT_SUPPORTED"


def test_redundant_parentheses_do_not_count_as_depth() -> None:
    assert where("(" * 10_000 + "a = 1" + ")" * 10_000) == ast.Compare("a", "=", 1)


# --- errors --------------------------------------------------------------------------------


def test_parse_error_fields() -> None:
    err = parse_error("ALTER SYSTEM FROB SERVER 'a:1'")
    assert (err.name, err.code, err.sqlstate) == ("ER_PARSE_ERROR", -1064, "42000")
    assert err.to_sql_text() == near("FROB SERVER 'a:1'")


def test_parse_error_line_number_in_a_multi_line_statement() -> None:
    text = "SELECT svr_ip\n  FROM __all_server\n WHERE zone = = 'z1'\n ORDER BY svr_ip"
    assert parse_error(text).to_sql_text() == near("= 'z1'\n ORDER BY svr_ip", line=3)


def test_parse_error_at_end_of_input_is_near_nothing() -> None:
    assert parse_error("ALTER SYSTEM ADD SERVER").to_sql_text() == near("")
    assert parse_error("ALTER SYSTEM").to_sql_text() == near("")
    # The terminating ; is not part of the statement (the mysql client strips it).
    assert parse_error("ALTER SYSTEM ADD SERVER ; -- done").to_sql_text() == near("")
    assert parse_error("SELECT *\nFROM\n").to_sql_text() == near("", line=2)


def test_near_text_is_truncated_to_80_characters() -> None:
    tail = "x" * 200
    err = parse_error(f"ALTER SYSTEM BOGUS {tail}")
    assert err.to_sql_text() == near(("BOGUS " + tail)[:80])


def test_unterminated_string_is_a_syntax_error_at_the_quote() -> None:
    assert parse_error("ALTER SYSTEM ADD SERVER 'a:1").to_sql_text() == near("'a:1")
    assert parse_error("ALTER SYSTEM ADD SERVER 'a:1\\'").to_sql_text() == near("'a:1\\'")


def test_unterminated_block_comment_is_a_syntax_error() -> None:
    assert parse_error("SHOW PARAMETERS /* no end").to_sql_text() == near("/* no end")


@pytest.mark.parametrize(
    "text",
    [
        "SHOW PARAMETERS; SHOW PARAMETERS",
        "ALTER SYSTEM RELOAD SERVER;;",
        "ALTER SYSTEM RELOAD SERVER; x",
    ],
)
def test_more_than_one_statement_is_a_syntax_error(text: str) -> None:
    err = parse_error(text)
    assert err.name == "ER_PARSE_ERROR"
    assert "near '" in err.message


@pytest.mark.parametrize("text", ["", "   ", "\n\t", ";", " ; ;", "-- only\n", "# x", "/* */ ;"])
def test_empty_query(text: str) -> None:
    err = parse_error(text)
    assert err.name == "ER_EMPTY_QUERY"
    assert err.to_sql_text() == "ERROR 1065 (42000): Query was empty"


def test_packet_too_large_counts_utf8_bytes_and_is_checked_before_parsing() -> None:
    statement = "ALTER SYSTEM SET p = 'ééééé'"  # 28 characters, 33 bytes
    assert isinstance(parse(statement, max_bytes=33), ast.SetParameters)
    err = parse_error(statement, max_bytes=32)
    assert err.name == "ER_NET_PACKET_TOO_LARGE"
    assert err.to_sql_text() == (
        "ERROR 1153 (08S01): Got a packet bigger than 'max_allowed_packet' bytes"
    )
    # Garbage that would be a syntax error is refused for its size first.
    assert parse_error("@" * 101, max_bytes=100).name == "ER_NET_PACKET_TOO_LARGE"
    assert parse_error("x" * (4 * MB + 1)).name == "ER_NET_PACKET_TOO_LARGE"


def test_one_megabyte_string_parses_quickly() -> None:
    address = "1" * MB
    started = time.perf_counter()
    statement = parse(f"ALTER SYSTEM ADD SERVER '{address}' ZONE 'z1'")
    elapsed = time.perf_counter() - started
    assert statement == ast.ServerOp(op="ADD", servers=(address,), zone="z1")
    assert elapsed < 1.0


def test_unterminated_megabyte_string_fails_quickly() -> None:
    # Backslashes and doubled quotes are where a naive string regex backtracks exponentially.
    started = time.perf_counter()
    err = parse_error("ALTER SYSTEM ADD SERVER '" + "a\\'b''" * (MB // 6))
    assert err.name == "ER_PARSE_ERROR"
    assert time.perf_counter() - started < 1.0


# --- robustness ----------------------------------------------------------------------------

# Keywords, punctuation, edge literals and the starts of strings and comments.
# fmt: off
_VOCABULARY = [
    "ALTER", "SYSTEM", "ADD", "DELETE", "CANCEL", "START", "STOP", "FORCE", "ISOLATE", "SERVER",
    "ZONE", "REGION", "IDC", "BOOTSTRAP", "RELOAD", "SET", "SHOW", "PARAMETERS", "LIKE",
    "SELECT", "FROM", "WHERE", "ORDER", "BY", "ASC", "DESC", "LIMIT", "OFFSET", "IN", "NOT",
    "IS", "NULL", "AND", "OR", "TRUE", "FALSE", "oceanbase", "__all_server", "x", "zone",
    "*", ",", ";", "(", ")", "=", "!=", "<>", "<", "<=", ">", ">=", "-", ".", "`c`", "``",
    "10s", "1.5", ".5", "1e999", "0", "99999999999999999999", "'a:1'", '"z"',
    "--", "#", "/*", "*/", "'", '"', "\\", "\n",
]
# fmt: on

_SEEDS = [
    "ALTER SYSTEM BOOTSTRAP REGION 'r' ZONE 'z1' SERVER '10.0.0.1:2882'",
    "ALTER SYSTEM ADD SERVER '10.0.0.1:2882', '10.0.0.2:2882' ZONE = 'z1';",
    "ALTER SYSTEM ADD ZONE z1 IDC 'i', REGION 'r'",
    "ALTER SYSTEM SET lease_time = 10s, x = 'y'",
    "SHOW PARAMETERS LIKE 'lease%'",
    "SELECT a, b FROM oceanbase.__all_server WHERE a IN (1, -2) AND NOT b LIKE 'x' "
    "OR c IS NOT NULL ORDER BY a DESC LIMIT 1, 2",
]


def _random_inputs(rng: random.Random, count: int) -> list[str]:
    inputs: list[str] = []
    for i in range(count):
        kind = i % 4
        if kind == 0:  # arbitrary code points, surrogates and control characters included
            inputs.append("".join(chr(rng.randrange(0x110000)) for _ in range(rng.randrange(40))))
        elif kind == 1:  # random bytes, as a server would see them decoded leniently
            raw = bytes(rng.randrange(256) for _ in range(rng.randrange(60)))
            inputs.append(raw.decode("latin-1"))
        elif kind == 2:  # token soup
            inputs.append(" ".join(rng.choice(_VOCABULARY) for _ in range(rng.randrange(20))))
        else:  # a valid statement with a few characters changed
            chars = list(rng.choice(_SEEDS))
            for _ in range(rng.randrange(1, 4)):
                pos = rng.randrange(len(chars))
                action = rng.randrange(3)
                if action == 0:
                    del chars[pos]
                elif action == 1:
                    chars.insert(pos, rng.choice("'\"`;()-*/#\\=\n\x00é"))
                else:
                    chars[pos] = chr(rng.randrange(32, 127))
            inputs.append("".join(chars))
    return inputs


def test_random_input_only_ever_raises_ob_error() -> None:
    accepted = refused = 0
    for text in _random_inputs(random.Random(20240611), 600):
        try:
            statement = parse(text)
        except ObError as e:
            refused += 1
            assert e.name in {
                "ER_PARSE_ERROR",
                "ER_EMPTY_QUERY",
                "OB_NOT_SUPPORTED",
            }, text
            assert e.to_sql_text().startswith(f"ERROR {abs(e.code)} ")
        else:
            accepted += 1
            assert isinstance(statement, STATEMENT_TYPES), text
    # The generator must exercise both outcomes for the loop to prove anything.
    assert accepted > 10
    assert refused > 300


def test_all_statement_forms_give_statement_types() -> None:
    for seed in _SEEDS:
        assert isinstance(parse(seed), STATEMENT_TYPES)
