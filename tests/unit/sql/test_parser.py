"""The admin SQL parser (sql/parser.py, sql/grammar.lark): statement forms of docs/design/statements.md,
the AST of sql/ast.py, and MySQL-style errors (docs/design/index.md#error-codes); and sql/sizes.py."""

from __future__ import annotations

import random
import typing

import pytest

from obcommon.errors import ObError
from obcommon.sizes import parse_size
from sql import ast
from sql.parser import parse

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
        ("FORCE DELETE", "FORCE_DELETE"),
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


def test_isolate_zone_is_a_zone_op_and_isolate_of_nothing_is_not() -> None:
    assert parse("ALTER SYSTEM ISOLATE ZONE z1") == ast.ZoneOp(op="ISOLATE", zone="z1")
    assert parse_error("ALTER SYSTEM ISOLATE z1").to_sql_text() == near("z1")


def test_reload_server() -> None:
    assert parse("alter system reload server ;") == ast.ReloadServer()
    assert parse("ALTER SYSTEM END ROLLING UPGRADE") == ast.EndRollingUpgrade()
    assert parse("alter system begin upgrade") == ast.BeginUpgrade()
    assert parse("ALTER SYSTEM BEGIN ROLLING UPGRADE") == ast.BeginRollingUpgrade()
    assert parse("ALTER SYSTEM END UPGRADE;") == ast.EndUpgrade()


def test_reload_zone_and_unit_and_nothing_else() -> None:
    assert parse("ALTER SYSTEM RELOAD ZONE") == ast.ReloadZone()
    assert parse("alter system reload unit;") == ast.ReloadUnit()
    assert parse_error("ALTER SYSTEM RELOAD TENANT").to_sql_text() == near("TENANT")


def test_run_job_takes_a_quoted_name() -> None:
    assert parse("ALTER SYSTEM RUN JOB 'ROOT_INSPECTION'") == ast.RunJob(job="ROOT_INSPECTION")
    assert parse('alter system run job "root_inspection"') == ast.RunJob(job="root_inspection")
    assert parse_error("ALTER SYSTEM RUN JOB ROOT_INSPECTION").to_sql_text() == near(
        "ROOT_INSPECTION"
    )


# --- EXPLAIN ALTER SYSTEM DELETE SERVER -----------------------------------


@pytest.mark.parametrize(
    ("text", "statement"),
    [
        (
            "EXPLAIN ALTER SYSTEM DELETE SERVER '10.0.0.1:2882'",
            ast.ExplainDeleteServer(servers=("10.0.0.1:2882",), zone=None),
        ),
        (
            "explain alter system delete server '10.0.0.1:2882', \"10.0.0.2:2882\" zone = 'z1';",
            ast.ExplainDeleteServer(servers=("10.0.0.1:2882", "10.0.0.2:2882"), zone="z1"),
        ),
        (
            "EXPLAIN /* dry run */ ALTER SYSTEM DELETE SERVER 'x' ZONE z2",
            ast.ExplainDeleteServer(servers=("x",), zone="z2"),
        ),
    ],
)
def test_explain_delete_server(text: str, statement: ast.Statement) -> None:
    assert parse(text) == statement


@pytest.mark.parametrize(
    ("text", "rest"),
    [
        # only DELETE SERVER has a dry run: the error points at the verb
        ("EXPLAIN ALTER SYSTEM STOP SERVER 'a:1'", "STOP SERVER 'a:1'"),
        ("EXPLAIN ALTER SYSTEM CANCEL DELETE SERVER 'a:1'", "CANCEL DELETE SERVER 'a:1'"),
        ("EXPLAIN ALTER SYSTEM DELETE ZONE 'z1'", "ZONE 'z1'"),
        ("EXPLAIN SELECT 1", "SELECT 1"),
        ("EXPLAIN DELETE SERVER 'a:1'", "DELETE SERVER 'a:1'"),
        ("EXPLAIN", ""),
        ("EXPLAIN ALTER SYSTEM DELETE SERVER", ""),
        ("EXPLAIN ALTER SYSTEM DELETE SERVER 10.0.0.1:2882", "10.0.0.1:2882"),
        ("EXPLAIN ALTER SYSTEM DELETE SERVER 'a:1',", ""),
        ("EXPLAIN ALTER SYSTEM DELETE SERVER 'a:1' ZONE", ""),
        (
            "EXPLAIN EXPLAIN ALTER SYSTEM DELETE SERVER 'a:1'",
            "EXPLAIN ALTER SYSTEM DELETE SERVER 'a:1'",
        ),
        ("EXPLAINALTER SYSTEM DELETE SERVER 'a:1'", "EXPLAINALTER SYSTEM DELETE SERVER 'a:1'"),
    ],
)
def test_explain_syntax_errors(text: str, rest: str) -> None:
    assert parse_error(text).to_sql_text() == near(rest)


# --- ALTER SYSTEM RECOVER LS ---------------------------------------------


@pytest.mark.parametrize(
    ("text", "statement"),
    [
        (
            "ALTER SYSTEM RECOVER LS FROM LOST SERVERS '10.0.0.1:2882'",
            ast.RecoverLs(servers=("10.0.0.1:2882",)),
        ),
        (
            "alter system recover ls tenant T1 ls = 1001 from lost servers 'a:1', 'b:2' dry run;",
            ast.RecoverLs(servers=("a:1", "b:2"), tenant="t1", ls_id=1001, dry_run=True),
        ),
        (
            "ALTER SYSTEM RECOVER LS LS 1002 FROM LOST SERVERS 'a:1' DRY RUN",
            ast.RecoverLs(servers=("a:1",), ls_id=1002, dry_run=True),
        ),
    ],
)
def test_recover_ls(text: str, statement: ast.Statement) -> None:
    assert parse(text) == statement


