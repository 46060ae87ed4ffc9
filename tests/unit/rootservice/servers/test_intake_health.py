"""The lease allowance for the RS's own intake delay (
rootservice/servers/intake_health.py): each signal on both sides of its boundary, the window,
the cap at lease_time and the log lines. A FakeClock."""

from __future__ import annotations

import logging

import pytest

from obcommon.clock import FakeClock
from rootservice.config import RsSettings
from rootservice.servers.intake_health import (
    LOG_EVERY_US,
    TRANSIT_WINDOW_US,
    IntakeHealth,
)

S = 1_000_000
LEASE = 10 * S
TICK = 100_000


def make(measure_ticks: bool = True) -> tuple[IntakeHealth, FakeClock, None]:
    clock = FakeClock()
    settings = RsSettings(lease_time="10s", heartbeat_interval="2s")
    return IntakeHealth(clock, settings, measure_ticks), clock, None


def test_on_time_ticks_grant_nothing_a_late_tick_grants_its_lateness() -> None:
    h, clock, _ = make()
    for _ in range(30):
        assert h.checker_tick() == 0
        clock.advance(TICK)
    clock.advance(5 * S - TICK)  # this tick comes 5 s after the last: 4.9 s late
    assert h.checker_tick() == 5 * S - TICK
    assert h.source == "tick"


def test_the_allowance_lasts_one_lease_time_then_falls_back() -> None:
    h, clock, _ = make()
    h.checker_tick()
    clock.advance(3 * S)
    late = 3 * S - TICK
    assert h.checker_tick() == late
    clock.advance(LEASE)  # the late sample is exactly lease_time old: still counted
    h._last_tick = clock.monotonic_us() - TICK  # the ticks in between ran on time
    assert h.checker_tick() == late
    clock.advance(1)
    h._last_tick = clock.monotonic_us() - TICK
    assert h.checker_tick() == 0


def test_the_allowance_is_capped_at_lease_time() -> None:
    h, clock, _ = make()
    h.checker_tick()
    clock.advance(60 * S)  # a SIGSTOP of one minute
    assert h.checker_tick() == LEASE


def test_ticks_driven_by_hand_are_not_lateness() -> None:
    h, clock, _ = make(measure_ticks=False)
    h.checker_tick()
    clock.advance(60 * S)
    assert h.checker_tick() == 0


def test_loop_lag_counts_as_it_is() -> None:
    h, clock, _ = make()
    h.loop_lag(30_000)
    assert h.checker_tick() == 30_000 and h.source == "loop"


def _window(h: IntakeHealth, clock: FakeClock, waits: list[int], sent_at: int) -> None:
    """One transit window: server i's heartbeat waited ``waits[i]`` us (its baseline is 0)."""
    for i, w in enumerate(waits):
        h.transit(f"s{i}", sent_at, sent_at + w)
    clock.advance(TRANSIT_WINDOW_US)
    h.checker_tick()


def test_transit_is_the_wait_above_each_servers_own_baseline() -> None:
    """Skew cancels out: server s0's clock is 3 s ahead, s1's 2 s behind; each one's first
    heartbeat sets its baseline. Then every heartbeat waits 1.5 s more: the 90 % quantile."""
    h, clock, _ = make(measure_ticks=False)
    now = clock.now_us()
    h.transit("s0", now + 3 * S, now)  # received - sent = -3 s: its baseline
    h.transit("s1", now - 2 * S, now)  # +2 s
    h.checker_tick()
    clock.advance(TRANSIT_WINDOW_US)
    now = clock.now_us()
    for _ in range(10):
        h.transit("s0", now + 3 * S - 1_500_000, now)
        h.transit("s1", now - 2 * S - 1_500_000, now)
    h.checker_tick()
    assert h.latest["transit"] == 1_500_000 and h.allowance_us() == 1_500_000
    assert h.source == "transit"


@pytest.mark.parametrize(("slow", "expected"), [(10, 0), (11, 2 * S)])
def test_the_quantile_ignores_the_slowest_tenth(slow: int, expected: int) -> None:
    """100 heartbeats: up to 10 that waited 2 s are one agent's slow network (10 %), 11 are
    the RS's backlog."""
    h, clock, _ = make(measure_ticks=False)
    h.checker_tick()
    t = clock.now_us()
    for i in range(100):
        h.transit(f"s{i}", t, t)  # baselines
    _window(h, clock, [2 * S] * slow + [0] * (100 - slow), t)
    assert h.latest["transit"] == expected


def test_silent_servers_weigh_nothing() -> None:
    """A mass expiry: 30 of 100 agents stop; the others are answered at once. No allowance
    (the rate deficit counted the silent ones as backlog)."""
    h, clock, _ = make(measure_ticks=False)
    h.checker_tick()
    t = clock.now_us()
    for i in range(100):
        h.transit(f"s{i}", t, t)
    _window(h, clock, [0] * 70, t)
    _window(h, clock, [0] * 70, t)
    assert h.allowance_us() == 0


def test_an_agents_clock_step_starts_a_new_baseline() -> None:
    """received - sent more than lease_time above the baseline: the agent's clock stepped
    back, not a wait: no sample, the new difference is the baseline."""
    h, clock, _ = make(measure_ticks=False)
    h.checker_tick()
    t = clock.now_us()
    h.transit("s0", t, t)
    h.transit("s0", t - 3600 * S, t)  # stepped back an hour
    h.transit("s0", t - 3600 * S - S, t)  # then a real 1 s wait
    clock.advance(TRANSIT_WINDOW_US)
    h.checker_tick()
    assert h.latest["transit"] == S


def test_crossing_the_log_threshold_logs_once_each_way(caplog: pytest.LogCaptureFixture) -> None:
    h, clock, _ = make()
    caplog.set_level(logging.INFO, logger="rootservice.servers.intake_health")
    h.checker_tick()
    clock.advance(2 * S)
    h.checker_tick()
    clock.advance(TICK)
    h.checker_tick()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "behind on heartbeats" in warnings[0].getMessage()
    for _ in range(LOG_EVERY_US // TICK + 5):
        clock.advance(TICK)
        h.checker_tick()
    infos = [r for r in caplog.records if "keeps up" in r.getMessage()]
    assert len(infos) == 1
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1
