"""Server manager unit tests with a FakeClock on SQLite and PostgreSQL: every transition of
SPEC.md section 3, every receive_hb case of section 5, the checker's inclusive boundaries,
the admin operations of section 7 and the consistency rules of section 6."""

from __future__ import annotations

from pathlib import Path

import pytest

from obcommon.proto import obrpc_pb2
from rootservice.app import RootService
from rootservice.servers.status import AdminStatus, HeartbeatStatus
from tests.support.harness import (
    LEASE,
    OFFLINE,
    SEEDED,
    error_name,
    events,
    flush,
    hb,
    heartbeat_all,
    jobs,
    make_rs,
    server_row,
)

A, ZA = SEEDED[0]  # 127.0.0.1:3001 in z1
B, ZB = SEEDED[1]  # z2
C, ZC = SEEDED[2]  # z3
D, ZD = SEEDED[3]  # z1


@pytest.fixture
def rs(db_url: str, tmp_path: Path) -> RootService:
    r = make_rs(db_url, tmp_path)
    yield r
    r.shutdown()


def status(rs: RootService, server: str) -> HeartbeatStatus:
    s = rs.whitelist.get(server)
    assert s is not None
    return s.hb_status


# --- load and receive_hb -----------------------------------------------------------------


def test_load_never_makes_a_server_alive(rs: RootService) -> None:
    for server, _ in SEEDED:
        assert status(rs, server) is HeartbeatStatus.LEASE_EXPIRED
    assert rs.whitelist.counts()["alive"] == 0
    flush(rs)
    assert server_row(rs, A)["status"] == "INACTIVE"


def test_first_heartbeat_makes_server_alive_and_active(rs: RootService) -> None:
    now = rs.clock.now_us()
    resp = rs.heartbeats.receive_hb(hb(A, ZA, seq=7))
    s = rs.whitelist.get(A)
    assert s.hb_status is HeartbeatStatus.ALIVE
    assert s.register_time == now and s.last_hb_time == now and s.last_offline_time == 0
    assert resp.lease_expire_time == now + LEASE == resp.heartbeat_expire_time
    assert resp.server_id == 1 and resp.seq == 7 and resp.cluster_id == "c0ffee"
    assert resp.rs_epoch == rs.store.epoch and resp.rs_server_status == obrpc_pb2.IS_WORKING
    flush(rs)
    row = server_row(rs, A)
    assert row["status"] == "ACTIVE" and row["last_offline_time"] == 0 and row["inner_port"] == 4001
    assert [e["value1"] for e in events(rs, "online")] == [A]


def test_heartbeat_refusals_change_nothing(rs: RootService) -> None:
    before = rs.whitelist.snapshot()
    assert (
        error_name(rs.heartbeats.receive_hb, hb("127.0.0.1:3999", ZA))
        == "OB_SERVER_NOT_IN_WHITE_LIST"
    )
    assert error_name(rs.heartbeats.receive_hb, hb("1.2.3.4:99999", ZA)) == "OB_INVALID_ARGUMENT"
    assert error_name(rs.heartbeats.receive_hb, hb("nohost", ZA)) == "OB_INVALID_ARGUMENT"
    assert error_name(rs.heartbeats.receive_hb, hb(A, "")) == "OB_INVALID_ARGUMENT"
    assert error_name(rs.heartbeats.receive_hb, hb(A, ZA, sql_port=0)) == "OB_INVALID_ARGUMENT"
    assert error_name(rs.heartbeats.receive_hb, hb(A, ZA, sql_port=70000)) == "OB_INVALID_ARGUMENT"
    assert (
        error_name(rs.heartbeats.receive_hb, hb(A, ZA, start_service_time=-1))
        == "OB_INVALID_ARGUMENT"
    )
    bad_res = obrpc_pb2.ResourceInfo(mem_total=-5)
    assert (
        error_name(rs.heartbeats.receive_hb, hb(A, ZA, resource_info=bad_res))
        == "OB_INVALID_ARGUMENT"
    )
    assert error_name(rs.heartbeats.receive_hb, hb(A, "nozone")) == "OB_ZONE_INFO_NOT_EXIST"
    assert error_name(rs.heartbeats.receive_hb, hb(A, ZB)) == "OB_SERVER_ZONE_NOT_MATCH"
    assert (
        error_name(rs.heartbeats.receive_hb, hb(A, ZA, cluster_id="another"))
        == "OB_INVALID_ARGUMENT"
    )
    assert rs.whitelist.snapshot() == before
    assert rs.whitelist.counts()["servers"] == len(SEEDED)


