"""The wait statements take before answering "done": DBA_OB_LS_LOCATIONS read back after
fresh reports and a sync of the meta table (rootservice.tenants.view_agreement)."""

from __future__ import annotations

import pytest

from obcommon.errors import ObError
from rootservice.app import RootService
from tests.support.tenants import ZONE, make_tenant, members_of, report_all


def test_the_view_is_synced_by_the_wait_and_a_disagreement_is_named(rs: RootService) -> None:
    tid = make_tenant(rs)
    report_all(rs, tid)
    views = rs.tenant_layer.views
    leader = next(m for m in members_of(rs, tid, 1001) if ZONE[m] == "z1")
    other = next(m for m in members_of(rs, tid, 1001) if m != leader)
    # No meta sync task ran: the round itself syncs, then reads the view.
    assert views.leaders() == {(tid, 1001): [leader], (tid, 1002): [leader]}
    now = rs.clock.now_us()
    # Both sides of each check: what agrees returns, what does not is named.
    views.wait_leaders_off([other], now, "test")
    views.wait_leader((tid, 1001), leader, [], now)
    with pytest.raises(ObError) as e:
        views.wait_leaders_off([leader], now, "leaders moved off")
    assert e.value.name == "OB_WAIT_LEADER_SWITCH_TIMEOUT"
    assert f"LS 1001 (tenant {tid}) on {leader}" in str(e.value)
    assert f"LS 1002 (tenant {tid}) on {leader}" in str(e.value)
    with pytest.raises(ObError) as e:
        views.wait_leader((tid, 1001), other, [], now)
    assert e.value.name == "OB_WAIT_LEADER_SWITCH_TIMEOUT"
    assert f"LS 1001 (tenant {tid}) led by {leader}" in str(e.value)
    with pytest.raises(ObError) as e:
        views.wait_led([(tid, 1001)], [leader], [], now, "force delete")
    assert f"LS 1001 (tenant {tid}) led by {leader}" in str(e.value)
    views.wait_led([(tid, 1001)], [other], [], now, "force delete")
