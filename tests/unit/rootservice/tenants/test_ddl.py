"""CREATE / DROP RESOURCE UNIT, RESOURCE POOL and TENANT through SQL on a real database with a
FakeClock (docs/design/statements.md; rootservice.tenants.ddl). The integration tests
(tests/integration/test_tenants.py) run the same paths with real agents.
"""

from __future__ import annotations

from rootservice.app import RootService
from sql.parser import parse
from tests.support.harness import error_name
from tests.support.tenants import GIB, ZONE, A, B, C, D, err, make_tenant, members_of, rows, sql


def test_unit_config_create_drop_and_errors(rs: RootService) -> None:
    sql(rs, "CREATE RESOURCE UNIT u1 MAX_CPU 2, MEMORY_SIZE '4G'")
    row = rows(rs, "SELECT * FROM dba_ob_unit_configs")[0]
    assert (row["NAME"] if "NAME" in row else row["name"]) == "u1"
    cfg = rows(rs, "SELECT * FROM __all_unit_config")[0]
    # MIN_CPU defaults to MAX_CPU, LOG_DISK_SIZE to three times MEMORY_SIZE (OceanBase).
    assert (cfg["max_cpu"], cfg["min_cpu"]) == (2.0, 2.0)
    assert (cfg["memory_size"], cfg["log_disk_size"]) == (4 * GIB, 12 * GIB)
    assert error_name(sql, rs, "CREATE RESOURCE UNIT u1 MAX_CPU 1, MEMORY_SIZE '4G'") == (
        "OB_RESOURCE_UNIT_EXIST"
    )
    sql(rs, "CREATE RESOURCE UNIT IF NOT EXISTS u1 MAX_CPU 1, MEMORY_SIZE '4G'")
    for bad, code in (
        ("CREATE RESOURCE UNIT u2 MAX_CPU 0.5, MEMORY_SIZE '4G'", "OB_INVALID_RESOURCE_UNIT"),
        ("CREATE RESOURCE UNIT u2 MAX_CPU 1, MEMORY_SIZE '1023M'", "OB_INVALID_RESOURCE_UNIT"),
        (
            "CREATE RESOURCE UNIT u2 MAX_CPU 1, MEMORY_SIZE '1G', LOG_DISK_SIZE '1G'",
            "OB_INVALID_RESOURCE_UNIT",
        ),
        ("CREATE RESOURCE UNIT u2 MAX_CPU 2, MIN_CPU 3, MEMORY_SIZE '4G'", "OB_INVALID_ARGUMENT"),
        ("CREATE RESOURCE UNIT u2 MEMORY_SIZE '4G'", "OB_INVALID_ARGUMENT"),
        ("CREATE RESOURCE UNIT u2 MAX_CPU 1, MEMORY_SIZE '4X'", "OB_INVALID_ARGUMENT"),
        ("CREATE RESOURCE UNIT u2 MAX_CPU 1, MAX_CPU 2, MEMORY_SIZE '4G'", "OB_INVALID_ARGUMENT"),
    ):
        assert error_name(sql, rs, bad) == code, bad
    # boundaries: exactly the minimum is accepted
    sql(rs, "CREATE RESOURCE UNIT umin MAX_CPU 1, MEMORY_SIZE '1G', LOG_DISK_SIZE '2G'")
    sql(rs, "CREATE RESOURCE POOL p1 UNIT 'u1', UNIT_NUM 1, ZONE_LIST ('z2')")
    assert error_name(sql, rs, "DROP RESOURCE UNIT u1") == "OB_RESOURCE_UNIT_IS_REFERENCED"
    sql(rs, "DROP RESOURCE POOL p1")
    sql(rs, "DROP RESOURCE UNIT u1")
    assert error_name(sql, rs, "DROP RESOURCE UNIT u1") == "OB_RESOURCE_UNIT_NOT_EXIST"
    sql(rs, "DROP RESOURCE UNIT IF EXISTS u1")
    assert [r["name"] for r in rows(rs, "SELECT name FROM __all_unit_config")] == ["umin"]


def test_pool_places_one_unit_per_zone_and_refuses_what_does_not_fit(rs: RootService) -> None:
    sql(rs, "CREATE RESOURCE UNIT u1 MAX_CPU 2, MEMORY_SIZE '4G'")
    sql(rs, "CREATE RESOURCE POOL p1 UNIT 'u1', UNIT_NUM 1, ZONE_LIST ('z1', 'z2', 'z3')")
    units = rows(rs, "SELECT * FROM __all_unit ORDER BY zone")
    assert [(u["zone"], f"{u['svr_ip']}:{u['svr_port']}") for u in units][1:] == [
        ("z2", B),
        ("z3", C),
    ]
    assert units[0]["zone"] == "z1" and f"{units[0]['svr_ip']}:{units[0]['svr_port']}" in (A, D)
    # one unit group per index, shared across zones
    assert len({u["unit_group_id"] for u in units}) == 1
    # z2 has one server: two units of one pool cannot share it
    e = err(sql, rs, "CREATE RESOURCE POOL p2 UNIT 'u1', UNIT_NUM 2, ZONE_LIST ('z2')")
    assert e.name == "OB_ZONE_SERVER_NOT_ENOUGH" and "z2" in str(e)
    # z1 has two servers: UNIT_NUM 2 fits, one unit on each
    sql(rs, "CREATE RESOURCE POOL p3 UNIT 'u1', UNIT_NUM 2, ZONE_LIST ('z1')")
    p3 = rows(
        rs,
        "SELECT u.* FROM __all_unit u JOIN __all_resource_pool p "
        "ON p.resource_pool_id = u.resource_pool_id WHERE p.name = 'p3'",
    )
    assert sorted(f"{u['svr_ip']}:{u['svr_port']}" for u in p3) == [A, D]
    # 16G servers: a 12G unit does not fit next to the 4G ones on B
    sql(rs, "CREATE RESOURCE UNIT big MAX_CPU 1, MEMORY_SIZE '13G'")
    e = err(sql, rs, "CREATE RESOURCE POOL p4 UNIT 'big', UNIT_NUM 1, ZONE_LIST ('z2')")
    assert e.name == "OB_ZONE_RESOURCE_NOT_ENOUGH"
    assert "memory: needs 13G, free 12G" in str(e)
    for bad, code in (
        ("CREATE RESOURCE POOL p1 UNIT 'u1', UNIT_NUM 1", "OB_RESOURCE_POOL_EXIST"),
        ("CREATE RESOURCE POOL p9 UNIT 'nope', UNIT_NUM 1", "OB_RESOURCE_UNIT_NOT_EXIST"),
        (
            "CREATE RESOURCE POOL p9 UNIT 'u1', UNIT_NUM 1, ZONE_LIST ('z9')",
            "OB_ZONE_INFO_NOT_EXIST",
        ),
        ("CREATE RESOURCE POOL p9 UNIT 'u1', UNIT_NUM 0", "OB_INVALID_ARGUMENT"),
        (
            "CREATE RESOURCE POOL p9 UNIT 'u1', UNIT_NUM 1, ZONE_LIST ('z1', 'z1')",
            "OB_INVALID_ARGUMENT",
        ),
    ):
        assert error_name(sql, rs, bad) == code, bad
    # nothing of the refused pools was written
    assert {r["name"] for r in rows(rs, "SELECT name FROM __all_resource_pool")} == {"p1", "p3"}


