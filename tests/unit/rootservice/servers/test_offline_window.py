"""The permanent-offline clock as cumulative offline time in a sliding window (rootservice.servers.offline_window): pure functions on monotonic microseconds."""

from __future__ import annotations

import pytest

from rootservice.servers.offline_window import closed, due_at, offline_in_window, window_us

S = 1_000_000
LIMIT = 3600 * S


def test_one_outage_reaches_the_limit_after_exactly_the_limit() -> None:
    assert window_us(LIMIT) == 2 * LIMIT
    assert offline_in_window((), 5 * S, 5 * S + LIMIT - 1, LIMIT) == LIMIT - 1
    assert offline_in_window((), 5 * S, 5 * S + LIMIT, LIMIT) == LIMIT
    assert due_at((), 5 * S, 6 * S, LIMIT) == 5 * S + LIMIT


def test_a_flapper_down_11s_up_1s_reaches_it_on_its_cumulative_downtime() -> None:
    # Down 11 s (from its last heartbeat), back for 1 s, again and again.
    spans: tuple[tuple[int, int], ...] = ()
    down = 0
    for _ in range(1000):  # 12,000 s of flapping at most
        if offline_in_window(spans, down, down + 11 * S, LIMIT) >= LIMIT:
            break
        spans = closed(spans, down, down + 11 * S, LIMIT)
        down += 12 * S
    else:
        pytest.fail("a flapper down 11 s of every 12 never reached permanent offline")
    # The limit falls within this outage: due_at gives its exact instant.
    at = due_at(spans, down, down, LIMIT)
    assert offline_in_window(spans, down, at, LIMIT) == LIMIT
    assert offline_in_window(spans, down, at - 1, LIMIT) == LIMIT - 1
    # 3600 s of downtime at 11 of every 12 s: after 3927 s of flapping, within the window.
    assert 3926 * S <= at <= 3928 * S
    assert len(spans) <= window_us(LIMIT) // (12 * S) + 1


def test_outages_older_than_the_window_no_longer_count() -> None:
    spans = ((0, 100 * S),)
    now = window_us(LIMIT) + 50 * S
    assert offline_in_window(spans, None, now, LIMIT) == 50 * S
    assert offline_in_window(spans, None, window_us(LIMIT) + 100 * S, LIMIT) == 0
    # due_at is a lower bound that the caller re-judges: the total grows at most 1:1.
    at = due_at(spans, now - 10 * S, now, LIMIT)
    assert at == now + LIMIT - 60 * S
    assert offline_in_window(spans, now - 10 * S, at, LIMIT) < LIMIT
    # A span that ended before the window of the new one's end is dropped, not before.
    end = now + 50 * S  # the window then starts where the old span ended
    assert closed(spans, now, end - 1, LIMIT) == ((0, 100 * S), (now, end - 1))
    assert closed(spans, now, end, LIMIT) == ((now, end),)
