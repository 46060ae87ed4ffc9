"""OceanBase's views over this project's state (migration 0014), read through the SELECT
statement (sql.reads -> rootservice.db.query_repo) of a whole RootService on SQLite and
PostgreSQL: GV$OB_SERVERS / V$OB_SERVERS, GV$OB_UNITS, GV$OB_LOG_STAT, the two event
histories, the three job views, CDB_OB_LS, CDB_OB_LS_REPLICA_TASKS, DBA_OB_TENANTS and the
leader-only columns of DBA_OB_LS_LOCATIONS. Columns and their order are OceanBase 4.x's
(src/share/inner_table/ob_inner_table_schema_def.py), the project's own after them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from obcommon.errors import ObError
from rootservice.app import RootService
from rootservice.db import event_repo, job_repo
from rootservice.db.event_repo import Event
from rootservice.servers.status import DATA_DISK_ERROR_BIT, HeartbeatStatus
from sql.client import result_rows
from tests.support.tenants import (
    GIB,
    A,
    B,
    C,
    D,
    lease,
    make_tenant,
    make_tenant_rs,
    members_of,
    replica,
    report_all,
    sql,
)

GV_OB_SERVERS = [
    "SVR_IP", "SVR_PORT", "ZONE", "SQL_PORT", "CPU_CAPACITY", "CPU_CAPACITY_MAX",
    "CPU_ASSIGNED", "CPU_ASSIGNED_MAX", "MEM_CAPACITY", "MEM_ASSIGNED", "LOG_DISK_CAPACITY",
    "LOG_DISK_ASSIGNED", "LOG_DISK_IN_USE", "DATA_DISK_CAPACITY", "DATA_DISK_IN_USE",
    "DATA_DISK_HEALTH_STATUS", "MEMORY_LIMIT", "DATA_DISK_ALLOCATED", "DATA_DISK_ABNORMAL_TIME",
    "SSL_CERT_EXPIRED_TIME",
    "MEM_IN_USE",  # the project's
]  # fmt: skip
GV_OB_UNITS = [
    "SVR_IP", "SVR_PORT", "UNIT_ID", "TENANT_ID", "ZONE", "ZONE_TYPE", "REGION", "MAX_CPU",
    "MIN_CPU", "MEMORY_SIZE", "MAX_IOPS", "MIN_IOPS", "IOPS_WEIGHT", "LOG_DISK_SIZE",
    "LOG_DISK_IN_USE", "DATA_DISK_IN_USE", "STATUS", "CREATE_TIME",
]  # fmt: skip
GV_OB_LOG_STAT = [
    "TENANT_ID", "LS_ID", "SVR_IP", "SVR_PORT", "ROLE", "PROPOSAL_ID", "CONFIG_VERSION",
    "ACCESS_MODE", "PAXOS_MEMBER_LIST", "PAXOS_REPLICA_NUM", "IN_SYNC", "BASE_LSN",
    "BEGIN_LSN", "BEGIN_SCN", "END_LSN", "END_SCN", "MAX_LSN", "MAX_SCN", "ARBITRATION_MEMBER",
    "DEGRADED_LIST", "LEARNER_LIST",
]  # fmt: skip
_HISTORY = [f"{k}{i}" for i in range(1, 7) for k in ("NAME", "VALUE")]
RS_EVENTS = ["TIMESTAMP", "MODULE", "EVENT", *_HISTORY, "EXTRA_INFO", "RS_SVR_IP", "RS_SVR_PORT"]
SERVER_EVENTS = ["TIMESTAMP", "SVR_IP", "SVR_PORT", "MODULE", "EVENT", *_HISTORY, "EXTRA_INFO"]
_JOB = ["JOB_ID", "JOB_TYPE", "JOB_STATUS", "RESULT_CODE", "PROGRESS", "START_TIME", "MODIFY_TIME"]
_JOB_END = ["SQL_TEXT", "EXTRA_INFO", "RS_SVR_IP", "RS_SVR_PORT"]
TENANT_JOBS = [*_JOB, "TENANT_ID", *_JOB_END, "TENANT_NAME"]  # the last: the project's
UNIT_JOBS = [*_JOB, "TENANT_ID", "UNIT_ID", *_JOB_END]
SERVER_JOBS = [*_JOB, "SVR_IP", "SVR_PORT", *_JOB_END]
CDB_OB_LS = [
    "TENANT_ID", "LS_ID", "STATUS", "PRIMARY_ZONE", "UNIT_GROUP_ID", "LS_GROUP_ID", "CREATE_SCN",
    "DROP_SCN", "SYNC_SCN", "READABLE_SCN", "FLAG",
    "CREATE_TIME", "MODIFY_TIME",  # the project's
]  # fmt: skip
REPLICA_TASKS = [
    "TENANT_ID", "LS_ID", "TASK_TYPE", "TASK_ID", "TASK_STATUS", "PRIORITY",
    "TARGET_REPLICA_SVR_IP", "TARGET_REPLICA_SVR_PORT", "TARGET_PAXOS_REPLICA_NUMBER",
    "TARGET_REPLICA_TYPE", "SOURCE_REPLICA_SVR_IP", "SOURCE_REPLICA_SVR_PORT",
    "SOURCE_PAXOS_REPLICA_NUMBER", "SOURCE_REPLICA_TYPE", "TASK_EXEC_SVR_IP",
    "TASK_EXEC_SVR_PORT", "CREATE_TIME", "START_TIME", "MODIFY_TIME", "COMMENT",
    "DATA_SIZE", "DATA_SOURCE",  # the project's
]  # fmt: skip


@pytest.fixture
def rs(db_url: str, tmp_path: Path) -> Iterator[RootService]:
    """An RS with servers A..D heartbeating (8 cores, 16G memory, 64G log disk each)."""
    r = make_tenant_rs(db_url, tmp_path)
    yield r
    r.shutdown()


def select(rs: RootService, query: str) -> tuple[list[str], list[dict[str, Any]]]:
    """The header and the rows (dicts by header) of a SELECT run as an operator runs it."""
    resp = sql(rs, query)
    cols = list(resp.columns)
    return cols, [dict(zip(cols, r, strict=True)) for r in result_rows(resp)]


def by_server(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {f"{r['SVR_IP']}:{r['SVR_PORT']}": r for r in rows}


def write(rs: RootService, statement: str, **params: Any) -> None:
    with rs.store.engine.begin() as conn:
        conn.execute(sa.text(statement), params)


def test_gv_ob_servers_shows_the_agents_reports_of_the_alive_servers(rs: RootService) -> None:
    broken = lease(B)
    broken.server_status = DATA_DISK_ERROR_BIT
    rs.heartbeats.receive_hb(broken)
    assert rs.server_reports.name == "server_report_sync"
    assert rs.server_reports.run_once() == 4
    assert rs.server_reports.run_once() == 0  # nothing changed: nothing written
    cols, rows = select(rs, "SELECT * FROM GV$OB_SERVERS")
    assert cols == GV_OB_SERVERS
    got = by_server(rows)
    assert set(got) == {A, B, C, D}
    a, b = got[A], got[B]
    assert (a["ZONE"], a["SQL_PORT"]) == ("z1", 4001)
    assert (a["CPU_CAPACITY"], a["CPU_CAPACITY_MAX"], a["MEM_CAPACITY"]) == (8.0, 8.0, 16 * GIB)
    assert (a["LOG_DISK_CAPACITY"], a["MEMORY_LIMIT"]) == (64 * GIB, 16 * GIB)
    assert (a["CPU_ASSIGNED"], a["MEM_ASSIGNED"], a["LOG_DISK_ASSIGNED"]) == (0, 0, 0)
    # Healthy vs broken data disk, with the time the RS first saw it broken.
    assert (a["DATA_DISK_HEALTH_STATUS"], a["DATA_DISK_ABNORMAL_TIME"]) == ("NORMAL", None)
    assert b["DATA_DISK_HEALTH_STATUS"] == "ERROR"
    first_seen = b["DATA_DISK_ABNORMAL_TIME"]
    assert first_seen is not None and first_seen.startswith("20")
    rs.clock.advance(5_000_000)
    rs.heartbeats.receive_hb(broken)
    rs.server_reports.run_once()
    assert (
        by_server(select(rs, "SELECT * FROM GV$OB_SERVERS")[1])[B]["DATA_DISK_ABNORMAL_TIME"]
        == first_seen
    )
    rs.heartbeats.receive_hb(lease(B))
    assert rs.server_reports.run_once() == 1
    b = by_server(select(rs, "SELECT * FROM GV$OB_SERVERS")[1])[B]
    assert (b["DATA_DISK_HEALTH_STATUS"], b["DATA_DISK_ABNORMAL_TIME"]) == ("NORMAL", None)
    # A server whose lease expired answers nothing: no row (and back once it answers).
    rs.whitelist.with_server(C, lambda s: setattr(s, "hb_status", HeartbeatStatus.LEASE_EXPIRED))
    assert rs.server_reports.run_once() == 1
    assert set(by_server(select(rs, "SELECT * FROM GV$OB_SERVERS")[1])) == {A, B, D}


def test_server_report_sync_reads_the_table_once_per_term_and_after_a_failed_round(
    rs: RootService,
) -> None:
    """The task keeps what it wrote instead of reading 5,000 rows every 2 s: within one term
    a row removed behind its back stays removed; a new term, or a round whose write failed,
    reads the table again and writes what is missing."""
    task = rs.server_reports
    assert task.run_once() == 4
    write(rs, "DELETE FROM __all_server_report WHERE svr_port = :p", p=int(A.rsplit(":", 1)[1]))
    assert task.run_once() == 0  # the same term: the table is not read again
    assert set(by_server(select(rs, "SELECT * FROM GV$OB_SERVERS")[1])) == {B, C, D}
    rs.term.incarnation += 1  # another term (as after a change of leader)
    assert task.run_once() == 1
    assert set(by_server(select(rs, "SELECT * FROM GV$OB_SERVERS")[1])) == {A, B, C, D}
    # A failed write (the table taken away by hand): the next round does not trust what it
    # meant to write.
    rs.whitelist.with_server(C, lambda s: setattr(s, "hb_status", HeartbeatStatus.LEASE_EXPIRED))
    write(rs, "ALTER TABLE __all_server_report RENAME TO moved_server_report")
    try:
        with pytest.raises(ObError, match="OB_ERR_SYS"):
            task.run_once()
    finally:
        write(rs, "ALTER TABLE moved_server_report RENAME TO __all_server_report")
    write(rs, "DELETE FROM __all_server_report WHERE svr_port = :p", p=int(B.rsplit(":", 1)[1]))
    assert task.run_once() == 2  # C's row deleted, B's written again: the table was read
    assert set(by_server(select(rs, "SELECT * FROM GV$OB_SERVERS")[1])) == {A, B, D}


def test_server_report_sync_rewrites_only_a_changed_report_and_dates_a_returning_broken_disk_anew(
    rs: RootService,
) -> None:
    """Rows are kept per server between rounds and made again only when the agent's report
    changes: a new memory figure from one agent writes that row alone, with the new value.
    A server whose row was deleted (lease expired) and that comes back with its data disk
    still broken is dated from its return, not from the row it had before."""
    task = rs.server_reports
    assert task.run_once() == 4
    bigger = lease(A)
    bigger.resource_info.mem_total = 32 * GIB
    rs.heartbeats.receive_hb(bigger)
    assert task.run_once() == 1
    assert by_server(select(rs, "SELECT * FROM GV$OB_SERVERS")[1])[A]["MEM_CAPACITY"] == 32 * GIB
    assert task.run_once() == 0
    broken = lease(B)
    broken.server_status = DATA_DISK_ERROR_BIT
    rs.heartbeats.receive_hb(broken)
    assert task.run_once() == 1
    first_seen = by_server(select(rs, "SELECT * FROM GV$OB_SERVERS")[1])[B]
    assert first_seen["DATA_DISK_HEALTH_STATUS"] == "ERROR"
    rs.whitelist.with_server(B, lambda s: setattr(s, "hb_status", HeartbeatStatus.LEASE_EXPIRED))
    assert task.run_once() == 1  # its row deleted
    rs.clock.advance(60_000_000)
    rs.whitelist.with_server(B, lambda s: setattr(s, "hb_status", HeartbeatStatus.ALIVE))
    assert task.run_once() == 1
    back = by_server(select(rs, "SELECT * FROM GV$OB_SERVERS")[1])[B]
    assert back["DATA_DISK_HEALTH_STATUS"] == "ERROR"
    assert back["DATA_DISK_ABNORMAL_TIME"] > first_seen["DATA_DISK_ABNORMAL_TIME"]
    # One server leaves and another comes back in the same round: one row deleted, one
    # written, although the table ends with as many rows as before.
    rs.whitelist.with_server(B, lambda s: setattr(s, "hb_status", HeartbeatStatus.LEASE_EXPIRED))
    assert task.run_once() == 1
    rs.whitelist.with_server(C, lambda s: setattr(s, "hb_status", HeartbeatStatus.LEASE_EXPIRED))
    rs.whitelist.with_server(B, lambda s: setattr(s, "hb_status", HeartbeatStatus.ALIVE))
    assert task.run_once() == 2
    assert set(by_server(select(rs, "SELECT * FROM GV$OB_SERVERS")[1])) == {A, B, D}
    assert task.run_once() == 0


def test_gv_ob_servers_counts_the_units_placed_on_each_server(rs: RootService) -> None:
    make_tenant(rs, ls_count=1)
    rs.server_reports.run_once()
    units = select(rs, "SELECT SVR_IP, SVR_PORT FROM DBA_OB_UNITS")[1]
    hosts = {f"{u['SVR_IP']}:{u['SVR_PORT']}" for u in units}
    got = by_server(select(rs, "SELECT * FROM GV$OB_SERVERS")[1])
    for server, row in got.items():
        placed = server in hosts
        assert row["CPU_ASSIGNED_MAX"] == (2.0 if placed else 0), server
        assert row["MEM_ASSIGNED"] == (4 * GIB if placed else 0), server
        assert row["LOG_DISK_ASSIGNED"] == (12 * GIB if placed else 0), server
    # A migrating unit occupies its source and its destination.
    src = next(h for h in hosts if h in (A, D))
    dest = D if src == A else A
    write(
        rs,
        "UPDATE __all_unit SET migrate_from_svr_ip = svr_ip, migrate_from_svr_port = svr_port,"
        " svr_port = :dport WHERE zone = 'z1'",
        dport=int(dest.rsplit(":", 1)[1]),
    )
    got = by_server(select(rs, "SELECT * FROM GV$OB_SERVERS")[1])
    assert got[src]["MEM_ASSIGNED"] == got[dest]["MEM_ASSIGNED"] == 4 * GIB


def test_v_ob_servers_is_the_row_of_the_server_colocated_with_the_rs(rs: RootService) -> None:
    rs.server_reports.run_once()
    cols, rows = select(rs, "SELECT * FROM V$OB_SERVERS")
    assert cols == GV_OB_SERVERS and rows == []  # the RS runs alone
    write(rs, "UPDATE __all_server SET with_rootserver = 1 WHERE svr_port = 3002")
    assert list(by_server(select(rs, "SELECT * FROM V$OB_SERVERS")[1])) == [B]


def test_gv_ob_log_stat_in_sync_follows_the_log_sync_threshold(rs: RootService) -> None:
    tid = make_tenant(rs, ls_count=1)
    members = members_of(rs, tid, 1001)
    lagging = next(m for m in members if m == B)
    # B trails the leader's log by 10 s, over ls_log_sync_threshold (3 s).
    report_all(rs, tid, lag={lagging: 10_000_000})
    rs.tenant_layer.meta_sync.sync_meta()
    cols, rows = select(rs, "SELECT * FROM GV$OB_LOG_STAT WHERE LS_ID = 1001")
    assert cols == GV_OB_LOG_STAT
    got = by_server(rows)
    assert set(got) == set(members)
    leader = next(m for m in members if m in (A, D))
    assert got[leader]["ROLE"] == "LEADER" and got[lagging]["ROLE"] == "FOLLOWER"
    assert {s: r["IN_SYNC"] for s, r in got.items()} == {
        m: ("NO" if m == lagging else "YES") for m in members
    }
    row = got[leader]
    assert (row["PROPOSAL_ID"], row["PAXOS_REPLICA_NUM"], row["ACCESS_MODE"]) == (1, 3, "APPEND")
    assert row["PAXOS_MEMBER_LIST"] == ",".join(sorted(members))
    assert (row["END_LSN"], row["CONFIG_VERSION"], row["ARBITRATION_MEMBER"]) == (None, None, "")
    # Caught up: in sync again.
    report_all(rs, tid)
    rs.tenant_layer.meta_sync.sync_meta()
    got = by_server(select(rs, "SELECT * FROM GV$OB_LOG_STAT WHERE LS_ID = 1001")[1])
    assert {r["IN_SYNC"] for r in got.values()} == {"YES"}
    # A replica whose server stopped answering is not known to be in sync.
    rs.whitelist.with_server(
        lagging, lambda s: setattr(s, "hb_status", HeartbeatStatus.LEASE_EXPIRED)
    )
    rs.tenant_layer.meta_sync.sync_meta()
    got = by_server(select(rs, "SELECT * FROM GV$OB_LOG_STAT WHERE LS_ID = 1001")[1])
    assert got[lagging]["IN_SYNC"] == "NO" and got[leader]["IN_SYNC"] == "YES"


def test_ls_locations_show_members_and_replica_number_on_the_leader_row_only(
    rs: RootService,
) -> None:
    tid = make_tenant(rs, ls_count=1)
    report_all(rs, tid)
    rs.tenant_layer.meta_sync.sync_meta()
    for view in ("DBA_OB_LS_LOCATIONS", "CDB_OB_LS_LOCATIONS"):
        rows = select(rs, f"SELECT * FROM {view}")[1]
        leaders = [r for r in rows if r["ROLE"] == "LEADER"]
        followers = [r for r in rows if r["ROLE"] == "FOLLOWER"]
        assert len(leaders) == 1 and len(followers) == 2, view
        assert leaders[0]["PAXOS_REPLICA_NUMBER"] == 3 and leaders[0]["MEMBER_LIST"], view
        assert {
            (r["MEMBER_LIST"], r["PAXOS_REPLICA_NUMBER"], r["LEARNER_LIST"]) for r in followers
        } == {(None, None, "")}, view


def test_cdb_ob_ls_replica_tasks_lists_the_copies_in_flight(rs: RootService) -> None:
    tid = make_tenant(rs, ls_count=1)
    key = (tid, 1001)
    members = members_of(rs, tid, 1001)
    leader = next(m for m in members if m in (A, D))
    report_all(rs, tid)
    rs.tenant_layer.meta_sync.sync_meta()
    cols, rows = select(rs, "SELECT * FROM CDB_OB_LS_REPLICA_TASKS")
    assert cols == REPLICA_TASKS and rows == []  # every replica in service: no copy
    # B's member replica is being rebuilt from the leader; the z1 server without a member
    # gets a new replica copied from the leader.
    newcomer = D if leader == A else A
    building = replica(key, leader, members, me=B, in_service=False)
    building.copy_from = leader
    rs.heartbeats.receive_hb(lease(B, [building]))
    added = replica(key, leader, members, me=newcomer, in_service=False)
    added.copy_from = leader
    rs.heartbeats.receive_hb(lease(newcomer, [added]))
    rs.tenant_layer.meta_sync.sync_meta()
    got = {
        f"{r['TARGET_REPLICA_SVR_IP']}:{r['TARGET_REPLICA_SVR_PORT']}": r
        for r in select(rs, "SELECT * FROM CDB_OB_LS_REPLICA_TASKS")[1]
    }
    assert set(got) == {B, newcomer}
    rebuild, add = got[B], got[newcomer]
    assert (rebuild["TASK_TYPE"], rebuild["PRIORITY"]) == ("BUILD ONLY IN MEMBER LIST", "HIGH")
    assert (add["TASK_TYPE"], add["SOURCE_REPLICA_SVR_IP"]) == ("ADD REPLICA", None)
    for r in (rebuild, add):
        assert (r["TENANT_ID"], r["LS_ID"], r["TASK_STATUS"]) == (tid, 1001, "INPROGRESS")
        assert (
            f"{r['TASK_EXEC_SVR_IP']}:{r['TASK_EXEC_SVR_PORT']}"
            == f"{r['TARGET_REPLICA_SVR_IP']}:{r['TARGET_REPLICA_SVR_PORT']}"
        )
        assert r["DATA_SOURCE"] == leader and r["COMMENT"] == f"copying from {leader}"
    # The newcomer's unit migrating there: a migration of the source's replica, low priority.
    src_ip, src_port = leader.rsplit(":", 1)
    write(
        rs,
        "UPDATE __all_ls_meta_table SET unit_id = 77 WHERE svr_port = :p",
        p=int(newcomer.rsplit(":", 1)[1]),
    )
    write(
        rs,
        "INSERT INTO __all_unit (unit_id, resource_pool_id, unit_group_id, zone, svr_ip,"
        " svr_port, migrate_from_svr_ip, migrate_from_svr_port) VALUES (77, 1, 1, 'z1', :ip,"
        " :port, :sip, :sport)",
        ip=newcomer.rsplit(":", 1)[0],
        port=int(newcomer.rsplit(":", 1)[1]),
        sip=src_ip,
        sport=int(src_port),
    )
    add = {
        f"{r['TARGET_REPLICA_SVR_IP']}:{r['TARGET_REPLICA_SVR_PORT']}": r
        for r in select(rs, "SELECT * FROM CDB_OB_LS_REPLICA_TASKS")[1]
    }[newcomer]
    assert (add["TASK_TYPE"], add["PRIORITY"]) == ("MIGRATE REPLICA", "LOW")
    assert f"{add['SOURCE_REPLICA_SVR_IP']}:{add['SOURCE_REPLICA_SVR_PORT']}" == leader
    # Built: no longer in flight.
    rs.heartbeats.receive_hb(lease(B, [replica(key, leader, members, me=B)]))
    rs.tenant_layer.meta_sync.sync_meta()
    left = select(rs, "SELECT TARGET_REPLICA_SVR_PORT FROM CDB_OB_LS_REPLICA_TASKS")[1]
    assert [r["TARGET_REPLICA_SVR_PORT"] for r in left] == [int(newcomer.rsplit(":", 1)[1])]


def test_gv_ob_units_lists_granted_units_on_each_server_they_occupy(rs: RootService) -> None:
    tid = make_tenant(rs, ls_count=2)
    report_all(rs, tid)
    rs.tenant_layer.meta_sync.sync_meta()
    sql(rs, "CREATE RESOURCE POOL p2 UNIT 'u1', UNIT_NUM 1, ZONE_LIST ('z3')")  # not granted
    cols, rows = select(rs, "SELECT * FROM GV$OB_UNITS")
    assert cols == GV_OB_UNITS
    assert len(rows) == 3 and {r["TENANT_ID"] for r in rows} == {tid}
    for r in rows:
        assert (r["STATUS"], r["ZONE_TYPE"], r["MAX_CPU"], r["MEMORY_SIZE"]) == (
            "NORMAL",
            "ReadWrite",
            2.0,
            4 * GIB,
        )
        # Two log streams of 1 MiB data and 4 KiB log each on every member.
        assert (r["DATA_DISK_IN_USE"], r["LOG_DISK_IN_USE"]) == (2 << 20, 2 * 4096)
    z1 = next(r for r in rows if r["ZONE"] == "z1")
    src = f"{z1['SVR_IP']}:{z1['SVR_PORT']}"
    dest = D if src == A else A
    write(
        rs,
        "UPDATE __all_unit SET migrate_from_svr_ip = svr_ip, migrate_from_svr_port = svr_port,"
        " svr_port = :dport WHERE unit_id = :u",
        dport=int(dest.rsplit(":", 1)[1]),
        u=z1["UNIT_ID"],
    )
    moving = select(rs, f"SELECT * FROM GV$OB_UNITS WHERE UNIT_ID = {z1['UNIT_ID']}")[1]
    assert {f"{r['SVR_IP']}:{r['SVR_PORT']}": r["STATUS"] for r in moving} == {
        src: "MIGRATE_OUT",
        dest: "MIGRATE_IN",
    }


def test_event_histories_split_the_servers_events_out(rs: RootService) -> None:
    now = rs.clock.now_us()
    with rs.store.txn() as conn:
        event_repo.insert_events(
            conn,
            [
                Event(now, "server", "data_disk_error", (("server", A), ("zone", "z1"))),
                Event(
                    now,
                    "disaster_recovery",
                    "rebuild_replica",
                    (("tenant_id", 1002), ("ls_id", 1001), ("server", B), ("source", A)),
                ),
                Event(
                    now,
                    "disaster_recovery",
                    "change_member_list",
                    (("tenant_id", 1002), ("ls_id", 1001), ("added", ""), ("removed", f"{C},{D}")),
                ),
                Event(now, "zone", "add_zone", (("zone", "z9"),)),
            ],
            rs.store.rs_addr,
        )
    cols, rows = select(
        rs,
        "SELECT * FROM DBA_OB_ROOTSERVICE_EVENT_HISTORY WHERE MODULE <> 'server' OR EVENT = 'data_disk_error'",
    )
    assert cols == RS_EVENTS
    mine = [
        r
        for r in rows
        if r["EVENT"] in ("data_disk_error", "rebuild_replica", "change_member_list", "add_zone")
    ]
    assert len(mine) == 4
    assert {r["RS_SVR_IP"] for r in mine} == {rs.store.rs_addr[0]}
    assert all(r["TIMESTAMP"] for r in mine)
    cols, rows = select(rs, "SELECT * FROM DBA_OB_SERVER_EVENT_HISTORY")
    assert cols == SERVER_EVENTS
    got = sorted((f"{r['SVR_IP']}:{r['SVR_PORT']}", r["MODULE"], r["EVENT"]) for r in rows)
    assert got == sorted(
        [
            (A, "server", "data_disk_error"),
            (B, "disaster_recovery", "rebuild_replica"),
            (C, "disaster_recovery", "change_member_list"),
            (D, "disaster_recovery", "change_member_list"),
        ]
    )
    b = next(r for r in rows if r["EVENT"] == "rebuild_replica")
    assert (b["NAME3"], b["VALUE3"], b["NAME4"], b["VALUE4"]) == ("server", B, "source", A)
    # Pruned with the RS's history.
    with rs.store.txn() as conn:
        event_repo.delete_events_before(conn, now + 1, 1000)
    assert select(rs, "SELECT * FROM DBA_OB_SERVER_EVENT_HISTORY")[1] == []


def test_job_views_split_the_jobs_by_kind_with_result_code(rs: RootService) -> None:
    now = rs.clock.now_us()
    addr = rs.store.rs_addr
    with rs.store.txn() as conn:
        delete = job_repo.create_job(conn, "DELETE_SERVER", "127.0.0.1", 3004, now, addr, "d")
        recover = job_repo.create_job(conn, "RECOVER_LS", "127.0.0.1", 3003, now, addr, "r")
        add = job_repo.create_job(
            conn, "ADD_REPLICA", "127.0.0.1", 3001, now, addr, "a", tenant_id=1002
        )
        zone = job_repo.create_job(
            conn, "ALTER_TENANT_PRIMARY_ZONE", "", 0, now, addr, "p", tenant_id=1002
        )
        unit = job_repo.create_job(conn, "MIGRATE_UNIT", "", 0, now, addr, "m", tenant_id=1002)
        job_repo.finish_job(conn, delete, "FAILED", now, return_code=-4018)
        job_repo.finish_job(conn, add, "SUCCESS", now)
    # A job finished by an RS of the schema before result_code: return_code only.
    write(
        rs,
        "UPDATE __all_rootservice_job SET job_status = 'CANCELED', return_code = -4072,"
        " unit_id = 9 WHERE job_id = :j",
        j=unit,
    )
    cols, rows = select(rs, "SELECT * FROM DBA_OB_SERVER_JOBS")
    assert cols == SERVER_JOBS
    assert {r["JOB_ID"]: (r["JOB_TYPE"], r["RESULT_CODE"]) for r in rows} == {
        delete: ("DELETE_SERVER", -4018),
        recover: ("RECOVER_LS", None),
    }
    cols, rows = select(rs, "SELECT * FROM DBA_OB_TENANT_JOBS")
    assert cols == TENANT_JOBS
    assert {r["JOB_ID"]: (r["TENANT_ID"], r["RESULT_CODE"]) for r in rows} == {
        add: (1002, 0),
        zone: (1002, None),
    }
    cols, rows = select(rs, "SELECT * FROM DBA_OB_UNIT_JOBS")
    assert cols == UNIT_JOBS
    assert [(r["JOB_ID"], r["UNIT_ID"], r["JOB_STATUS"], r["RESULT_CODE"]) for r in rows] == [
        (unit, 9, "CANCELED", -4072)
    ]
    # The project's name for all of them stays, as an alias.
    alias = select(rs, "SELECT JOB_ID, RESULT_CODE FROM DBA_OB_ROOTSERVICE_JOBS")[1]
    assert {r["JOB_ID"]: r["RESULT_CODE"] for r in alias} == {
        delete: -4018,
        recover: None,
        add: 0,
        zone: None,
        unit: -4072,
    }
    stored = select(
        rs, f"SELECT result_code, return_code FROM __all_rootservice_job WHERE job_id = {delete}"
    )[1]
    assert stored == [{"result_code": -4018, "return_code": -4018}]


def test_cdb_ob_ls_and_dba_ob_tenants_have_oceanbase_columns(rs: RootService) -> None:
    tid = make_tenant(rs, ls_count=2)
    rs.persist.run_once()  # the servers' build versions
    cols, rows = select(rs, "SELECT * FROM CDB_OB_LS")
    assert cols == CDB_OB_LS
    assert sorted(r["LS_ID"] for r in rows if r["TENANT_ID"] == tid) == [1001, 1002]
    assert {(r["CREATE_SCN"], r["SYNC_SCN"], r["FLAG"]) for r in rows} == {(None, None, "")}
    cols, rows = select(rs, "SELECT * FROM DBA_OB_TENANTS")
    assert cols[-12:] == [
        "TENANT_ROLE", "SWITCHOVER_STATUS", "SWITCHOVER_EPOCH", "SYNC_SCN", "REPLAYABLE_SCN",
        "READABLE_SCN", "RECOVERY_UNTIL_SCN", "LOG_MODE", "ARBITRATION_SERVICE_STATUS",
        "UNIT_NUM", "COMPATIBLE", "MAX_LS_ID",
    ]  # fmt: skip
    t = next(r for r in rows if r["TENANT_ID"] == tid)
    # The tenant's data version: the cluster version in four numbers (test_tool_query_views).
    version = select(rs, "SELECT version FROM __all_cluster_version")[1][0]["version"]
    assert (t["UNIT_NUM"], t["COMPATIBLE"], t["MAX_LS_ID"]) == (1, f"{version}.0", 1002)
    assert (t["TENANT_ROLE"], t["LOG_MODE"], t["SYNC_SCN"]) == ("PRIMARY", "NOARCHIVELOG", None)
    # The tenant's data version when one is set.
    write(rs, "INSERT INTO __all_sys_parameter (name, value) VALUES ('compatible', '4.3.0.0')")
    t = next(r for r in select(rs, "SELECT * FROM DBA_OB_TENANTS")[1] if r["TENANT_ID"] == tid)
    assert t["COMPATIBLE"] == "4.3.0.0"


def test_the_views_read_as_oceanbases_tools_write_their_queries(rs: RootService) -> None:
    rs.server_reports.run_once()
    rs.clock.advance(1_000_000)  # after the RS's own events (taking office...)
    with rs.store.txn() as conn:
        event_repo.insert_events(
            conn,
            [Event(rs.clock.now_us(), "server", "data_disk_error", (("server", A),))],
            rs.store.rs_addr,
        )
    cols, rows = select(
        rs,
        "SELECT `TIMESTAMP`, MODULE, EVENT FROM oceanbase.DBA_OB_ROOTSERVICE_EVENT_HISTORY "
        "ORDER BY `TIMESTAMP` DESC LIMIT 1",
    )
    assert cols == ["TIMESTAMP", "MODULE", "EVENT"] and rows[0]["EVENT"] == "data_disk_error"
    rows = select(
        rs, "select svr_ip, svr_port, event from dba_ob_server_event_history where svr_port = 3001"
    )[1]
    assert [r["event"] for r in rows] == ["data_disk_error"]
    rows = select(
        rs,
        "select zone, count(*) as n, sum(cpu_capacity) as cpu from oceanbase.gv$ob_servers "
        "group by zone order by zone",
    )[1]
    assert [(r["zone"], r["n"], r["cpu"]) for r in rows] == [
        ("z1", 2, 16.0),
        ("z2", 1, 8.0),
        ("z3", 1, 8.0),
    ]
    assert select(rs, "SELECT COUNT(*) AS n FROM GV$OB_LOG_STAT WHERE IN_SYNC = 'NO'")[1] == [
        {"n": 0}
    ]
    tables = [r[0] for r in result_rows(sql(rs, "SHOW TABLES LIKE 'GV$%'"))]
    assert tables == ["GV$OB_SERVERS", "GV$OB_UNITS", "GV$OB_LOG_STAT", "GV$OB_PARAMETERS"]
    desc = [r[0] for r in result_rows(sql(rs, "DESC V$OB_SERVERS"))]
    assert desc == GV_OB_SERVERS
