"""The admin operations on servers (docs/design/statements.md). Unit tests on an in-process RS with a
FakeClock, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import sqlalchemy as sa

from rootservice.app import RootService
from rootservice.servers.admin import ServerAdmin
from rootservice.servers.agent_client import EmptyCheck
from rootservice.servers.ports import inline
from rootservice.servers.status import AdminStatus, HeartbeatStatus
from tests.support.harness import (
    SEEDED,
    ZD,
    A,
    B,
    C,
    D,
    error_name,
    events,
    flush,
    hb,
    heartbeat_all,
    jobs,
    server_row,
)
from tests.support.server_parts import Parts, make_parts, seed


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
    rs.zones.stop_zone("z3")
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
    # The zone is checked once the agent answered (test_zones.py), as OceanBase does.
    assert error_name(m.add_servers, ["127.0.0.1:1"], "nozone") == "OB_SERVER_CONNECTION_ERROR"
    assert rs.whitelist.counts()["servers"] == len(SEEDED)


def test_multi_server_command_is_all_or_nothing(rs: RootService) -> None:
    heartbeat_all(rs)
    rs.server_admin.delete_servers([B], None)
    assert error_name(rs.server_admin.delete_servers, [A, B], None) == "OB_SERVER_ALREADY_DELETED"
    assert rs.whitelist.get(A).admin_status is AdminStatus.NORMAL
    flush(rs)
    assert server_row(rs, A)["status"] == "ACTIVE"


# --- built from its collaborators, without RootService ------------------------------------


class FakeAgents:
    """ADD SERVER's emptiness check: every server is empty and started in zone z1."""

    def check_server_empty(self, server: str, epoch: int) -> EmptyCheck:
        return EmptyCheck(True, "z1", server, "", 0)


class RecordingRequests:
    def __init__(self) -> None:
        self.asked: list[list[str]] = []

    def request_heartbeats(self, servers: Iterable[str]) -> int:
        self.asked.append(list(servers))
        return 0


def make_admin(p: Parts, requests: RecordingRequests) -> ServerAdmin:
    return ServerAdmin(
        p.whitelist,
        p.zones,
        p.store,
        p.clock,
        p.settings,
        FakeAgents(),  # type: ignore[arg-type]
        checks=p.tenants,
        leaders=p.tenants,
        cancel_listener=p.balancer,
        heartbeats=requests,
        wake=p.wake,
        background=inline,
    )


def test_admin_alone_add_delete_cancel_stop_start(engine: sa.Engine, tmp_path: Path) -> None:
    p = make_parts(engine, tmp_path)
    seed(p)
    requests = RecordingRequests()
    admin = make_admin(p, requests)
    new = "127.0.0.1:3005"
    assert admin.add_servers([new], None) == [len(SEEDED) + 1]
    assert requests.asked == [[new]]
    s = p.whitelist.get(new)
    assert s is not None and s.zone == "z1" and s.hb_status is HeartbeatStatus.LEASE_EXPIRED

    jobs = admin.delete_servers([new], None)
    assert len(jobs) == 1 and p.tenants.calls == [("check_delete", [new])]
    assert p.whitelist.get(new).admin_status is AdminStatus.DELETING
    assert p.woken == ["balancer", "empty_server_checker", "lost_replica_checker"]
    admin.cancel_delete_servers([new], None)
    # the units go back in the statement's transaction, memory once committed, the drops
    # of partial replicas in the background (inline here)
    assert p.balancer.calls == [
        ("move_units_back", new),
        ("cancelled", new),
        ("drop_partial", {"drops of": new}),
    ]
    assert requests.asked[-1] == [new]
    assert p.whitelist.get(new).admin_status is AdminStatus.NORMAL

    admin.stop_servers([A], None, "ISOLATE", reason="test")
    assert p.tenants.calls[-2:] == [("check_stop", ([A], "ISOLATE")), ("move_leaders_off", [A])]
    assert p.whitelist.get(A).stop_time == p.clock.now_us()
    admin.start_servers([A], None)
    assert p.whitelist.get(A).stop_time == 0

    p.tenants.refuse = "OB_DELETE_SERVER_NOT_ALLOWED"
    assert error_name(admin.delete_servers, [B], None) == "OB_DELETE_SERVER_NOT_ALLOWED"
    assert p.whitelist.get(B).admin_status is AdminStatus.NORMAL
    # The gate is the caller's (statement dispatch); a deposed term's write is fenced.
    p.tenants.refuse = ""
    p.term.request_step_down("test")
    assert error_name(admin.stop_servers, [A], None, "ISOLATE") == "OB_RS_NOT_MASTER"
    assert p.whitelist.get(A).stop_time == 0
