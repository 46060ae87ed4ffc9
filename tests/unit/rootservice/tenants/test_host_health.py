"""Which servers may lead (docs/design/statements.md; rootservice.tenants.host_health)."""

from __future__ import annotations

from rootservice.db.zone_repo import ZoneInfo
from rootservice.servers.status import HeartbeatStatus
from rootservice.tenants.topology import LsPlan
from tests.support.tenant_parts import A, B, C, D, Layer
from tests.support.tenants import replica


def test_a_leader_is_alive_started_not_stopped_in_an_active_zone(layer: Layer) -> None:
    h = layer.health
    assert h.can_lead(A) and h.is_alive(A)
    assert not h.can_lead(A, {A})
    layer.servers.get(A).stop_time = 1
    assert not h.can_lead(A)
    layer.servers.get(B).hb_status = HeartbeatStatus.LEASE_EXPIRED
    assert not h.can_lead(B) and not h.is_alive(B)
    layer.servers.get(C).start_service_time = 0
    assert not h.can_lead(C)
    layer.zones.by_name["z1"] = ZoneInfo("z1", "INACTIVE", "r1", "")
    assert not h.can_lead(D)
    assert not h.can_lead("10.9.9.9:1")


def test_healthy_members_and_zones(layer: Layer) -> None:
    key = (1002, 1001)
    h = layer.health
    assert h.healthy_member(A, replica(key, A, [A], me=A), set())
    assert not h.healthy_member(A, replica(key, A, [A], me=A, in_service=False), set())
    assert not h.healthy_member(A, None, set())
    plan = LsPlan(key, {"10.9.9.9:1": ("z7", 1)}, {}, "z7")
    assert h.zone_of(plan, B) == "z2"
    assert h.zone_of(plan, "10.9.9.9:1") == "z7" and h.zone_of(plan, "x:1") == ""