@pytest.mark.parametrize(
    "text",
    [
        "ALTER SYSTEM RECOVER LS FROM LOST SERVERS",
        "ALTER SYSTEM RECOVER LS LS 1 TENANT t FROM LOST SERVERS 'a:1'",
        "ALTER SYSTEM RECOVER LS FROM SERVERS 'a:1'",
        "ALTER SYSTEM RECOVER LS FROM LOST SERVERS 'a:1' DRY",
    ],
)
def test_recover_ls_syntax_errors(text: str) -> None:
    with pytest.raises(ObError) as e:
        parse(text)
    assert e.value.name == "ER_PARSE_ERROR"


# --- ALTER SYSTEM ... ZONE -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("verb", "op"),
    [
        ("ADD", "ADD"),
        ("START", "START"),
        ("STOP", "STOP"),
        ("FORCE STOP", "FORCE_STOP"),
        ("DELETE", "DELETE"),
        ("ISOLATE", "ISOLATE"),
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


@pytest.mark.parametrize("verb", ["ALTER", "CHANGE", "modify"])
def test_alter_zone_with_or_without_set(verb: str) -> None:
    assert parse(f"ALTER SYSTEM {verb} ZONE 'z1' SET REGION 'hz', IDC 'i'") == ast.ZoneOp(
        op="ALTER", zone="z1", idc="i", region="hz"
    )
    assert parse(f"ALTER SYSTEM {verb} ZONE z1 IDC 'i'") == ast.ZoneOp(
        op="ALTER", zone="z1", idc="i"
    )


@pytest.mark.parametrize(
    "attrs",
    [
        "ZONE_TYPE 'ReadWrite' REGION 'hz'",
        "REGION = 'hz', ZONE_TYPE = 'ReadWrite'",
        "zone_type=ReadWrite region=hz",
    ],
)
def test_zone_type_among_the_zone_options(attrs: str) -> None:
    assert parse(f"ALTER SYSTEM ADD ZONE z1 {attrs}") == ast.ZoneOp(
        op="ADD", zone="z1", region="hz", zone_type="ReadWrite"
    )
    assert parse(f"ALTER SYSTEM MODIFY ZONE z1 SET {attrs}") == ast.ZoneOp(
        op="ALTER", zone="z1", region="hz", zone_type="ReadWrite"
    )


def test_an_option_given_twice_is_kept_for_the_executor_to_refuse() -> None:
    st = parse("ALTER SYSTEM ADD ZONE z1 REGION 'a', IDC 'i', REGION 'b'")
    assert isinstance(st, ast.ZoneOp)
    assert (st.repeated, st.region, st.idc) == ("region", "b", "i")
    one = parse("ALTER SYSTEM ADD ZONE z1 REGION 'a', IDC 'i', ZONE_TYPE 'ReadWrite'")
    assert isinstance(one, ast.ZoneOp) and one.repeated is None


def test_alter_zone_without_an_attribute_is_a_syntax_error() -> None:
    assert parse_error("ALTER SYSTEM ALTER ZONE z1").name == "ER_PARSE_ERROR"


def test_zone_attribute_given_twice_parses_as_oceanbase_resolves_it() -> None:
    # OceanBase's grammar takes the repetition; its resolver refuses it (OB_NOT_SUPPORTED).
    st = parse("ALTER SYSTEM ADD ZONE z1 REGION 'a' REGION 'b'")
    assert isinstance(st, ast.ZoneOp) and st.repeated == "region"


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


def test_set_items_with_comment_scope_server_zone_and_tenant() -> None:
    """OceanBase's alter_system_set_parameter_action: each item its own clauses, in the
    order COMMENT, SCOPE, SERVER | ZONE, TENANT; '=' optional after SERVER, ZONE, TENANT."""
    statement = parse(
        "ALTER SYSTEM SET syslog_level = 'DEBUG' COMMENT 'why' SCOPE = MEMORY ZONE = 'z1', "
        "disk_probe_interval = 2s SCOPE = spfile SERVER '127.0.0.1:2882', "
        "migration_max_bytes_per_second = '1M' ZONE z2 TENANT = T1, lease_time = 10s "
        "scope = Both"
    )
    assert statement == ast.SetParameters(
        items=(
            ("syslog_level", "DEBUG"),
            ("disk_probe_interval", "2s"),
            ("migration_max_bytes_per_second", "1M"),
            ("lease_time", "10s"),
        ),
        scopes=(
            ast.ParameterScope(comment="why", scope="MEMORY", zone="z1"),
            ast.ParameterScope(scope="SPFILE", server="127.0.0.1:2882"),
            ast.ParameterScope(zone="z2", tenant="t1"),
            ast.ParameterScope(scope="BOTH"),
        ),
    )
    assert [sc for _, _, sc in statement.scoped()][3] == ast.ParameterScope(scope="BOTH")
    # No clause anywhere: the statement is the one it always was.
    assert parse("ALTER SYSTEM SET lease_time = 10s").scopes == ()
    assert parse("ALTER SYSTEM SET lease_time = 10s").scoped() == [
        ("lease_time", "10s", ast.ParameterScope())
    ]


def test_set_is_optional_as_in_oceanbase() -> None:
    assert parse("ALTER SYSTEM syslog_level = 'INFO' SERVER = '1.2.3.4:5'") == ast.SetParameters(
        items=(("syslog_level", "INFO"),),
        scopes=(ast.ParameterScope(server="1.2.3.4:5"),),
    )


@pytest.mark.parametrize(
    ("text", "rest"),
    [
        # SCOPE takes only MEMORY, SPFILE, BOTH, and needs its '='.
        ("ALTER SYSTEM SET a = 1 SCOPE = DISK", "DISK"),
        ("ALTER SYSTEM SET a = 1 SCOPE MEMORY", "MEMORY"),
        # One of SERVER and ZONE, and the clauses in OceanBase's order.
        ("ALTER SYSTEM SET a = 1 SERVER 's:1' ZONE 'z1'", "ZONE 'z1'"),
        ("ALTER SYSTEM SET a = 1 ZONE 'z1' COMMENT 'c'", "COMMENT 'c'"),
        ("ALTER SYSTEM SET a = 1 TENANT t SCOPE = BOTH", "SCOPE = BOTH"),
        # A server is a quoted 'ip:port'.
        ("ALTER SYSTEM SET a = 1 SERVER s1", "s1"),
        ("ALTER SYSTEM SET a = 1 COMMENT c", "c"),
    ],
)
def test_set_clause_errors(text: str, rest: str) -> None:
    assert parse_error(text).to_sql_text() == near(rest)


def test_show_parameters_where_is_a_read_of_gv_ob_parameters() -> None:
    st = parse("show parameters where name like 'sys%' and svr_port = 2882;")
    assert isinstance(st, ast.Query)
    assert "GV$OB_PARAMETERS" in st.text and "name LIKE 'sys%' AND svr_port = 2882" in st.text
    # The condition is checked as any SELECT's: one statement, reads only.
    assert parse_error("SHOW PARAMETERS WHERE 1; DROP TABLE t").name == "ER_PARSE_ERROR"
    assert parse("SHOW PARAMETERS LIKE 'where'") == ast.ShowParameters(like="where")


def test_set_duration_then_letters_is_a_syntax_error() -> None:
    assert parse_error("ALTER SYSTEM SET lease_time = 10sx").to_sql_text() == near("sx")


def test_set_needs_a_value() -> None:
    assert parse_error("ALTER SYSTEM SET lease_time =;").to_sql_text() == near("")


def test_show_parameters() -> None:
    assert parse("SHOW PARAMETERS") == ast.ShowParameters(like=None)
    assert parse("show parameters like 'lease%';") == ast.ShowParameters(like="lease%")
    assert parse('Show Parameters Like "%time"') == ast.ShowParameters(like="%time")


# --- ALTER SYSTEM SWITCH REPLICA LEADER ------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "ALTER SYSTEM SWITCH REPLICA LEADER LS=1001 SERVER='10.0.0.1:2882' TENANT='t1'",
        "alter system switch replica leader ls 1001 server '10.0.0.1:2882' tenant t1;",
        'Alter System Switch Replica Leader LS = 1001 SERVER = "10.0.0.1:2882" TENANT = `T1`',
        "ALTER SYSTEM SWITCH REPLICA LEADER LS=1001 SERVER='10.0.0.1:2882' TENANT='T1'",
    ],
)
def test_switch_leader_forms(text: str) -> None:
    assert parse(text) == ast.SwitchLeader(ls_id=1001, server="10.0.0.1:2882", tenant="t1")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "ALTER SYSTEM SWITCH REPLICA FOLLOWER LS=1 SERVER='a:1' TENANT=t",
            ast.SwitchLeader(ls_id=1, server="a:1", tenant="t", role="FOLLOWER"),
        ),
        (
            "alter system switch replica default ls 1001 server = 'a:1'",
            ast.SwitchLeader(ls_id=1001, server="a:1", tenant=None, role="DEFAULT"),
        ),
        (
            "ALTER SYSTEM SWITCH REPLICA LEADER LS=1 SERVER='a:1'",
            ast.SwitchLeader(ls_id=1, server="a:1", tenant=None, role="LEADER"),
        ),
        (
            "ALTER SYSTEM SWITCH ROOTSERVICE LEADER SERVER='127.0.0.1:2881'",
            ast.SwitchRootService(server="127.0.0.1:2881"),
        ),
        (
            "alter system switch rootservice leader server '127.0.0.1:2881';",
            ast.SwitchRootService(server="127.0.0.1:2881"),
        ),
    ],
)
def test_switch_replica_roles_and_rootservice(text: str, expected: ast.Statement) -> None:
    assert parse(text) == expected