def test_stopped_or_dead_servers_receive_no_unit(rs: RootService) -> None:
    sql(rs, "CREATE RESOURCE UNIT u1 MAX_CPU 2, MEMORY_SIZE '4G'")
    sql(rs, f"ALTER SYSTEM STOP SERVER '{A}'")
    sql(rs, "CREATE RESOURCE POOL p1 UNIT 'u1', UNIT_NUM 1, ZONE_LIST ('z1')")
    u = rows(rs, "SELECT * FROM __all_unit")[0]
    assert f"{u['svr_ip']}:{u['svr_port']}" == D
    e = err(sql, rs, "CREATE RESOURCE POOL p2 UNIT 'u1', UNIT_NUM 2, ZONE_LIST ('z1')")
    assert e.name == "OB_ZONE_SERVER_NOT_ENOUGH"


def test_tenant_layout_grant_and_errors(rs: RootService) -> None:
    tid = make_tenant(rs, ls_count=3, primary="z1;z2,z3")
    assert tid == 1002
    t = rows(rs, "SELECT * FROM dba_ob_tenants")[0]
    assert {k.upper(): v for k, v in t.items()}["PRIMARY_ZONE"] == "z1;z2,z3"
    ls = rows(rs, "SELECT * FROM __all_ls_status ORDER BY ls_id")
    assert [r["ls_id"] for r in ls] == [1001, 1002, 1003]
    assert {r["primary_zone"] for r in ls} == {"z1"}
    pool = rows(rs, "SELECT tenant_id FROM __all_resource_pool WHERE name = 'p1'")[0]
    assert pool["tenant_id"] == tid
    members = members_of(rs, tid, 1001)
    assert len(members) == 3 and {ZONE[m] for m in members} == {"z1", "z2", "z3"}
    for bad, code in (
        ("CREATE TENANT t1 RESOURCE_POOL_LIST ('p1')", "OB_TENANT_EXIST"),
        ("CREATE TENANT t2 RESOURCE_POOL_LIST ('p1')", "OB_RESOURCE_POOL_ALREADY_GRANTED"),
        ("CREATE TENANT t2 RESOURCE_POOL_LIST ('nope')", "OB_RESOURCE_POOL_NOT_EXIST"),
        ("CREATE TENANT t2", "OB_EMPTY_RESOURCE_POOL_LIST"),
    ):
        assert error_name(sql, rs, bad) == code, bad
    sql(rs, "CREATE RESOURCE POOL p2 UNIT 'u1', UNIT_NUM 1, ZONE_LIST ('z1')")
    e = err(sql, rs, "CREATE TENANT t2 RESOURCE_POOL_LIST ('p2'), PRIMARY_ZONE 'z2'")
    assert e.name == "OB_PRIMARY_ZONE_NOT_IN_ZONE_LIST"
    assert error_name(sql, rs, "DROP RESOURCE POOL p1") == "OB_RESOURCE_POOL_ALREADY_GRANTED"
    sql(rs, "DROP TENANT t1 FORCE")
    assert rows(rs, "SELECT * FROM __all_ls_status") == []
    assert (
        rows(rs, "SELECT tenant_id FROM __all_resource_pool WHERE name = 'p1'")[0]["tenant_id"]
        == -1
    )
    assert error_name(sql, rs, "DROP TENANT t1") == "OB_TENANT_NOT_EXIST"


def test_parse_is_wired(rs: RootService) -> None:
    # the executor table covers every new statement class
    from rootservice.api.statements import EXECUTORS

    for text in (
        "CREATE RESOURCE UNIT u MAX_CPU 1, MEMORY_SIZE '1G'",
        "DROP RESOURCE UNIT u",
        "CREATE RESOURCE POOL p UNIT 'u', UNIT_NUM 1",
        "DROP RESOURCE POOL p",
        "CREATE TENANT t RESOURCE_POOL_LIST ('p')",
        "DROP TENANT t",
        "ALTER SYSTEM SWITCH REPLICA LEADER LS 1001 SERVER '1.1.1.1:1' TENANT t",
    ):
        assert type(parse(text)) in EXECUTORS