def test_heartbeat_refused_before_in_service(db_url: str, tmp_path: Path) -> None:
    rs = make_rs(db_url, tmp_path, seed=False)
    try:
        assert error_name(rs.heartbeats.receive_hb, hb(A, ZA)) == "OB_RS_NOT_MASTER"
        assert rs.whitelist.counts()["servers"] == 0
    finally:
        rs.shutdown()


def test_lease_expiry_is_inclusive_and_persisted(rs: RootService) -> None:
    rs.clock.advance(LEASE)  # past the take-office grace
    rs.heartbeats.receive_hb(hb(A, ZA))
    last = rs.clock.now_us()
    rs.clock.advance(LEASE - 1)
    assert rs.lease_checker.run_once() == 0
    assert status(rs, A) is HeartbeatStatus.ALIVE
    rs.clock.advance(1)  # now - last_hb_time == lease_time: expired
    assert rs.lease_checker.run_once() == 1
    s = rs.whitelist.get(A)
    assert s.hb_status is HeartbeatStatus.LEASE_EXPIRED
    assert s.last_offline_time == last + LEASE and s.start_service_time == 0
    flush(rs)
    row = server_row(rs, A)
    assert (
        row["status"] == "INACTIVE"
        and row["last_offline_time"] == last + LEASE
        and row["start_service_time"] == 0
    )
    assert [e["value1"] for e in events(rs, "lease_expire")] == [A]


def test_permanent_offline_is_inclusive_and_heartbeat_revives(rs: RootService) -> None:
    rs.clock.advance(LEASE)
    rs.heartbeats.receive_hb(hb(A, ZA))
    last = rs.clock.now_us()
    rs.clock.advance(LEASE)
    rs.lease_checker.run_once()
    rs.clock.set(last + OFFLINE - 1)
    rs.lease_checker.run_once()
    assert status(rs, A) is HeartbeatStatus.LEASE_EXPIRED
    rs.clock.set(last + OFFLINE)
    assert rs.lease_checker.run_once() >= 1
    assert status(rs, A) is HeartbeatStatus.PERMANENT_OFFLINE
    assert rs.whitelist.get(A).display_status().value == "INACTIVE"
    rs.heartbeats.receive_hb(hb(A, ZA))
    assert status(rs, A) is HeartbeatStatus.ALIVE
    flush(rs)
    assert [e["value1"] for e in events(rs, "permanent_offline")].count(A) == 1
    assert server_row(rs, A)["status"] == "ACTIVE"


def test_take_office_grace_delays_every_expiry(db_url: str, tmp_path: Path) -> None:
    rs = make_rs(db_url, tmp_path)
    try:
        # Loaded servers' offline clocks started at the load; one lease_time of grace follows.
        t0 = rs.clock.now_us()
        rs.heartbeats.receive_hb(hb(A, ZA))
        rs.clock.set(t0 + LEASE - 1)
        assert rs.lease_checker.run_once() == 0
        rs.clock.set(t0 + LEASE)
        assert rs.lease_checker.run_once() == 1
        assert status(rs, A) is HeartbeatStatus.LEASE_EXPIRED
    finally:
        rs.shutdown()


def test_load_turns_old_offline_rows_permanent_offline(db_url: str, tmp_path: Path) -> None:
    rs = make_rs(db_url, tmp_path)
    now = rs.clock.now_us()
    with rs.store.engine.begin() as conn:
        import sqlalchemy as sa

        # Boundary of SPEC.md section 3: now - last_offline_time >= offline - lease.
        conn.execute(
            sa.text(
                "UPDATE __all_server SET last_offline_time = :t, status = 'inactive' WHERE svr_port = 3001"
            ),
            {"t": now - (OFFLINE - LEASE)},
        )
        conn.execute(
            sa.text("UPDATE __all_server SET last_offline_time = :t WHERE svr_port = 3002"),
            {"t": now - (OFFLINE - LEASE) + 1},
        )
        conn.execute(sa.text("UPDATE __all_server SET status = 'deleting' WHERE svr_port = 3003"))
    rs.shutdown()
    rs2 = make_rs(db_url, tmp_path / "x", seed=False)
    try:
        rs2.clock.set(now)
        rs2.bootstrapped = True
        rs2.do_restart()
        assert status(rs2, A) is HeartbeatStatus.PERMANENT_OFFLINE
        assert status(rs2, B) is HeartbeatStatus.LEASE_EXPIRED
        assert rs2.whitelist.get(C).admin_status is AdminStatus.DELETING
        assert rs2.whitelist.get(C).display_status().value == "DELETING"
    finally:
        rs2.shutdown()


