"""The lease checker (docs/design/leases.md): inclusive boundaries and the take-office grace. Unit
tests on an in-process RS with a FakeClock, on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from rootservice.app import RootService
from rootservice.servers.lease_checker import LeaseChecker
from rootservice.servers.status import HeartbeatStatus, ServerStatus
from tests.support.harness import (
    LEASE,
    OFFLINE,
    SEEDED,
    ZA,
    A,
    events,
    flush,
    hb,
    hb_status,
    make_rs,
    server_row,
)
from tests.support.server_parts import make_parts, seed


def test_lease_expiry_is_inclusive_and_persisted(rs: RootService) -> None:
    rs.clock.advance(LEASE)  # past the take-office grace
    rs.heartbeats.receive_hb(hb(A, ZA))
    last = rs.clock.now_us()
    rs.clock.advance(LEASE - 1)
    assert rs.lease_checker.run_once() == 0
    assert hb_status(rs, A) is HeartbeatStatus.ALIVE
    rs.clock.advance(1)  # now - last_hb_time == lease_time: expired
    assert rs.lease_checker.run_once() == 1
    s = rs.whitelist.get(A)
    assert s.hb_status is HeartbeatStatus.LEASE_EXPIRED
    assert s.last_offline_time == last + LEASE and s.start_service_time == 0
    flush(rs)
    row = server_row(rs, A)
    assert (
        row["status"] == "INACTIVE"
        and row["last_offline_time"] == last + LEASE
        and row["start_service_time"] == 0
    )
    assert [e["value1"] for e in events(rs, "lease_expire")] == [A]


def test_permanent_offline_is_inclusive_and_heartbeat_revives(rs: RootService) -> None:
    rs.clock.advance(LEASE)
    rs.heartbeats.receive_hb(hb(A, ZA))
    last = rs.clock.now_us()
    rs.clock.advance(LEASE)
    rs.lease_checker.run_once()
    rs.clock.advance(last + OFFLINE - 1 - rs.clock.now_us())
    rs.lease_checker.run_once()
    assert hb_status(rs, A) is HeartbeatStatus.LEASE_EXPIRED
    rs.clock.advance(last + OFFLINE - rs.clock.now_us())
    assert rs.lease_checker.run_once() >= 1
    assert hb_status(rs, A) is HeartbeatStatus.PERMANENT_OFFLINE
    assert rs.whitelist.get(A).display_status().value == "INACTIVE"
    rs.heartbeats.receive_hb(hb(A, ZA))
    assert hb_status(rs, A) is HeartbeatStatus.ALIVE
    flush(rs)
    assert [e["value1"] for e in events(rs, "permanent_offline")].count(A) == 1
    assert server_row(rs, A)["status"] == "ACTIVE"


def test_take_office_grace_delays_every_expiry(db_url: str, tmp_path: Path) -> None:
    rs = make_rs(db_url, tmp_path)
    try:
        # Loaded servers' offline clocks started at the load; one lease_time of grace follows.
        t0 = rs.clock.now_us()
        rs.heartbeats.receive_hb(hb(A, ZA))
        rs.clock.advance(t0 + LEASE - 1 - rs.clock.now_us())
        assert rs.lease_checker.run_once() == 0
        rs.clock.advance(t0 + LEASE - rs.clock.now_us())
        assert rs.lease_checker.run_once() == 1
        assert hb_status(rs, A) is HeartbeatStatus.LEASE_EXPIRED
    finally:
        rs.shutdown()


def test_lease_time_change_applies_to_the_checker(rs: RootService) -> None:
    rs.clock.advance(LEASE)
    rs.heartbeats.receive_hb(hb(A, ZA))
    rs.parameters.set((("lease_time", "3s"),))
    rs.clock.advance(3_000_000 - 1)
    assert rs.lease_checker.run_once() == 0
    rs.clock.advance(1)
    assert rs.lease_checker.run_once() == 1


# --- built from its collaborators, without RootService ------------------------------------


def test_checker_alone_expires_then_declares_offline_and_wakes(
    engine: sa.Engine, tmp_path: Path
) -> None:
    p = make_parts(engine, tmp_path)
    seed(p)
    checker = LeaseChecker(
        p.whitelist, p.persist, p.grace, p.term, p.clock, p.settings, p.metrics, p.wake
    )
    assert checker.name == "heartbeat_checker"
    now = p.clock.now_us()

    def alive(s: ServerStatus) -> None:
        s.hb_status = HeartbeatStatus.ALIVE
        s.last_hb_time = now
        s.last_hb_mono_us = p.clock.monotonic_us()
        s.last_offline_time = 0

    p.whitelist.with_server(A, alive)
    with p.whitelist.lock:
        p.whitelist.set_alive(p.whitelist.records[A])
    p.clock.advance(LEASE - 1)
    assert checker.run_once() == 0
    p.clock.advance(1)
    assert checker.run_once() == 1
    assert p.whitelist.get(A).hb_status is HeartbeatStatus.LEASE_EXPIRED
    assert A in p.persist.pending_keys()
    p.clock.advance(p.settings.server_permanent_offline_time - LEASE)
    # The seeded servers (offline since the seed) turn permanently offline at the same time.
    assert checker.run_once() == len(SEEDED)
    assert p.whitelist.get(A).hb_status is HeartbeatStatus.PERMANENT_OFFLINE
    assert {"balancer", "lost_replica_checker"} <= set(p.woken)
    p.term.close_service()
    assert checker.run_once() == 0


def test_checker_alone_respects_the_grace_and_writes_candidates_at_its_end(
    engine: sa.Engine, tmp_path: Path
) -> None:
    p = make_parts(engine, tmp_path)
    seed(p)
    checker = LeaseChecker(
        p.whitelist, p.persist, p.grace, p.term, p.clock, p.settings, p.metrics, p.wake
    )
    p.persist.run_once()
    p.grace.begin(p.clock.monotonic_us() + LEASE, {A, "10.9.9.9:1"})
    assert checker.run_once() == 0 and p.persist.depth() == 0
    p.clock.advance(LEASE)
    assert checker.run_once() == 1 and p.grace.candidates == set()
    assert p.persist.pending_keys() == {A}


# --- steps of the RS's wall clock ---------------------------------------

HOUR = 3600 * 1_000_000


def test_a_forward_wall_jump_expires_no_live_server(rs: RootService) -> None:
    """+1 h on the wall clock alone: no lease expires, nobody turns permanently offline
    (before the fix every live server did, in one tick); the lease still runs out after
    lease_time of monotonic time, on both sides of the boundary."""
    rs.clock.advance(LEASE)  # past the take-office grace
    rs.heartbeats.receive_hb(hb(A, ZA))
    rs.clock.jump(HOUR)
    assert rs.lease_checker.run_once() == 0
    assert hb_status(rs, A) is HeartbeatStatus.ALIVE
    rs.clock.advance(LEASE - 1)
    assert rs.lease_checker.run_once() == 0
    assert hb_status(rs, A) is HeartbeatStatus.ALIVE
    expired_at = rs.clock.advance(1)
    assert rs.lease_checker.run_once() == 1
    assert hb_status(rs, A) is HeartbeatStatus.LEASE_EXPIRED
    # The permanent-offline deadline is monotonic too: another hour of wall step changes
    # nothing, OFFLINE of monotonic time since the heartbeat does.
    rs.clock.jump(HOUR)
    rs.lease_checker.run_once()
    assert hb_status(rs, A) is HeartbeatStatus.LEASE_EXPIRED
    rs.clock.advance(OFFLINE - LEASE - 1)
    rs.lease_checker.run_once()
    assert hb_status(rs, A) is HeartbeatStatus.LEASE_EXPIRED
    rs.clock.advance(1)
    rs.lease_checker.run_once()
    assert hb_status(rs, A) is HeartbeatStatus.PERMANENT_OFFLINE
    flush(rs)
    # The events keep wall time (dashboards read it): the stepped clock's.
    (ev,) = [e for e in events(rs, "lease_expire") if e["value1"] == A]
    assert ev["event_time"] == expired_at


def test_a_backward_wall_jump_keeps_no_dead_server_alive(rs: RootService) -> None:
    """-1 h on the wall clock alone: a silent server still expires after lease_time of
    monotonic time (before the fix it would have stayed ACTIVE for an extra hour), a live
    one that keeps heartbeating never expires."""
    rs.clock.advance(LEASE)
    rs.heartbeats.receive_hb(hb(A, ZA))
    rs.clock.jump(-HOUR)
    rs.clock.advance(LEASE - 1)
    assert rs.lease_checker.run_once() == 0
    assert hb_status(rs, A) is HeartbeatStatus.ALIVE
    rs.clock.advance(1)
    assert rs.lease_checker.run_once() == 1
    assert hb_status(rs, A) is HeartbeatStatus.LEASE_EXPIRED
    rs.clock.advance(OFFLINE - LEASE)
    rs.lease_checker.run_once()
    assert hb_status(rs, A) is HeartbeatStatus.PERMANENT_OFFLINE
    # A server heartbeating across a backward step stays alive.
    b = SEEDED[1][0]
    zb = SEEDED[1][1]
    rs.heartbeats.receive_hb(hb(b, zb))
    for _ in range(3):
        rs.clock.advance(LEASE // 2)
        rs.clock.jump(-HOUR)
        rs.heartbeats.receive_hb(hb(b, zb))
        assert rs.lease_checker.run_once() == 0
    assert hb_status(rs, b) is HeartbeatStatus.ALIVE


@pytest.mark.parametrize("jump", [HOUR, -HOUR], ids=["forward", "backward"])
def test_the_take_office_grace_is_monotonic(rs: RootService, jump: int) -> None:
    """A step right after taking office neither ends the grace early (forward) nor
    stretches it (backward)."""
    rs.heartbeats.receive_hb(hb(A, ZA))
    rs.clock.jump(jump)
    rs.clock.advance(LEASE - 1)
    assert rs.lease_checker.run_once() == 0
    rs.clock.advance(1)
    assert rs.lease_checker.run_once() == 1
    assert hb_status(rs, A) is HeartbeatStatus.LEASE_EXPIRED


def test_a_lease_expiring_before_the_next_tick_is_offered_as_an_early_deadline(
    rs: RootService,
) -> None:
    """The checker hands the timers the next expiry when it comes before its next tick
    (they wake it then), and nothing when the regular tick is soon enough. Both sides:
    exactly one tick away, and one microsecond less."""
    tick = rs.settings.heartbeat_check_interval
    rs.clock.advance(LEASE)
    rs.heartbeats.receive_hb(hb(A, ZA))
    last = rs.clock.monotonic_us()
    rs.clock.advance(LEASE - tick)
    assert rs.lease_checker.run_once() == 0
    assert rs.lease_checker.early_due_mono_us() is None
    rs.clock.advance(1)
    assert rs.lease_checker.run_once() == 0
    assert rs.lease_checker.early_due_mono_us() == last + LEASE
    rs.clock.advance(tick - 1)  # at the deadline
    assert rs.lease_checker.run_once() == 1
    assert rs.lease_checker.early_due_mono_us() is None
