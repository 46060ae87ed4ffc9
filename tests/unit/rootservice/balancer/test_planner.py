"""The planner seam without Spark: the servers input rows (docs/design/migration.md) and the lazy
Spark planner that builds nothing until a plan is asked for."""

from __future__ import annotations

from rootservice.balancer.planner import SERVER_COLUMNS, server_rows
from rootservice.balancer.planners import LazySparkPlanner
from rootservice.config import RsSettings
from rootservice.servers.status import ResourceInfo
from tests.unit.rootservice.balancer.fakes import FakeWhitelist, server


def test_server_rows_carry_the_planner_columns() -> None:
    a = server("127.0.0.1:3001", deleting=True)
    a.resource_info = ResourceInfo(cpu_total=8, mem_total=16 << 30, log_disk_total=64 << 30)
    a.stop_time = 5
    [row] = server_rows(FakeWhitelist(a))
    assert tuple(row) == SERVER_COLUMNS
    assert row == {
        "svr_ip": "127.0.0.1",
        "svr_port": 3001,
        "zone": "z1",
        "status": a.display_status().value,
        "hb_status": "alive",
        "stop_time": 5,
        "cpu_total": 8.0,
        "mem_total": 16 << 30,
        "log_disk_total": 64 << 30,
        "suspect": False,
    }


def test_the_lazy_spark_planner_builds_nothing_until_asked() -> None:
    p = LazySparkPlanner(RsSettings())
    assert p._planner is None
    p.stop()  # nothing started: nothing to stop
    assert p._planner is None
