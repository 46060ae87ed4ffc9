"""The DELETE / STOP / ISOLATE SERVER pre-checks of the tenant layer through a whole
RootService (docs/design/statements.md; rootservice.tenants.pre_checks).
"""

from __future__ import annotations

from rootservice.app import RootService
from rootservice.db import zone_repo
from rootservice.db.zone_repo import ZoneInfo
from rootservice.servers.status import HeartbeatStatus
from tests.support.harness import S, error_name
from tests.support.tenant_parts import Layer
from tests.support.tenant_parts import make_tenant as make_tenant_alone
from tests.support.tenants import (
    GIB,
    ZONE,
    A,
    B,
    C,
    D,
    err,
    lease,
    make_tenant,
    members_of,
    report_all,
    sql,
)


def test_stop_refused_when_a_majority_would_be_lost(rs: RootService) -> None:
    tid = make_tenant(rs, ls_count=1)
    report_all(rs, tid)
    # C (z3) stops heartbeating and its lease expires; B (z2) alive.
    rs.clock.advance(5 * S)
    report_all(rs, tid, skip=(C,))
    rs.clock.advance(5 * S)
    report_all(rs, tid, skip=(C,))
    rs.lease_checker.run_once()
    assert not rs.whitelist.get(C).is_alive()
    e = err(rs.server_admin.stop_servers, [B], None, "STOP")
    assert e.name == "OB_OP_NOT_ALLOW"
    assert f"log stream 1001 of tenant {tid} would keep 1 of 3 members" in str(e)
    assert rs.whitelist.get(B).stop_time == 0  # nothing changed
    # FORCE STOP skips only the log-sync check: the majority rule still refuses.
    assert error_name(rs.server_admin.stop_servers, [B], None, "FORCE_STOP") == "OB_OP_NOT_ALLOW"


def test_stop_checks_log_sync_at_the_threshold_boundary(rs: RootService) -> None:
    tid = make_tenant(rs, ls_count=1)
    threshold = rs.settings.ls_log_sync_threshold
    # B lags exactly the threshold: in sync (inclusive), so stopping C keeps 2 in sync.
    report_all(rs, tid, lag={B: threshold})
    problem = rs.tenant_layer.pre_checks.stop_problem({C}, check_sync=True, refresh=False)
    assert problem == ""
    report_all(rs, tid, lag={B: threshold + 1})
    problem = rs.tenant_layer.pre_checks.stop_problem({C}, check_sync=True, refresh=False)
    assert "1 of 3 remaining members with the log in sync" in problem and B in problem
    assert rs.tenant_layer.pre_checks.stop_problem({C}, check_sync=False, refresh=False) == ""


def test_stop_retries_then_names_the_lagging_ls(rs: RootService) -> None:
    tid = make_tenant(rs, ls_count=1)
    report_all(rs, tid, lag={B: 10 * S})
    t0 = rs.clock.now_us()
    e = err(rs.server_admin.stop_servers, [C], None, "STOP")
    assert e.name == "OB_OP_NOT_ALLOW" and "log in sync" in str(e)
    # it retried for stop_server_check_timeout (1 s here) on the fake clock
    assert rs.clock.now_us() - t0 >= rs.settings.stop_server_check_timeout
    assert rs.whitelist.get(C).stop_time == 0


def test_isolate_refused_for_the_last_zone_of_the_primary_region(rs: RootService) -> None:
    now = rs.clock.now_us()
    with rs.store.txn() as conn:
        # z1 and z2 form region r1, z3 is alone in r2
        zone_repo.upsert_zone(conn, ZoneInfo("z3", "ACTIVE", "r2", ""), now)
        rs.zones.replace_all(zone_repo.load_zones(conn))
    tid = make_tenant(rs, ls_count=1, primary="z1")
    report_all(rs, tid)
    # With z2 stopped, z1 is the last running zone of r1.
    sql(rs, "ALTER SYSTEM STOP ZONE 'z2'")
    e = err(rs.server_admin.stop_servers, [A, D], None, "ISOLATE")
    assert e.name == "OB_OP_NOT_ALLOW" and "primary region r1" in str(e)
    sql(rs, "ALTER SYSTEM START ZONE 'z2'")
    # z2 running again: isolating z1's servers is allowed (region r1 keeps z2).
    rs.tenant_layer.pre_checks.check_isolate([rs.whitelist.get(A), rs.whitelist.get(D)])