def test_switch_leader_server_is_kept_as_written_for_the_executor_to_validate() -> None:
    statement = parse("ALTER SYSTEM SWITCH REPLICA LEADER LS 1 SERVER 'nowhere' TENANT sys")
    assert statement == ast.SwitchLeader(ls_id=1, server="nowhere", tenant="sys")


@pytest.mark.parametrize(
    ("text", "rest"),
    [
        ("ALTER SYSTEM SWITCH REPLICA LEADER LS=1 TENANT=t", "TENANT=t"),
        ("ALTER SYSTEM SWITCH ROOTSERVICE FOLLOWER SERVER='a:1'", "FOLLOWER SERVER='a:1'"),
        ("ALTER SYSTEM SWITCH ROOTSERVICE LEADER ZONE='z1'", "ZONE='z1'"),
        ("ALTER SYSTEM SWITCH ROOTSERVICE LEADER SERVER=a", "a"),
        (
            "ALTER SYSTEM SWITCH REPLICA LEADER LS='1' SERVER='a:1' TENANT=t",
            "'1' SERVER='a:1' TENANT=t",
        ),
        (
            "ALTER SYSTEM SWITCH REPLICA LEADER LS=-1 SERVER='a:1' TENANT=t",
            "-1 SERVER='a:1' TENANT=t",
        ),
        (
            "ALTER SYSTEM SWITCH REPLICA LEADER LS=1.5 SERVER='a:1' TENANT=t",
            ".5 SERVER='a:1' TENANT=t",
        ),
        (
            "ALTER SYSTEM SWITCH REPLICA LEADER SERVER='a:1' LS=1 TENANT=t",
            "SERVER='a:1' LS=1 TENANT=t",
        ),
        ("ALTER SYSTEM SWITCH REPLICA LEADER LS=1 SERVER=a TENANT=t", "a TENANT=t"),
        (
            "ALTER SYSTEM SWITCH REPLICA LEARNER LS=1 SERVER='a:1' TENANT=t",
            "LEARNER LS=1 SERVER='a:1' TENANT=t",
        ),
        (
            "ALTER SYSTEM SWITCH LEADER LS=1 SERVER='a:1' TENANT=t",
            "LEADER LS=1 SERVER='a:1' TENANT=t",
        ),
        (
            "ALTER SYSTEM SWITCH REPLICA LEADER LS=9223372036854775808 SERVER='a:1' TENANT=t",
            "9223372036854775808 SERVER='a:1' TENANT=t",
        ),
    ],
)
def test_switch_leader_syntax_errors(text: str, rest: str) -> None:
    assert parse_error(text).to_sql_text() == near(rest)


