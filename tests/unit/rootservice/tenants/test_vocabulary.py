"""The tenant layer's vocabulary and the CREATE RESOURCE UNIT options, pure
(docs/design/statements.md; rootservice.tenants.vocabulary and unit_options)."""

from __future__ import annotations

import pytest

from obcommon.errors import ObError
from rootservice.db.unit_repo import ResourcePool
from rootservice.tenants.unit_options import unit_resources
from rootservice.tenants.vocabulary import (
    DEFAULT_MAX_IOPS,
    affinity_of,
    check_name,
    parse_primary_zone,
    zone_priority,
)

GIB = 1 << 30
ZONES = ("z1", "z2", "z3")


def test_names_are_checked_and_lower_cased() -> None:
    assert check_name("tenant", "My_T1") == "my_t1"
    for bad in ("1abc", "a-b", "", "x" * 129):
        with pytest.raises(ObError) as e:
            check_name("tenant", bad)
        assert e.value.name == "OB_INVALID_ARGUMENT"


def test_primary_zone_grammar() -> None:
    assert parse_primary_zone("z1;z2,z3", ZONES) == [["z1"], ["z2", "z3"]]
    assert parse_primary_zone("random", ZONES) == [list(ZONES)]
    for bad, code in (
        ("z9", "OB_PRIMARY_ZONE_NOT_IN_ZONE_LIST"),
        ("z1;;z2", "OB_INVALID_ARGUMENT"),
        ("z1;z1", "OB_INVALID_ARGUMENT"),
    ):
        with pytest.raises(ObError) as e:
            parse_primary_zone(bad, ZONES)
        assert e.value.name == code, bad


def test_zone_priority_ranks_zones_outside_last_and_tolerates_garbage() -> None:
    assert zone_priority("z2", ZONES) == {"z1": 1, "z2": 0, "z3": 1}
    assert zone_priority("z1;z3", ZONES) == {"z1": 0, "z2": 2, "z3": 1}
    assert zone_priority("nonsense", ZONES) == {"z1": 0, "z2": 0, "z3": 0}


def test_affinity_is_the_tenant_once_granted() -> None:
    assert affinity_of(ResourcePool(7, "p", 1, 1, ZONES)) == ("pool", 7)
    assert affinity_of(ResourcePool(7, "p", 1, 1, ZONES, tenant_id=1002)) == ("tenant", 1002)


def test_unit_options_defaults_and_bounds() -> None:
    r = unit_resources((("max_cpu", 2), ("memory_size", "4G")))
    assert (r.max_cpu, r.min_cpu, r.memory_size, r.log_disk_size) == (2.0, 2.0, 4 * GIB, 12 * GIB)
    assert (r.max_iops, r.min_iops, r.iops_weight) == (DEFAULT_MAX_IOPS, DEFAULT_MAX_IOPS, 0)
    for options, code in (
        ((("max_cpu", 2),), "OB_INVALID_ARGUMENT"),
        ((("max_cpu", 2), ("max_cpu", 3), ("memory_size", "4G")), "OB_INVALID_ARGUMENT"),
        ((("max_cpu", 0.5), ("memory_size", "4G")), "OB_INVALID_RESOURCE_UNIT"),
        (
            (("max_cpu", 1), ("memory_size", "1G"), ("log_disk_size", "1G")),
            "OB_INVALID_RESOURCE_UNIT",
        ),
        ((("max_cpu", 1), ("min_cpu", 2), ("memory_size", "4G")), "OB_INVALID_ARGUMENT"),
        ((("max_cpu", 1), ("memory_size", "4X")), "OB_INVALID_ARGUMENT"),
        ((("max_cpu", True), ("memory_size", "4G")), "OB_INVALID_ARGUMENT"),
    ):
        with pytest.raises(ObError) as e:
            unit_resources(options)
        assert e.value.name == code, options
