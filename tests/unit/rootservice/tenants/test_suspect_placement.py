"""SUSPECT servers in placement: no new leaders (a leader candidate again
after exactly ``server_suspect_time``), a last resort for a leaderless LS, a live member for
majorities, no rebuild copy (the planner's side is in
tests/unit/rootservice/balancer/test_spark_jobs.py). In-memory agents, fake clock, both
databases."""

from __future__ import annotations

import pytest

from obcommon.errors import ObError
from rootservice.servers.status import HeartbeatStatus
from rootservice.servers.suspect_policy import SuspectState, on_expiry, on_return
from tests.support.tenant_parts import A, B, C, D, Layer, heartbeat, make_tenant

US = 1_000_000


def _suspect(layer: Layer, server: str) -> int:
    """``server``'s lease expired 11 s ago and it is back now: SUSPECT for
    ``server_suspect_time``. Returns the monotonic end of its suspect period."""
    base = layer.settings.server_suspect_time
    now = layer.clock.monotonic_us()
    s = layer.servers.get(server)
    s.suspect = on_return(on_expiry(SuspectState(), now - 11 * US, base), now, base)
    return s.suspect.until_mono_us


def _z1_member(layer: Layer, tid: int) -> str:
    return next(m for m in layer.layout.topology().plans[(tid, 1001)].members if m in (A, D))


def test_a_clean_return_leads_again_after_exactly_the_suspect_time(layer: Layer) -> None:
    tid = make_tenant(layer, ls_count=1, primary="z1;z2")
    key = (tid, 1001)
    z1 = _z1_member(layer, tid)
    layer.leaders.switch_leader(key, B, "the z1 member's lease expired")
    until = _suspect(layer, z1)
    assert until - layer.clock.monotonic_us() == layer.settings.server_suspect_time == 30 * US
    plan = layer.layout.topology().plans[key]
    layer.clock.advance(until - 1 - layer.clock.monotonic_us())
    # One microsecond before: the primary zone's member is no new leader, by any path.
    assert layer.leaders.choose_leader(plan, layer.reports.views()[key], set()) == B
    assert layer.leaders.coordinate(plan, layer.reports.views()[key]) == 0
    with pytest.raises(ObError) as e:
        layer.leaders.switch_leader(key, z1, "manual")
    assert e.value.name == "OB_OP_NOT_ALLOW" and "SUSPECT" in str(e.value)
    assert layer.reports.views()[key].leader == B
    # Exactly server_suspect_time after its return: a candidate again, led from z1 at once.
    layer.clock.advance(1)
    assert layer.leaders.coordinate(plan, layer.reports.views()[key]) == 1
    assert layer.reports.views()[key].leader == z1


def test_a_suspect_leader_keeps_its_leadership(layer: Layer) -> None:
    tid = make_tenant(layer, ls_count=1, primary="z2")
    key = (tid, 1001)
    assert layer.reports.views()[key].leader == B
    _suspect(layer, B)
    plan = layer.layout.topology().plans[key]
    assert layer.leaders.coordinate(plan, layer.reports.views()[key]) == 0
    assert layer.reports.views()[key].leader == B


def test_suspect_members_count_for_the_majority_and_lead_as_a_last_resort(layer: Layer) -> None:
    tid = make_tenant(layer, ls_count=1, primary="z2")
    key = (tid, 1001)
    z1 = _z1_member(layer, tid)
    plan = layer.layout.topology().plans[key]
    # The leader B dies; z1's member and C are SUSPECT: 2 of 3 live members, a majority, and
    # an LS without leader is unavailable: one of them leads.
    layer.servers.get(B).hb_status = HeartbeatStatus.LEASE_EXPIRED
    _suspect(layer, z1)
    _suspect(layer, C)
    assert layer.leaders.coordinate(plan, layer.reports.views()[key]) == 1
    assert layer.reports.views()[key].leader in (z1, C)


def test_a_member_not_suspect_is_preferred_over_the_primary_zone(layer: Layer) -> None:
    tid = make_tenant(layer, ls_count=1, primary="z2;z1")
    key = (tid, 1001)
    z1 = _z1_member(layer, tid)
    plan = layer.layout.topology().plans[key]
    assert layer.reports.views()[key].leader == B
    layer.servers.get(B).hb_status = HeartbeatStatus.LEASE_EXPIRED
    _suspect(layer, z1)
    assert layer.leaders.coordinate(plan, layer.reports.views()[key]) == 1
    assert layer.reports.views()[key].leader == C  # not z1, next in the primary zone list


def test_no_rebuild_copy_goes_to_a_suspect_server(layer: Layer) -> None:
    tid = make_tenant(layer, ls_count=1)
    key = (tid, 1001)
    view = layer.reports.views()[key]
    lost = next(s for s in sorted(view.replicas) if s != view.leader)
    del layer.agents.replicas[lost][key]
    heartbeat(layer, lost)
    until = _suspect(layer, lost)
    layer.clock.advance(until - 1 - layer.clock.monotonic_us())
    assert layer.rebuilder.run_once() == 0
    layer.clock.advance(1)
    # No longer SUSPECT: seen missing, then rebuilt once two more reports lack it.
    assert layer.rebuilder.run_once() == 0
    heartbeat(layer, lost)
    heartbeat(layer, lost)
    assert layer.rebuilder.run_once() == 1
    assert key in layer.agents.replicas[lost]
