"""Maintenance windows on one in-process RS with a fake clock, both
databases: the window's end exactly (both sides) for a server that heartbeats (started) and
one that does not (stays stopped, event ``agent_down``, the permanent-offline clock from the
end), STOP ZONE ... FOR MAINTENANCE starting the zone at the end, START SERVER ending a
window early, and a new leader reading the window from the table."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from obcommon.errors import ObError
from rootservice.app import RootService
from rootservice.servers.status import HeartbeatStatus
from tests.support.harness import A, B, C, D, events, hb, heartbeat_all, make_rs, server_row
from tests.support.tenants import sql

S = 1_000_000
WINDOW = 60 * S


@pytest.fixture
def rs(db_url: str, tmp_path: Path) -> Iterator[RootService]:
    r = make_rs(db_url, tmp_path, lease_time="10s", server_permanent_offline_time="30s")
    heartbeat_all(r)
    yield r
    r.shutdown()


def keep_alive(rs: RootService, until_us: int, *servers: str) -> None:
    """Advance the clock to ``until_us`` (wall), ``servers`` heartbeating every 5 s and the
    lease checker ticking."""
    while rs.clock.now_us() < until_us:
        rs.clock.advance(min(5 * S, until_us - rs.clock.now_us()))
        for s in servers:
            rs.heartbeats.receive_hb(hb(s, rs.whitelist.get(s).zone))
        rs.lease_checker.run_once()


def test_the_end_starts_a_server_that_heartbeats(rs: RootService) -> None:
    rs.server_admin.stop_servers([A], None, "STOP", maintenance_us=WINDOW)
    end = rs.whitelist.get(A).maintenance_end_time
    assert end == rs.clock.now_us() + WINDOW
    rs.persist.run_once()
    assert server_row(rs, A)["maintenance_end_time"] == end
    keep_alive(rs, end - 1, A, B, C, D)
    assert rs.maintenance.run_once() == 0 and rs.whitelist.get(A).is_stopped()
    keep_alive(rs, end, A, B, C, D)
    assert rs.maintenance.run_once() == 1
    s = rs.whitelist.get(A)
    assert not s.is_stopped() and s.maintenance_end_time == 0
    assert [e["value3"] for e in events(rs, "maintenance_end")] == ["started"]


def test_a_server_down_past_its_window_counts_offline_from_the_end(rs: RootService) -> None:
    rs.server_admin.stop_servers([A], None, "STOP", maintenance_us=WINDOW)
    end = rs.whitelist.get(A).maintenance_end_time
    # A stops heartbeating at once: INACTIVE after its lease, never permanently offline
    # inside the window although it is down twice server_permanent_offline_time.
    keep_alive(rs, end, B, C, D)
    assert rs.whitelist.get(A).hb_status is HeartbeatStatus.LEASE_EXPIRED
    assert rs.maintenance.run_once() == 1
    s = rs.whitelist.get(A)
    assert s.is_stopped() and s.maintenance_end_time == 0
    [ev] = events(rs, "maintenance_end")
    assert ev["value3"].startswith("agent_down")
    # The clock from the end: 30 s later exactly, not before.
    keep_alive(rs, end + 30 * S - 1, B, C, D)
    assert rs.whitelist.get(A).hb_status is HeartbeatStatus.LEASE_EXPIRED
    keep_alive(rs, end + 30 * S, B, C, D)
    assert rs.whitelist.get(A).hb_status is HeartbeatStatus.PERMANENT_OFFLINE


def test_start_server_ends_a_window_early(rs: RootService) -> None:
    rs.server_admin.stop_servers([A], None, "STOP", maintenance_us=WINDOW)
    rs.server_admin.start_servers([A], None)
    s = rs.whitelist.get(A)
    assert not s.is_stopped() and s.maintenance_end_time == 0
    assert rs.maintenance.run_once() == 0


def test_stop_zone_for_maintenance_starts_the_zone_at_the_end(rs: RootService) -> None:
    rs.server_admin.stop_zone("z2", maintenance_us=WINDOW)
    assert not rs.zones.is_active("z2")
    end = rs.whitelist.get(B).maintenance_end_time
    assert end > 0
    keep_alive(rs, end - 1, A, B, C, D)
    rs.maintenance.run_once()
    assert not rs.zones.is_active("z2")
    keep_alive(rs, end, A, B, C, D)
    rs.maintenance.run_once()
    assert rs.zones.is_active("z2") and rs.whitelist.get(B).maintenance_end_time == 0


def test_a_new_leader_reads_the_window_from_the_table(rs: RootService) -> None:
    rs.server_admin.stop_servers([A], None, "STOP", maintenance_us=WINDOW)
    end = rs.whitelist.get(A).maintenance_end_time
    rs.persist.run_once()
    rs.whitelist.clear()
    rs.server_loader.load(take_office=False)
    s = rs.whitelist.get(A)
    assert s.maintenance_end_time == end and s.maintenance_floor_mono == (
        rs.clock.monotonic_us() + WINDOW
    )


def test_no_maintenance_state_without_a_valid_end(rs: RootService) -> None:
    with pytest.raises(ObError) as e:
        sql(rs, f"ALTER SYSTEM STOP SERVER '{A}' FOR MAINTENANCE 8d")
    assert e.value.name == "OB_INVALID_ARGUMENT"
    with pytest.raises(ObError) as e:
        sql(rs, f"ALTER SYSTEM ISOLATE SERVER '{A}' FOR MAINTENANCE 2h")
    assert e.value.name == "OB_NOT_SUPPORTED"
    assert rs.whitelist.get(A).maintenance_end_time == 0 and not rs.whitelist.get(A).is_stopped()
