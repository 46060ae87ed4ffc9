"""Upgrade mode with real processes (a root service and three agents hosting a tenant's
replicas, on SQLite and PostgreSQL): ALTER SYSTEM BEGIN UPGRADE refused while a server is
stopped (the refusal names it, nothing changes), accepted once it is back; tenant DDL
refused in upgrade mode; the stage shown by SHOW PARAMETERS and the events naming the user;
END UPGRADE, after which the DDL runs again."""

from __future__ import annotations

import pytest

from tests.integration.test_tenants import RS_FLAGS, TenantCluster, tc  # noqa: F401
from tests.support.cluster import wait_until

pytestmark = pytest.mark.integration


def shown(c: TenantCluster) -> dict[str, str]:
    # OceanBase's SHOW PARAMETERS columns: name 5th, value 7th.
    return {r[4]: r[6] for r in c.ok("SHOW PARAMETERS LIKE '%upgrade%'")}


def refusal(c: TenantCluster, statement: str) -> tuple[str, str]:
    resp = c.sql(statement)
    assert resp.error.code != 0, f"{statement} was accepted"
    return resp.error.name, resp.error.message


def test_begin_upgrade_refused_then_accepted_ddl_refused_end_upgrade(
    tc: TenantCluster,  # noqa: F811
) -> None:
    c = tc
    c.start_rs(**RS_FLAGS)
    a1, a2, a3 = c.bootstrap()
    c.make_tenant(ls_count=1)
    wait_until(lambda: c.leaders_on(a1) == 1, 20, message="the LS led in primary zone z1")

    c.ok(f"ALTER SYSTEM STOP SERVER '{a3}'")
    name, message = refusal(c, "ALTER SYSTEM BEGIN UPGRADE")
    assert name == "OB_OP_NOT_ALLOW" and f"server '{a3}' is stopped or isolated" in message
    assert shown(c) == {"enable_upgrade_mode": "False", "_upgrade_stage": "NONE"}
    c.ok(f"ALTER SYSTEM START SERVER '{a3}'")
    # Its replica catches up (in sync within ls_log_sync_threshold) and the pre-checks pass.
    wait_until(
        lambda: c.sql("ALTER SYSTEM BEGIN UPGRADE").error.code == 0,
        30,
        message="BEGIN UPGRADE accepted",
    )
    assert shown(c) == {"enable_upgrade_mode": "True", "_upgrade_stage": "PREUPGRADE"}

    for statement in (
        "CREATE TENANT t2 RESOURCE_POOL_LIST ('p1')",
        "DROP TENANT t1",
        "CREATE RESOURCE POOL p2 UNIT 'u1', UNIT_NUM 1, ZONE_LIST ('z1')",
    ):
        name, message = refusal(c, statement)
        assert name == "OB_OP_NOT_ALLOW" and "in upgrade mode" in message, message
    assert c.ok("SELECT tenant_name FROM DBA_OB_TENANTS WHERE tenant_id = 1002") == [["t1"]]

    c.ok("ALTER SYSTEM END UPGRADE")
    assert shown(c) == {"enable_upgrade_mode": "False", "_upgrade_stage": "NONE"}
    rows = c.ok(
        "SELECT event, name4, value4 FROM __all_rootservice_event_history "
        "WHERE module = 'upgrade' ORDER BY id"
    )
    assert rows == [["begin_upgrade", "user", "root"], ["end_upgrade", "user", "root"]]
    c.ok("CREATE RESOURCE POOL p2 UNIT 'u1', UNIT_NUM 1, ZONE_LIST ('z1')")
