"""The whitelist's read API and bookkeeping (rootservice.servers.whitelist), built on its own."""

from __future__ import annotations

import pytest

from obcommon.errors import ObError
from rootservice.servers.status import CHECKED_COLUMNS, AdminStatus, HeartbeatStatus, ServerStatus
from rootservice.servers.whitelist import Whitelist


def server(i: int, zone: str = "z1", **fields: object) -> ServerStatus:
    s = ServerStatus(id=i, zone=zone, ip="10.0.0.1", port=3000 + i, sql_port=4000 + i)
    for k, v in fields.items():
        setattr(s, k, v)
    return s


def test_reads_are_copies_and_ordered_by_id() -> None:
    w = Whitelist()
    w.add([server(2), server(1, "z2")], offline=100)
    a = w.get("10.0.0.1:3001")
    assert a is not None and a.zone == "z2"
    a.zone = "changed"
    a.resource_info.cpu_total = 99
    again = w.get("10.0.0.1:3001")
    assert again is not None and again.zone == "z2" and again.resource_info.cpu_total == 0
    assert [s.id for s in w.snapshot()] == [1, 2]
    assert w.get("10.0.0.1:9") is None
    # Heartbeat status is LEASE_EXPIRED until the first heartbeat: counted "not alive".
    assert w.server_count("z2") == (0, 1) and w.server_count("z9") == (0, 0)
    assert w.stopped_server_zones() == []
    w.with_server("10.0.0.1:3001", lambda s: setattr(s, "stop_time", 5))
    assert w.stopped_server_zones() == ["z2"]


def test_with_server_changes_the_live_record_and_ignores_unknown_keys() -> None:
    w = Whitelist()
    w.add([server(1)], offline=100)
    w.with_server("10.0.0.1:3001", lambda s: setattr(s, "leader_cnt", 3))
    w.with_server("10.0.0.1:9", lambda s: setattr(s, "leader_cnt", 5))
    got = w.get("10.0.0.1:3001")
    assert got is not None and got.leader_cnt == 3


def test_counts_deleting_and_servers_to_empty() -> None:
    w = Whitelist()
    w.add([server(1), server(2), server(3)], offline=100)
    assert w.counts() == {"alive": 0, "lease_expired": 3, "permanent_offline": 0, "servers": 3}
    assert not w.has_servers_to_empty() and w.deleting_servers() == []
    w.with_server("10.0.0.1:3002", lambda s: setattr(s, "admin_status", AdminStatus.DELETING))
    assert [s.key for s in w.deleting_servers()] == ["10.0.0.1:3002"]
    assert w.has_servers_to_empty()
    w.with_server("10.0.0.1:3002", lambda s: setattr(s, "admin_status", AdminStatus.NORMAL))
    w.with_server(
        "10.0.0.1:3003", lambda s: setattr(s, "hb_status", HeartbeatStatus.PERMANENT_OFFLINE)
    )
    assert w.has_servers_to_empty()
    w.with_server("10.0.0.1:3001", lambda s: setattr(s, "hb_status", HeartbeatStatus.ALIVE))
    assert w.not_alive_servers() == ["10.0.0.1:3002", "10.0.0.1:3003"]


def test_alive_order_offline_heap_and_removal() -> None:
    w = Whitelist()
    a, b = server(1, last_hb_mono_us=10), server(2, last_hb_mono_us=20)
    w.add([a, b], offline=100)
    assert sorted(w.offline_heap) == [(110, a.key), (120, b.key)]
    with w.lock:
        w.set_alive(b)
        w.set_alive(a)
    assert list(w.alive) == [b.key, a.key]
    w.remove(b.key)
    assert list(w.alive) == [a.key] and w.get(b.key) is None
    w.rebuild_offline_heap(offline=5, mono=12)
    assert w.offline_heap == [(15, a.key)]
    # Past the deadline already: due now (the checker judges the total when it pops it).
    w.rebuild_offline_heap(offline=5, mono=40)
    assert w.offline_heap == [(40, a.key)]
    w.clear()
    assert w.records == {} and not w.alive and w.offline_heap == []


def test_rows_are_read_in_chunks_and_skip_unknown_keys() -> None:
    w = Whitelist()
    n = Whitelist.CHUNK + 3
    w.install(server(i) for i in range(1, n + 1))
    keys = [f"10.0.0.1:{3000 + i}" for i in range(1, n + 1)] + ["10.0.0.1:1"]
    rows = w.rows_for(keys)
    assert len(rows) == n and rows[0]["svr_port"] == 3001
    assert Whitelist.resolve_key("10.0.0.1:3001") == "10.0.0.1:3001"
    with pytest.raises(ObError, match="OB_INVALID_ARGUMENT"):
        Whitelist.resolve_key("nohost")


def test_replace_all_keeps_the_same_containers() -> None:
    w = Whitelist()
    records, alive = w.records, w.alive
    fresh = {
        s.key: s
        for s in (
            server(1, hb_status=HeartbeatStatus.ALIVE, last_hb_mono_us=30),
            server(2, hb_status=HeartbeatStatus.ALIVE, last_hb_mono_us=10),
            server(3),
        )
    }
    with w.lock:
        w.replace_all(fresh)
    assert w.records is records and w.alive is alive
    assert list(w.alive) == ["10.0.0.1:3002", "10.0.0.1:3001"]
    w.set_force_stop_hb("10.0.0.1:3003", True)
    got = w.get("10.0.0.1:3003")
    assert got is not None and got.force_stop_hb


@pytest.mark.parametrize("admin", list(AdminStatus))
@pytest.mark.parametrize("hb", list(HeartbeatStatus))
def test_checked_values_are_the_rows_checked_columns(
    admin: AdminStatus, hb: HeartbeatStatus
) -> None:
    """What check_all_server compares: to_row's CHECKED_COLUMNS, in that order, for every
    status (each other column given a distinct value so that a swap shows)."""
    s = ServerStatus(
        id=7,
        zone="z9",
        ip="10.0.0.9",
        port=3009,
        sql_port=4009,
        build_version="b1",
        admin_status=admin,
        hb_status=hb,
        with_rootserver=True,
        block_migrate_in_time=11,
        stop_time=12,
        start_service_time=13,
        with_partition=1,
        last_offline_time=14,
        suspect_end_time=15,
        maintenance_end_time=16,
        lagging_time=17,
    )
    row = s.to_row()
    assert s.checked_values() == tuple(row[c] for c in CHECKED_COLUMNS)
    wl = Whitelist()
    wl.add([s], offline=3_600_000_000)
    assert wl.checked_chunked([s.key, "10.0.0.1:1"]) == {s.key: s.checked_values()}
