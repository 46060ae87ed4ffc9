"""Unit placement (rootservice.tenants.placement): capacity, anti-affinity, spreading, failures."""

from __future__ import annotations

from rootservice.tenants.placement import (
    GIB,
    Demand,
    ServerRoom,
    UnitRequest,
    format_bytes,
    place_units,
)

D = Demand(min_cpu=1.0, max_cpu=2.0, memory=4 * GIB, log_disk=12 * GIB)


def room(key: str, zone: str = "z1", **kw: object) -> ServerRoom:
    base: dict[str, object] = {
        "cpu_total": 4.0,
        "mem_total": 16 * GIB,
        "log_disk_total": 64 * GIB,
    }
    base.update(kw)
    return ServerRoom(key=key, zone=zone, **base)  # type: ignore[arg-type]


def test_units_spread_over_the_least_loaded_servers() -> None:
    servers = [room("a:1"), room("b:1"), room("c:1")]
    servers[0].take(Demand(2, 2, 8 * GIB, 8 * GIB), ("tenant", 9))
    reqs = [UnitRequest(i, "z1", D, ("pool", i)) for i in range(3)]
    p = place_units(reqs, servers)
    assert not p.failures
    # b and c are empty (ties by address), then a is still the most loaded, so b/c again.
    assert p.chosen[0] == "b:1"
    assert p.chosen[1] == "c:1"
    assert p.chosen[2] in ("b:1", "c:1")


def test_anti_affinity_never_two_units_of_one_tenant_on_a_server() -> None:
    servers = [room("a:1"), room("b:1")]
    reqs = [UnitRequest(i, "z1", D, ("tenant", 1002)) for i in range(3)]
    p = place_units(reqs, servers)
    assert sorted(p.chosen.values()) == ["a:1", "b:1"]
    assert len(p.failures) == 1
    assert p.failures[0].kind == "server"


def test_other_zones_are_never_used() -> None:
    p = place_units([UnitRequest("u", "z2", D, "x")], [room("a:1", "z1")])
    assert p.failures[0].kind == "server"
    assert "z2" in p.failures[0].reason


def test_unusable_and_excluded_servers_are_skipped() -> None:
    servers = [room("a:1", usable=False), room("b:1"), room("c:1")]
    p = place_units([UnitRequest("u", "z1", D, "x", frozenset({"b:1"}))], servers)
    assert p.chosen == {"u": "c:1"}


def test_memory_short_is_named_with_sizes() -> None:
    servers = [room("a:1", mem_total=6 * GIB), room("b:1", mem_total=3584 << 20)]
    servers[0].take(Demand(0, 0, 3 * GIB, 0), "other")
    p = place_units([UnitRequest("u", "z1", D, "x")], servers)
    f = p.failures[0]
    assert f.kind == "resource"
    # b has 3.5G free (roomier than a's 3G) and is named
    assert f.reason.startswith("memory: needs 4G, free 3.5G on b:1")


def test_each_resource_boundary_fits_exactly_and_fails_one_over() -> None:
    exact = room("a:1", cpu_total=2.0, mem_total=4 * GIB, log_disk_total=12 * GIB)
    assert exact.shortfall(D) is None
    for field_name, value, word in (
        ("mem_total", 4 * GIB - 1, "memory"),
        ("log_disk_total", 12 * GIB - 1, "log disk"),
        ("cpu_total", 1.5, "CPU"),
    ):
        kw = {"cpu_total": 2.0, "mem_total": 4 * GIB, "log_disk_total": 12 * GIB}
        kw[field_name] = value
        r = room("a:1", **kw)
        short = r.shortfall(D)
        assert short is not None and short.startswith(word), (field_name, short)


def test_min_cpu_is_summed_against_the_cpu_count() -> None:
    r = room("a:1", cpu_total=2.0)
    r.take(Demand(1.5, 2, 0, 0), "t1")
    assert r.shortfall(Demand(0.5, 2, 0, 0)) is None
    assert (r.shortfall(Demand(0.6, 2, 0, 0)) or "").startswith("CPU: needs 0.6")


def test_release_gives_room_back() -> None:
    r = room("a:1", mem_total=4 * GIB)
    r.take(D, "t")
    assert r.shortfall(D) is not None
    r.release(D, "t")
    assert r.shortfall(D) is None and "t" not in r.affinity


def test_format_bytes() -> None:
    assert format_bytes(4 * GIB) == "4G"
    assert format_bytes(1536 << 20) == "1.5G"
    assert format_bytes(512 << 20) == "512M"
    assert format_bytes(300) == "300"
