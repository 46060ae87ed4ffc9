"""The balancer as a RootService wires it, with a FakeClock on a real database (docs/design/migration.md): unit moves from a plan, job progress and stall reports, CANCEL DELETE, unit completion,
lost-replica cleanup. The plans come from the pandas planner (the same computation as the
Spark jobs, checked against them in test_spark_jobs.py); replica copies need agents and are
covered by tests/integration/test_delete_server.py (and, with fakes, by test_copy_tasks.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rootservice.app import RootService
from rootservice.balancer.planner import server_rows
from rootservice.balancer.planners import PandasPlanner
from tests.support.harness import S, events, make_rs
from tests.support.tenants import (
    ZONE,
    A,
    B,
    C,
    D,
    lease,
    make_tenant,
    members_of,
    replica,
    report_all,
    rows,
)


@pytest.fixture
def rs(db_url: str, tmp_path: Path) -> Any:
    r = make_rs(
        db_url,
        tmp_path,
        allow_short_timings=True,
        tenant_create_timeout="1s",
        stop_server_check_timeout="1s",
        leader_switch_timeout="1s",
        migration_stall_time="30s",
        server_permanent_offline_time="60s",
    )
    r.migration.planner = r.lost_replica_checker.planner = PandasPlanner(db_url)
    for s in (A, B, C, D):
        r.heartbeats.receive_hb(lease(s))
    yield r
    r.shutdown()


def unit_plan(rs: RootService) -> list[dict[str, Any]]:
    return rs.migration.planner.unit_plan(server_rows(rs.whitelist))


def z1_member(rs: RootService, tid: int) -> str:
    return next(m for m in members_of(rs, tid, 1001) if ZONE[m] == "z1")


def job_row(rs: RootService) -> dict[str, Any]:
    return rows(rs, "SELECT * FROM __all_rootservice_job ORDER BY job_id DESC")[0]


def test_delete_moves_the_unit_reports_progress_and_a_stall(rs: RootService) -> None:
    tid = make_tenant(rs, ls_count=2)
    report_all(rs, tid)
    rs.tenant_layer.meta_sync.sync_meta()
    gone = z1_member(rs, tid)
    other = D if gone == A else A
    rs.server_admin.delete_servers([gone], None)
    moved = rs.unit_moves.apply_unit_plan(unit_plan(rs))
    assert moved == 1
    unit = rows(rs, "SELECT * FROM __all_unit WHERE zone = 'z1'")[0]
    assert (f"{unit['svr_ip']}:{unit['svr_port']}", unit["migrate_from_svr_port"]) == (
        other,
        int(gone.rsplit(":", 1)[1]),
    )
    # applying the same plan again moves nothing (the unit is no longer where it was)
    assert rs.unit_moves.apply_unit_plan(unit_plan(rs)) == 0
    rs.delete_jobs.update_jobs()
    info = json.loads(job_row(rs)["extra_info"])
    assert (info["units_total"], info["replicas_total"], info["units_moved"]) == (1, 2, 0)
    assert info["stalled"] == ""
    # nothing moves for migration_stall_time: the job says so, once, with a reason
    rs.clock.advance(30 * S)
    for s in (A, B, C, D):
        rs.heartbeats.receive_hb(
            lease(s, list(rs.tenant_layer.balancer_view.reports().get(s, {}).values()))
        )
    rs.delete_jobs.update_jobs()
    info = json.loads(job_row(rs)["extra_info"])
    assert info["stalled"], info
    rs.delete_jobs.update_jobs()
    rs.persist.run_once()
    assert len(events(rs, "migration_stalled")) == 1


def test_no_room_is_the_stall_reason(rs: RootService) -> None:
    tid = make_tenant(rs, ls_count=1)
    report_all(rs, tid)
    gone = z1_member(rs, tid)
    other = D if gone == A else A
    # DELETE passes its pre-check, then the other z1 server shrinks below the unit's memory
    rs.server_admin.delete_servers([gone], None)
    rs.heartbeats.receive_hb(lease(other, mem=1 << 30))
    plan = unit_plan(rs)
    assert len(plan) == 1 and plan[0]["to_svr_ip"] is None and "memory" in plan[0]["reason"]
    assert rs.unit_moves.apply_unit_plan(plan) == 0
    rs.delete_jobs.update_jobs()
    rs.clock.advance(31 * S)
    rs.heartbeats.receive_hb(lease(other, mem=1 << 30))
    rs.delete_jobs.update_jobs()
    assert "no room" in json.loads(job_row(rs)["extra_info"])["stalled"]


def test_cancel_delete_moves_the_unit_back(rs: RootService) -> None:
    tid = make_tenant(rs, ls_count=1)
    report_all(rs, tid)
    gone = z1_member(rs, tid)
    rs.server_admin.delete_servers([gone], None)
    rs.unit_moves.apply_unit_plan(unit_plan(rs))
    rs.server_admin.cancel_delete_servers([gone], None)
    unit = rows(rs, "SELECT * FROM __all_unit WHERE zone = 'z1'")[0]
    assert f"{unit['svr_ip']}:{unit['svr_port']}" == gone and unit["migrate_from_svr_ip"] == ""
    assert job_row(rs)["job_status"] == "CANCELED"
    rs.persist.run_once()
    assert len(events(rs, "cancel_migrate_unit")) == 1


def delete_and_move(rs: RootService, *, check: bool = False) -> str:
    """A tenant with one LS; DELETE of its z1 server, whose unit starts moving; then the new
    member list without that server (its replica not dropped yet). Returns the server.
    ``check``: also that no unit finishes while the source still reports its replica."""
    tid = make_tenant(rs, ls_count=1)
    report_all(rs, tid)
    gone = z1_member(rs, tid)
    other = D if gone == A else A
    rs.server_admin.delete_servers([gone], None)
    rs.unit_moves.apply_unit_plan(unit_plan(rs))
    rs.tenant_layer.meta_sync.sync_meta()
    if check:
        assert rs.unit_moves.finish_units() == 0  # the source still reports its replica
    members = sorted([other, B, C])
    for s in members:
        rs.heartbeats.receive_hb(lease(s, [replica((tid, 1001), other, members, me=s)]))
    return gone


def test_a_unit_finishes_once_no_replica_is_left_on_its_source(rs: RootService) -> None:
    gone = delete_and_move(rs, check=True)
    # the replica moved: the new member list excludes the source, which dropped it
    rs.heartbeats.receive_hb(lease(gone, []))
    rs.tenant_layer.meta_sync.sync_meta()
    assert rs.unit_moves.finish_units() == 1
    unit = rows(rs, "SELECT * FROM __all_unit WHERE zone = 'z1'")[0]
    assert unit["migrate_from_svr_ip"] == ""
    # nothing left on the source: the empty-server checker removes it, job SUCCESS 100
    assert rs.empty_server_checker.run_once() == 1
    assert rs.whitelist.get(gone) is None
    assert (job_row(rs)["job_status"], job_row(rs)["progress"]) == ("SUCCESS", 100)


def run_woken(rs: RootService) -> list[str]:
    """Run the leader tasks the RS woke, as the timers would at once, until nothing more is
    woken; the fake clock does not move, so no task runs for its period. Returns what ran."""
    tasks = {task.name: task for task, _ in rs.leader_tasks()}
    ran: list[str] = []
    while woken := rs.timers.take_woken():
        for name in dict.fromkeys(woken):
            if name in tasks:
                tasks[name].run_once()
                ran.append(name)
    return ran


def test_the_last_replica_leaving_ends_the_job_without_waiting_for_a_period(
    rs: RootService,
) -> None:
    """After the last replica of a DELETING server is gone, the job reached SUCCESS
    only at the next ``balancer_interval`` (10 s in ``make bench-empty``). With the clock
    frozen, the wakes alone now carry it: the server's report without the replica wakes the
    meta sync, whose deleted row wakes the balancer (the unit's move finishes) and the
    empty-server checker (the server goes, job SUCCESS)."""
    gone = delete_and_move(rs)
    run_woken(rs)  # whatever DELETE and the new member list woke
    assert job_row(rs)["job_status"] == "INPROGRESS"
    rs.heartbeats.receive_hb(lease(gone, []))  # the source has dropped its replica
    ran = run_woken(rs)
    assert ran[:1] == ["ls_meta_sync"] and {"balancer", "empty_server_checker"} <= set(ran)
    assert rs.whitelist.get(gone) is None
    assert (job_row(rs)["job_status"], job_row(rs)["progress"]) == ("SUCCESS", 100)


def test_lost_replicas_on_a_permanently_offline_server_are_deleted(rs: RootService) -> None:
    tid = make_tenant(rs, ls_count=1)
    report_all(rs, tid)
    rs.tenant_layer.meta_sync.sync_meta()
    # C reports its replica out of service, then falls silent for good
    members = members_of(rs, tid, 1001)
    leader = z1_member(rs, tid)
    rs.heartbeats.receive_hb(
        lease(C, [replica((tid, 1001), leader, members, me=C, in_service=False)])
    )
    rs.tenant_layer.meta_sync.sync_meta()
    assert rs.lost_replica_checker.run_once() == 0  # C is alive: nothing is lost
    for _ in range(7):
        rs.clock.advance(10 * S)
        for s in (A, B, D):
            rs.heartbeats.receive_hb(
                lease(s, list(rs.tenant_layer.balancer_view.reports().get(s, {}).values()))
            )
        rs.lease_checker.run_once()
    assert rs.whitelist.get(C).hb_status.value == "permanent_offline"
    assert rs.lost_replica_checker.run_once() == 1
    left = rows(rs, "SELECT svr_port FROM __all_ls_meta_table")
    assert 3003 not in {r["svr_port"] for r in left}
    assert rs.lost_replica_checker.run_once() == 0
