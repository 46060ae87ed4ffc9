"""Heartbeat intake (docs/design/leases.md): every receive_hb case. Unit tests on an in-process RS
with a FakeClock, on SQLite and PostgreSQL."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import sqlalchemy as sa

from obcommon.proto import obrpc_pb2
from rootservice.app import RootService
from rootservice.servers.heartbeat import HeartbeatIntake
from rootservice.servers.ports import inline
from rootservice.servers.status import HeartbeatStatus, StopMode
from tests.support.harness import (
    FAKE_START_US,
    LEASE,
    SEEDED,
    ZA,
    ZB,
    A,
    B,
    error_name,
    events,
    flush,
    hb,
    hb_status,
    heartbeat_all,
    make_rs,
    server_row,
)
from tests.support.server_parts import Parts, make_parts, seed


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


def test_force_stop_hb_stops_lease_extension(rs: RootService) -> None:
    rs.clock.advance(LEASE)
    rs.heartbeats.receive_hb(hb(A, ZA))
    last = rs.clock.now_us()
    rs.whitelist.set_force_stop_hb(A, True)
    rs.clock.advance(3 * 1_000_000)
    resp = rs.heartbeats.receive_hb(hb(A, ZA))
    assert rs.whitelist.get(A).last_hb_time == last
    assert resp.lease_expire_time == last + LEASE
    rs.clock.advance(last + LEASE - rs.clock.now_us())
    assert rs.lease_checker.run_once() == 1
    rs.heartbeats.receive_hb(hb(A, ZA))
    assert (
        hb_status(rs, A) is HeartbeatStatus.LEASE_EXPIRED
    )  # a force_stop_hb server is not revived


def test_start_service_time_build_version_and_sql_port_are_persisted(rs: RootService) -> None:
    rs.heartbeats.receive_hb(hb(A, ZA, start_service_time=0))
    flush(rs)
    assert server_row(rs, A)["start_service_time"] == 0
    started = FAKE_START_US + 123
    rs.heartbeats.receive_hb(
        hb(A, ZA, start_service_time=started, build_version="v2", sql_port=5555)
    )
    flush(rs)
    row = server_row(rs, A)
    assert (row["start_service_time"], row["build_version"], row["inner_port"]) == (
        started,
        "v2",
        5555,
    )


def test_stopped_server_and_stopped_zone_answer_is_stopped(rs: RootService) -> None:
    heartbeat_all(rs)
    rs.server_admin.stop_servers([A], None, "STOP")
    assert rs.heartbeats.receive_hb(hb(A, ZA)).rs_server_status == obrpc_pb2.IS_STOPPED
    assert rs.heartbeats.receive_hb(hb(B, ZB)).rs_server_status == obrpc_pb2.IS_WORKING
    rs.server_admin.start_servers([A], None)
    rs.zones.stop_zone(ZB)
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


def test_data_disk_error_stop_keeps_the_stop_checks(
    rs: RootService, caplog: pytest.LogCaptureFixture
) -> None:
    heartbeat_all(rs)
    rs.server_admin.stop_servers([B], None, "STOP")
    with caplog.at_level(logging.WARNING, logger="rootservice.servers.heartbeat"):
        rs.heartbeats.receive_hb(hb(A, ZA, server_status=1))
    # A server of another zone is stopped: the automatic STOP ran and was refused like a
    # typed one, with the statement's own error.
    s = rs.whitelist.get(A)
    assert s.server_report_status.value == "DATA_DISK_ERROR"
    assert s.stop_time == 0
    refused = [r.getMessage() for r in caplog.records if "automatic STOP SERVER" in r.getMessage()]
    assert len(refused) == 1 and "OB_STOP_SERVER_IN_MULTIPLE_ZONES" in refused[0], refused
    # Without the other zone's stop the same report stops the server: only the check held it.
    rs.server_admin.start_servers([B], None)
    rs.heartbeats.receive_hb(hb(A, ZA, server_status=0))
    rs.clock.advance(1)
    rs.heartbeats.receive_hb(hb(A, ZA, server_status=1))
    assert rs.whitelist.get(A).stop_time == rs.clock.now_us()


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


# --- built from its collaborators, without RootService ------------------------------------


class RecordingStopStart:
    """The admin operations as the data-disk reaction sees them."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str], str]] = []

    def stop_servers(
        self, servers: list[str], zone: str | None, mode: StopMode, reason: str = ""
    ) -> None:
        self.calls.append((mode, servers, reason))

    def start_servers(self, servers: list[str], zone: str | None, reason: str = "") -> None:
        self.calls.append(("START", servers, reason))


