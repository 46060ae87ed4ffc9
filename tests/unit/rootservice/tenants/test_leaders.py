"""Leader choice, switch, coordination and moving leaders off (docs/design/statements.md;
rootservice.tenants.leaders), with in-memory agents and no RootService."""

from __future__ import annotations

import pytest

from obcommon.errors import ObError
from rootservice.servers.status import HeartbeatStatus
from tests.support.tenant_parts import A, B, C, D, Layer, heartbeat, make_tenant


def _z1_member(layer: Layer, tid: int) -> str:
    return next(m for m in layer.layout.topology().plans[(tid, 1001)].members if m in (A, D))


def test_creation_elects_the_primary_zone_member(layer: Layer) -> None:
    tid = make_tenant(layer, ls_count=2, primary="z2")
    views = layer.reports.views()
    assert views[(tid, 1001)].leader == B and views[(tid, 1002)].leader == B
    assert views[(tid, 1001)].term == 1


def test_switch_leader_has_the_new_leader_catch_up_from_the_old(layer: Layer) -> None:
    tid = make_tenant(layer, ls_count=1)
    key = (tid, 1001)
    old = _z1_member(layer, tid)
    layer.agents.replicas[old][key].log_end_index = 250
    layer.leaders.switch_leader(key, C, "manual")
    view = layer.reports.views()[key]
    assert (view.leader, view.term) == (C, 2)
    spec = next(sp for s, req in layer.agents.calls for sp in req.upsert if s == C and sp.term == 2)
    assert (spec.catch_up_index, spec.catch_up_from) == (250, old)
    assert layer.agents.replicas[B][key].leader == C  # the others follow
    e = layer.events.events[-1]
    assert (e.event, dict(e.values)["reason"], dict(e.values)["from"]) == (
        "switch_leader",
        "manual",
        old,
    )
    layer.leaders.switch_leader(key, C, "again")  # already the leader: nothing to do
    assert layer.reports.views()[key].term == 2


def test_switch_leader_refusals(layer: Layer) -> None:
    tid = make_tenant(layer, ls_count=1)
    other = A if _z1_member(layer, tid) == D else D
    for key, server, code in (
        ((tid, 9999), B, "OB_ENTRY_NOT_EXIST"),
        ((tid, 1001), other, "OB_ENTRY_NOT_EXIST"),
    ):
        with pytest.raises(ObError) as e:
            layer.leaders.switch_leader(key, server, "manual")
        assert e.value.name == code
    layer.servers.get(B).stop_time = 1
    with pytest.raises(ObError) as e:
        layer.leaders.switch_leader((tid, 1001), B, "manual")
    assert e.value.name == "OB_OP_NOT_ALLOW"


def test_coordinate_replaces_a_leader_that_cannot_lead(layer: Layer) -> None:
    tid = make_tenant(layer, ls_count=1, primary="z1;z2")
    key = (tid, 1001)
    old = _z1_member(layer, tid)
    layer.servers.get(old).stop_time = 1
    plan = layer.layout.topology().plans[key]
    assert layer.leaders.coordinate(plan, layer.reports.views()[key]) == 1
    assert layer.reports.views()[key].leader == B  # next primary-zone priority
    reason = dict(layer.events.events[-1].values)["reason"]
    assert reason == f"leader {old} cannot lead"
    # started again: the leader goes back to the first priority zone
    layer.servers.get(old).stop_time = 0
    assert layer.leaders.coordinate(plan, layer.reports.views()[key]) == 1
    assert layer.reports.views()[key].leader == old
    assert dict(layer.events.events[-1].values)["reason"] == "primary zone z1"


def test_no_leader_is_elected_without_a_healthy_majority(layer: Layer) -> None:
    tid = make_tenant(layer, ls_count=1)
    key = (tid, 1001)
    for s in (B, C):
        layer.servers.get(s).hb_status = HeartbeatStatus.LEASE_EXPIRED
    layer.servers.get(_z1_member(layer, tid)).stop_time = 1
    plan = layer.layout.topology().plans[key]
    assert layer.leaders.coordinate(plan, layer.reports.views()[key]) == 0


def test_move_leaders_off_waits_for_leader_cnt_zero(layer: Layer) -> None:
    tid = make_tenant(layer, ls_count=2)
    old = _z1_member(layer, tid)
    assert layer.servers.get(old).leader_cnt == 2
    layer.servers.get(old).stop_time = 1
    layer.leaders.move_leaders_off([old])
    assert layer.servers.get(old).leader_cnt == 0
    assert all(v.leader != old for v in layer.reports.views().values())
    assert layer.heartbeats.asked and layer.heartbeats.asked[0] == [old]


def test_move_leaders_off_times_out_naming_the_log_streams(layer: Layer) -> None:
    tid = make_tenant(layer, ls_count=1)
    old = _z1_member(layer, tid)
    layer.servers.get(old).stop_time = 1
    # nobody answers: the old leader keeps reporting leadership, and no one can take over
    layer.agents.down = {old, B, C}
    t0 = layer.clock.now_us()
    with pytest.raises(ObError) as e:
        layer.leaders.move_leaders_off([old])
    assert e.value.name == "OB_WAIT_LEADER_SWITCH_TIMEOUT" and f"{tid}.1001" in str(e.value)
    assert layer.clock.now_us() - t0 >= layer.settings.leader_switch_timeout
    assert layer.servers.get(old).leader_cnt == 1
    heartbeat(layer, old)
    assert layer.servers.get(old).leader_cnt == 1