def test_force_stop_hb_stops_lease_extension(rs: RootService) -> None:
    rs.clock.advance(LEASE)
    rs.heartbeats.receive_hb(hb(A, ZA))
    last = rs.clock.now_us()
    rs.whitelist.set_force_stop_hb(A, True)
    rs.clock.advance(3 * 1_000_000)
    resp = rs.heartbeats.receive_hb(hb(A, ZA))
    assert rs.whitelist.get(A).last_hb_time == last
    assert resp.lease_expire_time == last + LEASE
    rs.clock.set(last + LEASE)
    assert rs.lease_checker.run_once() == 1
    rs.heartbeats.receive_hb(hb(A, ZA))
    assert status(rs, A) is HeartbeatStatus.LEASE_EXPIRED  # a force_stop_hb server is not revived


def test_start_service_time_build_version_and_sql_port_are_persisted(rs: RootService) -> None:
    rs.heartbeats.receive_hb(hb(A, ZA, start_service_time=0))
    flush(rs)
    assert server_row(rs, A)["start_service_time"] == 0
    rs.heartbeats.receive_hb(hb(A, ZA, start_service_time=123, build_version="v2", sql_port=5555))
    flush(rs)
    row = server_row(rs, A)
    assert (row["start_service_time"], row["build_version"], row["inner_port"]) == (123, "v2", 5555)


def test_stopped_server_and_stopped_zone_answer_is_stopped(rs: RootService) -> None:
    heartbeat_all(rs)
    rs.server_admin.stop_servers([A], None, "STOP")
    assert rs.heartbeats.receive_hb(hb(A, ZA)).rs_server_status == obrpc_pb2.IS_STOPPED
    assert rs.heartbeats.receive_hb(hb(B, ZB)).rs_server_status == obrpc_pb2.IS_WORKING
    rs.server_admin.start_servers([A], None)
    rs.zones.set_status(ZB, False)
    assert rs.heartbeats.receive_hb(hb(B, ZB)).rs_server_status == obrpc_pb2.IS_STOPPED


def test_data_disk_error_stops_and_recovery_starts(rs: RootService) -> None:
    heartbeat_all(rs)
    rs.heartbeats.receive_hb(hb(A, ZA, server_status=1))
    s = rs.whitelist.get(A)
    assert s.stop_time == rs.clock.now_us() and s.server_report_status.value == "DATA_DISK_ERROR"
    assert server_row(rs, A)["stop_time"] == s.stop_time
    rs.clock.advance(1)
    rs.heartbeats.receive_hb(hb(A, ZA, server_status=0))
    assert rs.whitelist.get(A).stop_time == 0
    assert server_row(rs, A)["stop_time"] == 0


def test_data_disk_error_stop_keeps_the_stop_checks(rs: RootService) -> None:
    heartbeat_all(rs)
    rs.server_admin.stop_servers([B], None, "STOP")
    rs.heartbeats.receive_hb(hb(A, ZA, server_status=1))
    # A server of another zone is stopped: the automatic STOP is refused like a typed one.
    assert rs.whitelist.get(A).stop_time == 0


# --- admin operations ----------------------------------------------------------------------


