"""The tenant layer on a real database with a FakeClock: unit configs, pools, tenants, the
LS layout, __all_ls_meta_table from replica reports, and the DELETE / STOP / ISOLATE
pre-checks (SPEC.md sections 4, 7, 9).

No agent runs here: replica reports are fed through receive_hb the way agents send them,
and the RS's ApplyReplicas calls fail fast (nothing listens on the seeded addresses). The
integration tests (test_tenants_integration.py) run the same paths with real agents.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from obcommon.errors import ObError
from obcommon.proto import obrpc_pb2
from rootservice.api.dispatch import execute_sql
from rootservice.app import RootService
from rootservice.db import zone_repo
from rootservice.db.zone_repo import ZoneInfo
from sql.parser import parse
from tests.support.harness import S, error_name, make_rs

GIB = 1 << 30
A, B, C, D = "127.0.0.1:3001", "127.0.0.1:3002", "127.0.0.1:3003", "127.0.0.1:3004"
ZONE = {A: "z1", B: "z2", C: "z3", D: "z1"}


def lease(server: str, replicas: list[obrpc_pb2.ReplicaInfo] | None = None, **res: Any) -> Any:
    req = obrpc_pb2.LeaseRequest(
        version=1,
        zone=ZONE[server],
        server=server,
        sql_port=int(server.rsplit(":", 1)[1]) + 1000,
        build_version="4.2.0.0-test",
        start_service_time=1,
        current_server_time=1,
    )
    req.resource_info.cpu_total = res.get("cpu", 8)
    req.resource_info.mem_total = res.get("mem", 16 * GIB)
    req.resource_info.log_disk_total = res.get("log", 64 * GIB)
    req.replicas.extend(replicas or [])
    return req


def replica(
    key: tuple[int, int],
    leader: str,
    members: list[str],
    *,
    me: str,
    term: int = 1,
    end: int = 100,
    end_ts: int = 0,
    in_service: bool = True,
) -> obrpc_pb2.ReplicaInfo:
    return obrpc_pb2.ReplicaInfo(
        tenant_id=key[0],
        ls_id=key[1],
        unit_id=1,
        role=obrpc_pb2.LEADER if leader == me else obrpc_pb2.FOLLOWER,
        member_list=sorted(members),
        replica_type="FULL",
        paxos_replica_number=len(members),
        data_size=1 << 20,
        required_size=(1 << 20) + 4096,
        in_service=in_service,
        term=term,
        leader=leader,
        log_end_index=end,
        log_end_ts=end_ts,
    )


def sql(rs: RootService, text: str) -> Any:
    resp = execute_sql(rs, text)
    if resp.error.code:
        raise ObError(resp.error.name, detail=resp.error.message)
    return resp


def rows(rs: RootService, query: str) -> list[dict[str, Any]]:
    with rs.store.engine.connect() as conn:
        return [dict(r) for r in conn.execute(sa.text(query)).mappings()]


@pytest.fixture
def rs(db_url: str, tmp_path: Path) -> Any:
    r = make_rs(
        db_url,
        tmp_path,
        allow_short_timings=True,
        tenant_create_timeout="1s",
        stop_server_check_timeout="1s",
        leader_switch_timeout="1s",
    )
    for s in (A, B, C, D):
        r.heartbeats.receive_hb(lease(s))
    yield r
    r.shutdown()


def make_tenant(rs: RootService, ls_count: int = 2, primary: str = "z1") -> int:
    sql(rs, "CREATE RESOURCE UNIT u1 MAX_CPU 2, MEMORY_SIZE '4G', LOG_DISK_SIZE '12G'")
    sql(rs, "CREATE RESOURCE POOL p1 UNIT 'u1', UNIT_NUM 1, ZONE_LIST ('z1', 'z2', 'z3')")
    # No agent answers ApplyReplicas here, so the tenant is created but has no leader yet.
    with pytest.raises(ObError) as e:
        sql(
            rs,
            f"CREATE TENANT t1 RESOURCE_POOL_LIST ('p1'), PRIMARY_ZONE '{primary}', "
            f"LS_COUNT {ls_count}",
        )
    assert e.value.name == "OB_TIMEOUT"
    return int(rows(rs, "SELECT tenant_id FROM __all_tenant")[0]["tenant_id"])


def members_of(rs: RootService, tenant_id: int, ls_id: int) -> list[str]:
    return sorted(rs.ls.topology(force=True).plans[(tenant_id, ls_id)].members)


def report_all(
    rs: RootService,
    tenant_id: int,
    leader: dict[int, str] | None = None,
    lag: dict[str, int] | None = None,
    skip: tuple[str, ...] = (),
) -> None:
    """Every member reports every LS; ``leader`` by ls_id (default the z1 member), ``lag``
    microseconds behind the leader's log by server."""
    plans = rs.ls.topology(force=True).plans
    now = rs.clock.now_us()
    per_server: dict[str, list[obrpc_pb2.ReplicaInfo]] = {}
    for (t, ls), plan in plans.items():
        if t != tenant_id:
            continue
        members = sorted(plan.members)
        lead = (leader or {}).get(ls) or next(m for m in members if ZONE[m] == "z1")
        for m in members:
            behind = (lag or {}).get(m, 0)
            per_server.setdefault(m, []).append(
                replica((t, ls), lead, members, me=m, end_ts=now - behind)
            )
    for server in (A, B, C, D):
        if server not in skip:
            rs.heartbeats.receive_hb(lease(server, per_server.get(server, [])))