# --- CREATE / DROP RESOURCE UNIT -------------------------------------------------------------


def test_create_resource_unit_full_form() -> None:
    statement = parse(
        "CREATE RESOURCE UNIT box1 MAX_CPU 4, MIN_CPU 2, MEMORY_SIZE '8G', "
        "LOG_DISK_SIZE '24G', MAX_IOPS 10000, MIN_IOPS 5000, IOPS_WEIGHT 2"
    )
    assert statement == ast.CreateResourceUnit(
        name="box1",
        options=(
            ("max_cpu", 4),
            ("min_cpu", 2),
            ("memory_size", "8G"),
            ("log_disk_size", "24G"),
            ("max_iops", 10000),
            ("min_iops", 5000),
            ("iops_weight", 2),
        ),
    )


def test_create_resource_unit_case_equals_quotes_order_and_if_not_exists() -> None:
    statement = parse(
        'create resource unit if not exists `Box_1` memory_size = "512M", Max_Cpu=1.5,\n'
        "log_disk_size = 2G , MIN_CPU .5;"
    )
    assert statement == ast.CreateResourceUnit(
        name="box_1",
        options=(
            ("memory_size", "512M"),
            ("max_cpu", 1.5),
            ("log_disk_size", "2G"),
            ("min_cpu", 0.5),
        ),
        if_not_exists=True,
    )


@pytest.mark.parametrize(
    ("value", "kept"),
    [
        ("'4G'", "4G"),
        ('"1073741824"', "1073741824"),
        ("1073741824", 1073741824),
        ("4G", "4G"),
        ("4gb", "4gb"),
        ("512M", "512M"),
        ("1.5G", "1.5G"),
        ("10m", "10m"),  # a size here, not the duration of SET
        ("2.5", 2.5),
        ("-1", -1),  # the executor refuses it
        ("'not a size'", "not a size"),  # likewise
    ],
)
def test_resource_unit_values_are_kept_as_written(value: str, kept: str | int | float) -> None:
    statement = parse(f"CREATE RESOURCE UNIT u MAX_CPU 1, MEMORY_SIZE = {value}")
    assert isinstance(statement, ast.CreateResourceUnit)
    assert statement.options == (("max_cpu", 1), ("memory_size", kept))
    assert type(statement.options[1][1]) is type(kept)


def test_resource_unit_options_may_be_missing_or_repeated_for_the_executor_to_refuse() -> None:
    assert parse("CREATE RESOURCE UNIT u") == ast.CreateResourceUnit(name="u", options=())
    assert parse("CREATE RESOURCE UNIT u MAX_CPU 1, max_cpu 2") == ast.CreateResourceUnit(
        name="u", options=(("max_cpu", 1), ("max_cpu", 2))
    )


def test_resource_unit_names_like_keywords_are_names() -> None:
    assert parse("CREATE RESOURCE UNIT unit MAX_CPU 1") == ast.CreateResourceUnit(
        name="unit", options=(("max_cpu", 1),)
    )
    assert parse("CREATE RESOURCE UNIT `if` MAX_CPU 1") == ast.CreateResourceUnit(
        name="if", options=(("max_cpu", 1),)
    )


@pytest.mark.parametrize(
    ("text", "rest"),
    [
        ("CREATE RESOURCE UNIT", ""),
        ("CREATE RESOURCE UNIT ;", ""),
        ("CREATE RESOURCE UNIT MAX_CPU 1, MEMORY_SIZE '1G'", "1, MEMORY_SIZE '1G'"),
        ("CREATE RESOURCE UNIT 'u' MAX_CPU 1", "'u' MAX_CPU 1"),
        ("CREATE RESOURCE UNIT u MAX_CPU 1, CPU_WEIGHT 2", "CPU_WEIGHT 2"),
        ("CREATE RESOURCE UNIT u MAX_CPU 1 MEMORY_SIZE '1G'", "MEMORY_SIZE '1G'"),
        ("CREATE RESOURCE UNIT u MAX_CPU 1,", ""),
        ("CREATE RESOURCE UNIT u MAX_CPU =, MEMORY_SIZE '1G'", ", MEMORY_SIZE '1G'"),
        ("CREATE RESOURCE UNIT u MEMORY_SIZE 4Gx", "Gx"),
        ("CREATE RESOURCE UNIT u MEMORY_SIZE 4 G", "G"),
        ("CREATE RESOURCE UNIT u MEMORY_SIZE 10s", "s"),
        ("CREATE RESOURCE UNIT u MEMORY_SIZE unlimited", "unlimited"),
        ("CREATE RESOURCE UNIT u MAX_CPU 99999999999999999999", "99999999999999999999"),
        ("CREATE RESOURCE UNIT IF EXISTS u MAX_CPU 1", "EXISTS u MAX_CPU 1"),
        ("CREATE RESOURCE u MAX_CPU 1", "u MAX_CPU 1"),
        ("CREATE UNIT u MAX_CPU 1", "UNIT u MAX_CPU 1"),
    ],
)
def test_create_resource_unit_syntax_errors(text: str, rest: str) -> None:
    assert parse_error(text).to_sql_text() == near(rest)


@pytest.mark.parametrize(
    ("text", "statement"),
    [
        ("DROP RESOURCE UNIT u1", ast.DropResourceUnit(name="u1")),
        ("drop resource unit U1;", ast.DropResourceUnit(name="u1")),
        ("DROP RESOURCE UNIT IF EXISTS `U1`", ast.DropResourceUnit(name="u1", if_exists=True)),
        ("Drop Resource Unit If Exists u1 ;", ast.DropResourceUnit(name="u1", if_exists=True)),
    ],
)
def test_drop_resource_unit(text: str, statement: ast.Statement) -> None:
    assert parse(text) == statement


