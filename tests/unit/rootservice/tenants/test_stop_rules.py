"""ISOLATE ZONE's tenant rule (OceanBase's check_can_stop for a zone), pure: each condition on
both sides."""

from __future__ import annotations

from rootservice.tenants.stop_rules import TenantZones, primary_region_stopped, tenants_on

# z1, z2 in region r1; z3 in r2; every zone ReadWrite unless a test says otherwise.
REGIONS = {"z1": "r1", "z2": "r1", "z3": "r2"}
RW = {"z1", "z2", "z3"}
T = {1: TenantZones("t1", ("z1", "z2", "z3"), "z1")}


def blocks(
    zone: str,
    stopped_zones: set[str],
    *,
    zone_tenants: set[int] | None = None,
    stopped_tenants: set[int] | None = None,
    tenants: dict[int, TenantZones] = T,
    rw: set[str] = RW,
) -> str | None:
    return primary_region_stopped(
        zone,
        {1} if zone_tenants is None else zone_tenants,
        {1} if stopped_tenants is None else stopped_tenants,
        stopped_zones,
        tenants,
        REGIONS,
        rw,
    )


def test_nothing_stopped_never_blocks_even_the_whole_primary_region() -> None:
    assert blocks("z1", {"z2"}, stopped_tenants=set()) is None


def test_a_tenant_only_on_one_side_is_not_looked_at() -> None:
    assert blocks("z1", {"z2"}, zone_tenants={2}) is None
    assert blocks("z1", {"z2"}, stopped_tenants={2}) is None
    assert blocks("z1", {"z2"}) == "t1"


def test_the_primary_region_with_one_zone_left_passes_and_with_none_blocks() -> None:
    # Primary zone z1 -> region r1 = {z1, z2}.
    assert blocks("z1", set()) is None  # z2 left (the zone itself is added to the stopped)
    assert blocks("z1", {"z2"}) == "t1"
    assert blocks("z3", {"z2"}) is None  # z1 left
    assert blocks("z3", {"z1"}) is None  # z2 left


def test_only_read_write_zones_of_the_region_count() -> None:
    assert blocks("z1", set(), rw={"z1", "z3"}) == "t1"
    assert blocks("z1", set(), rw=RW) is None


def test_every_pool_zone_stopped_blocks_even_a_random_primary_zone() -> None:
    random = {1: TenantZones("t1", ("z1", "z2"), "RANDOM")}
    assert blocks("z1", {"z2"}, tenants=random) == "t1"
    wide = {1: TenantZones("t1", ("z1", "z2", "z3"), "RANDOM")}
    assert blocks("z1", {"z2"}, tenants=wide) is None


def test_the_first_priority_level_decides_the_region() -> None:
    # z3 first: region r2 = {z3}; isolating z3 with anything stopped blocks.
    t = {1: TenantZones("t1", ("z1", "z2", "z3"), "z3;z1,z2")}
    assert blocks("z3", {"z2"}, tenants=t) == "t1"
    assert blocks("z1", {"z2"}, tenants=t) is None
    # Two zones of one level name both regions.
    t2 = {1: TenantZones("t1", ("z1", "z2", "z3"), "z1,z3")}
    assert blocks("z1", {"z2"}, tenants=t2) is None  # z3 of r2 left
    assert blocks("z1", {"z2", "z3"}, tenants=t2) == "t1"


def test_tenants_on_gathers_the_tenants_of_the_servers() -> None:
    members = {"a": {1}, "b": {2, 3}, "c": {3}}
    assert tenants_on(["a", "c"], members) == {1, 3}
    assert tenants_on([], members) == set()
    assert tenants_on(["x"], members) == set()