def test_delete_server_write_through_then_empty_checker_removes_it(rs: RootService) -> None:
    heartbeat_all(rs)
    assert rs.server_admin.delete_servers([D], "z1") == [1]
    assert server_row(rs, D)["status"] == "DELETING"
    assert [(j["job_type"], j["job_status"], j["svr_port"]) for j in jobs(rs)] == [
        ("DELETE_SERVER", "INPROGRESS", 3004)
    ]
    assert rs.whitelist.get(D).admin_status is AdminStatus.DELETING
    assert error_name(rs.server_admin.delete_servers, [D], None) == "OB_SERVER_ALREADY_DELETED"
    assert rs.empty_server_checker.run_once() == 1
    assert server_row(rs, D) is None and rs.whitelist.get(D) is None
    assert jobs(rs)[0]["job_status"] == "SUCCESS"
    assert len(events(rs, "finish_delete_server")) == 1
    assert error_name(rs.heartbeats.receive_hb, hb(D, ZD)) == "OB_SERVER_NOT_IN_WHITE_LIST"
    flush(rs)
    assert server_row(rs, D) is None  # the persistence queue never re-inserts it


def test_delete_server_refusals_change_nothing(rs: RootService) -> None:
    assert (
        error_name(rs.server_admin.delete_servers, ["127.0.0.1:3999"], None)
        == "OB_SERVER_NOT_IN_WHITE_LIST"
    )
    assert error_name(rs.server_admin.delete_servers, [A], "z2") == "OB_SERVER_ZONE_NOT_MATCH"
    assert (
        error_name(rs.server_admin.delete_servers, [A, "127.0.0.1:3999"], None)
        == "OB_SERVER_NOT_IN_WHITE_LIST"
    )
    assert error_name(rs.server_admin.delete_servers, [A, A], None) == "OB_INVALID_ARGUMENT"
    assert error_name(rs.server_admin.delete_servers, [], None) == "OB_INVALID_ARGUMENT"
    assert (
        error_name(rs.server_admin.delete_servers, ["'; DROP TABLE __all_server; --"], None)
        == "OB_INVALID_ARGUMENT"
    )
    assert rs.whitelist.get(A).admin_status is AdminStatus.NORMAL
    assert server_row(rs, A)["status"] == "INACTIVE"
    assert jobs(rs) == []


def test_cancel_delete_restores_normal(rs: RootService) -> None:
    heartbeat_all(rs)
    assert error_name(rs.server_admin.cancel_delete_servers, [A], None) == "OB_SERVER_NOT_DELETING"
    assert (
        error_name(rs.server_admin.cancel_delete_servers, ["127.0.0.1:3999"], None)
        == "OB_SERVER_NOT_IN_WHITE_LIST"
    )
    rs.server_admin.delete_servers([A], None)
    rs.whitelist.set_force_stop_hb(A, True)
    rs.server_admin.cancel_delete_servers([A], None)
    s = rs.whitelist.get(A)
    assert s.admin_status is AdminStatus.NORMAL and not s.force_stop_hb
    assert server_row(rs, A)["status"] == "ACTIVE"
    assert jobs(rs)[0]["job_status"] == "CANCELED"
    assert len(events(rs, "cancel_delete_server")) == 1


def test_stop_server_zone_rules(rs: RootService) -> None:
    heartbeat_all(rs)
    assert (
        error_name(rs.server_admin.stop_servers, [A, B], None, "STOP")
        == "OB_STOP_SERVER_IN_MULTIPLE_ZONES"
    )
    assert error_name(rs.server_admin.stop_servers, [A], "z2", "STOP") == "OB_SERVER_ZONE_NOT_MATCH"
    t = rs.clock.now_us()
    rs.server_admin.stop_servers([A, D], "z1", "STOP")
    assert rs.whitelist.get(A).stop_time == t == server_row(rs, D)["stop_time"]
    rs.clock.advance(5)
    rs.server_admin.stop_servers([A], None, "FORCE_STOP")
    assert rs.whitelist.get(A).stop_time == t  # unchanged when already stopped
    # Another zone has a stopped server: STOP and FORCE STOP refused, ISOLATE is not.
    assert (
        error_name(rs.server_admin.stop_servers, [B], None, "STOP")
        == "OB_STOP_SERVER_IN_MULTIPLE_ZONES"
    )
    assert (
        error_name(rs.server_admin.stop_servers, [B], None, "FORCE_STOP")
        == "OB_STOP_SERVER_IN_MULTIPLE_ZONES"
    )
    assert (
        error_name(rs.server_admin.stop_servers, [B, C], None, "ISOLATE")
        == "OB_STOP_SERVER_IN_MULTIPLE_ZONES"
    )
    rs.server_admin.stop_servers([B], None, "ISOLATE")
    assert rs.whitelist.get(B).stop_time != 0
    rs.server_admin.start_servers([A, D, B], None)
    assert all(rs.whitelist.get(s).stop_time == 0 for s in (A, B, D))
    # Another zone not ACTIVE: STOP refused.
    rs.zones.set_status("z3", False)
    assert (
        error_name(rs.server_admin.stop_servers, [A], None, "STOP")
        == "OB_STOP_SERVER_IN_MULTIPLE_ZONES"
    )
    assert [
        e["event"] for e in events(rs) if e["module"] == "server" and e["event"].endswith("server")
    ] == [
        "stop_server",
        "stop_server",
        "isolate_server",
        "start_server",
        "start_server",
        "start_server",
    ]


