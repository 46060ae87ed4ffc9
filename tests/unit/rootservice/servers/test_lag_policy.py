"""The lag detector's policy, pure: both sides of every boundary, on
microseconds."""

from __future__ import annotations

from rootservice.servers.command_ledger import SEQ_BITS, CommandLedger
from rootservice.servers.lag_policy import (
    DISK_LAG_US,
    EXPIRE_AFTER,
    REASON_COMMAND,
    LagState,
    command_lagging,
    disk_lagging,
    follower_lagging,
    judge,
    progressed,
    stalled,
    trailing_since,
)

S = 1_000_000
T = 30 * S  # agent_lag_timeout's default
T0 = 1_000 * S


def test_a_command_is_overdue_exactly_at_the_timeout() -> None:
    assert not command_lagging(None, T0 + 10 * T, T)
    assert not command_lagging(T0, T0 + T - 1, T)
    assert command_lagging(T0, T0 + T, T)


def test_the_disk_limit_is_5s_or_the_timeout_when_shorter_and_exactly_it_is_not_lagging() -> None:
    assert DISK_LAG_US == 5 * S
    assert not disk_lagging(5 * S, T)
    assert disk_lagging(5 * S + 1, T)
    short = 2 * S
    assert not disk_lagging(2 * S, short)
    assert disk_lagging(2 * S + 1, short)


def test_a_copy_stalls_after_twice_the_timeout_without_progress() -> None:
    p = progressed(None, 100, T0)
    p = progressed(p, 100, T0 + T)  # no progress: the watch keeps its start
    assert p.since_mono == T0
    assert not stalled(p, T0 + 2 * T - 1, T)
    assert stalled(p, T0 + 2 * T, T)
    moved = progressed(p, 101, T0 + 2 * T)  # one byte more restarts it
    assert not stalled(moved, T0 + 4 * T - 1, T)
    assert stalled(moved, T0 + 4 * T, T)


def test_a_follower_lags_after_trailing_for_twice_the_timeout() -> None:
    since = trailing_since(None, True, T0)
    assert since == T0
    assert trailing_since(since, True, T0 + S) == T0
    assert not follower_lagging(since, T0 + 2 * T - 1, T)
    assert follower_lagging(since, T0 + 2 * T, T)
    assert trailing_since(since, False, T0 + 2 * T) is None  # caught up: the watch ends
    assert not follower_lagging(None, T0 + 10 * T, T)


def test_an_episode_counts_timeouts_and_expires_at_the_third() -> None:
    st = judge(LagState(), (REASON_COMMAND,), T0, T)
    assert st.lagging and st.timeouts == 1 and not st.expired
    st = judge(st, (REASON_COMMAND,), T0 + T - 1, T)
    assert st.timeouts == 1
    st = judge(st, (REASON_COMMAND,), T0 + T, T)
    assert st.timeouts == 2
    st = judge(st, (REASON_COMMAND,), T0 + (EXPIRE_AFTER - 1) * T - 1, T)
    assert not st.expired
    st = judge(st, (REASON_COMMAND,), T0 + (EXPIRE_AFTER - 1) * T, T)
    assert st.expired and st.timeouts == EXPIRE_AFTER


def test_an_episode_ends_after_a_clear_timeout_and_a_relapse_continues_it() -> None:
    st = judge(LagState(), (REASON_COMMAND,), T0, T)
    st = judge(st, (), T0 + S, T)
    assert st.lagging and st.clear_since_mono == T0 + S
    assert judge(st, (), T0 + S + T - 1, T).lagging
    assert judge(st, (), T0 + S + T, T) == LagState()
    relapse = judge(st, (REASON_COMMAND,), T0 + 2 * S, T)
    assert relapse.since_mono == T0 and relapse.clear_since_mono is None
    assert judge(LagState(), (), T0, T) == LagState()


def test_the_ledger_settles_by_answer_or_by_the_applied_number() -> None:
    led = CommandLedger()
    a = led.issue("x", 7, T0)
    b = led.issue("x", 7, T0 + S)
    c = led.issue("x", 7, T0 + 2 * S)
    assert a == (7 << SEQ_BITS) | 1 and b == a + 1 and c == a + 2
    # A new RS leader's numbers sort above the old one's.
    assert led.issue("y", 8, T0) > c
    assert led.oldest_unapplied("x") == T0
    led.applied("x", a)
    assert led.oldest_unapplied("x") == T0 + S
    led.settled("x", c)
    led.applied("x", b - 1)  # below b: nothing more
    assert led.oldest_unapplied("x") == T0 + S
    led.applied("x", b)
    assert led.oldest_unapplied("x") is None
    assert led.last_issued("x") == T0 + 2 * S
    led.forget("y")
    assert led.oldest_unapplied("y") is None