def test_delete_refused_without_room_and_accepted_with_room(rs: RootService) -> None:
    tid = make_tenant(rs, ls_count=1)
    report_all(rs, tid)
    # B is the only server of z2: its unit has nowhere to go.
    e = err(rs.server_admin.delete_servers, [B], None)
    assert e.name == "OB_DELETE_SERVER_NOT_ALLOWED"
    assert "unit" in str(e) and "z2" in str(e)
    # In z1 the unit can move to the other server.
    z1_member = next(m for m in members_of(rs, tid, 1001) if ZONE[m] == "z1")
    rs.server_admin.delete_servers([z1_member], None)
    assert rs.whitelist.get(z1_member).admin_status.value == "DELETING"
    # the DELETING server still holds its unit: the empty-server checker keeps it
    assert rs.empty_server_checker.run_once() == 0


def test_delete_refused_for_memory_with_the_resource_named(rs: RootService) -> None:
    tid = make_tenant(rs, ls_count=1)
    report_all(rs, tid)
    z1_member = next(m for m in members_of(rs, tid, 1001) if ZONE[m] == "z1")
    other = D if z1_member == A else A
    # the other z1 server shrinks to 2G of memory
    rs.heartbeats.receive_hb(lease(other, mem=2 * GIB))
    e = err(rs.server_admin.delete_servers, [z1_member], None)
    assert e.name == "OB_DELETE_SERVER_NOT_ALLOWED"
    assert "memory: needs 4G, free 2G" in str(e)


def test_delete_refused_while_an_ls_has_no_leader(rs: RootService) -> None:
    tid = make_tenant(rs, ls_count=1)
    report_all(rs, tid, leader={1001: "none"})
    assert rs.tenant_layer.balancer_view.views()[(tid, 1001)].leader is None
    z1_member = next(m for m in members_of(rs, tid, 1001) if ZONE[m] == "z1")
    e = err(rs.server_admin.delete_servers, [z1_member], None)
    assert e.name == "OB_OP_NOT_ALLOW" and "no leader" in str(e)


# --- ServerPreChecks alone (no RootService) -------------------------------------------------


def _z1(layer: Layer, tid: int) -> str:
    return next(m for m in layer.layout.topology().plans[(tid, 1001)].members if m in (A, D))


def test_stop_check_alone_counts_healthy_members_and_requests_reports(layer: Layer) -> None:
    tid = make_tenant_alone(layer, ls_count=1)
    targets = [layer.servers.get(B)]
    layer.pre_checks.check_stop(targets, "STOP")
    assert sorted(layer.heartbeats.asked[-1]) == sorted(
        layer.layout.topology().plans[(tid, 1001)].members
    )
    layer.servers.get(C).hb_status = HeartbeatStatus.LEASE_EXPIRED
    e = err(layer.pre_checks.check_stop, targets, "FORCE_STOP")
    assert e.name == "OB_OP_NOT_ALLOW" and "would keep 1 of 3 members" in str(e)
    # no LS has a member on a server outside the layout
    assert layer.pre_checks.stop_problem({"10.9.9.9:1"}, check_sync=True, refresh=False) == ""


def test_isolate_check_alone_protects_the_primary_region(layer: Layer) -> None:
    make_tenant_alone(layer, ls_count=1)
    layer.zones.by_name["z3"] = ZoneInfo("z3", "ACTIVE", "r2", "")
    layer.zones.by_name["z2"] = ZoneInfo("z2", "INACTIVE", "r1", "")
    e = err(layer.pre_checks.check_stop, [layer.servers.get(A), layer.servers.get(D)], "ISOLATE")
    assert e.name == "OB_OP_NOT_ALLOW" and "primary region r1" in str(e)
    layer.pre_checks.check_isolate([layer.servers.get(C)])


def test_delete_check_alone_places_the_units_elsewhere(layer: Layer) -> None:
    tid = make_tenant_alone(layer, ls_count=1)
    e = err(layer.pre_checks.check_delete, [layer.servers.get(B)])
    assert e.name == "OB_DELETE_SERVER_NOT_ALLOWED" and "has nowhere to go" in str(e)
    layer.pre_checks.check_delete([layer.servers.get(_z1(layer, tid))])
    layer.agents.replicas.clear()
    layer.reports.clear()
    e = err(layer.pre_checks.check_delete, [layer.servers.get(_z1(layer, tid))])
    assert e.name == "OB_OP_NOT_ALLOW" and "has no leader" in str(e)