def test_start_server_refusals(rs: RootService) -> None:
    assert (
        error_name(rs.server_admin.start_servers, ["127.0.0.1:3999"], None)
        == "OB_SERVER_NOT_IN_WHITE_LIST"
    )
    assert error_name(rs.server_admin.start_servers, [A], "z3") == "OB_SERVER_ZONE_NOT_MATCH"
    rs.server_admin.start_servers([A], None)  # already started: no change, no event
    assert events(rs, "start_server") == []


def test_add_server_refusals(rs: RootService) -> None:
    m = rs.server_admin
    assert error_name(m.add_servers, ["1.2.3.4:99999"], "z1") == "OB_INVALID_ARGUMENT"
    assert error_name(m.add_servers, ["nohost"], "z1") == "OB_INVALID_ARGUMENT"
    assert error_name(m.add_servers, ["x" * 1_000_000], "z1") == "OB_INVALID_ARGUMENT"
    assert error_name(m.add_servers, [A], "z1") == "OB_ENTRY_EXIST"
    # Nothing listens on this port: the RS cannot check the server.
    assert error_name(m.add_servers, ["127.0.0.1:1"], "z1") == "OB_SERVER_CONNECTION_ERROR"
    assert error_name(m.add_servers, ["127.0.0.1:1"], "nozone") == "OB_ZONE_INFO_NOT_EXIST"
    rs.zones.add_zone("z9", None, None)  # a new zone is INACTIVE until START ZONE
    assert error_name(m.add_servers, ["127.0.0.1:1"], "z9") == "OB_ZONE_NOT_ACTIVE"
    assert rs.whitelist.counts()["servers"] == len(SEEDED)


def test_bootstrap_refusals(db_url: str, tmp_path: Path) -> None:
    from sql.ast import BootstrapEntry

    rs = make_rs(db_url, tmp_path, seed=False)
    try:
        assert error_name(rs.bootstrap, ()) == "OB_INVALID_ARGUMENT"
        dup_zone = (
            BootstrapEntry(None, "z1", "127.0.0.1:1"),
            BootstrapEntry(None, "z1", "127.0.0.1:2"),
        )
        assert error_name(rs.bootstrap, dup_zone) == "OB_PARTITION_ZONE_DUPLICATED"
        dup_server = (
            BootstrapEntry(None, "z1", "127.0.0.1:1"),
            BootstrapEntry(None, "z2", "127.0.0.1:1"),
        )
        assert error_name(rs.bootstrap, dup_server) == "OB_INVALID_ARGUMENT"
        assert (
            error_name(rs.bootstrap, (BootstrapEntry(None, "z1", "nohost"),))
            == "OB_INVALID_ARGUMENT"
        )
        assert (
            error_name(rs.bootstrap, (BootstrapEntry(None, "z1", "127.0.0.1:1"),))
            == "OB_SERVER_CONNECTION_ERROR"
        )
        assert not rs.bootstrapped and rs.term.state.value == "WAIT_BOOTSTRAP"
        assert rs.whitelist.counts()["servers"] == 0 and rs.zones.all() == []
    finally:
        rs.shutdown()
    rs = make_rs(db_url, tmp_path / "again")
    try:
        assert (
            error_name(rs.bootstrap, (BootstrapEntry(None, "z1", "127.0.0.1:1"),))
            == "OB_INIT_TWICE"
        )
    finally:
        rs.shutdown()