def make_intake(p: Parts, ops: RecordingStopStart) -> HeartbeatIntake:
    return HeartbeatIntake(
        p.whitelist,
        p.zones,
        p.persist,
        p.grace,
        p.identity,
        p.term,
        p.store,
        p.clock,
        p.settings,
        replicas=p.tenants,
        server_ops=ops,
        wake=p.wake,
        background=inline,
    )


def test_intake_alone_accepts_reports_and_reacts_to_the_data_disk(
    engine: sa.Engine, tmp_path: Path
) -> None:
    p = make_parts(engine, tmp_path)
    seed(p)
    ops = RecordingStopStart()
    intake = make_intake(p, ops)
    resp = intake.receive_hb(hb(A, ZA, seq=3))
    assert (
        resp.seq == 3 and resp.cluster_id == "c0ffee" and list(resp.rs_list) == ["127.0.0.1:2881"]
    )
    assert resp.rs_epoch == p.store.epoch and resp.lease_expire_time == p.clock.now_us() + LEASE
    assert p.whitelist.get(A).hb_status is HeartbeatStatus.ALIVE
    assert p.tenants.reports == [(A, 0)] and p.persist.pending_keys() == {A}
    intake.receive_hb(hb(A, ZA, server_status=1))
    assert ops.calls == [("STOP", [A], "data disk error")]
    p.whitelist.with_server(A, lambda s: setattr(s, "stop_time", 1))
    intake.receive_hb(hb(A, ZA))
    assert ops.calls[-1] == ("START", [A], "data disk recovered")
    assert error_name(intake.receive_hb, hb(A, ZA, cluster_id="other")) == "OB_INVALID_ARGUMENT"
    p.term.close_service()
    assert error_name(intake.receive_hb, hb(A, ZA)) == "OB_RS_NOT_MASTER"


def test_each_lease_response_carries_what_the_rs_holds_now(rs: RootService) -> None:
    """The fields every server is sent alike come from a template, which
    must follow each change (a replaced rs_list or cluster id, ALTER SYSTEM SET
    migration_max_bytes_per_second, a new term's epoch), and one server's stop must not
    reach another server's answer."""
    first = rs.heartbeats.receive_hb(hb(A, ZA))
    assert first.rs_server_status == obrpc_pb2.IS_WORKING and first.version == 1
    rs.parameters.set((("migration_max_bytes_per_second", "64M"),))
    rs.identity.rs_list = [*first.rs_list, "127.0.0.1:2999"]
    resp = rs.heartbeats.receive_hb(hb(A, ZA, seq=2))
    assert resp.migration_max_bytes_per_second == 64 << 20
    assert list(resp.rs_list) == [*first.rs_list, "127.0.0.1:2999"]
    assert resp.rs_epoch == first.rs_epoch and resp.seq == 2 and resp.server_id == 1
    rs.identity.cluster_id = "beef"
    assert rs.heartbeats.receive_hb(hb(A, ZA, cluster_id="beef")).cluster_id == "beef"
    rs.server_admin.stop_servers([A], None, "STOP")
    assert rs.heartbeats.receive_hb(hb(A, ZA, cluster_id="beef")).rs_server_status == (
        obrpc_pb2.IS_STOPPED
    )
    other = rs.heartbeats.receive_hb(hb(B, ZB, cluster_id="beef"))
    assert other.rs_server_status == obrpc_pb2.IS_WORKING and other.server_id == 2
    rs.server_admin.start_servers([A], None)
    assert rs.heartbeats.receive_hb(hb(A, ZA, cluster_id="beef")).rs_server_status == (
        obrpc_pb2.IS_WORKING
    )
    # Last: this RS's writes are fenced by its epoch, which the database does not know.
    rs.term.begin(first.rs_epoch + 1, rs.clock.monotonic_us())
    assert rs.heartbeats.receive_hb(hb(A, ZA, cluster_id="beef")).rs_epoch == first.rs_epoch + 1
