"""RateLimitedLog: first line at once, then at most one per interval with the
number suppressed; keys are independent; reset logs the next occurrence at once."""

from __future__ import annotations

import logging

import pytest

from obcommon.clock import FakeClock
from obcommon.ratelimit_log import RateLimitedLog

MINUTE = 60_000_000
log = logging.getLogger("tests.ratelimit")


def _messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == log.name]


def test_first_logged_then_once_per_interval_with_the_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    rl = RateLimitedLog(log, clock, MINUTE)
    with caplog.at_level(logging.WARNING, logger=log.name):
        # 10.5 minutes of a warning every 2 s (the deleted server's agent).
        logged = 0
        for _ in range(315):
            logged += rl.warning("k", "refused %s", "x")
            clock.advance(2_000_000)
    msgs = _messages(caplog)
    assert logged == len(msgs) == 11  # t = 0, 60, ..., 600 s
    assert msgs[0] == "refused x"
    assert msgs[1] == "refused x (29 similar suppressed)"
    assert [r.suppressed for r in caplog.records[1:]] == [29] * 10  # type: ignore[attr-defined]


def test_interval_edge_one_microsecond_before_is_suppressed_at_the_edge_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    rl = RateLimitedLog(log, clock, MINUTE)
    with caplog.at_level(logging.WARNING, logger=log.name):
        assert rl.warning("k", "a")
        clock.advance(MINUTE - 1)
        assert not rl.warning("k", "a")
        assert rl.suppressed("k") == 1
        clock.advance(1)
        assert rl.warning("k", "a")
    assert _messages(caplog) == ["a", "a (1 similar suppressed)"]


def test_keys_are_independent_and_reset_logs_at_once(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    rl = RateLimitedLog(log, clock, MINUTE)
    with caplog.at_level(logging.INFO, logger=log.name):
        assert rl.warning("a", "a1")
        assert rl.log(logging.INFO, "b", "b1", extra={"server": "s1"})
        assert not rl.warning("a", "a2")
        rl.reset("a")
        assert rl.warning("a", "a3")
    assert _messages(caplog) == ["a1", "b1", "a3"]
    assert caplog.records[1].server == "s1"  # type: ignore[attr-defined]


def test_interval_must_be_positive() -> None:
    with pytest.raises(ValueError):
        RateLimitedLog(log, FakeClock(), 0)