def test_zone_operations(rs: RootService) -> None:
    z = rs.zones
    z.add_zone("z4", "r2", "idc1")
    assert z.get("z4").status == "INACTIVE" and z.get("z4").region == "r2"
    assert error_name(z.add_zone, "z4", None, None) == "OB_ENTRY_EXIST"
    z.set_status("z4", True)
    assert z.is_active("z4")
    z.set_status("z3", False)
    assert error_name(z.set_status, "z4", False) == "OB_OP_NOT_ALLOW"
    z.set_status("z4", False, force=True)
    assert not z.is_active("z4")
    assert error_name(z.delete_zone, "z1") == "OB_OP_NOT_ALLOW"
    assert error_name(z.set_status, "nozone", True) == "OB_ZONE_INFO_NOT_EXIST"
    z.delete_zone("z4")
    assert not z.exists("z4")
    rs.server_loader.load(take_office=False)
    assert not z.exists("z4") and not z.is_active("z3")


def test_multi_server_command_is_all_or_nothing(rs: RootService) -> None:
    heartbeat_all(rs)
    rs.server_admin.delete_servers([B], None)
    assert error_name(rs.server_admin.delete_servers, [A, B], None) == "OB_SERVER_ALREADY_DELETED"
    assert rs.whitelist.get(A).admin_status is AdminStatus.NORMAL
    flush(rs)
    assert server_row(rs, A)["status"] == "ACTIVE"


# --- consistency (SPEC.md section 6) --------------------------------------------------------


def test_database_outage_heartbeats_continue_queue_catches_up(
    rs: RootService, tmp_path: Path
) -> None:
    from rootservice.db.engine import make_engine

    heartbeat_all(rs)
    flush(rs)
    good = rs.store.engine
    # A real unreachable database: nothing listens on 127.0.0.1:1.
    rs.store.engine = make_engine(
        "postgresql+psycopg://postgres@127.0.0.1:1/none", connect_timeout_s=1
    )
    try:
        rs.clock.advance(LEASE)
        rs.heartbeats.receive_hb(hb(A, ZA, build_version="old"))
        assert rs.lease_checker.run_once() == 3  # B, C, D expire in memory
        assert rs.persist.run_once() == 0  # fails, keeps the work
        assert error_name(rs.server_admin.delete_servers, [A], None) == "OB_ERR_SYS"
        assert rs.whitelist.get(A).admin_status is AdminStatus.NORMAL
        rs.heartbeats.receive_hb(hb(A, ZA, build_version="newest"))
    finally:
        rs.store.engine.dispose()
        rs.store.engine = good
    flush(rs)
    assert server_row(rs, A)["build_version"] == "newest"
    assert server_row(rs, B)["status"] == "INACTIVE"
    assert len(events(rs, "lease_expire")) == 3


def test_check_all_server_repairs_the_table(rs: RootService) -> None:
    import sqlalchemy as sa

    heartbeat_all(rs)
    flush(rs)
    assert rs.check_all_server.run_once() == 0
    with rs.store.engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE __all_server SET status = 'INACTIVE', stop_time = 42 WHERE svr_port = 3001"
            )
        )
        conn.execute(sa.text("UPDATE __all_server SET zone = 'zz' WHERE svr_port = 3002"))
    # One row per page: pagination must visit every row exactly once.
    assert rs.check_all_server.run_once(page_size=1) == 2
    flush(rs)
    assert (server_row(rs, A)["status"], server_row(rs, A)["stop_time"]) == ("ACTIVE", 0)
    assert server_row(rs, B)["zone"] == ZB


def test_reload_drops_servers_absent_from_the_table_and_keeps_heartbeat_state(
    rs: RootService,
) -> None:
    import sqlalchemy as sa

    heartbeat_all(rs)
    flush(rs)
    with rs.store.engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM __all_server WHERE svr_port = 3004"))
        conn.execute(sa.text("UPDATE __all_server SET stop_time = 99 WHERE svr_port = 3001"))
    rs.reload_server()
    assert rs.whitelist.get(D) is None
    a = rs.whitelist.get(A)
    assert (
        a.stop_time == 99
        and a.hb_status is HeartbeatStatus.ALIVE
        and a.resource_info.cpu_total == 2
    )