@pytest.mark.parametrize(
    ("text", "rest"),
    [
        ("DROP RESOURCE UNIT", ""),
        ("DROP RESOURCE UNIT IF EXISTS", ""),
        ("DROP RESOURCE UNIT IF NOT EXISTS u1", "NOT EXISTS u1"),
        ("DROP RESOURCE UNIT u1 FORCE", "FORCE"),
        ("DROP RESOURCE UNIT u1, u2", ", u2"),
        ("DROP RESOURCE UNIT 'u1'", "'u1'"),
    ],
)
def test_drop_resource_unit_syntax_errors(text: str, rest: str) -> None:
    assert parse_error(text).to_sql_text() == near(rest)


# --- CREATE / DROP RESOURCE POOL -------------------------------------------------------------


def test_create_resource_pool_full_form() -> None:
    statement = parse(
        "CREATE RESOURCE POOL pool1 UNIT = 'box1', UNIT_NUM = 1, ZONE_LIST = ('z1', 'z2', 'z3')"
    )
    assert statement == ast.CreateResourcePool(
        name="pool1", unit="box1", unit_num=1, zone_list=("z1", "z2", "z3")
    )


@pytest.mark.parametrize(
    "options",
    [
        "UNIT 'Box1', UNIT_NUM 2, ZONE_LIST ('z1', 'Z2')",
        'zone_list=("z1", Z2), unit=BOX1, unit_num=2',
        "Unit_Num 2 , Zone_List = ( z1 , `Z2` ) , Unit = `box1`",
        "UNIT_NUM=2,UNIT='box1',ZONE_LIST=('z1','Z2')",
    ],
)
def test_create_resource_pool_options_in_any_order_and_form(options: str) -> None:
    assert parse(f"create resource pool if not exists Pool1 {options};") == (
        ast.CreateResourcePool(
            name="pool1", unit="box1", unit_num=2, zone_list=("z1", "Z2"), if_not_exists=True
        )
    )


def test_create_resource_pool_missing_options_are_none() -> None:
    assert parse("CREATE RESOURCE POOL p") == ast.CreateResourcePool(
        name="p", unit=None, unit_num=None, zone_list=None
    )
    assert parse("CREATE RESOURCE POOL p UNIT_NUM 3") == ast.CreateResourcePool(
        name="p", unit=None, unit_num=3, zone_list=None
    )


def test_resource_pool_names_like_keywords_are_names() -> None:
    assert parse("CREATE RESOURCE POOL pool UNIT unit, ZONE_LIST (zone)") == (
        ast.CreateResourcePool(name="pool", unit="unit", unit_num=None, zone_list=("zone",))
    )


@pytest.mark.parametrize(
    ("text", "rest"),
    [
        ("CREATE RESOURCE POOL", ""),
        ("CREATE RESOURCE POOL UNIT 'u'", "'u'"),
        ("CREATE RESOURCE POOL p UNIT 'u', UNIT_NUM 1, ZONE_LIST ('z1', 'z2'", ""),
        ("CREATE RESOURCE POOL p ZONE_LIST ('z1' 'z2')", "'z2')"),
        ("CREATE RESOURCE POOL p ZONE_LIST ()", ")"),
        ("CREATE RESOURCE POOL p ZONE_LIST 'z1'", "'z1'"),
        ("CREATE RESOURCE POOL p UNIT 'u' UNIT_NUM 1", "UNIT_NUM 1"),
        ("CREATE RESOURCE POOL p UNIT 'u', REPLICA_TYPE 'FULL'", "REPLICA_TYPE 'FULL'"),
        ("CREATE RESOURCE POOL p UNIT_NUM -1", "-1"),
        ("CREATE RESOURCE POOL p UNIT_NUM '1'", "'1'"),
        ("CREATE RESOURCE POOL p UNIT_NUM 1.5", ".5"),
        ("CREATE RESOURCE POOL p UNIT 'u', UNIT_NUM 1, unit 'v'", "unit 'v'"),
        ("CREATE RESOURCE POOL p ZONE_LIST ('a'), UNIT_NUM 1, ZONE_LIST ('b')", "ZONE_LIST ('b')"),
    ],
)
def test_create_resource_pool_syntax_errors(text: str, rest: str) -> None:
    assert parse_error(text).to_sql_text() == near(rest)


@pytest.mark.parametrize(
    ("text", "statement"),
    [
        ("DROP RESOURCE POOL p1", ast.DropResourcePool(name="p1")),
        ("drop resource pool `P1`;", ast.DropResourcePool(name="p1")),
        ("DROP RESOURCE POOL IF EXISTS P1", ast.DropResourcePool(name="p1", if_exists=True)),
    ],
)
def test_drop_resource_pool(text: str, statement: ast.Statement) -> None:
    assert parse(text) == statement


def test_drop_resource_pool_syntax_errors() -> None:
    assert parse_error("DROP RESOURCE POOL").to_sql_text() == near("")
    assert parse_error("DROP RESOURCE POOL IF EXISTS ;").to_sql_text() == near("")
    assert parse_error("DROP POOL p1").to_sql_text() == near("POOL p1")


# --- CREATE / DROP TENANT --------------------------------------------------------------------


def test_create_tenant_full_form() -> None:
    statement = parse(
        "CREATE TENANT t1 RESOURCE_POOL_LIST = ('pool1', 'pool2'), PRIMARY_ZONE = 'z1;z2,z3', "
        "LS_COUNT = 4"
    )
    assert statement == ast.CreateTenant(
        name="t1", pools=("pool1", "pool2"), primary_zone="z1;z2,z3", ls_count=4
    )


