"""A planner that fails, as a RootService wires it, with a FakeClock on both
databases: the failing planner is a real one (the pandas planner reading a database file that
cannot be opened, so its every method raises as a dead JVM or an unreachable master would).
Within ``migration_stall_time`` the DELETE SERVER job says ``stalled: planner failed: <cause>``,
one ``planner_failed`` event and one WARNING are written however many rounds fail, every
failure is counted; ``ALTER SYSTEM SET balancer_planner = 'local'`` through the statement path
makes the next round plan with pandas and the stall clears. The lost-replica checker's
failures are visible the same way.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from obcommon.errors import ObError
from rootservice.app import RootService
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
    sql,
)

PLANNERS_LOG = "rootservice.balancer.planners"


@pytest.fixture
def rs(db_url: str, tmp_path: Path) -> Any:
    broken = PandasPlanner(f"sqlite:///{tmp_path}/no/such/dir/rs.db")
    r = make_rs(
        db_url,
        tmp_path,
        planner=broken,
        allow_short_timings=True,
        tenant_create_timeout="1s",
        stop_server_check_timeout="1s",
        leader_switch_timeout="1s",
        migration_stall_time="30s",
        server_permanent_offline_time="60s",
    )
    for s in (A, B, C, D):
        r.heartbeats.receive_hb(lease(s))
    yield r
    r.shutdown()


def job_row(rs: RootService) -> dict[str, Any]:
    return rows(rs, "SELECT * FROM __all_rootservice_job ORDER BY job_id DESC")[0]


def stalled(rs: RootService) -> str:
    return str(json.loads(job_row(rs)["extra_info"] or "{}").get("stalled", ""))


def keep_alive(rs: RootService, servers: tuple[str, ...] = (A, B, C, D)) -> None:
    for s in servers:
        rs.heartbeats.receive_hb(
            lease(s, list(rs.tenant_layer.balancer_view.reports().get(s, {}).values()))
        )


def planner_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == PLANNERS_LOG and r.levelno == logging.WARNING]


def test_a_failing_planner_stalls_the_job_then_local_takes_over(
    rs: RootService, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    tid = make_tenant(rs, ls_count=1)
    report_all(rs, tid)
    rs.tenant_layer.meta_sync.sync_meta()
    gone = next(m for m in members_of(rs, tid, 1001) if ZONE[m] == "z1")
    rs.server_admin.delete_servers([gone], None)
    assert rs.migration.run_once() == 0
    assert stalled(rs) == ""  # the stall time has not passed since the job started
    assert rs.metrics.labelled("planner_failures") == {("balancer",): 1}
    # every round fails; once migration_stall_time passed the job says why
    for _ in range(3):
        rs.clock.advance(10 * S)
        keep_alive(rs)
        rs.migration.run_once()
    assert stalled(rs).startswith("planner failed: "), stalled(rs)
    assert "OperationalError" in stalled(rs)
    rs.migration.run_once()
    rs.persist.run_once()
    [ev] = events(rs, "planner_failed")
    assert (ev["name1"], ev["value1"], ev["name2"], ev["value2"]) == (
        "task",
        "balancer",
        "planner",
        "spark",
    )
    assert len(events(rs, "migration_stalled")) == 1
    assert rs.metrics.labelled("planner_failures") == {("balancer",): 5}
    [warning] = planner_warnings(caplog)
    assert "OperationalError" in warning.getMessage()
    assert rs.planner.failures == {"balancer": stalled(rs).removeprefix("planner failed: ")}
    # the operator switches to the pandas planner: the next round plans and moves the unit
    sql(rs, "ALTER SYSTEM SET balancer_planner = 'local'")
    assert rs.settings.balancer_planner == "local"
    keep_alive(rs)
    assert rs.migration.run_once() >= 1
    assert stalled(rs) == ""
    assert rs.planner.failures == {}
    unit = rows(rs, "SELECT * FROM __all_unit WHERE zone = 'z1'")[0]
    assert f"{unit['migrate_from_svr_ip']}:{unit['migrate_from_svr_port']}" == gone
    assert any("works again" in r.getMessage() for r in caplog.records)
    assert len(planner_warnings(caplog)) == 1


def test_the_lost_replica_checker_failures_are_visible(
    rs: RootService, caplog: pytest.LogCaptureFixture
) -> None:
    tid = make_tenant(rs, ls_count=1)
    report_all(rs, tid)
    rs.tenant_layer.meta_sync.sync_meta()
    members = members_of(rs, tid, 1001)
    leader = next(m for m in members if ZONE[m] == "z1")
    rs.heartbeats.receive_hb(
        lease(C, [replica((tid, 1001), leader, members, me=C, in_service=False)])
    )
    rs.tenant_layer.meta_sync.sync_meta()
    for _ in range(7):
        rs.clock.advance(10 * S)
        keep_alive(rs, (A, B, D))
        rs.lease_checker.run_once()
    assert rs.whitelist.get(C).hb_status.value == "permanent_offline"
    caplog.set_level(logging.WARNING)
    assert rs.lost_replica_checker.run_once() == 0
    assert rs.lost_replica_checker.run_once() == 0
    rs.persist.run_once()
    assert [e["value1"] for e in events(rs, "planner_failed")] == ["lost_replica_checker"]
    assert rs.metrics.labelled("planner_failures")[("lost_replica_checker",)] == 2
    assert len(planner_warnings(caplog)) == 1
    # with the pandas planner the lost rows go
    rs.settings.balancer_planner = "local"
    assert rs.lost_replica_checker.run_once() == 1


def test_balancer_planner_is_a_parameter_of_the_statement_path(rs: RootService) -> None:
    with pytest.raises(ObError) as e:
        sql(rs, "ALTER SYSTEM SET balancer_planner = 'hadoop'")
    assert e.value.name == "OB_INVALID_CONFIG"
    assert rs.settings.balancer_planner == "spark"
    sql(rs, "ALTER SYSTEM SET balancer_planner = 'LOCAL'")
    assert rs.settings.balancer_planner == "local"
    assert rs.planner.current == "local"
    [shown] = [
        r
        for r in rows(rs, "SELECT name, value FROM __all_sys_parameter")
        if r["name"] == "balancer_planner"
    ]
    assert shown["value"] == "local"
    [row] = rs.parameters.show("balancer_planner")
    assert row[:5] == (
        "balancer_planner",
        "local",
        "spark",
        "{spark, local}",
        "__all_sys_parameter",
    )
    # the check ran again for the new planner: pandas can always run
    assert rs.planner_check is not None and rs.planner_check.planner == "local"
    assert rs.planner_check.ready
    assert rs.readings().planner_ready is True
