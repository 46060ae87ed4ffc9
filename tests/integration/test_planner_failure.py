"""With real processes: an RS whose Spark planner cannot start (``JAVA_HOME``
pointing nowhere, for the RS process only) shows the DELETE SERVER job stalled with the reason
in DBA_OB_ROOTSERVICE_JOBS and a ``planner_failed`` event; ``ALTER SYSTEM SET
balancer_planner = 'local'`` then takes the DELETE SERVER to SUCCESS with the pandas plans.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.test_cluster import LEASE
from tests.integration.test_delete_server import job
from tests.integration.test_tenants import RS_FLAGS, TenantCluster
from tests.support.cluster import ProcSet, rs_cmd, wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def tc(procs: ProcSet, tmp_path: Path, db_url: str) -> TenantCluster:
    return TenantCluster(procs, tmp_path, db_url)


def test_no_java_stalls_the_delete_until_the_local_planner_takes_over(tc: TenantCluster) -> None:
    c = tc
    flags = {
        **RS_FLAGS,
        "lease_time": LEASE,
        "heartbeat_interval": "500ms",
        "allow_short_timings": True,
        "rpc_timeout": "1s",
        "balancer_interval": "1s",
        "empty_server_check_interval": "1s",
        "migration_stall_time": "2s",
        "balancer_planner": "spark",
    }
    c.rs = c.procs.start(
        rs_cmd(c.db_url, c.rs_addr, c.tmp / "rs", **flags), "rs", env={"JAVA_HOME": "/nowhere"}
    )
    c.rs.wait_healthy(c.rs_addr, timeout_s=30)
    c.bootstrap()
    spare = c.start_agent("z1")
    c.ok(f"ALTER SYSTEM ADD SERVER '{spare}' ZONE 'z1'")
    wait_until(lambda: c.statuses().get(spare) == "ACTIVE", 15, message="spare ACTIVE")
    c.make_tenant(ls_count=1)
    [(ip, port)] = c.ok("SELECT svr_ip, svr_port FROM DBA_OB_UNITS WHERE zone = 'z1'")
    gone = f"{ip}:{port}"
    c.ok(f"ALTER SYSTEM DELETE SERVER '{gone}'")
    wait_until(
        lambda: job(c, gone)["info"].get("stalled", "").startswith("planner failed: "),
        60,
        message="the job stalled on the planner",
    )
    stalled = job(c, gone)["info"]["stalled"]
    assert "JAVA_HOME=/nowhere has no executable bin/java" in stalled, stalled
    assert "balancer_planner = 'local'" in stalled
    assert job(c, gone)["status"] == "INPROGRESS"
    wait_until(
        lambda: (
            c.ok(
                "SELECT value1, value2 FROM __all_rootservice_event_history "
                "WHERE event = 'planner_failed'"
            )
            == [["balancer", "spark"]]
        ),
        10,
        message="one planner_failed event",
    )
    assert c.metrics()["planner_failures.balancer"] >= 1
    assert c.metrics()["planner_ready"] is False
    # the operator switches to the pandas planner: the DELETE SERVER completes
    c.ok("ALTER SYSTEM SET balancer_planner = 'local'")
    wait_until(lambda: job(c, gone)["status"] == "SUCCESS", 120, message="DELETE SERVER done")
    final = job(c, gone)
    assert final["progress"] == 100 and final["info"]["stalled"] == ""
    assert gone not in c.statuses()
    assert c.metrics()["planner_ready"] is True
