"""The agents' parameters by zone and server (rootservice.servers.agent_parameters,
rootservice.parameters): which value is in effect where, what each lease answer carries,
GV$OB_PARAMETERS / V$OB_PARAMETERS / SHOW PARAMETERS, and refusals that change nothing. An
in-process RS with the SEEDED cluster (A and D in z1, B in z2, C in z3) on SQLite and
PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from obcommon.errors import ObError
from rootservice.api.dispatch import run_statement
from rootservice.app import RootService
from rootservice.config import RsSettings
from rootservice.parameters import SHOW_COLUMNS
from rootservice.servers.agent_parameters import AgentParameterValues
from tests.support.harness import ROOT, ZA, ZB, ZC, A, B, C, D, hb


def q(rs: RootService, text: str) -> Any:
    return run_statement(rs, text, ROOT)


def sent(rs: RootService, server: str, zone: str) -> tuple[int, dict[str, str]]:
    resp = rs.heartbeats.receive_hb(hb(server, zone))
    return resp.migration_max_bytes_per_second, dict(resp.parameters)


def test_a_server_s_value_wins_over_its_zone_s_which_wins_over_the_cluster_s(
    tmp_path: Path,
) -> None:
    v = AgentParameterValues(RsSettings(data_dir=tmp_path, db_url="sqlite://"))
    # Nothing set anywhere: nothing sent but the copy limit, and the values are the defaults.
    assert v.for_server("10.0.0.1", 1, "z1") == (0, {})
    assert v.value_in_effect("10.0.0.1", 1, "z1", "syslog_level") == "INFO"
    v.settings.syslog_level = "WARN"
    v.replace(
        {
            ("z1", "ANY", 0, "syslog_level"): "DEBUG",
            ("", "10.0.0.1", 1, "syslog_level"): "ERROR",
            ("z1", "ANY", 0, "migration_max_bytes_per_second"): "1M",
            ("", "10.0.0.2", 1, "disk_probe_interval"): "2s",
        },
        cluster_set={"syslog_level", "lease_time"},
    )
    # The server's own value, then its zone's, then the cluster's; what a zone's servers are
    # sent is computed once for the zone, and a server with a value of its own is not sent it.
    assert v.for_server("10.0.0.4", 1, "z1") == (1 << 20, {"syslog_level": "DEBUG"})
    assert v.for_server("10.0.0.1", 1, "z1") == (1 << 20, {"syslog_level": "ERROR"})
    assert v.for_server("10.0.0.3", 1, "z1") == (1 << 20, {"syslog_level": "DEBUG"})
    assert v.for_server("10.0.0.2", 1, "z2") == (
        0,
        {"disk_probe_interval": "2s", "syslog_level": "WARN"},
    )
    # Same ip, other port: another server (the zone's value, not 10.0.0.1:1's).
    assert v.for_server("10.0.0.1", 2, "z1") == (1 << 20, {"syslog_level": "DEBUG"})
    # A root service parameter is never sent, though set.
    assert "lease_time" not in v.for_server("10.0.0.9", 1, "z9")[1]
    # Replacing forgets what was computed.
    v.replace({}, cluster_set=())
    assert v.for_server("10.0.0.1", 1, "z1") == (0, {})


def test_scoped_set_reaches_each_lease_answer_and_the_views(rs: RootService) -> None:
    assert sent(rs, A, ZA) == (0, {})
    q(
        rs,
        "ALTER SYSTEM SET syslog_level = 'debug' COMMENT 'chasing a bug' ZONE = 'z1', "
        f"disk_probe_interval = '2s' SCOPE = MEMORY SERVER = '{B}', "
        f"migration_max_bytes_per_second = '1M' SERVER '{A}'",
    )
    assert sent(rs, A, ZA) == (1 << 20, {"syslog_level": "DEBUG"})
    assert sent(rs, D, ZA) == (0, {"syslog_level": "DEBUG"})
    assert sent(rs, B, ZB) == (0, {"disk_probe_interval": "2s"})
    assert sent(rs, C, ZC) == (0, {})
    # A later cluster-wide value reaches the servers without a narrower one, only.
    q(rs, "ALTER SYSTEM SET syslog_level = 'WARN'")
    assert sent(rs, A, ZA)[1] == {"syslog_level": "DEBUG"}
    assert sent(rs, C, ZC)[1] == {"syslog_level": "WARN"}
    assert sent(rs, B, ZB)[1] == {"disk_probe_interval": "2s", "syslog_level": "WARN"}

    rows = q(
        rs,
        "SELECT SVR_IP, SVR_PORT, ZONE, VALUE, ISDEFAULT, SCOPE, TENANT_ID, DATA_TYPE, "
        "SECTION, EDIT_LEVEL, DEFAULT_VALUE FROM GV$OB_PARAMETERS "
        "WHERE NAME = 'syslog_level' ORDER BY SVR_PORT",
    ).rows
    assert [(r[1], r[2], r[3], r[4]) for r in rows] == [
        (3001, "z1", "DEBUG", "NO"),
        (3002, "z2", "WARN", "NO"),
        (3003, "z3", "WARN", "NO"),
        (3004, "z1", "DEBUG", "NO"),
    ]
    assert rows[0][5:] == ("CLUSTER", None, "STRING", "OBSERVER", "DYNAMIC_EFFECTIVE", "INFO")
    # A root service parameter is on every server's rows, with the RS's value.
    lease = q(
        rs,
        "SELECT DISTINCT VALUE, ISDEFAULT, SECTION FROM GV$OB_PARAMETERS WHERE NAME = 'lease_time'",
    ).rows
    assert lease == [("10s", "YES", "ROOT_SERVICE")]
    copy = q(
        rs,
        "SELECT SVR_PORT, VALUE, DATA_TYPE FROM GV$OB_PARAMETERS "
        "WHERE NAME = 'migration_max_bytes_per_second' ORDER BY SVR_PORT",
    ).rows
    assert copy == [
        (3001, "1M", "CAPACITY"),
        (3002, "0", "CAPACITY"),
        (3003, "0", "CAPACITY"),
        (3004, "0", "CAPACITY"),
    ]
    counts = q(rs, "SELECT COUNT(*), COUNT(DISTINCT NAME) FROM GV$OB_PARAMETERS").rows
    assert counts[0][0] == 4 * counts[0][1]
    # The statement's COMMENT is kept with the zone's value.
    with rs.store.read() as conn:
        info = conn.execute(
            sa.text("SELECT info FROM __all_sys_parameter_override WHERE zone = 'z1'")
        ).scalar_one()
    assert info == "chasing a bug"

    shown = q(rs, "SHOW PARAMETERS LIKE 'syslog%'")
    assert shown.columns == SHOW_COLUMNS
    assert [(r[0], r[2], r[3], r[6], r[13]) for r in shown.rows] == [
        ("z1", "127.0.0.1", 3001, "DEBUG", "NO"),
        ("z2", "127.0.0.1", 3002, "WARN", "NO"),
        ("z3", "127.0.0.1", 3003, "WARN", "NO"),
        ("z1", "127.0.0.1", 3004, "DEBUG", "NO"),
    ]
    assert shown.rows[0][1] == "observer" and shown.rows[0][9] == "CLUSTER"
    where = q(rs, "SHOW PARAMETERS WHERE name = 'syslog_level' AND value = 'DEBUG'")
    assert [c.lower() for c in where.columns] == SHOW_COLUMNS
    assert [(r[3], r[6], r[10]) for r in where.rows] == [
        (3001, "DEBUG", "__all_sys_parameter"),
        (3004, "DEBUG", "__all_sys_parameter"),
    ]
    # The same row as SHOW PARAMETERS LIKE gives, every column.
    assert q(rs, "SHOW PARAMETERS WHERE svr_port = 3003 AND name LIKE 'syslog%'").rows == [
        shown.rows[2]
    ]


def test_the_views_have_oceanbase_s_columns(rs: RootService) -> None:
    oceanbase = [
        "SVR_IP",
        "SVR_PORT",
        "ZONE",
        "SCOPE",
        "TENANT_ID",
        "NAME",
        "DATA_TYPE",
        "VALUE",
        "INFO",
        "SECTION",
        "EDIT_LEVEL",
        "DEFAULT_VALUE",
        "ISDEFAULT",
    ]
    for view in ("GV$OB_PARAMETERS", "V$OB_PARAMETERS"):
        desc = q(rs, f"DESC {view}").rows
        assert [r[0] for r in desc] == oceanbase
        assert dict((r[0], r[1]) for r in desc)["TENANT_ID"] == "bigint(20)"


def test_v_ob_parameters_is_the_server_with_the_root_service(rs: RootService) -> None:
    assert q(rs, "SELECT COUNT(*) FROM V$OB_PARAMETERS").rows == [(0,)]
    with rs.store.txn() as conn:
        conn.execute(sa.text("UPDATE __all_server SET with_rootserver = 1 WHERE svr_port = 3002"))
    ports = q(rs, "SELECT DISTINCT SVR_PORT FROM V$OB_PARAMETERS").rows
    assert ports == [(3002,)]


def snapshot(rs: RootService) -> tuple[Any, ...]:
    answers = (sent(rs, A, ZA), sent(rs, B, ZB))
    with rs.store.read() as conn:
        tables = tuple(
            tuple(sorted(tuple(r) for r in conn.execute(sa.text(query))))
            for query in (
                "SELECT * FROM __all_sys_parameter",
                "SELECT * FROM __all_sys_parameter_override",
                "SELECT * FROM __all_sys_parameter_info",
                "SELECT * FROM __all_rootservice_event_history WHERE event = 'set_parameter'",
            )
        )
    return tables, rs.settings.model_dump(), answers


GOOD = (
    f"syslog_level = 'DEBUG' ZONE 'z1', lease_time = '20s', disk_probe_interval = '3s' SERVER '{B}'"
)


@pytest.mark.parametrize(
    ("bad", "code", "message"),
    [
        ("syslog_level = 'LOUD' ZONE 'z2'", "OB_INVALID_CONFIG", "is not one of DEBUG"),
        ("disk_probe_interval = '0s'", "OB_INVALID_CONFIG", "out of range"),
        ("disk_probe_interval = 1.5", "OB_INVALID_CONFIG", "write a duration"),
        ("migration_max_bytes_per_second = 'lots' ZONE 'z1'", "OB_INVALID_CONFIG", "lots"),
        ("lease_time = '20s' ZONE 'z1'", "OB_INVALID_CONFIG", "no ZONE or SERVER scope"),
        ("lease_time = '1s'", "OB_INVALID_CONFIG", "must be greater than"),
        ("syslog_level = 'INFO' ZONE 'z9'", "OB_INVALID_ARGUMENT", "Incorrect arguments to zone"),
        (
            "syslog_level = 'INFO' SERVER '127.0.0.1:3999'",
            "OB_INVALID_ARGUMENT",
            "Incorrect arguments to server",
        ),
        ("syslog_level = 'INFO' SERVER 'nowhere'", "OB_INVALID_ARGUMENT", "server"),
        ("syslog_level = 'INFO' TENANT = sys", "OB_ERR_SYS_CONFIG_UNKNOWN", "no tenant parameter"),
        ("no_such_parameter = 1", "OB_ERR_SYS_CONFIG_UNKNOWN", "System config unknown"),
    ],
)
def test_one_bad_item_refuses_the_statement_and_nothing_changes(
    rs: RootService, bad: str, code: str, message: str
) -> None:
    before = snapshot(rs)
    with pytest.raises(ObError) as e:
        q(rs, f"ALTER SYSTEM SET {GOOD}, {bad}")
    assert e.value.name == code and message in e.value.message, e.value.message
    assert snapshot(rs) == before
    # The good items alone pass (the refusal was the bad item's).
    q(rs, f"ALTER SYSTEM SET {GOOD}")
    assert sent(rs, A, ZA)[1] == {"syslog_level": "DEBUG"}
    assert rs.settings.lease_time == 20_000_000