# --- statements ------------------------------------------------------------------------------


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
    e = _err(sql, rs, "CREATE RESOURCE POOL p2 UNIT 'u1', UNIT_NUM 2, ZONE_LIST ('z2')")
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
    e = _err(sql, rs, "CREATE RESOURCE POOL p4 UNIT 'big', UNIT_NUM 1, ZONE_LIST ('z2')")
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
    e = _err(sql, rs, "CREATE RESOURCE POOL p2 UNIT 'u1', UNIT_NUM 2, ZONE_LIST ('z1')")
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
    e = _err(sql, rs, "CREATE TENANT t2 RESOURCE_POOL_LIST ('p2'), PRIMARY_ZONE 'z2'")
    assert e.name == "OB_PRIMARY_ZONE_NOT_IN_ZONE_LIST"
    assert error_name(sql, rs, "DROP RESOURCE POOL p1") == "OB_RESOURCE_POOL_ALREADY_GRANTED"
    sql(rs, "DROP TENANT t1 FORCE")
    assert rows(rs, "SELECT * FROM __all_ls_status") == []
    assert (
        rows(rs, "SELECT tenant_id FROM __all_resource_pool WHERE name = 'p1'")[0]["tenant_id"]
        == -1
    )
    assert error_name(sql, rs, "DROP TENANT t1") == "OB_TENANT_NOT_EXIST"


def test_reports_fill_ls_meta_table_leader_cnt_and_space_usage(rs: RootService) -> None:
    tid = make_tenant(rs)
    report_all(rs, tid)
    views = rs.ls.views()
    leader = next(m for m in members_of(rs, tid, 1001) if ZONE[m] == "z1")
    assert views[(tid, 1001)].leader == leader and views[(tid, 1002)].leader == leader
    assert rs.whitelist.get(leader).leader_cnt == 2
    assert rs.whitelist.get(B).leader_cnt == 0
    assert rs.ls.sync_meta() > 0
    assert rs.ls.sync_meta() == 0  # nothing changed: nothing written
    locs = rows(rs, "SELECT * FROM dba_ob_ls_locations ORDER BY ls_id, svr_port")
    locs = [{k.upper(): v for k, v in r.items()} for r in locs]
    assert len(locs) == 6
    assert {r["ROLE"] for r in locs if f"{r['SVR_IP']}:{r['SVR_PORT']}" == leader} == {"LEADER"}
    assert all(r["REPLICA_TYPE"] == "FULL" and r["PAXOS_REPLICA_NUMBER"] == 3 for r in locs)
    usage = rows(rs, "SELECT * FROM __all_space_usage")
    assert len(usage) == 3 and all(u["data_size"] == 2 << 20 for u in usage)
    # A replica dropped by its server disappears from the table at the next sync.
    rs.heartbeats.receive_hb(lease(B, []))
    rs.ls.sync_meta()
    assert not [r for r in rows(rs, "SELECT * FROM __all_ls_meta_table") if r["svr_port"] == 3002]


# --- STOP / ISOLATE / DELETE pre-checks ------------------------------------------------------


def _err(fn: Any, *args: Any) -> ObError:
    try:
        fn(*args)
    except ObError as e:
        return e
    raise AssertionError("no error")


def test_stop_refused_when_a_majority_would_be_lost(rs: RootService) -> None:
    tid = make_tenant(rs, ls_count=1)
    report_all(rs, tid)
    # C (z3) stops heartbeating and its lease expires; B (z2) alive.
    rs.clock.advance(5 * S)
    report_all(rs, tid, skip=(C,))
    rs.clock.advance(5 * S)
    report_all(rs, tid, skip=(C,))
    rs.lease_checker.run_once()
    assert not rs.whitelist.get(C).is_alive()
    e = _err(rs.server_admin.stop_servers, [B], None, "STOP")
    assert e.name == "OB_OP_NOT_ALLOW"
    assert f"log stream 1001 of tenant {tid} would keep 1 of 3 members" in str(e)
    assert rs.whitelist.get(B).stop_time == 0  # nothing changed
    # FORCE STOP skips only the log-sync check: the majority rule still refuses.
    assert error_name(rs.server_admin.stop_servers, [B], None, "FORCE_STOP") == "OB_OP_NOT_ALLOW"