@pytest.mark.parametrize(
    "options",
    [
        "RESOURCE_POOL_LIST ('Pool1', pool2), PRIMARY_ZONE 'Z1;z2', LS_COUNT 2",
        'ls_count=2, primary_zone="Z1;z2", resource_pool_list=("POOL1", `pool2`)',
        "Primary_Zone = 'Z1;z2' , Ls_Count 2 , Resource_Pool_List = ( pool1 , 'POOL2' )",
    ],
)
def test_create_tenant_options_in_any_order_and_form(options: str) -> None:
    assert parse(f"create tenant if not exists `T1` {options};") == ast.CreateTenant(
        name="t1",
        pools=("pool1", "pool2"),
        primary_zone="Z1;z2",
        ls_count=2,
        if_not_exists=True,
    )


def test_create_tenant_missing_options() -> None:
    # No RESOURCE_POOL_LIST: the executor refuses with OB_EMPTY_RESOURCE_POOL_LIST.
    assert parse("CREATE TENANT t1") == ast.CreateTenant(name="t1", pools=())
    assert parse("CREATE TENANT t1 PRIMARY_ZONE RANDOM") == ast.CreateTenant(
        name="t1", pools=(), primary_zone="RANDOM"
    )
    assert parse("CREATE TENANT t1 RESOURCE_POOL_LIST ('p')") == ast.CreateTenant(
        name="t1", pools=("p",)
    )


def test_tenant_names_like_keywords_are_names() -> None:
    assert parse("CREATE TENANT tenant RESOURCE_POOL_LIST (pool)") == ast.CreateTenant(
        name="tenant", pools=("pool",)
    )


@pytest.mark.parametrize(
    ("text", "rest"),
    [
        ("CREATE TENANT", ""),
        ("CREATE TENANT RESOURCE_POOL_LIST ('p')", "('p')"),
        ("CREATE TENANT 't1' RESOURCE_POOL_LIST ('p')", "'t1' RESOURCE_POOL_LIST ('p')"),
        ("CREATE TENANT t1 RESOURCE_POOL_LIST ('p1', 'p2'", ""),
        ("CREATE TENANT t1 RESOURCE_POOL_LIST ('p1', 'p2';", ""),
        ("CREATE TENANT t1 RESOURCE_POOL_LIST 'p1'", "'p1'"),
        ("CREATE TENANT t1 RESOURCE_POOL_LIST ()", ")"),
        ("CREATE TENANT t1 RESOURCE_POOL_LIST ('p'), LOCALITY 'F@z1'", "LOCALITY 'F@z1'"),
        ("CREATE TENANT t1 CHARSET = utf8mb4", "CHARSET = utf8mb4"),
        ("CREATE TENANT t1 RESOURCE_POOL_LIST ('p') PRIMARY_ZONE 'z1'", "PRIMARY_ZONE 'z1'"),
        ("CREATE TENANT t1 LS_COUNT 'two'", "'two'"),
        ("CREATE TENANT t1 LS_COUNT 1, LS_COUNT 2", "LS_COUNT 2"),
        ("CREATE TENANT t1 FORCE", "FORCE"),
    ],
)
def test_create_tenant_syntax_errors(text: str, rest: str) -> None:
    assert parse_error(text).to_sql_text() == near(rest)


def test_create_tenant_syntax_error_line_number() -> None:
    text = "CREATE TENANT t1\n  RESOURCE_POOL_LIST = ('p1'\n  PRIMARY_ZONE = 'z1'"
    assert parse_error(text).to_sql_text() == near("PRIMARY_ZONE = 'z1'", line=3)


@pytest.mark.parametrize(
    ("text", "statement"),
    [
        ("DROP TENANT t1", ast.DropTenant(name="t1")),
        ("drop tenant T1;", ast.DropTenant(name="t1")),
        ("DROP TENANT t1 FORCE", ast.DropTenant(name="t1", force=True)),
        ("DROP TENANT IF EXISTS t1", ast.DropTenant(name="t1", if_exists=True)),
        (
            "Drop Tenant If Exists `T1` Force ;",
            ast.DropTenant(name="t1", force=True, if_exists=True),
        ),
        ("DROP TENANT force", ast.DropTenant(name="force")),  # a tenant named force
        ("DROP TENANT force FORCE", ast.DropTenant(name="force", force=True)),
    ],
)
def test_drop_tenant(text: str, statement: ast.Statement) -> None:
    assert parse(text) == statement


@pytest.mark.parametrize(
    ("text", "rest"),
    [
        ("DROP TENANT", ""),
        ("DROP TENANT ;", ""),
        ("DROP TENANT IF EXISTS", ""),
        ("DROP TENANT t1 FORCE FORCE", "FORCE"),
        ("DROP TENANT t1 PURGE", "PURGE"),
        ("DROP TENANT 't1'", "'t1'"),
        ("DROP TENANT t1, t2", ", t2"),
        ("DROP TENANTS t1", "TENANTS t1"),
    ],
)
def test_drop_tenant_syntax_errors(text: str, rest: str) -> None:
    assert parse_error(text).to_sql_text() == near(rest)


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


# --- errors --------------------------------------------------------------------------------


def test_parse_error_fields() -> None:
    # SET is optional before a parameter (as in OceanBase), so FROB reads as a parameter's
    # name and the error is at what follows it.
    err = parse_error("ALTER SYSTEM FROB SERVER 'a:1'")
    assert (err.name, err.code, err.sqlstate) == ("ER_PARSE_ERROR", -1064, "42000")
    assert err.to_sql_text() == near("SERVER 'a:1'")


def test_parse_error_line_number_in_a_multi_line_statement() -> None:
    text = "SELECT svr_ip\n  FROM __all_server\n WHERE zone = = 'z1'\n ORDER BY svr_ip"
    assert parse_error(text).to_sql_text() == near("= 'z1'\n ORDER BY svr_ip", line=3)


def test_parse_error_at_end_of_input_is_near_nothing() -> None:
    assert parse_error("ALTER SYSTEM ADD SERVER").to_sql_text() == near("")
    assert parse_error("ALTER SYSTEM").to_sql_text() == near("")
    # The terminating ; is not part of the statement (the mysql client strips it).
    assert parse_error("ALTER SYSTEM ADD SERVER ; -- done").to_sql_text() == near("")