def test_a_newer_epoch_deposes_the_old_rs(db_url: str, tmp_path: Path) -> None:
    old = make_rs(db_url, tmp_path / "a")
    new = make_rs(db_url, tmp_path / "b", seed=False)
    try:
        new.bootstrapped = True
        new.do_restart()
        assert new.store.epoch == old.store.epoch + 1
        assert error_name(old.server_admin.delete_servers, [A], None) == "OB_RS_NOT_MASTER"
        assert old.term.state.value == "NOT_MASTER"
        assert error_name(old.heartbeats.receive_hb, hb(A, ZA)) == "OB_RS_NOT_MASTER"
        assert server_row(new, A)["status"] == "INACTIVE"
        new.server_admin.delete_servers([A], None)
        assert server_row(new, A)["status"] == "DELETING"
    finally:
        old.shutdown()
        new.shutdown()


# --- parameters --------------------------------------------------------------------------


def test_set_parameters_ranges_and_invariants(rs: RootService) -> None:
    assert (
        error_name(rs.set_parameters, (("lease_time", "2s"),)) == "OB_INVALID_ARGUMENT"
    )  # not > heartbeat_interval
    rs.set_parameters((("lease_time", "3s"),))
    assert rs.settings.lease_time == 3_000_000
    rs.set_parameters((("lease_time", "5m"),))
    assert error_name(rs.set_parameters, (("lease_time", "301s"),)) == "OB_INVALID_ARGUMENT"
    assert error_name(rs.set_parameters, (("lease_time", "ten"),)) == "OB_INVALID_ARGUMENT"
    assert (
        error_name(rs.set_parameters, (("no_such_parameter", "1s"),)) == "OB_ERR_SYS_CONFIG_UNKNOWN"
    )
    assert (
        error_name(rs.set_parameters, (("server_permanent_offline_time", "19s"),))
        == "OB_INVALID_ARGUMENT"
    )
    # All or nothing: the second item is bad, so the first is not applied.
    assert (
        error_name(rs.set_parameters, (("lease_time", "20s"), ("rpc_timeout", "0s")))
        == "OB_INVALID_ARGUMENT"
    )
    assert rs.settings.lease_time == 300_000_000
    rs.set_parameters((("server_permanent_offline_time", "20m"), ("lease_time", "10s")))
    assert rs.settings.server_permanent_offline_time == 1_200_000_000


def test_lease_time_change_applies_to_the_checker(rs: RootService) -> None:
    rs.clock.advance(LEASE)
    rs.heartbeats.receive_hb(hb(A, ZA))
    rs.set_parameters((("lease_time", "3s"),))
    rs.clock.advance(3_000_000 - 1)
    assert rs.lease_checker.run_once() == 0
    rs.clock.advance(1)
    assert rs.lease_checker.run_once() == 1


def test_event_queue_is_bounded_and_flushes_what_it_kept(rs: RootService) -> None:
    from rootservice.db.event_repo import Event
    from rootservice.servers.persist_queue import PersistQueue
    from rootservice.servers.whitelist import Whitelist

    q = PersistQueue(rs.store, rs.clock, Whitelist(), rs.metrics, max_events=3)
    for i in range(5):
        q.add_event(Event(rs.clock.now_us(), "test", f"e{i}"))
    assert q.depth() == 3 and rs.metrics.get("events_dropped_total") == 2
    assert q.run_once() == 3 and q.depth() == 0
    assert [e["event"] for e in events(rs) if e["module"] == "test"] == ["e2", "e3", "e4"]


def test_resource_changes_are_applied_and_checked(rs: RootService) -> None:
    rs.heartbeats.receive_hb(hb(A, ZA))
    assert rs.whitelist.get(A).resource_info.cpu_total == 2
    rs.heartbeats.receive_hb(hb(A, ZA))  # same bytes: the fast path keeps the same values
    assert rs.whitelist.get(A).resource_info.mem_total == 8 << 30
    rs.heartbeats.receive_hb(
        hb(A, ZA, resource_info=obrpc_pb2.ResourceInfo(cpu_total=16, mem_total=1 << 30))
    )
    s = rs.whitelist.get(A)
    assert (s.resource_info.cpu_total, s.resource_info.mem_total) == (16, 1 << 30)
    bad = obrpc_pb2.ResourceInfo(cpu_total=16, data_disk_total=-1)
    assert (
        error_name(rs.heartbeats.receive_hb, hb(A, ZA, resource_info=bad)) == "OB_INVALID_ARGUMENT"
    )
    assert rs.whitelist.get(A).resource_info.data_disk_total == 0