def test_stop_checks_log_sync_at_the_threshold_boundary(rs: RootService) -> None:
    tid = make_tenant(rs, ls_count=1)
    threshold = rs.settings.ls_log_sync_threshold
    # B lags exactly the threshold: in sync (inclusive), so stopping C keeps 2 in sync.
    report_all(rs, tid, lag={B: threshold})
    problem = rs.ls._stop_problem({C}, check_sync=True, refresh=False)
    assert problem == ""
    report_all(rs, tid, lag={B: threshold + 1})
    problem = rs.ls._stop_problem({C}, check_sync=True, refresh=False)
    assert "1 of 3 remaining members with the log in sync" in problem and B in problem
    assert rs.ls._stop_problem({C}, check_sync=False, refresh=False) == ""


def test_stop_retries_then_names_the_lagging_ls(rs: RootService) -> None:
    tid = make_tenant(rs, ls_count=1)
    report_all(rs, tid, lag={B: 10 * S})
    t0 = rs.clock.now_us()
    e = _err(rs.server_admin.stop_servers, [C], None, "STOP")
    assert e.name == "OB_OP_NOT_ALLOW" and "log in sync" in str(e)
    # it retried for stop_server_check_timeout (1 s here) on the fake clock
    assert rs.clock.now_us() - t0 >= rs.settings.stop_server_check_timeout
    assert rs.whitelist.get(C).stop_time == 0


def test_isolate_refused_for_the_last_zone_of_the_primary_region(rs: RootService) -> None:
    now = rs.clock.now_us()
    with rs.store.txn() as conn:
        # z1 and z2 form region r1, z3 is alone in r2
        zone_repo.upsert_zone(conn, ZoneInfo("z3", "ACTIVE", "r2", ""), now)
        rs.zones.replace_all(zone_repo.load_zones(conn))
    tid = make_tenant(rs, ls_count=1, primary="z1")
    report_all(rs, tid)
    # With z2 stopped, z1 is the last running zone of r1.
    sql(rs, "ALTER SYSTEM STOP ZONE 'z2'")
    e = _err(rs.server_admin.stop_servers, [A, D], None, "ISOLATE")
    assert e.name == "OB_OP_NOT_ALLOW" and "primary region r1" in str(e)
    sql(rs, "ALTER SYSTEM START ZONE 'z2'")
    # z2 running again: isolating z1's servers is allowed (region r1 keeps z2).
    rs.ls.check_isolate([rs.whitelist.get(A), rs.whitelist.get(D)])


def test_delete_refused_without_room_and_accepted_with_room(rs: RootService) -> None:
    tid = make_tenant(rs, ls_count=1)
    report_all(rs, tid)
    # B is the only server of z2: its unit has nowhere to go.
    e = _err(rs.server_admin.delete_servers, [B], None)
    assert e.name == "OB_DELETE_SERVER_NOT_ALLOWED"
    assert "unit" in str(e) and "z2" in str(e)
    # In z1 the unit can move to the other server.
    z1_member = next(m for m in members_of(rs, tid, 1001) if ZONE[m] == "z1")
    rs.server_admin.delete_servers([z1_member], None)
    assert rs.whitelist.get(z1_member).admin_status.value == "DELETING"
    # the DELETING server still holds its unit: the empty-server checker keeps it
    assert rs.empty_server_checker.run_once() == 0


def test_delete_refused_for_memory_with_the_resource_named(rs: RootService) -> None:
    tid = make_tenant(rs, ls_count=1)
    report_all(rs, tid)
    z1_member = next(m for m in members_of(rs, tid, 1001) if ZONE[m] == "z1")
    other = D if z1_member == A else A
    # the other z1 server shrinks to 2G of memory
    rs.heartbeats.receive_hb(lease(other, mem=2 * GIB))
    e = _err(rs.server_admin.delete_servers, [z1_member], None)
    assert e.name == "OB_DELETE_SERVER_NOT_ALLOWED"
    assert "memory: needs 4G, free 2G" in str(e)


def test_delete_refused_while_an_ls_has_no_leader(rs: RootService) -> None:
    tid = make_tenant(rs, ls_count=1)
    report_all(rs, tid, leader={1001: "none"})
    assert rs.ls.views()[(tid, 1001)].leader is None
    z1_member = next(m for m in members_of(rs, tid, 1001) if ZONE[m] == "z1")
    e = _err(rs.server_admin.delete_servers, [z1_member], None)
    assert e.name == "OB_OP_NOT_ALLOW" and "no leader" in str(e)


def test_parse_is_wired(rs: RootService) -> None:
    # the executor table covers every new statement class
    from rootservice.api.dispatch import EXECUTORS

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