def test_near_text_is_truncated_to_80_characters() -> None:
    tail = "x" * 200
    err = parse_error(f"ALTER SYSTEM BOGUS = {tail} {tail}")
    assert err.to_sql_text() == near(tail[:80])


@pytest.mark.parametrize(
    ("text", "rest"),
    [
        ("DROP TENANTfoo", "TENANTfoo"),
        ("DROP TENANTS t1", "TENANTS t1"),
        ("DROP RESOURCE UNITx", "UNITx"),
        ("DROP TENANT t1 FORCEx", "FORCEx"),
        ("CREATE RESOURCE POOL p UNIT_NUMS 1", "UNIT_NUMS 1"),
        ("ALTER SYSTEM ADD ZONEz1", "ZONEz1"),
        ("ALTER SYSTEM RELOAD SERVERS", "SERVERS"),
        ("SHOWPARAMETERS", "SHOWPARAMETERS"),
        ("SELECT * FROM t WHERE a = 1 ANDb = 2", "ANDb = 2"),
        ("SELECT * FROM t ORDER BYx", "BYx"),
    ],
)
def test_a_keyword_is_a_whole_word_never_the_start_of_a_longer_one(text: str, rest: str) -> None:
    # Otherwise DROP TENANTfoo would drop the tenant foo.
    assert parse_error(text).to_sql_text() == near(rest)


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


def test_one_megabyte_string_parses() -> None:
    # How long it takes is measured by tests/bench/micro_bench.py (make bench-micro); a
    # regex that backtracks would not return here before the suite's timeout.
    address = "1" * MB
    statement = parse(f"ALTER SYSTEM ADD SERVER '{address}' ZONE 'z1'")
    assert statement == ast.ServerOp(op="ADD", servers=(address,), zone="z1")


