"""ISOLATE ZONE and ROOT_INSPECTION on real ``rootservice`` and ``observer-agent`` processes
whose agents host replicas, on SQLite and PostgreSQL: the leaders leave the isolated zone
while its server stays ACTIVE with its replicas as followers, START ZONE brings them back;
a row changed behind the RS's back is reported by ROOT_INSPECTION and RELOAD ZONE clears it;
RELOAD UNIT on agreeing units changes nothing; ADD ZONE ... ZONE_TYPE shows in DBA_OB_ZONES.
"""

from __future__ import annotations

import sqlalchemy as sa

from obcommon.proto import obrpc_pb2
from rootservice.db.engine import make_engine
from tests.integration.test_tenants import (  # noqa: F401
    RS_FLAGS,
    TenantCluster,
    replica_report,
    tc,
)
from tests.support.cluster import wait_until

INSPECT = "ALTER SYSTEM RUN JOB 'ROOT_INSPECTION'"
CHECKS = ["server_table", "zone_table", "unit_layout", "view_consistency"]


def test_isolate_zone_moves_leaders_and_root_inspection_finds_a_planted_row(
    tc: TenantCluster,  # noqa: F811
) -> None:
    c = tc
    c.start_rs(**RS_FLAGS)
    a1, a2, a3 = addrs = [c.start_agent(f"z{i}") for i in (1, 2, 3)]
    c.ok(
        f"ALTER SYSTEM BOOTSTRAP REGION 'r1' ZONE 'z1' SERVER '{a1}', ZONE 'z2' SERVER '{a2}', "
        f"ZONE 'z3' SERVER '{a3}'"
    )
    wait_until(lambda: all(c.statuses().get(a) == "ACTIVE" for a in addrs), 20, message="ACTIVE")
    c.make_tenant(ls_count=2, primary="z1")
    wait_until(lambda: c.leaders_on(a1) == 2, 20, message="both leaders in z1")

    # A clean state: every check succeeds, the job row says SUCCESS.
    assert c.ok(INSPECT) == [[name, "succeed"] for name in CHECKS]
    [[status, code]] = c.ok(
        "SELECT job_status, return_code FROM __all_rootservice_job "
        "WHERE job_type = 'ROOT_INSPECTION'"
    )
    assert (status, code) == ("SUCCESS", 0)

    # ISOLATE ZONE: answered once no leader is left in z1 (the leaders went to z2 / z3).
    c.ok("ALTER SYSTEM ISOLATE ZONE 'z1'")
    # The agent itself says so at the answer (no wait): it leads nothing.
    roles = {k: r.role for k, r in replica_report(a1).items()}
    assert sorted(roles.values()) == [obrpc_pb2.FOLLOWER, obrpc_pb2.FOLLOWER]
    assert c.ok("SELECT status FROM DBA_OB_ZONES WHERE zone = 'z1'") == [["INACTIVE"]]
    wait_until(lambda: c.leaders_on(a1) == 0, 20, message="DBA_OB_LS_LOCATIONS: no leader in z1")
    # The zone's server keeps serving: ACTIVE, not stopped, a follower of both log streams.
    assert c.statuses()[a1] == "ACTIVE" and c.stop_time(a1) == 0
    roles = sorted(role for _, s, _, role in c.locations() if s == a1)
    assert roles == ["FOLLOWER", "FOLLOWER"]
    assert sum(c.leaders_on(a) for a in (a2, a3)) == 2
    [[ev]] = c.ok(
        "SELECT count(*) FROM __all_rootservice_event_history "
        "WHERE module = 'zone' AND event = 'isolate_zone'"
    )
    assert ev == 1
    # START ZONE undoes it: the leaders come back to the primary zone.
    c.ok("ALTER SYSTEM START ZONE 'z1'")
    wait_until(lambda: c.leaders_on(a1) == 2, 30, message="leaders back in z1")

    # A region changed behind the RS's back is found, with an event and a FAILED job.
    eng = make_engine(c.db_url)
    try:
        with eng.begin() as conn:
            conn.execute(
                sa.text("UPDATE __all_zone SET info = 'r9' WHERE zone = 'z3' AND name = 'region'")
            )
    finally:
        eng.dispose()
    got = dict(c.ok(INSPECT))
    assert got["zone_table"] == "zone z3 region 'r1' -> 'r9' (memory -> __all_zone)"
    assert [k for k, v in got.items() if v != "succeed"] == ["zone_table"]
    [[status, extra]] = c.ok(
        "SELECT job_status, extra_info FROM __all_rootservice_job "
        "WHERE job_type = 'ROOT_INSPECTION' ORDER BY job_id DESC LIMIT 1"
    )
    assert status == "FAILED" and "zone z3 region 'r1' -> 'r9'" in extra
    assert c.ok(
        "SELECT value1, value2 FROM __all_rootservice_event_history "
        "WHERE module = 'inspector' AND event = 'root_inspection'"
    ) == [["zone_table", "zone z3 region 'r1' -> 'r9' (memory -> __all_zone)"]]
    # RELOAD ZONE takes the table's side; the next inspection is clean.
    resp = c.sql("ALTER SYSTEM RELOAD ZONE")
    assert resp.error.code == 0 and "zone z3 region 'r1' -> 'r9'" in resp.info
    assert c.ok(INSPECT) == [[name, "succeed"] for name in CHECKS]

    # RELOAD UNIT on a cluster whose units agree with __all_unit: nothing to change.
    resp = c.sql("ALTER SYSTEM RELOAD UNIT")
    assert (resp.error.code, resp.info) == (0, "0 unit change(s)")

    # ZONE_TYPE: a zone added with OceanBase's only supported type shows it in
    # DBA_OB_ZONES.TYPE; another type is refused and adds nothing.
    c.ok("ALTER SYSTEM ADD ZONE z4 ZONE_TYPE 'readWRITE', REGION 'r1'")
    assert c.ok("SELECT type FROM DBA_OB_ZONES WHERE zone = 'z4'") == [["ReadWrite"]]
    assert c.error("ALTER SYSTEM ADD ZONE z5 ZONE_TYPE 'ReadOnly'") == "OB_NOT_SUPPORTED"
    assert c.ok("SELECT zone FROM DBA_OB_ZONES WHERE zone = 'z5'") == []
