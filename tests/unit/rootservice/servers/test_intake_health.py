"""The lease allowance for the RS's own intake delay (issue 14 item 3,
rootservice/servers/intake_health.py): each signal on both sides of its boundary, the window,
the cap at lease_time and the log lines. A FakeClock; the counters are plain variables."""

from __future__ import annotations

import logging

import pytest

from obcommon.clock import FakeClock
from rootservice.config import RsSettings
from rootservice.servers.intake_health import (
    LOG_EVERY_US,
    SATURATED_LAG_US,
    IntakeHealth,
)

S = 1_000_000
LEASE = 10 * S
TICK = 100_000


class Counters:
    def __init__(self) -> None:
        self.served = 0
        self.alive = 0


def make(measure_ticks: bool = True) -> tuple[IntakeHealth, FakeClock, Counters]:
    clock = FakeClock()
    c = Counters()
    settings = RsSettings(lease_time="10s", heartbeat_interval="2s")
    h = IntakeHealth(clock, settings, lambda: c.served, lambda: c.alive, measure_ticks)
    return h, clock, c


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


@pytest.mark.parametrize(
    ("lag", "expected"),
    [
        (SATURATED_LAG_US - 1, SATURATED_LAG_US - 1),  # not saturated: the rate is ignored
        # 1,000 agents answered 200 times a second: each heard every 5 s instead of 2 s.
        (SATURATED_LAG_US, 3 * S),
    ],
)
def test_rate_deficit_counts_only_while_the_loop_is_saturated(lag: int, expected: int) -> None:
    h, clock, c = make(measure_ticks=False)
    c.alive = 1000
    h.checker_tick()
    for _ in range(10):
        clock.advance(TICK)
        h.loop_lag(lag)
        c.served += 20
        h.checker_tick()
    assert h.allowance_us() == expected


def test_a_rate_that_keeps_up_grants_nothing() -> None:
    h, clock, c = make(measure_ticks=False)
    c.alive = 1000
    h.checker_tick()
    for _ in range(10):
        clock.advance(TICK)
        h.loop_lag(SATURATED_LAG_US)  # saturated, yet every agent is heard every 2 s
        c.served += 50  # 500/s = 1,000 agents every 2 s
        h.checker_tick()
    assert h.latest["rate"] == 0
    assert h.allowance_us() == SATURATED_LAG_US  # only the loop's own lag


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