def test_unterminated_megabyte_string_fails() -> None:
    # Backslashes and doubled quotes are where a naive string regex backtracks exponentially
    # (timed by tests/bench/micro_bench.py).
    err = parse_error("ALTER SYSTEM ADD SERVER '" + "a\\'b''" * (MB // 6))
    assert err.name == "ER_PARSE_ERROR"


# --- sizes (sql/sizes.py) ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "size"),
    [
        (0, 0),
        (1073741824, 1073741824),
        (2**63 - 1, 2**63 - 1),
        (1.9, 1),
        (0.0, 0),
        ("0", 0),
        ("1073741824", 1073741824),
        ("0001024", 1024),
        ("100B", 100),
        ("1k", 1024),
        ("1K", 1024),
        ("1kb", 1024),
        ("512M", 512 * 2**20),
        ("512mb", 512 * 2**20),
        ("4G", 4 * 2**30),
        ("4gB", 4 * 2**30),
        ("2T", 2 * 2**40),
        ("8P", 8 * 2**50),
        ("1.5G", 3 * 2**29),
        (".5k", 512),
        ("1.k", 1024),
        ("1.0009765625K", 1025),
        ("1.0009765624K", 1024),  # rounded down
        ("0.1", 0),
        ("0." + "9" * 200 + "K", 1023),  # a long fraction still rounds down exactly
        ("  4G\t", 4 * 2**30),
        ("8191.99999P", (819199999 * 2**50) // 10**5),
    ],
)
def test_parse_size(value: str | int | float, size: int) -> None:
    assert parse_size(value) == size
    assert type(parse_size(value)) is int


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-1, "must not be negative"),
        (-0.5, "must not be negative"),
        ("-1G", "must not be negative"),
        ("-0", "must not be negative"),
        (2**63, "larger than the maximum"),
        (1e19, "larger than the maximum"),
        ("8192P", "larger than the maximum"),
        ("9223372036854775808", "larger than the maximum"),
        ("9" * 5000, "larger than the maximum"),
        (float("nan"), "not a finite number"),
        (float("inf"), "not a finite number"),
        (True, "expected a number of bytes"),
        (None, "expected a number of bytes"),
        ("", "expected digits"),
        ("   ", "expected digits"),
        ("G", "expected digits"),
        ("B", "expected digits"),
        (".", "expected digits"),
        ("-", "expected digits"),
        ("+1G", "expected digits"),
        ("4 G", "expected digits"),
        ("4Q", "expected digits"),
        ("4GiB", "expected digits"),
        ("4GBB", "expected digits"),
        ("0x10", "expected digits"),
        ("00junk", "expected digits"),
        ("1e3", "expected digits"),
        ("1,024", "expected digits"),
        ("1..5G", "expected digits"),
        ("\u0663G", "expected digits"),  # a non-ASCII digit
        ("unlimited", "expected digits"),
    ],
)
def test_parse_size_refuses(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        parse_size(value)  # type: ignore[arg-type]
    assert str(info.value).startswith("invalid size ")
    assert len(str(info.value)) < 200  # a huge value is not echoed whole


def test_parse_size_accepts_what_the_parser_keeps() -> None:
    statement = parse("CREATE RESOURCE UNIT u MAX_CPU 1, MEMORY_SIZE 4G, LOG_DISK_SIZE '512M'")
    assert isinstance(statement, ast.CreateResourceUnit)
    sizes = {name: parse_size(value) for name, value in statement.options if name != "max_cpu"}
    assert sizes == {"memory_size": 4 * 2**30, "log_disk_size": 512 * 2**20}


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
# And those of the resource unit / pool / tenant statements.
_VOCABULARY_TENANTS = [
    *_VOCABULARY,
    "CREATE", "DROP", "RESOURCE", "UNIT", "POOL", "TENANT", "IF", "EXISTS", "MAX_CPU",
    "MEMORY_SIZE", "UNIT_NUM", "ZONE_LIST", "RESOURCE_POOL_LIST", "PRIMARY_ZONE", "LS_COUNT",
    "SWITCH", "REPLICA", "LEADER", "LS", "EXPLAIN", "4G", "1.5G", "'4G'", "TENANTx", "UNIT_NUMS",
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

_SEEDS_TENANTS = [
    "CREATE RESOURCE UNIT IF NOT EXISTS u1 MAX_CPU 1.5, MEMORY_SIZE 4G, LOG_DISK_SIZE '8G'",
    "DROP RESOURCE UNIT IF EXISTS u1",
    "CREATE RESOURCE POOL p1 UNIT = 'u1', UNIT_NUM = 1, ZONE_LIST = ('z1', 'z2')",
    "DROP RESOURCE POOL p1;",
    "CREATE TENANT t1 RESOURCE_POOL_LIST = ('p1'), PRIMARY_ZONE = 'z1;z2', LS_COUNT = 2",
    "DROP TENANT IF EXISTS t1 FORCE",
    "ALTER SYSTEM SWITCH REPLICA LEADER LS = 1001 SERVER = '10.0.0.1:2882' TENANT = t1",
    "EXPLAIN ALTER SYSTEM DELETE SERVER '10.0.0.1:2882', '10.0.0.2:2882' ZONE 'z1'",
]


def _random_inputs(
    rng: random.Random,
    count: int,
    seeds: list[str] = _SEEDS,
    vocabulary: list[str] = _VOCABULARY,
) -> list[str]:
    inputs: list[str] = []
    for i in range(count):
        kind = i % 4
        if kind == 0:  # arbitrary code points, surrogates and control characters included
            inputs.append("".join(chr(rng.randrange(0x110000)) for _ in range(rng.randrange(40))))
        elif kind == 1:  # random bytes, as a server would see them decoded leniently
            raw = bytes(rng.randrange(256) for _ in range(rng.randrange(60)))
            inputs.append(raw.decode("latin-1"))
        elif kind == 2:  # token soup
            inputs.append(" ".join(rng.choice(vocabulary) for _ in range(rng.randrange(20))))
        else:  # a valid statement with a few characters changed
            chars = list(rng.choice(seeds))
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


@pytest.mark.parametrize(
    ("seeds", "vocabulary", "count"),
    [(_SEEDS, _VOCABULARY, 600), (_SEEDS_TENANTS, _VOCABULARY_TENANTS, 1200)],
    ids=["alter-system-select", "units-pools-tenants"],
)
def test_random_input_only_ever_raises_ob_error(
    seeds: list[str], vocabulary: list[str], count: int
) -> None:
    accepted = refused = 0
    for text in _random_inputs(random.Random(20240611), count, seeds, vocabulary):
        try:
            statement = parse(text)
        except ObError as e:
            refused += 1
            assert e.name in {
                "ER_PARSE_ERROR",
                "ER_EMPTY_QUERY",
                "OB_NOT_SUPPORTED",
                # sql.reads: a read that is not allowed, another schema.
                "ER_NOT_SUPPORTED_YET",
                "ER_BAD_DB_ERROR",
                "OB_TABLE_NOT_EXIST",
            }, text
            assert e.to_sql_text().startswith(f"ERROR {abs(e.code)} ")
        else:
            accepted += 1
            assert isinstance(statement, STATEMENT_TYPES), text
    # The generator must exercise both outcomes for the loop to prove anything.
    assert accepted > 10
    assert refused > 300


def test_all_statement_forms_give_statement_types() -> None:
    for seed in _SEEDS + _SEEDS_TENANTS:
        assert isinstance(parse(seed), STATEMENT_TYPES)


@pytest.mark.parametrize(
    ("text", "statement"),
    [
        (
            "ALTER SYSTEM MIGRATE UNIT = 1001 DESTINATION = '127.0.0.1:3004'",
            ast.MigrateUnit(1001, "127.0.0.1:3004"),
        ),
        ("alter system migrate unit 7 destination 'a:1';", ast.MigrateUnit(7, "a:1")),
        ("ALTER SYSTEM CANCEL MIGRATE UNIT 1001", ast.CancelMigrateUnit(1001)),
        (
            "ALTER RESOURCE UNIT U1 MAX_CPU = 4, MEMORY_SIZE '8G'",
            ast.AlterResourceUnit("u1", (("max_cpu", 4), ("memory_size", "8G"))),
        ),
        (
            "ALTER RESOURCE POOL p1 UNIT_NUM = 1 DELETE UNIT = (1001, 1002)",
            ast.AlterResourcePool("p1", (("unit_num", (1, (1001, 1002))),)),
        ),
        (
            "ALTER RESOURCE POOL p1 UNIT_NUM 2",
            ast.AlterResourcePool("p1", (("unit_num", (2, ())),)),
        ),
        ("ALTER RESOURCE POOL p1 UNIT 'U2'", ast.AlterResourcePool("p1", (("unit", "u2"),))),
        (
            "ALTER RESOURCE POOL p1 ZONE_LIST ('z1', 'z2'), UNIT_NUM = 2",
            ast.AlterResourcePool("p1", (("zone_list", ("z1", "z2")), ("unit_num", (2, ())))),
        ),
        ("ALTER TENANT t1 SET PRIMARY_ZONE = 'z2;z1'", ast.AlterTenant("t1", "z2;z1")),
        ("ALTER TENANT T1 primary_zone 'RANDOM'", ast.AlterTenant("t1", "RANDOM")),
    ],
)
def test_units_by_hand(text: str, statement: ast.Statement) -> None:
    assert parse(text) == statement


@pytest.mark.parametrize(
    "text",
    [
        "ALTER SYSTEM MIGRATE UNIT 1001",  # no destination
        "ALTER SYSTEM MIGRATE UNIT 'x' DESTINATION 'a:1'",  # the id is a number
        "ALTER SYSTEM CANCEL MIGRATE UNIT",
        "ALTER RESOURCE UNIT u1",  # no option
        "ALTER RESOURCE POOL p1",
        "ALTER TENANT t1 SET LOCALITY = 'F@z1'",  # only PRIMARY_ZONE changes here
    ],
)
def test_units_by_hand_syntax_errors(text: str) -> None:
    with pytest.raises(ObError) as e:
        parse(text)
    assert e.value.name == "ER_PARSE_ERROR"
