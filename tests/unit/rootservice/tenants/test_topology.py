"""The desired layout and its cache (docs/design/servers.md and docs/design/statements.md; rootservice.tenants.topology),
built without a RootService."""

from __future__ import annotations

from rootservice.db.ls_repo import LsStatus
from rootservice.db.tenant_repo import Tenant
from rootservice.db.unit_repo import ResourcePool, Unit
from rootservice.tenants.topology import build_topology
from tests.support.tenant_parts import Layer, make_tenant


def test_each_ls_takes_the_units_of_its_unit_group_in_every_pool() -> None:
    tenants = {1002: Tenant(1002, "t1", ("z1", "z2"), "z2")}
    pools = {
        1: ResourcePool(1, "p1", 2, 1, ("z1",), tenant_id=1002),
        2: ResourcePool(2, "p2", 2, 1, ("z2",), tenant_id=1002),
        3: ResourcePool(3, "free", 1, 1, ("z1",)),
    }
    units = [
        Unit(11, 1, 100, "z1", "10.0.0.1", 1),
        Unit(12, 1, 101, "z1", "10.0.0.2", 1),
        Unit(21, 2, 200, "z2", "10.0.0.3", 1),
        Unit(22, 2, 201, "z2", "10.0.0.4", 1),
        Unit(31, 3, 300, "z1", "10.0.0.5", 1),
    ]
    rows = [
        LsStatus(1002, 1001, unit_group_id=100, ls_group_id=1001, primary_zone="z2"),
        LsStatus(1002, 1002, unit_group_id=101, ls_group_id=1002, primary_zone="z2"),
        LsStatus(1002, 1003, unit_group_id=999, ls_group_id=1003, primary_zone="z2"),
        LsStatus(1003, 1001, unit_group_id=100, ls_group_id=1001, primary_zone="z1"),
    ]
    topo = build_topology(5, tenants, rows, units, pools)
    assert topo.version == 5
    assert sorted(topo.plans) == [(1002, 1001), (1002, 1002)]  # unknown group / tenant: none
    p1, p2 = topo.plans[(1002, 1001)], topo.plans[(1002, 1002)]
    assert p1.members == {"10.0.0.1:1": ("z1", 11), "10.0.0.3:1": ("z2", 21)}
    assert p2.members == {"10.0.0.2:1": ("z1", 12), "10.0.0.4:1": ("z2", 22)}
    assert p1.zone_priority == {"z1": 1, "z2": 0} and p1.primary_zone == "z2"


def test_the_cache_is_re_read_only_when_the_version_moves(layer: Layer) -> None:
    tid = make_tenant(layer, ls_count=2)
    first = layer.layout.topology()
    assert sorted(first.plans) == [(tid, 1001), (tid, 1002)]
    assert layer.layout.topology() is first
    assert layer.layout.topology(force=True) is not first
    cached = layer.layout.topology()
    layer.version.changed()
    assert layer.layout.topology() is not cached
    layer.layout.clear()
    assert layer.layout.topology().version == layer.version.version
